"""One cgroup v1/v2 driver that emits file operations, applied here or on a remote host.

A driver never touches the file system itself: ``create``, ``kill`` and
``remove`` return a list of :class:`Op` (make a directory, write or copy a
value, drain a cgroup of its processes). The ``local`` backend applies them
with :func:`apply` (Python); the ``ssh`` backend sends :func:`.cgroup_script.script` (the same
operations as one POSIX ``sh`` script) over one ``fabric`` ``run``. Reads go
the same way: a driver names the file and parses its text.

* v1: separate hierarchies per controller (cpuset, cpu, cpuacct, memory, and
  pids and freezer where they are mounted).
* v2: the unified hierarchy, one directory per instance with cpuset, cpu and
  memory (and pids where the kernel has it) enabled in the parent's
  ``cgroup.subtree_control``.

Not root on cgroup v2: :func:`detect_here` finds this process's own cgroup (``/proc/self/cgroup``)
and, when it is delegated to the user (writable: systemd ``Delegate=yes``, e.g. a scope made by
``systemd-run --user --scope -p Delegate=yes``), drives instances there as children of it. Its own
processes first move to a leaf child (:data:`LEAF`: cgroup v2 lets a cgroup other than the root
enable controllers for its children only when it holds no process itself), then the controllers are
enabled in its ``cgroup.subtree_control``. A controller the subtree was not given is refused by name
with the fix (:func:`delegation_fix`); limits are never accepted and silently not enforced.

``pids_max`` (``create``) caps the number of tasks in the instance (``pids.max``);
a driver's ``has_pids`` says whether the host has the pids controller. ``kill``
leaves no process behind even when one keeps forking: v2 writes ``cgroup.kill``;
v1 freezes the cgroup (freezer), sends SIGKILL to every process listed, thaws it
(the killed die before they run again, so none can fork meanwhile), then drains
what is left.

:data:`JOIN` is the wrapper a command starts through: it joins the instance's cgroups
(its pid to each ``cgroup.procs`` file; on v1, "0" to the ``tasks`` file beside it, which
moves its one thread, so the whole process, without the kernel's global threadgroup lock),
then ``exec``\\s the command, so every process it starts is in the instance from its first
instruction.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..core.waiting import wait_until
from ..errors import BackendError, BackendUnavailable

PERIOD_US = 100_000
DRAIN_TIMEOUT_S = 10.0
#: ``sh -c JOIN labkit-join argv...`` with $LABKIT_CGROUP_PROCS = the procs files
#: (v1: "0" to the ``tasks`` file beside each: the shell's one thread, so the whole process, without
#: the global threadgroup lock and its RCU grace period, 8-23 ms, that a write to cgroup.procs takes)
JOIN = (
    'for f in $LABKIT_CGROUP_PROCS; do t="${f%/cgroup.procs}/tasks"; '
    'if [ "$t" != "$f" ] && [ -e "$t" ]; then echo 0 > "$t"; else echo $$ > "$f"; fi '
    '|| { echo "labkit-join: cannot join $f" >&2; exit 125; }; done; '
    'unset LABKIT_CGROUP_PROCS; exec "$@"'
)
JOIN_FAILED = 125
CONTROLLERS = ("cpuset", "cpu", "memory")
#: controllers used where the host has them (v1: mounted hierarchies; v2: pids)
OPTIONAL = ("cpuacct", "pids", "freezer")


@dataclass(frozen=True)
class Op:
    """One file operation: ``mkdir`` path; ``write`` value to path; ``write?`` the same but
    only if path exists (and a failure is ignored); ``copy`` the contents of ``value`` (a
    path) to path; ``kill`` path: SIGKILL once every process listed in the cgroup ``path``
    (no waiting: they may be frozen); ``drain`` path: kill every process in the cgroup
    ``path`` until it is empty; ``rmdir``: drain, then remove the cgroup ``path`` (quiet
    if gone); ``move`` path: every process of the cgroup ``path`` into the cgroup ``value`` (one that
    exits meanwhile is skipped)."""

    kind: str
    path: str
    value: str = ""


def parse_cpulist(text: str) -> list[int]:
    """'0-2,4' -> [0, 1, 2, 4]."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-")
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(part))
    return cpus


def format_cpulist(cpus: Iterable[int]) -> str:
    return ",".join(str(c) for c in sorted(set(cpus)))


def _usage_usec(text: str) -> float:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    raise BackendError("no usage_usec in cpu.stat")


def _oom_kill_count(text: str) -> int:
    """``oom_kill N`` from memory.events (v2) or memory.oom_control (v1, kernel >= 4.13)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    raise BackendError("no oom_kill counter (kernel older than 4.13?)")


class CgroupV1:
    """Separate hierarchies per controller; ``roots`` maps controller -> mount point."""

    version = 1

    def __init__(self, roots: dict[str, str]):
        self.roots = {k: str(v) for k, v in roots.items()}
        self.has_pids = "pids" in self.roots

    def dirs(self, name: str) -> list[str]:
        return list(dict.fromkeys(f"{root}/{name}" for root in self.roots.values()))

    def cpus_file(self) -> str:
        return f"{self.roots['cpuset']}/cpuset.cpus"

    def create(
        self, name: str, cpus: list[int], quota_cpus: int | None, memory_mb: int, pids_max: int | None = None
    ) -> list[Op]:
        cs, cpu, mem = (f"{self.roots[c]}/{name}" for c in CONTROLLERS)
        limit = str(memory_mb * 2**20)
        ops = [Op("mkdir", d) for d in self.dirs(name)]
        if pids_max is not None and self.has_pids:
            ops.append(Op("write", f"{self.roots['pids']}/{name}/pids.max", str(pids_max)))
        return ops + [
            Op("copy", f"{cs}/cpuset.mems", f"{self.roots['cpuset']}/cpuset.mems"),
            Op("write", f"{cs}/cpuset.cpus", format_cpulist(cpus)),
            Op("write", f"{cpu}/cpu.cfs_period_us", str(PERIOD_US)),
            Op("write", f"{cpu}/cpu.cfs_quota_us", str(quota_cpus * PERIOD_US if quota_cpus else -1)),
            Op("write", f"{mem}/memory.limit_in_bytes", limit),
            Op("write?", f"{mem}/memory.memsw.limit_in_bytes", limit),
            Op("write?", f"{mem}/memory.swappiness", "0"),
        ]

    def procs_files(self, name: str) -> list[str]:
        return [f"{d}/cgroup.procs" for d in self.dirs(name)]

    def kill(self, name: str) -> list[Op]:
        if "freezer" not in self.roots:
            return [Op("drain", d) for d in self.dirs(name)]
        frozen = f"{self.roots['freezer']}/{name}"
        return [
            Op("write?", f"{frozen}/freezer.state", "FROZEN"),
            Op("kill", frozen),
            Op("write?", f"{frozen}/freezer.state", "THAWED"),
            *(Op("drain", d) for d in self.dirs(name)),
        ]

    def remove(self, name: str) -> list[Op]:
        return [Op("rmdir", d) for d in self.dirs(name)]

    def cpu_time(self, name: str) -> tuple[str, Callable[[str], float]]:
        root = self.roots.get("cpuacct") or self.roots["cpu"]
        return f"{root}/{name}/cpuacct.usage", lambda text: int(text) / 1e9

    def oom_kills(self, name: str) -> tuple[str, Callable[[str], int]]:
        return f"{self.roots['memory']}/{name}/memory.oom_control", _oom_kill_count


class CgroupV2:
    """The unified hierarchy rooted at ``root``: the mount point (root), or a subtree delegated to
    this user, whose own processes move to the leaf ``leaf`` before controllers are enabled."""

    version = 2

    def __init__(self, root: str, has_pids: bool = False, leaf: str | None = None):
        self.root = str(root)
        self.has_pids = has_pids
        self.leaf = leaf

    def dirs(self, name: str) -> list[str]:
        return [f"{self.root}/{name}"]

    def cpus_file(self) -> str:
        return f"{self.root}/cpuset.cpus.effective"

    def create(
        self, name: str, cpus: list[int], quota_cpus: int | None, memory_mb: int, pids_max: int | None = None
    ) -> list[Op]:
        d = f"{self.root}/{name}"
        quota = f"{quota_cpus * PERIOD_US} {PERIOD_US}" if quota_cpus else f"max {PERIOD_US}"
        pids = pids_max is not None and self.has_pids
        enable = [
            Op("write", f"{self.root}/cgroup.subtree_control", f"+{c}")
            for c in CONTROLLERS + (("pids",) if pids else ())
        ]
        if self.leaf is not None:  # a delegated subtree: no process of its own where controllers are enabled
            enable = [Op("mkdir?", self.leaf), Op("move", self.root, self.leaf), *enable]
        return enable + [
            Op("mkdir", d),
            *([Op("write", f"{d}/pids.max", str(pids_max))] if pids else []),
            Op("write", f"{d}/cpuset.cpus", format_cpulist(cpus)),
            Op("write", f"{d}/cpu.max", quota),
            Op("write", f"{d}/memory.max", str(memory_mb * 2**20)),
            Op("write?", f"{d}/memory.swap.max", "0"),
        ]

    def procs_files(self, name: str) -> list[str]:
        return [f"{self.root}/{name}/cgroup.procs"]

    def kill(self, name: str) -> list[Op]:
        d = f"{self.root}/{name}"
        return [Op("write?", f"{d}/cgroup.kill", "1"), Op("drain", d)]

    def remove(self, name: str) -> list[Op]:
        return [Op("write?", f"{self.root}/{name}/cgroup.kill", "1"), Op("rmdir", f"{self.root}/{name}")]

    def cpu_time(self, name: str) -> tuple[str, Callable[[str], float]]:
        return f"{self.root}/{name}/cpu.stat", _usage_usec

    def oom_kills(self, name: str) -> tuple[str, Callable[[str], int]]:
        return f"{self.root}/{name}/memory.events", _oom_kill_count


#: a cgroup driver of either version
Driver = CgroupV1 | CgroupV2


# -- detection ------------------------------------------------------------------------------


def create_ops(
    driver: Driver | None,
    name: str,
    host_ids: list[int],
    cpus: Sequence[int] | None,
    vcpus: int,
    memory_mb: int,
    pids_max: int | None = None,
) -> tuple[list[int] | None, list[Op]]:
    """How to make instance ``name``'s cgroup, given indexes ``cpus`` into the host's CPU ids
    ``host_ids`` (None: floating). Returns the host CPU ids it is pinned to (None when
    floating) and the ops that create the cgroup with ``driver``: on those CPUs, or on all
    of them with a quota of ``vcpus`` CPUs, at most ``pids_max`` tasks where the host has the
    pids controller (None: no cap); no ops when ``driver`` is None (unconfined)."""
    real = [host_ids[c] for c in cpus] if cpus is not None else None
    if driver is None:
        return real, []
    if real is not None:
        return real, driver.create(name, real, None, memory_mb, pids_max)
    return real, driver.create(name, host_ids, vcpus, memory_mb, pids_max)


def cgroup_mounts(mounts_text: str) -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, options) of the cgroup and cgroup2 lines of a mount table."""
    out = []
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            out.append((parts[1], parts[2], set(parts[3].split(","))))
    return out


#: the child of a delegated cgroup that its own processes (labkit's) move to
LEAF = "labkit-self"


def own_cgroup(proc_self_cgroup: str) -> str | None:
    """This process's cgroup in the unified hierarchy (the ``0::/path`` line of ``/proc/self/cgroup``),
    or None (no such line: a v1-only host)."""
    for line in proc_self_cgroup.splitlines():
        hid, _, rest = line.partition(":")
        ctl, _, path = rest.partition(":")
        if hid == "0" and ctl == "" and path.startswith("/"):
            return path.removesuffix(" (deleted)")
    return None


def delegation_fix(where: str) -> str:
    """How a user gets a cgroup v2 subtree with the controllers labkit needs (``where``: the cgroup)."""
    return (
        f"run labkit in a delegated scope: `systemd-run --user --scope -p Delegate=yes labkit run ...`; "
        f"the user manager hands on only what it has: if `cat /sys/fs/cgroup/user.slice/user-$(id -u).slice/"
        f"user@$(id -u).service/cgroup.controllers` lacks one of {' '.join(CONTROLLERS)} (cpuset usually), "
        f"add it as root: `mkdir -p /etc/systemd/system/user@.service.d && printf '[Service]\\nDelegate=cpu "
        f"cpuset memory pids\\n' > /etc/systemd/system/user@.service.d/delegate.conf && systemctl "
        f"daemon-reload`, then log in again (this process's cgroup: {where}); or run as root, or unconfined "
        f"with --backend-option enforce_limits=false"
    )


def delegated(
    cgroup_dir: str, controllers_of: Callable[[str], str | None], writable: Callable[[str], bool]
) -> CgroupV2:
    """The driver for the delegated cgroup v2 directory ``cgroup_dir`` (this process's own cgroup):
    BackendUnavailable naming the cause and the fix when it is not writable by this user (not
    delegated) or lacks a controller labkit needs."""
    files = [cgroup_dir, f"{cgroup_dir}/cgroup.procs", f"{cgroup_dir}/cgroup.subtree_control"]
    if not all(writable(f) for f in files):
        raise BackendUnavailable(
            f"cgroup v2: this process's cgroup {cgroup_dir} is not delegated to uid "
            f"{os.geteuid()} (not writable by it), so instance limits cannot be set: "
            + delegation_fix(cgroup_dir)
        )
    available = set((controllers_of(cgroup_dir) or "").split())
    missing = [c for c in CONTROLLERS if c not in available]
    if missing:
        raise BackendUnavailable(
            f"cgroup v2: controller{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"not delegated to {cgroup_dir} (its cgroup.controllers: "
            f"{' '.join(sorted(available)) or 'none'}): " + delegation_fix(cgroup_dir)
        )
    return CgroupV2(cgroup_dir, has_pids="pids" in available, leaf=f"{cgroup_dir}/{LEAF}")


def detect(
    mounts_text: str,
    controllers_of: Callable[[str], str | None],
    *,
    own: str | None = None,
    writable: Callable[[str], bool] | None = None,
) -> CgroupV1 | CgroupV2:
    """The driver for a host: v1 when cpuset/cpu/memory hierarchies are mounted, else v2.

    ``mounts_text`` is the host's /proc/self/mounts; ``controllers_of(path)``
    returns the text of ``<path>/cgroup.controllers`` (or None). With ``own`` (this process's
    cgroup, :func:`own_cgroup`) and ``writable(path)``: on v2, when the mount point is not writable
    (not root), the subtree delegated to this user (:func:`delegated`).
    """
    found = cgroup_mounts(mounts_text)
    v1: dict[str, str] = {}
    for path, fstype, opts in found:
        if fstype == "cgroup":
            for ctl in CONTROLLERS + OPTIONAL:
                if ctl in opts and ctl not in v1:
                    v1[ctl] = path
    if set(CONTROLLERS) <= set(v1):
        return CgroupV1(v1)
    for path, fstype, _ in found:
        if fstype != "cgroup2":
            continue
        if own is not None and writable is not None and not writable(path):
            return delegated(path.rstrip("/") + own if own != "/" else path, controllers_of, writable)
        available = set((controllers_of(path) or "").split())
        if set(CONTROLLERS) <= available:
            return CgroupV2(path, has_pids="pids" in available)
    raise BackendUnavailable(
        "no usable cgroup hierarchy: need cgroup v1 cpuset+cpu+memory or cgroup v2 with those "
        "controllers (see /proc/self/mounts); pass enforce_limits=False to run without limits "
        "(recorded in the run metadata)"
    )


def detect_here() -> Driver:
    """This machine's driver (:func:`detect` on /proc/self/mounts, this process's cgroup from
    /proc/self/cgroup: a subtree delegated to this user when not root); BackendUnavailable or
    OSError when it has no usable hierarchy."""
    try:
        own = own_cgroup(read_local("/proc/self/cgroup"))
    except OSError:
        own = None
    return detect(
        read_local("/proc/self/mounts"), _controllers_here, own=own, writable=lambda p: os.access(p, os.W_OK)
    )


def _controllers_here(path: str) -> str | None:
    try:
        return read_local(f"{path}/cgroup.controllers")
    except OSError:
        return None


def accounting_root(driver: Driver) -> str:
    """The hierarchy that counts CPU time (v1: cpuacct's, else cpu's; v2: the unified one): a cgroup
    made there and nowhere else counts its processes' CPU time without limiting them."""
    return (
        (driver.roots.get("cpuacct") or driver.roots["cpu"]) if isinstance(driver, CgroupV1) else driver.root
    )


def writable_roots(driver: Driver) -> list[str]:
    """The directories that must be writable to create instances."""
    return list(driver.roots.values()) if isinstance(driver, CgroupV1) else [driver.root]


# -- applying operations here ---------------------------------------------------------------


def _write(path: str, value: str) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError as exc:
        raise BackendError(f"cannot write {value!r} to {path}: {exc.strerror}") from exc


def read_local(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _move(source: str, target: str) -> None:
    """Every process of cgroup ``source`` into cgroup ``target`` (one gone meanwhile is skipped)."""
    for pid in _pids(source):
        try:
            with open(f"{target}/cgroup.procs", "w") as fh:
                fh.write(str(pid))
        except ProcessLookupError:
            continue
        except OSError as exc:
            raise BackendError(
                f"cannot move process {pid} from cgroup {source} to {target}: {exc.strerror}"
            ) from exc


def _pids(directory: str) -> list[int]:
    try:
        return [int(p) for p in read_local(f"{directory}/cgroup.procs").split()]
    except OSError:
        return []


def _kill_listed(directory: str) -> list[int]:
    """SIGKILL every process listed in cgroup ``directory`` once; the pids signalled."""
    pids = _pids(directory)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def _drain(directory: str, remove: bool, timeout: float) -> None:
    """SIGKILL what cgroup ``directory`` holds until it is empty (then remove it when
    ``remove``); BackendError naming the survivors after ``timeout`` s."""

    def drained() -> bool:
        if not os.path.isdir(directory):
            return True
        pids = _kill_listed(directory)
        if pids:
            return False
        if not remove:
            return True
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            pass
        except OSError:
            return False  # processes are still exiting
        return True

    wait_until(
        drained,
        timeout=timeout,
        interval=0.02,
        what=f"the processes of cgroup {directory} to end after SIGKILL",
        detail=lambda: f"survivors: {_pids(directory)}",
    )


def apply(ops: list[Op], timeout: float = DRAIN_TIMEOUT_S) -> None:
    """Carry out ``ops`` on this machine, in order; BackendError on the first failure."""
    for op in ops:
        if op.kind in ("mkdir", "mkdir?"):
            try:
                os.mkdir(op.path)
            except FileExistsError:
                if op.kind == "mkdir":
                    raise BackendError(f"cannot create cgroup {op.path}: it exists") from None
            except OSError as exc:
                raise BackendError(f"cannot create cgroup {op.path}: {exc.strerror}") from exc
        elif op.kind == "move":
            _move(op.path, op.value)
        elif op.kind == "write":
            _write(op.path, op.value)
        elif op.kind == "write?":
            if os.path.exists(op.path):
                try:
                    _write(op.path, op.value)
                except BackendError:
                    pass  # optional: not settable on every kernel
        elif op.kind == "copy":
            _write(op.path, read_local(op.value).strip())
        elif op.kind == "kill":
            _kill_listed(op.path)
        elif op.kind in ("drain", "rmdir"):
            _drain(op.path, op.kind == "rmdir", timeout)
        else:
            raise BackendError(f"unknown cgroup operation {op.kind!r}")
