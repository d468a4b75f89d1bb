"""Keep secrets out of stores and logs: ``redact()`` replaces secret values by a marker.

A key is secret when its name mentions a password, passphrase, secret, token,
credential, cookie, private key, key material (``pkey``, ``key_data``...) or an
API key. Key *file names* (``key_filename``) are paths, not secrets, and are kept
so that ``labkit clean`` can reconnect.

>>> redact({"host": "h", "password": "hunter2", "connect_kwargs": {"passphrase": "x"}})
{'host': 'h', 'password': '<redacted>', 'connect_kwargs': {'passphrase': '<redacted>'}}
"""
from __future__ import annotations

import re

REDACTED = "<redacted>"

_SECRET = re.compile(
    r"pass(?:word|wd|phrase)?|secret|token|credential|cookie|auth|"
    r"private|pkey|api_?key|access_?key|key_?(?:data|material|content|text|bytes)|^key$",
    re.IGNORECASE)


def is_secret(key) -> bool:
    """Whether a mapping key names a secret (see the module docstring)."""
    return isinstance(key, str) and bool(_SECRET.search(key))


def redact(value, _depth: int = 0):
    """A copy of ``value`` (dicts, lists, tuples, scalars) with every secret key's value
    replaced by ``"<redacted>"``; other values are returned unchanged. Nesting deeper than
    50 levels is cut (replaced by the marker) so the walk is bounded."""
    if _depth > 50:
        return REDACTED
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret(k) and v is not None else redact(v, _depth + 1))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, _depth + 1) for v in value)
    return value


def without_redacted(options: dict) -> dict:
    """``options`` minus the keys whose value was redacted (to reopen a backend from stored options)."""
    return {k: v for k, v in (options or {}).items() if v != REDACTED}
