"""This machine's processes as :mod:`labkit.run.readings` reads them from ``/proc``: the CPU its
kernel threads used (:class:`KernelThreads`) and the CPU the backends' daemons used
(:class:`DaemonCpu`: dockerd, containerd, libvirtd, LXD ..., identified by their program file,
never by name alone), in clock ticks (:func:`ticks_cpu_s`)."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable

#: the kernel's clock ticks per second (what ``/proc/<pid>/stat`` counts CPU time in)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def parse_stat(data: bytes) -> tuple[str, int, int]:
    """A ``/proc/<pid>/stat`` line: the program's name (``comm``), the CPU clock ticks it used
    (user + system, its own) and its start time (clock ticks after boot)."""
    end = data.rindex(b")")
    fields = data[end + 2 :].split()
    return (
        data[data.index(b"(") + 1 : end].decode(errors="replace"),
        int(fields[11]) + int(fields[12]),
        int(fields[19]),
    )


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
                    self._fds.pop(pid, None)  # closed below
                    continue  # ended meanwhile
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
DAEMON_DIRS = (
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/libexec",
    "/usr/lib/lxd",
    "/snap/lxd/current/bin",
    "/snap/lxd/current/sbin",
)
#: ``comm`` holds at most this many characters of a program's name (TASK_COMM_LEN - 1)
COMM_LEN = 15
DELETED = " (deleted)"
#: where the daemons write their pid (:class:`DaemonCpu`: the process a root-owned pid file names,
#: owned as a daemon is, runs a daemon's program, whatever directory it is in)
DAEMON_PIDFILES = (
    "/run/docker.pid",
    "/run/docker/containerd/containerd.pid",
    "/run/containerd/containerd.pid",
    "/run/libvirtd.pid",
    "/run/virtqemud.pid",
    "/run/virtlogd.pid",
    "/var/snap/lxd/common/lxd.pid",
)


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

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        proc: str = "/proc",
        dirs: Iterable[str] = DAEMON_DIRS,
        pidfiles: Iterable[str] = DAEMON_PIDFILES,
        owners: Iterable[int] | None = None,
    ) -> None:
        self.names: frozenset[str] = frozenset()
        self.clock, self.proc, self.dirs, self.pidfiles = clock, proc, tuple(dirs), tuple(pidfiles)
        #: the uids a daemon may run as (and its program be owned by): root and labkit's user
        self.owners = frozenset({0, os.geteuid()} if owners is None else owners)
        self._paths: dict[str, str] = {}  # a daemon's program -> its name (comm)
        self._pids: list[str] = []
        self._keys: dict[str, str] = {}  # pid -> key ("pid:start") of each daemon found
        self._verdicts: dict[str, bool] = {}  # key -> whether it is a daemon (name matching)
        self._scanned: float | None = None
        self._uptime: float | None = None  # /proc/uptime at the last scan, in clock ticks
        self._uptime_before: float | None = None  # ... and at the scan before it
        self._base: dict[str, int] = {}  # key -> ticks not counted (used before it was found)
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
                if entry[:COMM_LEN] in names:  # a longer name is cut in comm: it is the program's start
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
            return True  # labkit is not root: a root-owned process of the name (see the class)
        except OSError:
            return False  # no program: a kernel thread, or ended
        if (st.st_dev, st.st_ino) in files:
            return True
        try:
            link = os.readlink(f"{self.proc}/{pid}/exe")
        except OSError:
            return False
        # its program was upgraded while it runs
        return link.endswith(DELETED) and link[: -len(DELETED)] in self._paths

    def _scan(self) -> None:
        with open(f"{self.proc}/uptime", "rb") as fh:
            now = float(fh.read().split()[0]) * CLOCK_TICKS
        files = self._files()
        verdicts: dict[str, bool] = {}
        keys: dict[str, str] = {}  # pid -> key of each daemon
        for pid in os.listdir(self.proc):
            if not pid.isdigit():
                continue
            try:
                with open(f"{self.proc}/{pid}/stat", "rb") as fh:
                    data = fh.read(1024)
                comm, _, start = parse_stat(data)
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile
            if comm not in self.names:
                continue
            key = f"{pid}:{start}"
            known = self._verdicts[key] if key in self._verdicts else self._identify(pid, files)
            verdicts[key] = known
            if known:
                keys[pid] = key
        self._verdicts = verdicts  # only the processes alive now: the cache stays small
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
                    continue  # ended: the next scan drops it
                _, ticks, start = parse_stat(data)
                key = f"{pid}:{start}"
                if key != self._keys.get(pid):  # a pid reused by another process
                    continue
                if key not in self._base:  # first found: new since the scan before, or running already
                    new = self._uptime_before is not None and start >= self._uptime_before
                    self._base[key] = 0 if new else ticks
                out[key] = ticks - self._base[key]
            for gone in set(self._base) - set(out):
                del self._base[gone]
            return out
