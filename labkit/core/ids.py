"""Campaign ids and the names of what a campaign makes (``labkit-<id>--...``).

The lowest layer of the run path: the registry of running campaigns, ``labkit clean`` and the
campaign itself read ids here, and nothing here imports another labkit module but errors.
"""

from __future__ import annotations

import re

from ..errors import ConfigError

# no "--" inside (it delimits the campaign in instance names), no "-" at the end
_ID = re.compile(r"^[a-z0-9](?:[a-z0-9_]|-(?!-))*$")
#: its instances' names (``labkit-<id>--<13 random characters>`` and the like, issue 45) stay within
#: the 63 characters a host name, an LXD instance or a libvirt domain may have
MAX_ID = 41


def check_campaign_id(campaign_id) -> str:
    """``campaign_id`` if valid, else ConfigError saying the rule."""
    if (
        not isinstance(campaign_id, str)
        or len(campaign_id) > MAX_ID
        or not _ID.match(campaign_id)
        or campaign_id.endswith("-")
    ):
        raise ConfigError(
            f"campaign_id {str(campaign_id)[:80]!r}: use 1-{MAX_ID} lowercase letters, digits, "
            "'-' or '_', starting with a letter or digit, without '--' and not ending in '-'"
        )
    return campaign_id


def campaign_prefix(campaign_id: str) -> str:
    """Name prefix of every instance of the campaign: ``labkit-<id>--`` (exact: ``x`` never matches ``x-2``)."""
    return f"labkit-{campaign_id}--"


def campaign_of(name: str) -> str | None:
    """The campaign id whose :func:`campaign_prefix` starts ``name`` (``labkit-<id>--...``), or None
    for a name no campaign makes (``labkit-test-1a2b``, ``labkit-fleet-1``: made by hand or by tests)."""
    if not isinstance(name, str) or not name.startswith("labkit-"):
        return None
    cid, sep, _ = name[len("labkit-") :].partition("--")
    if not sep:
        return None
    try:
        return check_campaign_id(cid)
    except ConfigError:
        return None
