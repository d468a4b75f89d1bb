"""Instance names: ``<prefix><13 base-32 characters>`` (65 random bits, :func:`new_name`: at
100,000 instances per campaign a repeat has odds of about 1 in 10^10, where the 8 hex digits
of before gave 69 %). A campaign's prefix is ``labkit-<campaign id>--``; campaign ids contain no
``--`` and do not end in ``-``, so a backend's ``cleanup(prefix)`` (a plain ``startswith``) can
only ever match that campaign's instances: ``labkit-x--`` never matches ``labkit-x-2--...``.
:func:`check_prefix` and :func:`check_name` refuse anything else."""

from __future__ import annotations

import re
import secrets

from ..errors import ConfigError

#: what every name labkit makes or cleans up starts with
NAME_PREFIX = "labkit-"
_PREFIX_RE = re.compile(r"^labkit-[a-z0-9_-]*$")
_NAME_RE = re.compile(r"^labkit-[a-z0-9_-]+$")


def check_prefix(prefix: str) -> str:
    """A name prefix labkit may create or clean up: ``labkit-`` + [a-z0-9_-]."""
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix):
        raise ConfigError(
            f"instance name prefix must be 'labkit-' followed by lowercase letters, "
            f"digits, '_' or '-'; got {prefix!r}"
        )
    return prefix


def check_name(name: str) -> str:
    """An instance name safe in a path, a shell word, a container or domain name."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > 63:
        raise ConfigError(
            f"instance name {name!r} must be 'labkit-' followed by lowercase letters, "
            "digits, '_' or '-' (at most 63 characters)"
        )
    return name


#: random characters of an instance name (:func:`new_name`): base 32, 5 bits each, 65 bits
NAME_RANDOM_CHARS = 13
_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"


def name_token(chars: int = NAME_RANDOM_CHARS) -> str:
    """``chars`` random characters of ``a-z2-7`` (5 bits each, from :mod:`secrets`)."""
    bits = secrets.randbits(5 * chars)
    return "".join(_BASE32[(bits >> (5 * i)) & 31] for i in range(chars))


def new_name(prefix: str = "labkit-") -> str:
    """A fresh instance name ``<prefix><13 characters of a-z2-7>`` (``labkit-`` is added if missing).

    The 13 characters are 65 random bits: the names a campaign draws are unique in practice (at
    100,000 instances the odds of any repeat are about 1.4 in 10^10; 8 hex digits gave 69 %), in
    13 characters rather than 16 hex digits so that a name stays within 63 characters (an LXD or
    host name) with campaign ids up to 41 characters. The level analysis does not rely on that
    alone: an instance is identified by its boot and its name (:mod:`labkit.store.levels`).
    Network device names are not derived from it (``lk`` + a hash of the network's name,
    :attr:`.networks.Network.device`), so their 15-character limit does not apply here.

    A prefix that does not end in ``-`` gets one, so ``new_name("labkit-test")``
    is ``labkit-test-<13 characters>``.
    """
    if not prefix.startswith(NAME_PREFIX):
        prefix = NAME_PREFIX + prefix
    if not prefix.endswith("-"):
        prefix += "-"
    return check_name(check_prefix(prefix) + name_token())
