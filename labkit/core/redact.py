"""Keep secrets out of stores and logs: ``redact()`` replaces secret values by a marker.

A key is secret when its name mentions a password, passphrase, secret, token,
credential, cookie, private key, key material (``pkey``, ``key_data``...) or an
API key. Key *file names* (``key_filename``) are paths, not secrets, and are kept
so that ``labkit clean`` can reconnect.

Long secret words (``password``, ``passwd``, ``passphrase``, ``secret``, ``token``,
``credential``, ``cookie``, ``apikey``...) count anywhere in a name (``dbpassword``); the
short ones (``pass``, ``auth``, ``private``) only as whole words of the name (``key`` only
as the whole name, or joined as ``api_key``, ``access_key``, ``key_data``...), words being split at ``_``, ``-``, ``.``,
other non-letters and camelCase humps: ``ssh_pass``, ``x-auth``, ``sshPass`` and
``private_key`` are secret, ``spec_store_bypass``, ``compass`` and ``author`` are not.

>>> redact({"host": "h", "password": "hunter2", "connect_kwargs": {"passphrase": "x"}})
{'host': 'h', 'password': '<redacted>', 'connect_kwargs': {'passphrase': '<redacted>'}}
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

# matched on the name with its words joined by "_" (lower case, camelCase split); a short word
# must stand between word boundaries: the start/end of the name or "_"
_B, _E = r"(?:^|(?<=_))", r"(?=_|$)"
_SECRET = re.compile(
    r"pass_?(?:word|wd|phrase|code|key)|secret|token|credential|cookie|authori[sz]ation|oauth|"
    r"pkey|api_?key|auth_?key|access_?key|private_?key|key_?(?:data|material|content|text|bytes)|"
    rf"{_B}(?:pass|auth|private){_E}|^key$"
)
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[^a-z0-9]+")


def is_secret(key) -> bool:
    """Whether a mapping key names a secret (see the module docstring)."""
    if not isinstance(key, str):
        return False
    words = _SEPARATORS.sub("_", _HUMP.sub("_", key).lower())
    return bool(_SECRET.search(words))


def redact(value, _depth: int = 0):
    """A copy of ``value`` (dicts, lists, tuples, scalars) with every secret key's value
    replaced by ``"<redacted>"``; other values are returned unchanged. Nesting deeper than
    50 levels is cut (replaced by the marker) so the walk is bounded."""
    if _depth > 50:
        return REDACTED
    if isinstance(value, dict):
        return {
            k: (REDACTED if is_secret(k) and v is not None else redact(v, _depth + 1))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, _depth + 1) for v in value)
    return value


def without_redacted(options: dict) -> dict:
    """``options`` minus the keys whose value was redacted (to reopen a backend from stored options)."""
    return {k: v for k, v in (options or {}).items() if v != REDACTED}
