"""``labkit clean`` without a campaign id: find the leftovers of campaigns that are not running.

Every object a campaign makes is named ``labkit-<campaign id>--...``
(:func:`~labkit.core.ids.campaign_prefix`), so the campaign of each object a backend lists is
read from its name (:func:`~labkit.core.ids.campaign_of`); backends report no creation time,
so no age is used. An object is

* ``running``: its campaign is registered as running on this host (:func:`labkit.core.registry.running`,
  any data dir, any user whose registry is readable) or holds its lock under the data dir
  given: **always kept**. A campaign registers before it cleans up or creates anything, so a
  running campaign's objects are never without an entry;
* ``stopped``: its campaign is not running (killed, or finished without tearing down):
  removed, one campaign at a time with ``cleanup(campaign_prefix(id))`` while this process
  holds that id in the registry (``kind: clean``), so the campaign cannot start meanwhile, and
  a campaign that started since the listing is skipped;
* ``unknown``: a ``labkit-`` name no campaign makes (test fixtures ``labkit-test-<hex>``,
  fleet test hosts ``labkit-fleet-<n>``, hand-made objects): kept unless ``include_unknown``.

A campaign on another machine sharing a backend (a remote libvirt, an SSH host, a cloud
account) is not in this host's registry: clean such backends by campaign id.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..backends.base import NAME_PREFIX
from ..core.ids import campaign_of, campaign_prefix
from ..core.lock import LOCK_NAME, is_locked
from ..core.registry import register, running
from ..errors import StoreError

__all__ = ["Leftover", "find_leftovers", "remove_leftovers", "running_ids"]


@dataclass(frozen=True)
class Leftover:
    """One object a backend lists: its name, its campaign (None: unknown) and its ``state``
    (``running``, ``stopped`` or ``unknown``; see the module docstring)."""
    backend: str
    name: str
    campaign: str | None
    state: str


def running_ids(data_dir: str | Path | None = None) -> dict[str, str]:
    """Campaign id -> who runs it: every campaign registered as running on this host, plus those
    whose lock is held under ``data_dir`` (a labkit without the registry)."""
    out = {e.campaign_id: e.describe() for e in running()}
    if data_dir is not None:
        for lock in sorted(Path(data_dir).glob(f"*/{LOCK_NAME}")):
            if is_locked(lock):
                out.setdefault(lock.parent.name, f"lock held under {Path(data_dir).resolve()}")
    return out


def find_leftovers(backends: dict, busy: dict[str, str]) -> list[Leftover]:
    """Every ``labkit-`` object of each backend (name -> Backend), classified against ``busy``
    (:func:`running_ids`)."""
    out = []
    for bname, backend in backends.items():
        for name in backend.list_labkit(NAME_PREFIX):
            cid = campaign_of(name)
            state = "unknown" if cid is None else "running" if cid in busy else "stopped"
            out.append(Leftover(bname, name, cid, state))
    return out


def remove_leftovers(backends: dict, leftovers: list[Leftover], *,
                     include_unknown: bool = False) -> dict[str, list[str]]:
    """Remove the ``stopped`` leftovers (and ``unknown`` ones with ``include_unknown``); returns
    backend -> removed names. A campaign that is running now (registered since the listing) is
    skipped, and its id is held in the registry while its leftovers go."""
    removed: dict[str, list[str]] = {b: [] for b in backends}
    for cid in sorted({x.campaign for x in leftovers if x.state == "stopped" and x.campaign is not None}):
        try:
            reg = register(cid, None, kind="clean")
        except StoreError:
            continue   # it started meanwhile: its objects are its own again
        with reg:
            for bname in sorted({x.backend for x in leftovers if x.campaign == cid}):
                removed[bname] += backends[bname].cleanup(campaign_prefix(cid))
    if include_unknown:
        for x in leftovers:
            # cleanup() matches a prefix: never one that also starts a campaign's name (labkit-a, labkit-a--...)
            if x.state == "unknown" and not any(y.backend == x.backend and y.state != "unknown"
                                                and y.name.startswith(x.name) for y in leftovers):
                removed[x.backend] += backends[x.backend].cleanup(x.name)
    return removed
