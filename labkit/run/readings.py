"""Readings of this machine and of a run's instances, and the metrics of the interval between two
(:func:`delta_rows`): what :mod:`labkit.run.sampler` reads and :mod:`labkit.run.telemetry` stores
(the metrics are listed there). What is read of this machine's processes (kernel threads, the
backends' daemons) is :mod:`labkit.run.processes`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..backends import cgroups, host_end
from ..errors import LabkitError
from .hooks import RunContext

# this machine's processes read from /proc, re-exported where they were defined before
from .processes import (  # noqa: F401
    CLOCK_TICKS,
    COMM_LEN,
    DAEMON_DIRS,
    DAEMON_PIDFILES,
    DELETED,
    DaemonCpu,
    KernelThreads,
    kernel_threads,
    parse_stat,
    parse_uids,
    ticks_cpu_s,
)

PSI = ("cpu", "memory", "io")
#: the shortest interval whose shares of the host's CPU are told (its CPU times count in 10-ms
#: clock ticks: over a few ms they read as any share; 2 CPUs x 1 tick over 0.2 s is 10 % of a CPU)
SHORTEST_S = 0.2
DRIVERS = (cgroups.CgroupV1, cgroups.CgroupV2)


def remote_reason(backend: Any) -> str | None:
    """None when ``backend`` runs its instances on this machine; otherwise why telemetry of this
    machine would describe the wrong host."""
    name = getattr(backend, "name", type(backend).__name__)
    if name == "local":
        return None
    if name == "docker":
        url = str(getattr(backend, "base_url", ""))
        if getattr(backend, "ssh", None) is None and (url.startswith(("unix://", "/"))):
            return None
        return f"the docker daemon at {url} is not on this machine"
    if name == "lxd":
        return None  # a unix socket on this machine
    if name == "libvirt" and getattr(backend, "local", False):
        return None
    return f"backend {name!r} runs its instances on another machine"


# -- readings ---------------------------------------------------------------------------------


@dataclass
class Reading:
    """Counters read at one moment (``t``: monotonic seconds)."""

    t: float
    cpus: list = field(default_factory=list)  # psutil scputimes per CPU
    psi: dict = field(default_factory=dict)  # "cpu_some" -> total microseconds
    disk: tuple | None = None  # (read_bytes, write_bytes)
    net: tuple | None = None  # (bytes_recv, bytes_sent)
    own_cpu_s: float | None = None  # this process's CPU time
    kernel: dict | None = None  # kernel thread pid -> CPU clock ticks used
    daemons: dict | None = None  # backend daemon "pid:start" -> CPU clock ticks used
    groups: dict = field(default_factory=dict)  # campaign cgroup -> (cpu_s, nr_throttled)
    gauges: dict = field(default_factory=dict)  # metric -> value read as is (load, memory, freq)
    instances: dict = field(default_factory=dict)  # the run's instance id -> Instance.stats()
    members: frozenset | None = None  # ids behind campaign_cpu_s (None: not all known)
    groups_whole: bool = True  # groups hold the instances (local), not only host ends
    campaign_cpu_s: float = 0.0  # CPU seconds of the run's instances and neighbours


def parse_psi(text: str) -> dict[str, float]:
    """``some``/``full`` -> the ``total`` stall counter (microseconds) of one /proc/pressure file."""
    out = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for f in fields:
            key, _, value = f.partition("=")
            if key == "total":
                out[kind] = float(value)
    return out


def parse_throttled(text: str) -> int | None:
    """``nr_throttled`` of a cgroup's cpu.stat (v1 and v2), None when it has none."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "nr_throttled":
            return int(value)
    return None


class CgroupWatch:
    """The campaign's cgroups on this machine: those under ``driver``'s CPU-accounting root whose
    names start with ``prefix``. The local backend names each instance's cgroup after it
    (``holds_instances``); on any backend, the commands a run's workload starts on this machine
    (a private network's host end, :mod:`labkit.backends.host_end`) are in one too."""

    def __init__(self, driver: cgroups.Driver, prefix: str, holds_instances: bool = True):
        self.driver, self.prefix, self.holds_instances = driver, prefix, holds_instances
        self.root = cgroups.accounting_root(driver)
        self.stat_root = driver.roots["cpu"] if isinstance(driver, cgroups.CgroupV1) else driver.root

    def read(self) -> dict[str, tuple[float, int | None]]:
        """cgroup name -> (CPU seconds used, throttled periods); a cgroup gone meanwhile is left out.
        ``<prefix>host-retired``: what the campaign's host ends removed so far used (their count
        goes on there: :func:`~labkit.backends.host_end.retired_cpu`)."""
        out: dict[str, tuple[float, int | None]] = {
            self.prefix + host_end.GROUP_TAG + "retired": (host_end.retired_cpu(self.prefix), 0)
        }
        try:
            names = [n for n in os.listdir(self.root) if n.startswith(self.prefix)]
        except OSError:
            return {}
        for name in names:
            path, parse = self.driver.cpu_time(name)
            try:
                used = parse(cgroups.read_local(path))
            except (OSError, ValueError, LabkitError):
                continue
            try:
                throttled = parse_throttled(cgroups.read_local(f"{self.stat_root}/{name}/cpu.stat"))
            except (OSError, ValueError, LabkitError):
                throttled = None
            out[name] = (used, throttled)
        return out


def campaign_watch(backend: Any, prefix: str) -> CgroupWatch | None:
    """The :class:`CgroupWatch` of a campaign (instance names ``prefix*``) on ``backend``, which
    runs here: its instances' cgroups when it has a cgroup driver (the local backend), else its
    host ends' (cgroups in this machine's CPU-accounting hierarchy; its instances are counted
    through their own stats); None when this machine has no usable cgroup hierarchy."""
    driver = getattr(backend, "driver", None)
    if isinstance(driver, DRIVERS):
        return CgroupWatch(driver, prefix)
    try:
        return CgroupWatch(cgroups.detect_here(), prefix, holds_instances=False)
    except (LabkitError, OSError):
        return None


def read_host(
    clock: Callable[[], float], groups: CgroupWatch | None, proc: Any, daemons: DaemonCpu | None = None
) -> Reading:
    """One :class:`Reading` of this machine (psutil, /proc/pressure, the campaign's cgroups, the
    backends' ``daemons``)."""
    import psutil

    r = Reading(clock())
    with contextlib.suppress(OSError, RuntimeError):
        r.cpus = psutil.cpu_times(percpu=True)
    for res in PSI:
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/pressure/{res}") as fh:
                for kind, total in parse_psi(fh.read()).items():
                    r.psi[f"{res}_{kind}"] = total
    with contextlib.suppress(OSError, RuntimeError, AttributeError):
        d = psutil.disk_io_counters()
        r.disk = None if d is None else (d.read_bytes, d.write_bytes)
    with contextlib.suppress(OSError, RuntimeError, AttributeError):
        n = psutil.net_io_counters()
        r.net = None if n is None else (n.bytes_recv, n.bytes_sent)
    with contextlib.suppress(OSError, psutil.Error):
        c = proc.cpu_times()
        r.own_cpu_s = c.user + c.system
    with contextlib.suppress(OSError, ValueError, IndexError):
        r.kernel = kernel_threads()
    if daemons is not None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            r.daemons = daemons.read()
    if groups is not None:
        r.groups, r.groups_whole = groups.read(), groups.holds_instances
    with contextlib.suppress(OSError):
        r.gauges["load1"] = os.getloadavg()[0]
    with contextlib.suppress(OSError, RuntimeError):
        vm = psutil.virtual_memory()
        r.gauges["mem_used_pct"] = 100.0 * (vm.total - vm.available) / vm.total
        r.gauges["mem_available_mb"] = vm.available / 2**20
    with contextlib.suppress(OSError, RuntimeError, NotImplementedError, AttributeError):
        freqs = [f.current for f in psutil.cpu_freq(percpu=True) or [] if f.current]
        if freqs:
            r.gauges["freq_min_mhz"], r.gauges["freq_max_mhz"] = min(freqs), max(freqs)
    return r


class InstanceWatch:
    """The run's instances (``ctx.instances``) and their neighbours (``ctx.neighbours``), read with
    :meth:`Instance.stats <labkit.backends.base.Instance.stats>` at each reading; :attr:`why_not`
    is the last reason an instance gave none (StatsUnavailable)."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.why_not: str | None = None
        self.read_any = False

    def read(self, r: Reading) -> None:
        """Fill ``r.instances`` and, when every instance and neighbour gave its CPU time and none is
        being made, ``r.members`` and ``r.campaign_cpu_s``."""
        insts, neighbours = list(self.ctx.instances), list(self.ctx.neighbours)
        complete = not getattr(self.ctx, "provisioning", False)
        total = 0.0
        for i, inst in enumerate(insts + neighbours):
            try:
                counters = inst.stats()
            except (LabkitError, OSError) as exc:
                self.why_not = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                complete = False
                continue
            except Exception as exc:  # a backend SDK's own error: telemetry never fails a run
                self.why_not = f"{type(exc).__name__}: {exc}"[:300]
                complete = False
                continue
            if i < len(insts):
                r.instances[inst.name] = counters
                self.read_any = True
            if "cpu_s" in counters:
                total += counters["cpu_s"]
            else:
                complete = False
        if complete:
            r.members = member_names(self.ctx)
            r.campaign_cpu_s = total


def member_names(ctx: RunContext) -> frozenset[str]:
    """The names of a run's instances and neighbours (``ctx.instances``, ``ctx.neighbours``): the
    campaign's members whose CPU a reading counts."""
    return frozenset(getattr(x, "name", str(id(x))) for x in list(ctx.instances) + list(ctx.neighbours))


def instance_rows(a: Reading, b: Reading, dt: float) -> list[tuple[str, float, str]]:
    """``(metric, value, instance)`` rows of the interval for each instance in both readings."""
    rows: list[tuple[str, float, str]] = []
    for name, y in b.instances.items():
        x = a.instances.get(name)
        if x is None:
            continue
        for key, metric in (("cpu_s", "instance_cpu_pct"), ("vcpu_s", "instance_vcpu_pct")):
            if key in x and key in y:
                rows.append((metric, max(0.0, 100.0 * (y[key] - x[key]) / dt), name))
        for key in ("throttled_periods", "throttled_s"):
            if key in x and key in y:
                rows.append((f"instance_{key}", max(0.0, y[key] - x[key]), name))
        if "steal_s" in x and "steal_s" in y and y.get("cpu_total_s", 0) > x.get("cpu_total_s", 0):
            rows.append(
                (
                    "instance_steal_pct",
                    _pct(y["steal_s"] - x["steal_s"], y["cpu_total_s"] - x["cpu_total_s"]),
                    name,
                )
            )
        if "memory_bytes" in y:
            rows.append(("instance_memory_mb", y["memory_bytes"] / 2**20, name))
    return rows


def _busy_s(t) -> tuple[float, float]:
    """(total, busy) seconds of one CPU's times (guest time is already in user/nice on Linux)."""
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    return total, total - t.idle - getattr(t, "iowait", 0.0)


def delta_rows(a: Reading, b: Reading) -> list[tuple]:
    """The metrics of the interval from reading ``a`` to ``b`` (see the module docstring): host
    rows ``(metric, value)`` and instance rows ``(metric, value, instance)``."""
    dt = b.t - a.t
    if dt <= 0:
        return []
    rows: list[tuple[str, float]] = []
    host_busy = None
    if a.cpus and len(a.cpus) == len(b.cpus) and dt >= SHORTEST_S:
        tot = busy = steal = iowait = 0.0
        for i, (x, y) in enumerate(zip(a.cpus, b.cpus)):
            (t0, b0), (t1, b1) = _busy_s(x), _busy_s(y)
            d_tot, d_busy = t1 - t0, b1 - b0
            if d_tot > 0:
                rows.append((f"cpu{i}_pct", _pct(d_busy, d_tot)))
            tot, busy = tot + d_tot, busy + d_busy
            steal += getattr(y, "steal", 0.0) - getattr(x, "steal", 0.0)
            iowait += getattr(y, "iowait", 0.0) - getattr(x, "iowait", 0.0)
        if tot > 0:
            rows += [
                ("cpu_pct", _pct(busy, tot)),
                ("steal_pct", _pct(steal, tot)),
                ("iowait_pct", _pct(iowait, tot)),
            ]
            host_busy = max(0.0, busy)
            rows.append(("host_cpu_used_pct", 100.0 * host_busy / dt))
    for key, total in b.psi.items():
        if key in a.psi:
            rows.append((f"psi_{key}_pct", min(100.0, 100.0 * (total - a.psi[key]) / 1e6 / dt)))
    for (name_in, name_out), (x, y) in (
        (("disk_read_Bps", "disk_write_Bps"), (a.disk, b.disk)),
        (("net_rx_Bps", "net_tx_Bps"), (a.net, b.net)),
    ):
        if x is not None and y is not None:
            rows += [(name_in, max(0.0, y[0] - x[0]) / dt), (name_out, max(0.0, y[1] - x[1]) / dt)]
    own = None
    if a.own_cpu_s is not None and b.own_cpu_s is not None and dt >= SHORTEST_S:
        own = max(0.0, b.own_cpu_s - a.own_cpu_s)
        rows.append(("controller_cpu_pct", 100.0 * own / dt))
    kernel = None
    if a.kernel is not None and b.kernel is not None and dt >= SHORTEST_S:
        kernel = ticks_cpu_s(a.kernel, b.kernel)
        rows.append(("kernel_cpu_pct", 100.0 * kernel / dt))
    daemon = None
    if a.daemons is not None and b.daemons is not None and dt >= SHORTEST_S:
        daemon = ticks_cpu_s(a.daemons, b.daemons)
        rows.append(("daemon_cpu_pct", 100.0 * daemon / dt))
    # a cgroup seen first now was made during the interval: all its CPU time is in it; one gone
    # since (an instance or host end removed) took its last CPU time with it: no campaign CPU then
    grouped = (
        None
        if set(a.groups) - set(b.groups)
        else sum(max(0.0, cpu - a.groups.get(g, (0.0, None))[0]) for g, (cpu, _) in b.groups.items())
    )
    used = None
    if (b.groups or a.groups) and a.groups_whole and b.groups_whole:
        if grouped is not None:
            throttled = sum(
                max(0, (n or 0) - (a.groups.get(g, (0.0, 0))[1] or 0)) for g, (_, n) in b.groups.items()
            )
            used = grouped
            rows.append(("throttled_periods", float(throttled)))
    elif host_busy is not None and a.members is not None and a.members == b.members and grouped is not None:
        # the instances' own counters, plus the campaign's commands on this machine (host ends)
        used = max(0.0, b.campaign_cpu_s - a.campaign_cpu_s) + grouped
    if used is not None:
        rows.append(("campaign_cpu_pct", 100.0 * used / dt))
        if host_busy is not None:
            outside = host_busy - used - (own or 0.0) - (kernel or 0.0) - (daemon or 0.0)
            rows.append(("cpu_other_pct", max(0.0, 100.0 * outside / dt)))
    rows += list(b.gauges.items())
    return rows + instance_rows(a, b, dt)


def _pct(part: float, whole: float) -> float:
    return min(100.0, max(0.0, 100.0 * part / whole))
