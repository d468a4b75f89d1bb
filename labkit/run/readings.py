"""Readings of this machine and of a run's instances, and the metrics of the interval between two
(:func:`delta_rows`): what :mod:`labkit.run.sampler` reads and :mod:`labkit.run.telemetry` stores
(the metrics are listed there)."""
from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..backends import cgroups, network_host
from ..errors import LabkitError
from .hooks import RunContext

PSI = ("cpu", "memory", "io")
#: the shortest interval whose shares of the host's CPU are told (its CPU times count in 10-ms
#: clock ticks: over a few ms they read as any share; 2 CPUs x 1 tick over 0.2 s is 10 % of a CPU)
SHORTEST_S = 0.2
DRIVERS = (cgroups.CgroupV1, cgroups.CgroupV2)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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
    kernel: dict | None = None                      # kernel thread pid -> CPU clock ticks used
    daemons: dict | None = None                     # backend daemon "pid:start" -> CPU clock ticks used
    groups: dict = field(default_factory=dict)      # campaign cgroup -> (cpu_s, nr_throttled)
    gauges: dict = field(default_factory=dict)      # metric -> value read as is (load, memory, freq)
    instances: dict = field(default_factory=dict)   # the run's instance id -> Instance.stats()
    members: frozenset | None = None                # ids behind campaign_cpu_s (None: not all known)
    groups_whole: bool = True                       # groups hold the instances (local), not only host ends
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
    names start with ``prefix``. The local backend names each instance's cgroup after it
    (``holds_instances``); on any backend, the commands a run's workload starts on this machine
    (a private network's host end, :mod:`labkit.backends.network_host`) are in one too."""

    def __init__(self, driver: cgroups.Driver, prefix: str, holds_instances: bool = True):
        self.driver, self.prefix, self.holds_instances = driver, prefix, holds_instances
        self.root = cgroups.accounting_root(driver)
        self.stat_root = driver.roots["cpu"] if isinstance(driver, cgroups.CgroupV1) else driver.root

    def read(self) -> dict[str, tuple[float, int | None]]:
        """cgroup name -> (CPU seconds used, throttled periods); a cgroup gone meanwhile is left out.
        ``<prefix>host-retired``: what the campaign's host ends removed so far used (their count
        goes on there: :func:`~labkit.backends.network_host.retired_cpu`)."""
        out: dict[str, tuple[float, int | None]] = {
            self.prefix + network_host.GROUP_TAG + "retired": (network_host.retired_cpu(self.prefix), 0)}
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


def parse_stat(data: bytes) -> tuple[str, int, int]:
    """A ``/proc/<pid>/stat`` line: the program's name (``comm``), the CPU clock ticks it used
    (user + system, its own) and its start time (clock ticks after boot)."""
    end = data.rindex(b")")
    fields = data[end + 2:].split()
    return data[data.index(b"(") + 1:end].decode(errors="replace"), int(fields[11]) + int(fields[12]), int(fields[19])


class KernelThreads:
    """The CPU clock ticks (user + system) of each kernel thread alive: kthreadd and its children
    (``/proc/2/task/2/children``: kworkers, ksoftirqd, the network namespaces' clean-up...). Their
    work is the kernel's, done for whoever asked (often the campaign's own instances: a removed
    network namespace is cleaned up by a kworker), not a process outside the campaign.

    Each thread's ``stat`` file stays open between readings (a ``pread`` each: ~0.3 ms for 85
    threads instead of ~1.1 ms opening them every time), at most :attr:`MAX_OPEN` of them (the
    others are opened at each reading); one that ended is closed."""

    MAX_OPEN = 256

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()

    def read(self) -> dict[str, int]:
        """pid -> ticks; OSError where /proc does not list kthreadd's children."""
        with open("/proc/2/task/2/children") as fh:
            pids = ["2", *fh.read().split()]
        out = {}
        with self._lock:
            for pid in set(self._fds) - set(pids):
                os.close(self._fds.pop(pid))
            for pid in pids:
                fd = self._fds.get(pid)
                try:
                    if fd is None:
                        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
                        if len(self._fds) < self.MAX_OPEN:
                            self._fds[pid] = fd
                    data = os.pread(fd, 1024, 0)
                except OSError:
                    self._fds.pop(pid, None)   # closed below
                    continue   # ended meanwhile
                finally:
                    if fd is not None and pid not in self._fds:
                        os.close(fd)
                if not data:
                    continue
                out[pid] = parse_stat(data)[1]
        return out


#: this process's reader of the kernel threads (one set of open files for every sampler)
kernel_threads = KernelThreads().read


def ticks_cpu_s(a: dict[str, int], b: dict[str, int]) -> float:
    """CPU seconds the processes of two readings of clock ticks used between them (the kernel
    threads of :func:`kernel_threads`, the daemons of :class:`DaemonCpu`; one new in ``b``, or a
    pid reused, counts from its start)."""
    ticks = sum(t if t < a.get(pid, 0) else t - a.get(pid, 0) for pid, t in b.items())
    return ticks / CLOCK_TICKS


#: where the daemons' programs are looked for (:class:`DaemonCpu`): the system's program
#: directories, LXD's own (Debian's package, the snap)
DAEMON_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin",
               "/usr/libexec", "/usr/lib/lxd", "/snap/lxd/current/bin", "/snap/lxd/current/sbin")
#: ``comm`` holds at most this many characters of a program's name (TASK_COMM_LEN - 1)
COMM_LEN = 15
DELETED = " (deleted)"
#: where the daemons write their pid (:class:`DaemonCpu`: the process a root-owned pid file names,
#: owned as a daemon is, runs a daemon's program, whatever directory it is in)
DAEMON_PIDFILES = ("/run/docker.pid", "/run/docker/containerd/containerd.pid", "/run/containerd/containerd.pid",
                   "/run/libvirtd.pid", "/run/virtqemud.pid", "/run/virtlogd.pid",
                   "/var/snap/lxd/common/lxd.pid")


def parse_uids(text: str) -> tuple[int, ...]:
    """The real, effective, saved and file-system uids of a ``/proc/<pid>/status`` text; ValueError
    without its ``Uid:`` line."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            return tuple(int(u) for u in line.split()[1:])
    raise ValueError("no Uid: line in /proc/<pid>/status")


class DaemonCpu:
    """The CPU clock ticks (user + system: their own, not their children's, which the instances'
    stats count) of the host daemons that do the campaign's backends' work on this machine
    (:attr:`Backend.daemons <labkit.backends.base.Backend.daemons>`: LXD, dockerd and containerd,
    libvirtd; :meth:`add`). Their work making and removing the campaign's instances (LXD launching
    and deleting containers: up to 60 % of a CPU over a one-second interval on the 2-core machine)
    is the campaign's, not a process outside it. Another campaign using the same daemon meanwhile is told apart by the registry
    (``others_running``, the run flagged suspect), not here.

    A daemon is identified by its program, owner and ancestry, never by its name alone (any user's
    busy loop may call itself ``dockerd``: issue 47, it hid 100 % of a CPU from the quiet-host
    guard). A process is one when its name (``/proc/<pid>/comm``, which it may set) is one of the
    daemons' (the cheap first filter), its real and effective uids are in :attr:`owners` (root, or
    the user running labkit: a rootless daemon), and its program (``/proc/<pid>/exe``, compared by
    device and inode, so neither a copy, a link nor another mount namespace's file of the same
    path passes) is a daemon's:

    * a program of a daemon's name found in :attr:`dirs`, a file owned by one of :attr:`owners`
      that no one else may write (a name of 15 characters, ``comm``'s longest, stands for every
      program it begins: ``containerd-shim`` for ``containerd-shim-runc-v2``), or that program's
      former file (``/usr/sbin/dockerd (deleted)``: upgraded while the daemon runs);
    * or the program of the process a daemon's root-owned pid file names (:attr:`pidfiles`,
      ``/run/docker.pid``...), owned as above: a daemon installed elsewhere, and its forks that
      run its program (LXD's ``forkstart`` and monitors).

    The processes a daemon starts with other programs (the instances: a container's processes
    under containerd-shim, QEMU under libvirtd) are not daemons: their CPU is the instances' own
    (their stats). A user who may not read a root process's ``exe`` (labkit not run as root)
    counts a root-owned process of a daemon's name: an unprivileged user cannot make one.

    The processes are found at most every :attr:`RESCAN_S` seconds (a scan of /proc: each
    process's ``stat``, ~2 ms; the checks above only for a process of a daemon's name not seen
    before, cached by pid and start time); between scans only their stat files are read. Keys are
    ``"<pid>:<start time>"``, so a pid reused by another process is a new one. Values count from
    when a process was first found: one started since the scan before counts from its start (all
    its CPU is new), one that ran before it was found (a daemon named only now, by the campaign's
    first run on that backend) from that moment, not with the CPU of its whole life."""

    RESCAN_S = 5.0

    def __init__(self, clock: Callable[[], float] = time.monotonic, proc: str = "/proc",
                 dirs: Iterable[str] = DAEMON_DIRS, pidfiles: Iterable[str] = DAEMON_PIDFILES,
                 owners: Iterable[int] | None = None) -> None:
        self.names: frozenset[str] = frozenset()
        self.clock, self.proc, self.dirs, self.pidfiles = clock, proc, tuple(dirs), tuple(pidfiles)
        #: the uids a daemon may run as (and its program be owned by): root and labkit's user
        self.owners = frozenset({0, os.geteuid()} if owners is None else owners)
        self._paths: dict[str, str] = {}          # a daemon's program -> its name (comm)
        self._pids: list[str] = []
        self._keys: dict[str, str] = {}           # pid -> key ("pid:start") of each daemon found
        self._verdicts: dict[str, bool] = {}      # key -> whether it is a daemon (name matching)
        self._scanned: float | None = None
        self._uptime: float | None = None         # /proc/uptime at the last scan, in clock ticks
        self._uptime_before: float | None = None  # ... and at the scan before it
        self._base: dict[str, int] = {}           # key -> ticks not counted (used before it was found)
        self._lock = threading.Lock()

    def add(self, names: Iterable[str]) -> None:
        """Count the daemons called ``names`` too (``comm``, at most 15 characters) from the next
        reading on."""
        with self._lock:
            more = self.names | {n[:COMM_LEN] for n in names}
            if more != self.names:
                self.names, self._scanned = more, None
                self._paths = self._programs(more)
                self._verdicts.clear()

    def _programs(self, names: frozenset[str]) -> dict[str, str]:
        """The paths in :attr:`dirs` of the programs of ``names`` -> their name."""
        out = {}
        for d in self.dirs:
            try:
                entries = os.listdir(d)
            except OSError:
                continue
            for entry in entries:
                if entry[:COMM_LEN] in names:   # a longer name is cut in comm: it is the program's start
                    out[os.path.join(d, entry)] = entry[:COMM_LEN]
        return out

    def _files(self) -> set[tuple[int, int]]:
        """(device, inode) of each daemon's program now: those found in :attr:`dirs` (a program
        replaced since is its new file), leaving out one a user outside :attr:`owners` owns or may
        write; and the program of each daemon a pid file names (:attr:`pidfiles`)."""
        out = set()
        for path in self._paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if st.st_uid in self.owners and not st.st_mode & 0o022 and stat.S_ISREG(st.st_mode):
                out.add((st.st_dev, st.st_ino))
        for path in self.pidfiles:
            pid = self._pidfile(path)
            if pid is not None and self._owned(pid):
                with contextlib.suppress(OSError):
                    st = os.stat(f"{self.proc}/{pid}/exe")
                    out.add((st.st_dev, st.st_ino))
        return out

    def _pidfile(self, path: str) -> str | None:
        """The pid a daemon's pid file holds, if it is a small regular file owned by root that no
        one else may write, else None."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
                return None
            text = os.read(fd, 32).decode(errors="replace").strip()
        except OSError:
            return None
        finally:
            os.close(fd)
        return text if text.isdigit() else None

    def _owned(self, pid: str) -> bool:
        """Whether the real and effective uids of process ``pid`` are in :attr:`owners`."""
        try:
            with open(f"{self.proc}/{pid}/status", "rb") as fh:
                uids = parse_uids(fh.read().decode(errors="replace"))
        except (OSError, ValueError):
            return False
        return all(u in self.owners for u in uids[:2])

    def _identify(self, pid: str, files: set[tuple[int, int]]) -> bool:
        """Whether process ``pid`` (of a daemon's name) is a daemon by its owner and program."""
        if not self._owned(pid):
            return False
        try:
            st = os.stat(f"{self.proc}/{pid}/exe")
        except PermissionError:
            return True    # labkit is not root: a root-owned process of the name (see the class)
        except OSError:
            return False   # no program: a kernel thread, or ended
        if (st.st_dev, st.st_ino) in files:
            return True
        try:
            link = os.readlink(f"{self.proc}/{pid}/exe")
        except OSError:
            return False
        # its program was upgraded while it runs
        return link.endswith(DELETED) and link[:-len(DELETED)] in self._paths

    def _scan(self) -> None:
        with open(f"{self.proc}/uptime", "rb") as fh:
            now = float(fh.read().split()[0]) * CLOCK_TICKS
        files = self._files()
        verdicts: dict[str, bool] = {}
        keys: dict[str, str] = {}                 # pid -> key of each daemon
        for pid in os.listdir(self.proc):
            if not pid.isdigit():
                continue
            try:
                with open(f"{self.proc}/{pid}/stat", "rb") as fh:
                    data = fh.read(1024)
                comm, _, start = parse_stat(data)
            except (OSError, ValueError, IndexError):
                continue   # ended meanwhile
            if comm not in self.names:
                continue
            key = f"{pid}:{start}"
            known = self._verdicts[key] if key in self._verdicts else self._identify(pid, files)
            verdicts[key] = known
            if known:
                keys[pid] = key
        self._verdicts = verdicts   # only the processes alive now: the cache stays small
        self._keys, self._pids, self._scanned = keys, sorted(keys, key=int), self.clock()
        self._uptime_before, self._uptime = self._uptime, now

    def read(self) -> dict[str, int] | None:
        """``"pid:start"`` -> ticks of each daemon alive; None when no backend named any."""
        with self._lock:
            if not self.names:
                return None
            if self._scanned is None or self.clock() - self._scanned >= self.RESCAN_S:
                self._scan()
            out = {}
            for pid in self._pids:
                try:
                    with open(f"{self.proc}/{pid}/stat", "rb") as fh:
                        data = fh.read(1024)
                except OSError:
                    continue   # ended: the next scan drops it
                _, ticks, start = parse_stat(data)
                key = f"{pid}:{start}"
                if key != self._keys.get(pid):   # a pid reused by another process
                    continue
                if key not in self._base:   # first found: new since the scan before, or running already
                    new = self._uptime_before is not None and start >= self._uptime_before
                    self._base[key] = 0 if new else ticks
                out[key] = ticks - self._base[key]
            for gone in set(self._base) - set(out):
                del self._base[gone]
            return out


def read_host(clock: Callable[[], float], groups: CgroupWatch | None, proc: Any,
              daemons: DaemonCpu | None = None) -> Reading:
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
    grouped = None if set(a.groups) - set(b.groups) else \
        sum(max(0.0, cpu - a.groups.get(g, (0.0, None))[0]) for g, (cpu, _) in b.groups.items())
    used = None
    if (b.groups or a.groups) and a.groups_whole and b.groups_whole:
        if grouped is not None:
            throttled = sum(max(0, (n or 0) - (a.groups.get(g, (0.0, 0))[1] or 0)) for g, (_, n) in b.groups.items())
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
