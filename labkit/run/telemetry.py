"""Per-run telemetry: a :class:`~labkit.run.hooks.RunHook` that samples the host and each instance during each run.

:class:`Telemetry` (``Campaign(..., telemetry=1.0)``, on by default) reads through one
:class:`HostSampler` per campaign: a single background thread, started by the campaign's first
run and stopped (joined) when the campaign ends, on an error or an interrupt too, that reads this
machine every ``interval`` seconds and, in the same pass, the instances of every run in flight.
Each run gets a window cut from those readings (:class:`Window`): the intervals that overlap it,
i.e. the one in progress when its hook is entered (before its instances are made), those ending
while it runs, and a last one up to the moment its hook is left (its workload has ended, its
instances still exist), cut by one reading of this machine taken then (no instance stats at the
ends: a slow stats interface never delays a run). A run shorter than one interval still gets
that last interval. Each interval gives one row ``(t, metric, value)`` per host metric and
``(t, metric, value, instance)`` per instance metric (``instance``: the instance's id, its name;
``t``: seconds from the run's start to the interval's end), kept in the run's
:attr:`RunContext.samples <labkit.run.hooks.RunContext.samples>` and stored with the run in the
store's ``samples`` table (same transaction as the run: :meth:`labkit.store.Store.record_run`).
The same sampler's latest readings serve the quiet-host guard's look before each run
(:func:`labkit.run.guard.pre_run_load`), which then costs the run nothing.

Metrics (psutil and /proc; a metric the host does not have is left out):

* ``cpu_pct`` (all CPUs busy, % of the host), ``cpu<i>_pct`` per CPU, ``steal_pct``, ``iowait_pct``
  (% of the host's CPU time over the interval), ``load1``;
* ``mem_used_pct``, ``mem_available_mb``;
* ``psi_<cpu|memory|io>_<some|full>_pct``: share of the interval tasks stalled, from the PSI
  ``total`` counters (/proc/pressure; kernels >= 4.20 built with PSI);
* ``disk_read_Bps``, ``disk_write_Bps``, ``net_rx_Bps``, ``net_tx_Bps`` (counter deltas);
* ``freq_min_mhz``, ``freq_max_mhz`` over the CPUs (where cpufreq is readable);
* ``host_cpu_used_pct`` (busy CPU time in % of one CPU), ``controller_cpu_pct`` (this process, the
  sampler included), ``kernel_cpu_pct`` (the kernel's threads: kworkers, ksoftirqd, a removed
  network namespace's clean-up; work done for whoever asked, often the campaign itself),
  ``daemon_cpu_pct`` (the daemons of the campaign's backends running here, their own CPU: LXD,
  dockerd and containerd, libvirtd, :attr:`Backend.daemons <labkit.backends.base.Backend.daemons>`;
  their work making and removing the campaign's instances; identified by program, owner and pid
  file, never by name alone: :class:`~labkit.run.readings.DaemonCpu`), and, where
  the instances' CPU is known (the ``local`` backend: the cgroups
  whose names start with the campaign's prefix, its instances and neighbours, v1 or v2),
  ``campaign_cpu_pct``, ``cpu_other_pct`` (host minus campaign cgroups minus this process minus the
  kernel's threads minus the backends' daemons: the processes outside the campaign, % of one CPU) and ``throttled_periods`` (CFS periods the
  campaign's cgroups were throttled in); on the other backends running here (``docker``, ``lxd``,
  ``libvirt``), ``campaign_cpu_pct`` and ``cpu_other_pct`` come from the instances' and their
  neighbours' own counters (below), for the intervals in which all of them were known (not while
  the instances are being made). On every backend the commands a workload runs on this machine
  (a private network's host end: ``ab`` or an ``iperf3`` end on the host) are in a cgroup named
  after the campaign and count as the campaign's, not as processes outside it.

Per instance, from its backend's own stats interface (:meth:`Instance.stats
<labkit.backends.base.Instance.stats>`: the cgroup's files for ``local`` and, through the
connection, ``ssh``; the Docker stats API; LXD's instance state; libvirt's domain stats, vCPU times
and the guest's /proc/stat through its agent), collected on every backend, this machine's or not:
``instance_cpu_pct`` (% of one CPU), ``instance_vcpu_pct`` (VMs), ``instance_throttled_periods``,
``instance_throttled_s``, ``instance_memory_mb`` and ``instance_steal_pct`` (% of the CPU time
seen inside a VM, or on an ``ssh`` host, that was stolen), each where the interface has it.

The run's metadata gets a summary under ``telemetry`` (run-level covariates): ``collected``,
``interval_s``, ``samples`` (readings), ``host`` (whether this machine was sampled, or why not),
``instance_cpu`` (``cgroups``, or why the instances' cgroups were not read), ``instance_stats``
(the backend's stats interface, or why it gave nothing), maxima and means (``cpu_other_max_pct``,
``steal_max_pct``, ``iowait_mean_pct``, ``psi_cpu_some_max_pct``, ``freq_min_mhz``, and over the
instances ``instance_cpu_mean_pct``, ``instance_steal_max_pct``, ...), ``throttled_periods``,
``instance_throttled_periods`` and
the sampler's own CPU while the run ran (``sampler_cpu_s``, ``sampler_cpu_pct`` of one core,
from the sampling thread's CPU clock, the end reading included: the whole campaign's sampler, shared
by the runs in flight); :func:`covariates` gives them as columns, one row per run. The controller
host is sampled only when the run's backend runs its instances on this machine (``local``,
``docker`` and ``lxd`` on a local socket, ``libvirt`` with a local URI); for any other the
summary's ``host`` says why not, rather than sampling the wrong machine (or without psutil, why
not), and only the instances are sampled. Telemetry never fails a run: a reading that fails is
left out.
"""

from __future__ import annotations

import contextlib
import importlib.util
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..design.options import DEFAULT_INTERVAL, MIN_INTERVAL, check_interval  # noqa: F401 (re-exported)
from ..errors import ConfigError
from .hooks import RunContext, RunHook
from .readings import (  # noqa: F401 (re-exported: what telemetry reads)
    DRIVERS,
    PSI,
    SHORTEST_S,
    CgroupWatch,
    InstanceWatch,
    Reading,
    campaign_watch,
    delta_rows,
    instance_rows,
    parse_psi,
    parse_throttled,
    read_host,
    remote_reason,
)
from .sampler import FIRST_S, HISTORY, HostSampler, Window  # noqa: F401 (re-exported)


def summarize(rows: list[tuple]) -> dict[str, float]:
    """Run-level covariates from a run's sample rows (see the module docstring); an instance
    metric's are over every instance's rows."""
    by: dict[str, list[float]] = {}
    for _, metric, value, *_inst in rows:
        by.setdefault(metric, []).append(value)
    out: dict[str, float] = {}

    def put(name: str, metric: str, fn: Callable[[list[float]], float]) -> None:
        if by.get(metric):
            out[name] = round(fn(by[metric]), 4)

    def mean(v: list[float]) -> float:
        return sum(v) / len(v)

    for m in ("cpu_other", "campaign_cpu", "controller_cpu", "cpu", "steal", "iowait"):
        put(f"{m}_max_pct", f"{m}_pct", max)
        put(f"{m}_mean_pct", f"{m}_pct", mean)
    for res in PSI:
        put(f"psi_{res}_some_max_pct", f"psi_{res}_some_pct", max)
    put("load1_max", "load1", max)
    put("mem_used_max_pct", "mem_used_pct", max)
    put("freq_min_mhz", "freq_min_mhz", min)
    put("freq_max_mhz", "freq_max_mhz", max)
    put("throttled_periods", "throttled_periods", sum)
    for m in ("instance_cpu", "instance_vcpu", "instance_steal"):
        put(f"{m}_max_pct", f"{m}_pct", max)
        put(f"{m}_mean_pct", f"{m}_pct", mean)
    put("instance_throttled_periods", "instance_throttled_periods", sum)
    put("instance_throttled_s", "instance_throttled_s", sum)
    put("instance_memory_max_mb", "instance_memory_mb", max)
    return out


#: why nothing is measured on a host without psutil (a base dependency of labkit)
PSUTIL_MISSING = "psutil missing (pip install psutil; it is a dependency of labkit: reinstall labkit)"


def psutil_missing() -> bool:
    """Whether psutil cannot be imported here (telemetry and the quiet-host guard then measure nothing)."""
    return importlib.util.find_spec("psutil") is None


def start_warnings(backend: Any = None) -> list[str]:
    """What a campaign says at its start when it will not measure what it normally measures: telemetry
    and the quiet-host guard without psutil; a backend that runs unconfined (limits not enforced)."""
    out = []
    if psutil_missing():
        out.append(
            f"telemetry off: {PSUTIL_MISSING}: no run is sampled and the quiet-host guard cannot "
            "look, so whether a run was disturbed (suspect) stays unknown"
        )
    if (
        backend is not None
        and getattr(backend, "enforce", True) is False
        and getattr(backend, "driver", None) is None
    ):
        out.append(
            f"unconfined: the {getattr(backend, 'name', '?')} backend runs with enforce_limits=false: "
            "no cgroup caps the instances' CPU time or memory (recorded per run as "
            "limits_enforced=False; pinned instances are still bound to their CPUs where the "
            "backend can do it without cgroups, as local does with taskset)"
        )
    return out


def _has_false(md: Any, key: str) -> bool:
    """Whether ``key`` is False anywhere in ``md``'s dicts and lists (walked with a stack: no call
    per scalar value, which at 100,000 runs' metadata was 4.4 M calls)."""
    stack = [md]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if x.get(key) is False:
                return True
            stack.extend(v for v in x.values() if isinstance(v, (dict, list)))
        elif isinstance(x, list):
            stack.extend(v for v in x if isinstance(v, (dict, list)))
    return False


def _guard_blind(md: dict) -> bool:
    """Whether the quiet-host guard could judge a run neither before it (its ``quiet_check`` not
    measured) nor during it (no ``cpu_other_mean_pct`` in its telemetry) although the host was
    sampled: such a run is not flagged, and not known to be quiet either."""
    quiet = md.get("quiet_check")
    tele = md.get("telemetry") or {}
    if not isinstance(quiet, dict) or quiet.get("measured") is not False or not isinstance(tele, dict):
        return False
    return str(tele.get("host", "")) == "sampled" and tele.get("cpu_other_mean_pct") is None


def measurement_notes(runs: Any) -> list[str]:
    """What the stored ``runs`` (:meth:`Store.runs <labkit.store.Store.runs>`) were not measured for,
    in words, for every conclusion drawn from them: ``telemetry off: <why>: suspect runs unknown``
    when the host was not sampled during them (psutil missing, instances on another machine), and
    ``unconfined: ...`` when their instances ran without enforced limits. Empty when all is measured."""
    if runs is None or not len(runs) or "metadata" not in runs:
        return []
    mds = [md or {} for md in runs["metadata"]]
    n = len(mds)
    why: dict[str, int] = {}
    for md in mds:
        host = str((md.get("telemetry") or {}).get("host", ""))
        if host.startswith("not sampled: "):
            reason = host.removeprefix("not sampled: ")
            reason = (
                "psutil missing"
                if reason.startswith(("psutil is not installed", "psutil missing"))
                else reason
            )
            why[reason] = why.get(reason, 0) + 1
    notes = []
    for reason, k in why.items():
        notes.append(
            f"telemetry off: {reason}: suspect runs unknown"
            + ("" if k == n else f" ({k} of {n} runs not measured)")
        )
    blind = sum(_guard_blind(md) for md in mds)
    if blind:
        notes.append(
            f"guard blind: {blind} of {n} runs could not be judged for other processes' CPU (the "
            "campaign's CPU could not be told apart from the rest before or during them: instances "
            "made or torn down around a run shorter than the sampler's readings); whether they were "
            "disturbed is unknown"
        )
    unconfined = sum(_has_false(md, "limits_enforced") for md in mds)
    if unconfined:
        notes.append(
            f"unconfined: {unconfined} of {n} runs ran without enforced limits (enforce_limits=false): "
            "the CPU-time and memory limits of their levels were asked for, not applied "
            "(pinning only where the backend binds CPUs without cgroups, e.g. local's taskset)"
        )
    return notes


def host_reason(backend: Any) -> str | None:
    """None when this machine's metrics describe ``backend``'s runs (and psutil is here), else why not."""
    why = remote_reason(backend)
    if why is not None:
        return f"{why}: host telemetry is not collected there"
    if psutil_missing():
        return PSUTIL_MISSING
    return None


class Telemetry(RunHook):
    """Sample the controller host every ``interval`` seconds during each run (module docstring), from
    one :class:`HostSampler` for the whole campaign (``sampler``: the campaign's, shared with its
    quiet-host guard; default: a new one)."""

    def __init__(self, interval: float = DEFAULT_INTERVAL, *, sampler: HostSampler | None = None):
        checked = check_interval(interval)
        if checked is None:
            raise ConfigError(
                "Telemetry(interval): give an interval in seconds; leave the hook out to turn telemetry off"
            )
        self.interval = checked
        self.sampler = sampler if sampler is not None else HostSampler(checked)

    def reader(self, ctx: RunContext, *, host: bool = True) -> tuple[Callable[[], Reading], InstanceWatch]:
        """How one reading for ``ctx``'s run is taken on the caller's thread: this machine
        (``host``), with the campaign's cgroups when the backend has a cgroup driver (the local
        backend), and the run's instances (the guard's first look, before the sampler has read)."""
        watch = campaign_watch(ctx.backend, ctx.prefix) if host else None
        proc = None
        if host:
            import psutil

            proc = psutil.Process()
        insts = InstanceWatch(ctx)

        def read() -> Reading:
            r = read_host(time.monotonic, watch, proc) if host else Reading(time.monotonic())
            insts.read(r)
            return r

        return read, insts

    def around_campaign(self, campaign: Any) -> contextlib.AbstractContextManager:
        return self.sampler.campaign()

    def instances_ready(self, ctx: RunContext) -> None:
        self.sampler.wake()  # the new instances' first stats now, not up to an interval later

    @contextlib.contextmanager
    def _sampled(self, ctx: RunContext) -> Iterator[list]:
        why = host_reason(ctx.backend)
        window = self.sampler.open(ctx, host=why is None)
        try:
            yield []
        finally:
            self.sampler.close(window)
            ctx.samples.extend(window.rows)
            insts = window.watch
            cgroup = isinstance(getattr(ctx.backend, "driver", None), DRIVERS) and why is None
            read_any = insts is not None and insts.read_any
            why_not = insts.why_not if insts is not None else None
            ctx.metadata["telemetry"] = {
                "collected": True,
                "interval_s": self.interval,
                "samples": window.readings,
                "host": "sampled" if why is None else f"not sampled: {why}",
                "instance_cpu": "cgroups" if cgroup else f"not read (backend {ctx.backend.name})",
                "instance_stats": (
                    f"{ctx.backend.name} stats"
                    if read_any
                    else f"none: {why_not or 'no instance was sampled'}"
                ),
                **summarize(window.rows),
                "sampler_cpu_s": round(window.cpu_s, 6),
                "sampler_cpu_pct": round(100.0 * window.cpu_s / window.wall_s, 4)
                if window.wall_s > 0
                else None,
            }

    def around_run(self, ctx: RunContext) -> contextlib.AbstractContextManager:
        return self._sampled(ctx)


def covariates(runs: Any) -> Any:
    """The runs' telemetry summaries as run-level covariates: one row per row of ``runs``
    (:meth:`Store.runs <labkit.store.Store.runs>`), column ``run_id`` and one column per numeric key
    of its metadata's ``telemetry`` (``cpu_other_max_pct``, ``steal_max_pct``, ...; NaN where a run
    has none, e.g. not collected), ready to merge into :meth:`Store.tidy <labkit.store.Store.tidy>`
    on ``run_id``."""
    import pandas as pd

    if runs.empty:
        return pd.DataFrame(columns=["run_id"])
    rows = []
    for rid, md in zip(runs["run_id"], runs["metadata"]):
        summary = (md or {}).get("telemetry") or {}
        rows.append(
            {
                "run_id": rid,
                **{
                    k: v
                    for k, v in summary.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)
                },
            }
        )
    return pd.DataFrame(rows)
