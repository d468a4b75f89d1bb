"""``labkit clean`` without a campaign id: find the leftovers of campaigns that are not running.

Every object a campaign makes is named ``labkit-<campaign id>--...``
(:func:`~labkit.core.ids.campaign_prefix`), so the campaign of each object a backend lists is
read from its name (:func:`~labkit.core.ids.campaign_of`). An object is

* ``running``: its campaign runs on this host: registered as running
  (:func:`labkit.core.registry.running`, any data dir, any user whose registry is readable),
  holding its id's claim (:func:`labkit.core.registry.claimed`: any user of this host, even one
  whose registry is not readable) or its lock under the data dir given: **always kept**. A
  campaign claims and registers before it cleans up or creates anything, so a running
  campaign's objects are never without both;
* ``stopped``: its campaign is registered as stopped (killed: its entry stayed) in this user's
  own registry or root's: removed;
* ``unregistered``: no registry here knows its campaign (it finished, or runs on another machine
  or in another network namespace sharing the backend, or another user's registry that cannot
  be read holds it), and the newest sign of its campaign's life is older than the grace period
  (``grace_s``, default :data:`DEFAULT_GRACE_S`): removed. The signs (:func:`last_signs`): when
  each of the campaign's objects was made as its backend reports it
  (:meth:`Backend.created <labkit.backends.base.Backend.created>`), the last write of its store
  in a data dir this host knows (:func:`labkit.core.datadirs.known`, the one given, those of the
  registries) and the start of a stopped entry in a registry not trusted for it;
* ``recent``: unregistered but younger than the grace period, or of an age nobody reports (the
  ``ssh`` and cloud backends say no creation time, and no store is known): kept, unless the
  grace period is 0;
* ``unknown``: a ``labkit-`` name no campaign makes (test fixtures ``labkit-test-<hex>``,
  fleet test hosts ``labkit-fleet-<n>``, hand-made objects): kept unless ``include_unknown``.

Removal goes one campaign at a time with ``cleanup(campaign_prefix(id))`` while this process
holds that id in the registry (``kind: clean``), so the campaign cannot start meanwhile, and a
campaign that started since the listing is skipped. A campaign's age is its newest sign, so an
object is never removed while another object of its campaign is young.

``labkit clean <campaign>`` of a campaign run on a testbed: :func:`clean_testbed`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ..backends.base import NAME_PREFIX
from ..core import datadirs
from ..core.ids import campaign_of, campaign_prefix
from ..core.lock import LOCK_NAME, is_locked
from ..core.registry import claimed, entries, holder_text, register, running
from ..errors import LabkitError, StoreError
from .platforms import FACTOR, BackendPool

if TYPE_CHECKING:
    from .testbed import Testbed

__all__ = [
    "DEFAULT_GRACE_S",
    "Leftover",
    "clean_testbed",
    "find_leftovers",
    "last_signs",
    "remove_leftovers",
    "running_ids",
    "stopped_ids",
]

#: how long an object of a campaign no registry knows is kept after the campaign's last sign of life
DEFAULT_GRACE_S = 600.0
REMOVED_STATES = ("stopped", "unregistered")
#: files of a store whose last write is a sign of its campaign's life
STORE_FILES = ("store.sqlite", "store.sqlite-wal")


@dataclass(frozen=True)
class Leftover:
    """One object a backend lists: its name, its campaign (None: unknown), its ``state``
    (``running``, ``stopped``, ``unregistered``, ``recent`` or ``unknown``; see the module docstring)
    and ``why``, the reason said to the user."""

    backend: str
    name: str
    campaign: str | None
    state: str
    why: str = ""

    @property
    def doomed(self) -> bool:
        """Whether :func:`remove_leftovers` removes it (``include_unknown`` aside)."""
        return self.state in REMOVED_STATES


def running_ids(data_dir: str | Path | None = None) -> dict[str, str]:
    """Campaign id -> who runs it: every campaign registered as running on this host, every id
    claimed on it (any user), plus those whose lock is held under ``data_dir`` (a labkit without
    the registry)."""
    out = {e.campaign_id: e.describe() for e in running()}
    for cid in sorted(claimed() - set(out)):
        out[cid] = holder_text(cid)
    if data_dir is not None:
        for lock in sorted(Path(data_dir).glob(f"*/{LOCK_NAME}")):
            if is_locked(lock):
                out.setdefault(lock.parent.name, f"lock held under {Path(data_dir).resolve()}")
    return out


def stopped_ids() -> dict[str, str]:
    """Campaign id -> its entry, for the campaigns registered as stopped in this user's own
    registry or root's (a killed campaign's entry stays); entries of other users' registries
    are only signs of life (:func:`last_signs`)."""
    return {
        e.campaign_id: f"registered as stopped: {e.describe()}"
        for e in entries()
        if not e.running and e.trusted
    }


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def last_signs(
    campaigns: Iterable[str], data_dirs: Iterable[str | Path] = ()
) -> dict[str, tuple[float, str]]:
    """Campaign id -> (epoch seconds, what) of the newest sign of its life labkit finds outside the
    backends: the last write of its store in ``data_dirs`` or in a data dir this host knows
    (:func:`labkit.core.datadirs.known`, the registries' entries), the start of a stopped entry in
    a registry not trusted for it."""
    wanted = set(campaigns)
    out: dict[str, tuple[float, str]] = {}

    def seen(cid: str, when: float | None, what: str) -> None:
        if when is not None and (cid not in out or when > out[cid][0]):
            out[cid] = (when, what)

    known = entries()
    dirs = list(
        dict.fromkeys([*map(str, data_dirs), *datadirs.known(), *(e.data_dir for e in known if e.data_dir)])
    )
    for cid in wanted:
        for d in dirs:
            for name in STORE_FILES:
                seen(cid, _mtime(Path(d) / cid / name), f"its store in {d} written")
    for e in known:
        if e.campaign_id in wanted and not e.running and not e.trusted:
            try:
                started = datetime.fromisoformat(e.started)
            except ValueError:
                continue
            if started.tzinfo is not None:  # labkit.core.clock writes UTC with its offset
                seen(e.campaign_id, started.timestamp(), f"started, says the entry in {e.registry}")
    return out


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def find_leftovers(
    backends: dict,
    busy: dict[str, str],
    *,
    stopped: dict[str, str] | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    signs: dict[str, tuple[float, str]] | None = None,
    data_dirs: Iterable[str | Path] = (),
    now: float | None = None,
) -> list[Leftover]:
    """Every ``labkit-`` object of each backend (name -> Backend), classified against ``busy``
    (:func:`running_ids`), ``stopped`` (:func:`stopped_ids`; None: none) and, for the rest, the
    grace period ``grace_s`` from the newest of the objects' creation times (each backend's
    :meth:`~labkit.backends.base.Backend.created`) and ``signs`` (None: :func:`last_signs` of
    those campaigns, with ``data_dirs``)."""
    now = time.time() if now is None else now
    stopped = stopped or {}
    listed = [
        (bname, name, campaign_of(name))
        for bname, backend in backends.items()
        for name in backend.list_labkit(NAME_PREFIX)
    ]
    if signs is None:
        signs = last_signs(
            {c for _, _, c in listed if c is not None and c not in busy and c not in stopped}, data_dirs
        )
    born: dict[str, float | None] = {}
    for bname, backend in backends.items():
        names = [
            n
            for b, n, cid in listed
            if b == bname and cid is not None and cid not in busy and cid not in stopped
        ]
        if not names:
            continue
        try:
            when = backend.created(names)
        except LabkitError:
            when = {}
        for n in names:
            born[n] = when.get(n)
    newest: dict[str, tuple[float, str] | None] = {}
    for camp in {c for _, n, c in listed if n in born and c is not None}:
        mine = [(born[n], f"{b} object {n} made") for b, n, c in listed if c == camp and n in born]
        known = [(t, what) for t, what in mine if t is not None]
        if camp in signs:
            known.append(signs[camp])
        # an object of unknown age could be new: only a store record bounds its campaign then
        newest[camp] = max(known) if known and (camp in signs or len(known) == len(mine)) else None
    out = []
    for bname, name, cid in listed:
        if cid is None:
            out.append(Leftover(bname, name, None, "unknown", "not made by a campaign"))
        elif cid in busy:
            out.append(Leftover(bname, name, cid, "running", f"campaign {cid} is running ({busy[cid]})"))
        elif cid in stopped:
            out.append(Leftover(bname, name, cid, "stopped", f"campaign {cid} is {stopped[cid]}"))
        else:
            sign = newest.get(cid)
            grace = f"the grace period is {_ago(grace_s)}"
            if sign is not None and now - sign[0] >= grace_s:
                out.append(
                    Leftover(
                        bname,
                        name,
                        cid,
                        "unregistered",
                        f"campaign {cid} is not registered on this host; its newest sign of life "
                        f"({sign[1]}) is {_ago(now - sign[0])} old and {grace}",
                    )
                )
            elif grace_s <= 0:
                out.append(
                    Leftover(
                        bname,
                        name,
                        cid,
                        "unregistered",
                        f"campaign {cid} is not registered on this host (--grace 0)",
                    )
                )
            elif sign is not None:
                out.append(
                    Leftover(
                        bname,
                        name,
                        cid,
                        "recent",
                        f"campaign {cid} is not registered on this host, but its newest sign of "
                        f"life ({sign[1]}) is only {_ago(now - sign[0])} old and {grace} "
                        "(it may run elsewhere; --grace 0 removes it)",
                    )
                )
            else:
                out.append(
                    Leftover(
                        bname,
                        name,
                        cid,
                        "recent",
                        f"campaign {cid} is not registered on this host and no one tells how old "
                        "its objects are (it may run elsewhere; --grace 0 removes it)",
                    )
                )
    return out


def remove_leftovers(
    backends: dict, leftovers: list[Leftover], *, include_unknown: bool = False
) -> dict[str, list[str]]:
    """Remove the ``stopped`` and ``unregistered`` leftovers (and ``unknown`` ones with
    ``include_unknown``); returns backend -> removed names. A campaign that is running now
    (registered since the listing) is skipped, and its id is held in the registry while its
    leftovers go."""
    removed: dict[str, list[str]] = {b: [] for b in backends}
    for cid in sorted({x.campaign for x in leftovers if x.doomed and x.campaign is not None}):
        try:
            reg = register(cid, None, kind="clean")
        except StoreError:
            continue  # it started meanwhile: its objects are its own again
        with reg:
            for bname in sorted({x.backend for x in leftovers if x.campaign == cid}):
                removed[bname] += backends[bname].cleanup(campaign_prefix(cid))
    if include_unknown:
        for x in leftovers:
            # cleanup() matches a prefix: never one that also starts a campaign's name (labkit-a, labkit-a--...)
            if x.state == "unknown" and not any(
                y.backend == x.backend and y.state != "unknown" and y.name.startswith(x.name)
                for y in leftovers
            ):
                removed[x.backend] += backends[x.backend].cleanup(x.name)
    return removed


def clean_testbed(
    meta: dict, prefix: str, testbed: Testbed | dict | str | Path | None = None
) -> dict[str, list[str]]:
    """``labkit clean <campaign>`` for a campaign run on a testbed: ``cleanup(prefix)`` on every
    host and platform its store's meta records; returns ``"host/platform" -> removed names``
    (hosts that cannot be reached are reported as an error line instead).

    The hosts are those of ``testbed`` (a :class:`~labkit.run.testbed.Testbed`, a path or a dict:
    give it when the store's copy lacks what reconnecting needs, e.g. a redacted key) or else
    the store's description, where values redacted at run time are left out (so SSH falls
    back to the agent and default keys instead of a ``<redacted>`` path). A Slurm testbed's
    campaign: its allocations still running are cleaned node by node and cancelled
    (:func:`labkit.run.slurm_testbed.clean`)."""
    from ..core.redact import without_redacted
    from .testbed import Testbed

    if (meta.get("testbed") or {}).get("slurm") is not None:
        from .slurm_testbed import clean

        return clean(meta, prefix, meta["testbed"].get("platforms") or {})
    if testbed is not None:
        tb = Testbed.load(testbed)
    else:
        desc = meta["testbed"]
        hosts = [
            without_redacted(
                {
                    k: v
                    for k, v in h.items()
                    if v is not None
                    and k
                    in ("name", "address", "port", "user", "key", "platforms", "labels", "price_per_hour")
                }
            )
            for h in desc["hosts"]
        ]
        platforms = {
            n: {"backend": p["backend"], **without_redacted(p.get("options") or {})}
            for n, p in (desc.get("platforms") or {}).items()
        }
        tb = Testbed.from_dict({"hosts": hosts, "platforms": platforms})
    used = (meta.get("design") or {}).get("factors", {}).get(FACTOR) or [meta.get("backend") or "local"]
    pool, out = BackendPool(), {}
    try:
        for h in tb.hosts:
            for p in used:
                if tb.offers(h, p):
                    try:
                        out[f"{h.name}/{p}"] = pool.open(h, tb.platform(p)).cleanup(prefix)
                    except LabkitError as exc:
                        out[f"{h.name}/{p}"] = [f"(not cleaned: {str(exc).splitlines()[0][:160]})"]
    finally:
        pool.close()
    return out
