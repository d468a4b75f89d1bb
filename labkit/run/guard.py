"""The quiet-host guard: what else ran on this host during each run, and runs flagged ``suspect``.

A measurement is only as good as the quiet of the host it was taken on. :class:`QuietHost` (a
:class:`~labkit.run.hooks.RunHook` every :class:`~labkit.run.campaign.Campaign` enters first and
leaves last around each run) records:

* ``others_running``: the other campaigns the host's registry of running campaigns
  (:mod:`labkit.core.registry`, ``/run/labkit/campaigns``, shared by every data dir) showed
  running before, during (polled every second, by one watcher for all the campaign's runs in
  flight) and at the end of the run. A campaign seen for the
  first time is logged as a warning, once. At the start of a campaign (:meth:`QuietHost.check_start`,
  right after it registers) another running campaign is a warning, or a refusal
  (:class:`~labkit.errors.StoreError`) when this campaign or the other is ``exclusive``; two
  exclusive campaigns started in the same instant may both refuse, never both run.
* ``quiet_check``: before the run, the CPU used by processes outside the campaign
  (``other_cpu_pct``, % of one CPU: the host's busy time minus this process's, the campaign's
  instances' and host ends', and the kernel threads'), when the instances run on this machine,
  over ``seconds`` ending ``age_s`` seconds
  before the run: read from the campaign's host sampler
  (:class:`labkit.run.telemetry.HostSampler`, one thread for the whole campaign, which also
  serves the telemetry; ``source: sampler``), so the check costs the run nothing: the newest of
  its last intervals in which the campaign's CPU is told apart from the rest, joined with those
  just before it that tell it apart too until the look spans :data:`LOOK_S` (by its cgroups on
  the local backend, else by its instances' counters, unknown while instances are being made or
  torn down: then ``measured: False`` and why). The sampler starts with the campaign when its
  backend runs here, its first interval :data:`~labkit.run.telemetry.FIRST_S` long, and the campaign
  waits for the rest of it before its first run (:meth:`QuietHost.ready`, start-up time, not the
  run's; and for one interval more when that short first look crosses the threshold); only when
  the sampler has no reading at all within
  ``pre_run_s`` is a sample of its own taken (:data:`PRE_RUN_S` seconds, ``source: sample``), dead
  time before that run; ``campaign.guard.pre_run_s`` sets its length (0: none, recorded as not
  measured).
* ``suspect``: why the run is doubtful, or None: another campaign ran during it; before it or
  during it (the telemetry's ``cpu_other_mean_pct``) processes outside the campaign used more
  than ``other_cpu_pct`` % of a CPU; the host's or an instance's steal time was above
  ``steal_pct`` % (mean over the run); a ``pinned`` instance was CFS-throttled (it should
  never be: its CPUs are its own). Thresholds: :data:`labkit.design.options.DEFAULT_THRESHOLDS`,
  or a design's / campaign's ``thresholds``.

The store shows the flag as the ``suspect`` and ``suspect_reason`` columns of
:meth:`Store.runs <labkit.store.Store.runs>` and :meth:`Store.tidy <labkit.store.Store.tidy>`;
with ``quarantine`` the campaign runs its suspect runs once more at the end, the first attempt
kept in :meth:`Store.attempts <labkit.store.Store.attempts>` as a retry keeps it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..core import registry
from ..design.options import DEFAULT_THRESHOLDS
from ..errors import StoreError
from .hooks import RunContext, RunHook
from .readings import delta_rows, remote_reason
from .sampler import HostSampler
from .telemetry import PSUTIL_MISSING

log = logging.getLogger("labkit.run.guard")

#: seconds of the sample of the host's load taken before each run
PRE_RUN_S = 0.25
#: seconds between two looks at the registry during a run
POLL_S = 1.0
#: seconds a look at the host before a run spans when the sampler's readings allow: its CPU
#: counters are clock ticks, so over the sampler's first interval (0.25 s) one tick is 4 % of a
#: CPU, and 3 ticks of nobody's were enough to flag a run
LOOK_S = 1.0


def other_campaigns(campaign_id: str) -> dict[str, registry.Entry]:
    """The campaigns running on this host now other than ``campaign_id`` (``labkit clean`` runs
    left out); {} when the registry cannot be read (logged)."""
    try:
        return {
            e.campaign_id: e for e in registry.running() if e.campaign_id != campaign_id and e.kind == "run"
        }
    except (StoreError, OSError) as exc:
        log.warning(
            "the registry of running campaigns cannot be read (%s): other campaigns are not seen", exc
        )
        return {}


def verdict(metadata: dict, affinity: str, thresholds: dict) -> str | None:
    """Why a run with ``metadata`` (its ``others_running``, ``quiet_check`` and ``telemetry``
    summary) and instances of ``affinity`` is suspect under ``thresholds``; None when it is not."""
    reasons = []
    others = metadata.get("others_running") or []
    if others:
        reasons.append(f"other campaign(s) running on this host: {', '.join(others)}")
    limit = thresholds["other_cpu_pct"]
    before = (metadata.get("quiet_check") or {}).get("other_cpu_pct")
    if before is not None and before > limit:
        reasons.append(
            f"before the run, processes outside the campaign used {before:.1f} % of a CPU "
            f"(threshold {limit:g} %)"
        )
    tele = metadata.get("telemetry") or {}
    during = tele.get("cpu_other_mean_pct")
    if during is not None and during > limit:
        reasons.append(
            f"during the run, processes outside the campaign used {during:.1f} % of a CPU on average "
            f"(max {tele.get('cpu_other_max_pct', during):.1f} %; threshold {limit:g} %)"
        )
    for key, what in (
        ("steal_mean_pct", "the host's steal time"),
        ("instance_steal_mean_pct", "steal time in an instance"),
    ):
        value = tele.get(key)
        if value is not None and value > thresholds["steal_pct"]:
            reasons.append(f"{what} was {value:.1f} % on average (threshold {thresholds['steal_pct']:g} %)")
    throttled = tele.get("instance_throttled_periods")
    if thresholds["pinned_throttled"] and affinity == "pinned" and throttled:
        reasons.append(f"a pinned instance was throttled in {throttled:g} CFS period(s)")
    return "; ".join(reasons) or None


class QuietHost(RunHook):
    """The quiet-host guard of a campaign (see the module docstring): ``campaign_id`` is the
    campaign's own (left out of ``others_running``), ``exclusive`` refuses to run beside another
    campaign, ``thresholds`` a complete :data:`~labkit.design.options.DEFAULT_THRESHOLDS` mapping.

    The registry is read by one watcher thread for all the campaign's runs in flight (every
    ``poll_s``, while any is), and at a run's start and end at most every :attr:`fresh_s` (a reading
    that recent is shared): on a fleet of a thousand hosts the registry is read a few times a
    second, not by a thread per run."""

    def __init__(
        self,
        campaign_id: str,
        *,
        exclusive: bool = False,
        thresholds: dict | None = None,
        pre_run_s: float = PRE_RUN_S,
        poll_s: float = POLL_S,
        sampler: HostSampler | None = None,
    ):
        self.campaign_id = campaign_id
        #: the campaign's host sampler (shared with its telemetry), read before each run
        self.sampler = sampler if sampler is not None else HostSampler()
        self.exclusive = exclusive
        self.thresholds = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
        self.pre_run_s, self.poll_s = pre_run_s, poll_s
        #: how old a reading of the registry a run's start or end may share
        self.fresh_s = poll_s / 4
        self.seen: set[str] = set()
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._last: tuple[float, dict[str, registry.Entry]] | None = None
        self._active: dict[int, set[str]] = {}  # id of each run in flight -> the campaigns it saw
        self._watcher: threading.Thread | None = None

    def check_start(self) -> list[str]:
        """Right after the campaign registered: warn of the other campaigns running on this host, or
        refuse (StoreError) when this campaign or one of them is exclusive. Returns their ids."""
        others = other_campaigns(self.campaign_id)
        if not others:
            return []
        shown = "; ".join(f"{cid} ({e.describe()})" for cid, e in sorted(others.items()))
        strict = sorted(cid for cid, e in others.items() if e.extra.get("exclusive"))
        if self.exclusive or strict:
            why = (
                "this campaign is exclusive"
                if self.exclusive
                else f"campaign(s) {', '.join(strict)} run exclusive"
            )
            raise StoreError(
                f"campaign {self.campaign_id!r} refused: {why}, and other campaign(s) run on this "
                f"host: {shown}. Wait for them to end, or run without exclusive (their runs and "
                "this one's are then flagged suspect)"
            )
        self._note(others)
        return sorted(others)

    def ready(self) -> bool:
        """Campaign start-up, once before the first run: wait (at most ``pre_run_s`` + 0.1 s) for the
        host sampler's first interval when the sampler runs (started by :meth:`around_campaign`),
        so that the first run's quiet check reads it rather than waiting for it inside the run's
        own time. Whether there is an interval (False at once when the sampler does not run or
        ``pre_run_s`` is 0: the first run then takes its look as every run does).

        That first interval is short (:data:`~labkit.run.sampler.FIRST_S`): when the CPU it shows
        outside the campaign crosses the threshold, the campaign waits for the sampler's next
        reading (at most one interval more) and the first run's look spans both, :data:`LOOK_S`
        or more: a busy host is still seen, a few clock ticks nobody used no longer flag the run."""
        if self.pre_run_s <= 0 or not self.sampler.running:
            return False
        if not self.sampler.wait_interval(self.pre_run_s + 0.1):
            return False
        got = sampled_load(self.sampler)
        if (
            got is not None
            and got["seconds"] < LOOK_S
            and got["other_cpu_pct"] > self.thresholds["other_cpu_pct"]
        ):
            self.sampler.wait_next(self.sampler.interval + 0.5)
        return True

    def _note(self, others: dict[str, registry.Entry]) -> None:
        with self._lock:
            new = sorted(set(others) - self.seen)
            self.seen |= set(new)
        for cid in new:
            log.warning(
                "campaign %s: another campaign runs on this host: %s (%s); the runs that overlap it are "
                "recorded with others_running and flagged suspect",
                self.campaign_id,
                cid,
                others[cid].describe(),
            )

    def _others(self, max_age: float) -> set[str]:
        """The other campaigns running now, from a reading of the registry at most ``max_age`` s old
        (one reading at a time; the runs that wait for it share it)."""
        with self._read_lock:
            if self._last is None or time.monotonic() - self._last[0] > max_age:
                self._last = (time.monotonic(), other_campaigns(self.campaign_id))
            others = self._last[1]
        self._note(others)
        return set(others)

    def _watch(self) -> None:
        """While runs are in flight: every ``poll_s`` add the campaigns running to each one's."""
        while True:
            time.sleep(self.poll_s)
            with self._lock:
                if not self._active:
                    self._watcher = None
                    return
            found = self._others(self.fresh_s)
            with self._lock:
                for mine in self._active.values():
                    mine |= found

    @contextlib.contextmanager
    def _guarded(self, ctx: RunContext) -> Iterator[list]:
        found = self._others(self.fresh_s)
        ctx.metadata["quiet_check"] = pre_run_load(ctx, self.pre_run_s, sampler=self.sampler)
        key = id(ctx)
        with self._lock:
            self._active[key] = found
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, daemon=True, name="labkit-guard")
                self._watcher.start()
        here = remote_reason(ctx.backend) is None
        try:
            with self.sampler.in_flight(ctx) if here else contextlib.nullcontext():
                yield []
        finally:
            with self._lock:
                found = self._active.pop(key)
            found |= self._others(self.fresh_s)
            ctx.metadata["others_running"] = sorted(found)
            ctx.metadata["suspect"] = verdict(ctx.metadata, ctx.spec.affinity, self.thresholds)

    def around_run(self, ctx: RunContext) -> contextlib.AbstractContextManager:
        return self._guarded(ctx)

    @contextlib.contextmanager
    def around_campaign(self, campaign: Any) -> Iterator[None]:
        """The campaign's host sampler runs until the campaign ends (stopped then, on every path
        out): started here when the campaign's one backend runs its instances on this machine (its
        first interval, :data:`~labkit.run.telemetry.FIRST_S`, is then ready by the first run,
        or nearly), else by the first run that needs it."""
        with self.sampler.campaign():
            backend = getattr(campaign, "backend", None)
            if (
                backend is not None
                and remote_reason(backend) is None
                and importlib.util.find_spec("psutil") is not None
            ):
                self.sampler.configure(backend, campaign.prefix)
                self.sampler.ensure_started()
            yield


def sampled_load(sampler: HostSampler, span: float = LOOK_S) -> dict[str, Any] | None:
    """``quiet_check`` from ``sampler``'s most recent intervals of this machine that tell the
    campaign's CPU apart: the newest of the last few, joined with the ones just before it that
    also do until they span ``span`` s (or the history ends); None when there is none recent."""
    first = last = None
    for a, b in sampler.recent():
        tells = "cpu_other_pct" in (m for m, _, *inst in delta_rows(a, b) if not inst)
        if not tells:
            if last is None:
                continue  # the newest that tells the campaign apart
            break
        last = last or b
        first = a
        if last.t - first.t >= span:
            break
    if first is None or last is None:
        return None
    rows = dict((m, v) for m, v, *inst in delta_rows(first, last) if not inst)
    if "cpu_other_pct" not in rows:
        return None
    return {
        "measured": True,
        "seconds": round(last.t - first.t, 3),
        "other_cpu_pct": round(rows["cpu_other_pct"], 3),
        "source": "sampler",
        "age_s": round(max(0.0, sampler.clock() - last.t), 3),
    }


def pre_run_load(
    ctx: RunContext, seconds: float = PRE_RUN_S, *, sampler: HostSampler | None = None
) -> dict[str, Any]:
    """The CPU used by processes outside the campaign before ``ctx``'s run (``other_cpu_pct``, % of
    one CPU, over ``seconds``): from ``sampler``'s most recent interval that tells the campaign's
    CPU apart (its thread is started here if the campaign runs and it does not yet; the first run
    waits for its first interval, at most ``seconds``), else a sample of ``seconds`` taken now; or
    ``measured: False`` and why (the instances run on another machine, psutil is missing, the
    campaign's CPU could not be told apart)."""
    why = remote_reason(ctx.backend)
    if why is not None:
        return {"measured": False, "reason": why}
    if importlib.util.find_spec("psutil") is None:
        return {"measured": False, "reason": PSUTIL_MISSING}
    if sampler is not None:
        sampler.configure(ctx.backend, ctx.prefix)
        if sampler.ensure_started() and sampler.running and seconds > 0:
            # the first run: the sampler's first interval (FIRST_S) rather than a sample of its own
            sampler.wait_interval(seconds + 0.1)
        got = sampled_load(sampler)
        if got is not None:
            return got
        if sampler.recent():
            return {
                "measured": False,
                "source": "sampler",
                "reason": "the campaign's CPU could not be told apart in the sampler's last intervals "
                "(its instances were being made or torn down, or gave no CPU counter)",
            }
    if seconds <= 0:
        return {"measured": False, "reason": "no sample asked (pre_run_s 0)"}
    return take_sample(ctx, seconds)


def take_sample(ctx: RunContext, seconds: float) -> dict[str, Any]:
    """``quiet_check`` from a sample of ``seconds`` of this machine taken now (the guard's fallback:
    dead time before the run)."""
    from .telemetry import Telemetry

    read, _ = Telemetry(max(seconds, 0.05)).reader(ctx)
    a = read()
    time.sleep(seconds)
    b = read()
    rows = dict((m, v) for m, v, *inst in delta_rows(a, b) if not inst)
    if "cpu_other_pct" not in rows:
        return {"measured": False, "reason": "the CPU of the campaign's instances could not be read"}
    return {
        "measured": True,
        "seconds": seconds,
        "other_cpu_pct": round(rows["cpu_other_pct"], 3),
        "source": "sample",
    }
