"""cgroup v1 and v2 drivers for the local backend.

Both drivers expose the same small surface: ``create(name, cpus, quota_cpus,
memory_mb)``, ``procs_files(name)`` (where a pid is written to join),
``pids(name)``, ``cpu_time_s(name)`` and ``remove(name)``. The hierarchy
root is a parameter so the file layout can be exercised on any directory.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ..errors import BackendError, BackendUnavailable

PERIOD_US = 100_000


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


def format_cpulist(cpus) -> str:
    return ",".join(str(c) for c in sorted(set(cpus)))


def _write(path: Path, value) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(str(value))
    except OSError as exc:
        raise BackendError(f"cannot write {value!r} to {path}: {exc.strerror}") from exc


def _read(path: Path) -> str:
    with open(path) as fh:
        return fh.read()


def _mounts(mountinfo: str = "/proc/self/mounts") -> list[tuple[str, str, set[str]]]:
    out = []
    try:
        lines = _read(Path(mountinfo)).splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            out.append((parts[1], parts[2], set(parts[3].split(","))))
    return out


class CgroupV1:
    """Separate hierarchies per controller (cpuset, cpu, cpuacct, memory)."""

    version = 1

    def __init__(self, roots: dict[str, Path]):
        self.roots = {k: Path(v) for k, v in roots.items()}

    def _dirs(self, name: str) -> list[Path]:
        return list(dict.fromkeys(root / name for root in self.roots.values()))

    def available_cpus(self) -> list[int]:
        return parse_cpulist(_read(self.roots["cpuset"] / "cpuset.cpus"))

    def check_writable(self) -> None:
        for ctl, root in self.roots.items():
            if not os.access(root, os.W_OK):
                raise BackendUnavailable(f"cgroup v1 {ctl} hierarchy {root} is not writable (run as root)")

    def create(self, name: str, cpus: list[int], quota_cpus: int | None, memory_mb: int) -> None:
        for d in self._dirs(name):
            d.mkdir(exist_ok=False)
        cs = self.roots["cpuset"]
        _write(cs / name / "cpuset.mems", _read(cs / "cpuset.mems").strip())
        _write(cs / name / "cpuset.cpus", format_cpulist(cpus))
        cpu = self.roots["cpu"] / name
        _write(cpu / "cpu.cfs_period_us", PERIOD_US)
        _write(cpu / "cpu.cfs_quota_us", quota_cpus * PERIOD_US if quota_cpus else -1)
        mem = self.roots["memory"] / name
        _write(mem / "memory.limit_in_bytes", memory_mb * 2**20)
        if (mem / "memory.memsw.limit_in_bytes").exists():
            _write(mem / "memory.memsw.limit_in_bytes", memory_mb * 2**20)
        if (mem / "memory.swappiness").exists():
            try:
                _write(mem / "memory.swappiness", 0)
            except BackendError:
                pass  # not settable on every kernel; the limit above is what matters

    def procs_files(self, name: str) -> list[str]:
        return [str(d / "cgroup.procs") for d in self._dirs(name)]

    def pids(self, name: str) -> set[int]:
        found: set[int] = set()
        for d in self._dirs(name):
            try:
                found.update(int(p) for p in _read(d / "cgroup.procs").split())
            except OSError:
                pass
        return found

    def cpu_time_s(self, name: str) -> float:
        root = self.roots.get("cpuacct") or self.roots["cpu"]
        return int(_read(root / name / "cpuacct.usage")) / 1e9

    def memory_events(self, name: str) -> dict:
        try:
            return {"failcnt": int(_read(self.roots["memory"] / name / "memory.failcnt"))}
        except OSError:
            return {}

    def exists(self, name: str) -> bool:
        return any(d.exists() for d in self._dirs(name))

    def remove(self, name: str, timeout: float = 10.0) -> None:
        _kill_and_rmdir(self, self._dirs(name), name, timeout)


class CgroupV2:
    """The unified hierarchy: one directory per instance with cpuset, cpu and memory enabled."""

    version = 2

    def __init__(self, root: Path):
        self.root = Path(root)

    def available_cpus(self) -> list[int]:
        for f in ("cpuset.cpus.effective", "cpuset.cpus"):
            p = self.root / f
            if p.exists() and _read(p).strip():
                return parse_cpulist(_read(p))
        return sorted(os.sched_getaffinity(0))

    def check_writable(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise BackendUnavailable(f"cgroup v2 directory {self.root} is not writable "
                                     "(run as root or delegate a cgroup to this user)")
        controllers = set(_read(self.root / "cgroup.controllers").split())
        missing = {"cpuset", "cpu", "memory"} - controllers
        if missing:
            raise BackendUnavailable(f"cgroup v2 at {self.root} lacks controllers: {', '.join(sorted(missing))}")

    def _enable_controllers(self) -> None:
        enabled = set(_read(self.root / "cgroup.subtree_control").split())
        for ctl in ("cpuset", "cpu", "memory"):
            if ctl not in enabled:
                _write(self.root / "cgroup.subtree_control", f"+{ctl}")

    def create(self, name: str, cpus: list[int], quota_cpus: int | None, memory_mb: int) -> None:
        self._enable_controllers()
        d = self.root / name
        d.mkdir(exist_ok=False)
        _write(d / "cpuset.cpus", format_cpulist(cpus))
        quota = f"{quota_cpus * PERIOD_US} {PERIOD_US}" if quota_cpus else f"max {PERIOD_US}"
        _write(d / "cpu.max", quota)
        _write(d / "memory.max", memory_mb * 2**20)
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", 0)

    def procs_files(self, name: str) -> list[str]:
        return [str(self.root / name / "cgroup.procs")]

    def pids(self, name: str) -> set[int]:
        try:
            return {int(p) for p in _read(self.root / name / "cgroup.procs").split()}
        except OSError:
            return set()

    def cpu_time_s(self, name: str) -> float:
        for line in _read(self.root / name / "cpu.stat").splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise BackendError(f"no usage_usec in {self.root / name / 'cpu.stat'}")

    def memory_events(self, name: str) -> dict:
        try:
            text = _read(self.root / name / "memory.events")
        except OSError:
            return {}
        return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}

    def exists(self, name: str) -> bool:
        return (self.root / name).exists()

    def remove(self, name: str, timeout: float = 10.0) -> None:
        kill = self.root / name / "cgroup.kill"
        if kill.exists():
            try:
                _write(kill, 1)
            except BackendError:
                pass
        _kill_and_rmdir(self, [self.root / name], name, timeout)


def _kill_and_rmdir(driver, dirs: list[Path], name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pids = driver.pids(name)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        left = [d for d in dirs if d.exists()]
        for d in left:
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                pass  # still busy: processes are exiting; retry below
        if not any(d.exists() for d in dirs):
            return
        if time.monotonic() > deadline:
            raise BackendError(f"could not remove cgroup {name}: processes {sorted(driver.pids(name))} "
                               f"survive in {', '.join(str(d) for d in dirs if d.exists())}")
        time.sleep(0.02)


def detect(mounts: str = "/proc/self/mounts"):
    """The driver for this machine: v1 when cpuset/cpu/memory hierarchies are mounted, else v2."""
    found = _mounts(mounts)
    v1: dict[str, Path] = {}
    for path, fstype, opts in found:
        if fstype == "cgroup":
            for ctl in ("cpuset", "cpu", "cpuacct", "memory"):
                if ctl in opts and ctl not in v1:
                    v1[ctl] = Path(path)
    if {"cpuset", "cpu", "memory"} <= set(v1):
        return CgroupV1(v1)
    for path, fstype, _ in found:
        if fstype == "cgroup2":
            p = Path(path)
            try:
                ctls = set(_read(p / "cgroup.controllers").split())
            except OSError:
                continue
            if {"cpuset", "cpu", "memory"} <= ctls:
                return CgroupV2(p)
    raise BackendUnavailable(
        "no usable cgroup hierarchy: need cgroup v1 cpuset+cpu+memory or cgroup v2 with those "
        "controllers (see /proc/self/mounts); pass enforce_limits=False to run without limits "
        "(recorded in the run metadata)")
