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
  sampler included), and, where the instances' CPU is known (the ``local`` backend: the cgroups
  whose names start with the campaign's prefix, its instances and neighbours, v1 or v2),
  ``campaign_cpu_pct``, ``cpu_other_pct`` (host minus campaign cgroups minus this process: the
  processes outside the campaign, % of one CPU) and ``throttled_periods`` (CFS periods the
  campaign's cgroups were throttled in); on the other backends running here (``docker``, ``lxd``,
  ``libvirt``), ``campaign_cpu_pct`` and ``cpu_other_pct`` come from the instances' and their
  neighbours' own counters (below), for the intervals in which all of them were known (not while
  the instances are being made).

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
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..backends import cgroups
from ..design.options import DEFAULT_INTERVAL, MIN_INTERVAL, check_interval  # noqa: F401 (re-exported)
from ..errors import ConfigError, LabkitError
from .hooks import RunContext, RunHook

PSI = ("cpu", "memory", "io")
#: readings of this machine the campaign's sampler keeps for the quiet-host guard's look
HISTORY = 4
#: seconds between the sampler's first two readings (at most its interval): the guard's first look
FIRST_S = 0.25
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
        return None   # a unix socket on this machine
    if name == "libvirt" and getattr(backend, "local", False):
        return None
    return f"backend {name!r} runs its instances on another machine"


# -- readings ---------------------------------------------------------------------------------

@dataclass
class Reading:
    """Counters read at one moment (``t``: monotonic seconds)."""
    t: float
    cpus: list = field(default_factory=list)        # psutil scputimes per CPU
    psi: dict = field(default_factory=dict)         # "cpu_some" -> total microseconds
    disk: tuple | None = None                       # (read_bytes, write_bytes)
    net: tuple | None = None                        # (bytes_recv, bytes_sent)
    own_cpu_s: float | None = None                  # this process's CPU time
    groups: dict = field(default_factory=dict)      # campaign cgroup -> (cpu_s, nr_throttled)
    gauges: dict = field(default_factory=dict)      # metric -> value read as is (load, memory, freq)
    instances: dict = field(default_factory=dict)   # the run's instance id -> Instance.stats()
    members: frozenset | None = None                # ids behind campaign_cpu_s (None: not all known)
    campaign_cpu_s: float = 0.0                     # CPU seconds of the run's instances and neighbours


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
    names start with ``prefix`` (the local backend names each instance's cgroup after it)."""

    def __init__(self, driver: cgroups.Driver, prefix: str):
        self.driver, self.prefix = driver, prefix
        if isinstance(driver, cgroups.CgroupV1):
            self.root = driver.roots.get("cpuacct") or driver.roots["cpu"]
            self.stat_root = driver.roots["cpu"]
        else:
            self.root = self.stat_root = driver.root

    def read(self) -> dict[str, tuple[float, int | None]]:
        """cgroup name -> (CPU seconds used, throttled periods); a cgroup gone meanwhile is left out."""
        out = {}
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


def read_host(clock: Callable[[], float], groups: CgroupWatch | None, proc: Any) -> Reading:
    """One :class:`Reading` of this machine (psutil, /proc/pressure, the campaign's cgroups)."""
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
    if groups is not None:
        r.groups = groups.read()
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
            except Exception as exc:   # a backend SDK's own error: telemetry never fails a run
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
            r.members = frozenset(getattr(x, "name", str(id(x))) for x in insts + neighbours)
            r.campaign_cpu_s = total


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
            rows.append(("instance_steal_pct", _pct(y["steal_s"] - x["steal_s"], y["cpu_total_s"] - x["cpu_total_s"]),
                         name))
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
            rows += [("cpu_pct", _pct(busy, tot)), ("steal_pct", _pct(steal, tot)),
                     ("iowait_pct", _pct(iowait, tot))]
            host_busy = max(0.0, busy)
            rows.append(("host_cpu_used_pct", 100.0 * host_busy / dt))
    for key, total in b.psi.items():
        if key in a.psi:
            rows.append((f"psi_{key}_pct", min(100.0, 100.0 * (total - a.psi[key]) / 1e6 / dt)))
    for (name_in, name_out), (x, y) in ((("disk_read_Bps", "disk_write_Bps"), (a.disk, b.disk)),
                                        (("net_rx_Bps", "net_tx_Bps"), (a.net, b.net))):
        if x is not None and y is not None:
            rows += [(name_in, max(0.0, y[0] - x[0]) / dt), (name_out, max(0.0, y[1] - x[1]) / dt)]
    own = None
    if a.own_cpu_s is not None and b.own_cpu_s is not None and dt >= SHORTEST_S:
        own = max(0.0, b.own_cpu_s - a.own_cpu_s)
        rows.append(("controller_cpu_pct", 100.0 * own / dt))
    if (b.groups or a.groups) and not set(a.groups) - set(b.groups):
        # a cgroup seen first now was made during the interval: all its CPU time is in it; one gone
        # since (an instance removed) took its last CPU time with it: no campaign CPU for the interval
        used = sum(max(0.0, cpu - a.groups.get(g, (0.0, None))[0]) for g, (cpu, _) in b.groups.items())
        throttled = sum(max(0, (n or 0) - (a.groups.get(g, (0.0, 0))[1] or 0)) for g, (_, n) in b.groups.items())
        rows += [("campaign_cpu_pct", 100.0 * used / dt), ("throttled_periods", float(throttled))]
        if host_busy is not None:
            rows.append(("cpu_other_pct", max(0.0, 100.0 * (host_busy - used - (own or 0.0)) / dt)))
    elif host_busy is not None and a.members is not None and a.members == b.members:
        used = max(0.0, b.campaign_cpu_s - a.campaign_cpu_s)
        rows.append(("campaign_cpu_pct", 100.0 * used / dt))
        if host_busy is not None:
            rows.append(("cpu_other_pct", max(0.0, 100.0 * (host_busy - used - (own or 0.0)) / dt)))
    rows += list(b.gauges.items())
    return rows + instance_rows(a, b, dt)


def _pct(part: float, whole: float) -> float:
    return min(100.0, max(0.0, 100.0 * part / whole))


# -- the campaign's sampler ----------------------------------------------------------------------

@dataclass(eq=False)
class Window:
    """One run's share of a :class:`HostSampler`'s readings: ``start`` (the sampler's clock when the
    run's hook was entered), whether this machine's metrics are its own (``host``), its
    :class:`InstanceWatch`, the rows cut so far and the last reading they reach."""
    start: float
    host: bool
    watch: InstanceWatch | None
    cpu0: float
    rows: list = field(default_factory=list)
    last: Reading | None = None
    readings: int = 0
    cpu_s: float = 0.0          # the sampler's CPU while the window was open (filled at close)
    wall_s: float = 0.0
    closed: bool = False

    def add(self, r: Reading) -> None:
        """Append the rows of the interval from the window's last reading to ``r`` (the first
        reading only sets where the rows start)."""
        if self.last is not None:
            t = round(r.t - self.start, 6)
            self.rows += [(t, m, float(v), *inst) for m, v, *inst in delta_rows(self.last, r) if math.isfinite(v)]
        self.last = r
        self.readings += 1


class HostSampler:
    """One sampling thread for a whole campaign: a reading of this machine every ``interval``
    seconds (and of the instances of every run in flight), from the campaign's start to its end;
    each run's rows are cut from those readings (:meth:`open` / :meth:`close`).

    The thread runs while the campaign does (:meth:`campaign`, entered by the campaign's hooks'
    ``around_campaign``; it is started by the first run that needs it and stopped, joined, when the
    campaign ends, on an error or an interrupt as well). A run's window (:class:`Window`) gets the
    intervals that overlap it: the one in progress when it starts (from the sampler's last
    reading, with the last stats the thread read of the run's instances when they already exist:
    a later run of a boot), those ending while it runs, and a last one to its end, cut by one
    reading of this machine taken when it ends (no instance stats: those come only from the
    thread, so a slow stats interface never delays a run's start or end; a run's new instances
    wake the thread for their first stats, :meth:`wake`). A run shorter than one interval still
    gets that last interval, hence a summary. Outside a campaign's :meth:`campaign` no thread runs:
    a window then gets one reading of the host at its start and one at its end.

    ``read_host``: how this machine is read (default: :func:`read_host`, set by :meth:`configure`
    for the first run on this machine); ``clock`` the time base (monotonic seconds),
    ``thread_clock`` the sampling thread's CPU clock; ``workers``: threads reading the instances'
    stats when several runs are in flight (a fleet); ``autostart`` False runs no thread (the caller
    calls :meth:`sample`)."""

    def __init__(self, interval: float = DEFAULT_INTERVAL, read_host: Callable[[], Reading] | None = None, *,
                 clock: Callable[[], float] = time.monotonic, thread_clock: Callable[[], float] = time.thread_time,
                 workers: int = 8, autostart: bool = True):
        self.interval = interval
        self.autostart = autostart   # False: no thread; whoever drives it calls sample() (tests)
        self.read_host = read_host
        self.clock, self.thread_clock = clock, thread_clock
        self.workers = workers
        self.readings = 0
        self.cpu_s = 0.0            # CPU time of the sampling thread's readings
        self.prev: Reading | None = None   # the last two readings of this machine (the guard's look)
        self.last: Reading | None = None
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._windows: list[Window] = []
        self._history: deque[Reading] = deque(maxlen=HISTORY)
        self._interval = threading.Event()   # set once two readings of this machine exist
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._stats: dict[str, tuple[float, dict]] = {}   # instance id -> (t, its last stats) read by the thread
        self._thread: threading.Thread | None = None
        self._pool: Any = None
        self._depth = 0             # campaigns entered (campaign())
        self._runs: set[int] = set()   # ids of the contexts of the runs in flight here (in_flight())
        self._runs_changed = False     # a run here started or ended since the last reading
        self._groups_for: Any = None

    # -- configuration and life --

    def configure(self, backend: Any, prefix: str) -> None:
        """Read this machine from now on (psutil), with the campaign's cgroups (names starting with
        ``prefix``) when ``backend`` has a cgroup driver (the local backend); a later run's driver
        adds them if the first had none. A reader given to the constructor is kept as is."""
        driver = getattr(backend, "driver", None)
        with self._start_lock:
            if self.read_host is not None and not getattr(self.read_host, "labkit_default", False):
                return
            if self.read_host is not None and (self._groups_for is not None or not isinstance(driver, DRIVERS)):
                return
            import psutil
            watch = CgroupWatch(driver, prefix) if isinstance(driver, DRIVERS) else None
            self._groups_for = watch
            proc = psutil.Process()

            def read() -> Reading:
                return read_host(self.clock, watch, proc)
            read.labkit_default = True   # type: ignore[attr-defined]
            self.read_host = read

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @contextlib.contextmanager
    def campaign(self) -> Iterator[HostSampler]:
        """While a campaign runs: runs may start the thread; it is stopped when the last campaign
        context is left (on any path out)."""
        with self._start_lock:
            self._depth += 1
        try:
            yield self
        finally:
            with self._start_lock:
                self._depth -= 1
                last = self._depth == 0
            if last:
                self.stop()

    def ensure_started(self) -> bool:
        """Start the thread when inside :meth:`campaign` and not yet running; whether runs are
        windows of the campaign's readings (inside :meth:`campaign`)."""
        with self._start_lock:
            if self._depth <= 0:
                return False
            if self.autostart and (self._thread is None or not self._thread.is_alive()):
                self._stop.clear()
                self._wake.clear()
                self._thread = threading.Thread(target=self._loop, daemon=True, name="labkit-telemetry")
                self._thread.start()
            return True

    def stop(self) -> None:
        """Stop and join the thread (idempotent)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._lock:   # a campaign run again starts from fresh readings
            self.prev = self.last = None
            self._history.clear()
            self._interval.clear()

    def _loop(self) -> None:
        wait = min(self.interval, FIRST_S)   # a first interval soon (the guard's first look)
        while not self._stop.is_set():
            self.sample()
            self._wake.wait(wait)
            self._wake.clear()
            wait = self.interval

    def wake(self) -> None:
        """Take the next reading now rather than at the end of the interval (a run's instances were
        just made: their first stats as early as can be); returns at once."""
        self._wake.set()

    @contextlib.contextmanager
    def in_flight(self, ctx: RunContext) -> Iterator[None]:
        """``ctx``'s run runs on this machine meanwhile (the quiet-host guard says so): a reading
        whose interval a run here overlaps without a window of its own (telemetry off: its
        instances' CPU is not read) does not tell the campaign's CPU apart unless the campaign's
        cgroups do (the local backend)."""
        with self._lock:
            self._runs.add(id(ctx))
            self._runs_changed = True
        try:
            yield
        finally:
            with self._lock:
                self._runs.discard(id(ctx))
                self._runs_changed = True

    def wait_interval(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the thread's first interval of this machine (two readings);
        whether there is one."""
        return self._interval.wait(timeout)

    # -- readings --

    def _read(self) -> Reading | None:
        if self.read_host is None:
            return None
        try:
            return self.read_host()
        except Exception:   # telemetry never fails a run
            return None

    def _instances(self, windows: list[Window], host: Reading | None, t: float) -> list[Reading]:
        """Each window's reading: this machine's (a copy, for windows on it) and its instances'."""
        def one(w: Window) -> Reading:
            r = replace(host, instances={}, members=None, campaign_cpu_s=0.0) if host and w.host else Reading(t)
            if w.watch is not None:
                w.watch.read(r)
            return r
        if len(windows) <= 1:
            return [one(w) for w in windows]
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor
            self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="labkit-telemetry-stats")
        return list(self._pool.map(one, windows))

    def sample(self) -> None:
        """One reading: this machine's, and the instances' of every window open; each open window
        gets the interval's rows. The campaign's CPU (``members``) is the sum over the windows on
        this machine, known when every one of them knew its own."""
        c0 = self.thread_clock()
        host = self._read()
        t = host.t if host is not None else self.clock()
        with self._lock:
            windows = [w for w in self._windows if not w.closed]
            seen = {id(w.watch.ctx) for w in windows if w.watch is not None}
            blind = self._runs_changed or bool(self._runs - seen)
            self._runs_changed = False
        parts = self._instances(windows, host, t)
        members: frozenset | None = None if blind else frozenset()
        used = 0.0
        for w, r in zip(windows, parts):
            if not w.host:
                continue
            if r.members is None or members is None:
                members = None
            else:
                members, used = members | r.members, used + r.campaign_cpu_s
        with self._lock:
            if host is not None:
                host.members, host.campaign_cpu_s = members, used
                self.prev, self.last = self.last, host
                self._history.append(host)
                if len(self._history) > 1:
                    self._interval.set()
            for r in parts:
                self._stats.update((name, (t, counters)) for name, counters in r.instances.items())
            old = t - 3 * self.interval - 1.0
            self._stats = {name: v for name, v in self._stats.items() if v[0] >= old}
            for w, r in zip(windows, parts):
                if w.closed:
                    continue
                if w.host and host is not None:
                    r.members, r.campaign_cpu_s = members, used
                w.add(r)
            self.readings += 1
            self.cpu_s += max(0.0, self.thread_clock() - c0)

    def recent(self, max_age: float | None = None) -> list[tuple[Reading, Reading]]:
        """The last intervals of this machine the thread read (``(reading, next reading)``, newest
        first, at most ``HISTORY - 1``) that end at most ``max_age`` s ago (default 3 intervals + 1 s)."""
        limit = 3 * self.interval + 1.0 if max_age is None else max_age
        with self._lock:
            hist = list(self._history)
        now = self.clock()
        pairs = list(zip(hist, hist[1:]))[::-1]
        return [(a, b) for a, b in pairs if now - b.t <= limit]

    # -- runs --

    def open(self, ctx: RunContext | None, *, host: bool) -> Window:
        """A run's window, from now (see the class docstring); ``host``: this machine is the run's."""
        if host and ctx is not None:
            self.configure(ctx.backend, ctx.prefix)
        threaded = self.ensure_started()
        w = Window(self.clock(), host, InstanceWatch(ctx) if ctx is not None else None, self.cpu_s)
        first = None
        if host and (not threaded or self._groups_for is not None):
            # no thread, or the campaign's cgroups tell its CPU (local): the window starts with a
            # reading now, not the thread's last one (which may hold a removed instance's CPU)
            c0 = self.thread_clock()
            first = self._read()
            w.cpu0 -= max(0.0, self.thread_clock() - c0)
        with self._lock:
            if first is not None:
                w.add(first)
            elif threaded:
                # the run's instances already made (a later run of a boot): their last stats the
                # thread read start the window, beside this machine's last reading
                names = {getattr(i, "name", None) for i in (ctx.instances if ctx is not None else [])}
                known = {n: self._stats[n] for n in names if n in self._stats}
                insts = {n: c for n, (_, c) in known.items()}
                if host and self.last is not None:
                    w.add(replace(self.last, instances=insts))
                elif known:
                    w.add(Reading(max(t for t, _ in known.values()), instances=insts))
            if threaded:
                self._windows.append(w)
        return w

    def close(self, w: Window) -> Window:
        """End ``w`` now: one reading of this machine cuts its last interval (no instance stats).
        Returns it with its ``rows``, ``readings``, ``cpu_s`` and ``wall_s`` set."""
        with self._lock:
            w.closed = True
            with contextlib.suppress(ValueError):
                self._windows.remove(w)
            cpu = self.cpu_s - w.cpu0
        if w.host:
            c0 = self.thread_clock()
            r = self._read()
            if r is not None:
                w.add(r)   # its members unknown (None): no campaign CPU from instance stats in this interval
            cpu += max(0.0, self.thread_clock() - c0)
        w.cpu_s, w.wall_s = cpu, max(0.0, self.clock() - w.start)
        return w


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


def host_reason(backend: Any) -> str | None:
    """None when this machine's metrics describe ``backend``'s runs (and psutil is here), else why not."""
    why = remote_reason(backend)
    if why is not None:
        return f"{why}: host telemetry is not collected there"
    if importlib.util.find_spec("psutil") is None:
        return "psutil is not installed (pip install psutil)"
    return None


class Telemetry(RunHook):
    """Sample the controller host every ``interval`` seconds during each run (module docstring), from
    one :class:`HostSampler` for the whole campaign (``sampler``: the campaign's, shared with its
    quiet-host guard; default: a new one)."""

    def __init__(self, interval: float = DEFAULT_INTERVAL, *, sampler: HostSampler | None = None):
        checked = check_interval(interval)
        if checked is None:
            raise ConfigError("Telemetry(interval): give an interval in seconds; leave the hook out to turn telemetry off")
        self.interval = checked
        self.sampler = sampler if sampler is not None else HostSampler(checked)

    def reader(self, ctx: RunContext, *, host: bool = True) -> tuple[Callable[[], Reading], InstanceWatch]:
        """How one reading for ``ctx``'s run is taken on the caller's thread: this machine
        (``host``), with the campaign's cgroups when the backend has a cgroup driver (the local
        backend), and the run's instances (the guard's first look, before the sampler has read)."""
        driver = getattr(ctx.backend, "driver", None)
        watch = CgroupWatch(driver, ctx.prefix) if host and isinstance(driver, DRIVERS) else None
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
        self.sampler.wake()   # the new instances' first stats now, not up to an interval later

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
                "collected": True, "interval_s": self.interval, "samples": window.readings,
                "host": "sampled" if why is None else f"not sampled: {why}",
                "instance_cpu": "cgroups" if cgroup else f"not read (backend {ctx.backend.name})",
                "instance_stats": (f"{ctx.backend.name} stats" if read_any
                                   else f"none: {why_not or 'no instance was sampled'}"),
                **summarize(window.rows), "sampler_cpu_s": round(window.cpu_s, 6),
                "sampler_cpu_pct": round(100.0 * window.cpu_s / window.wall_s, 4) if window.wall_s > 0 else None}

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
        rows.append({"run_id": rid, **{k: v for k, v in summary.items()
                                       if isinstance(v, (int, float)) and not isinstance(v, bool)}})
    return pd.DataFrame(rows)
