"""The counters of an instance's cgroup (:mod:`.cgroups`' drivers): which files hold them
(:func:`stat_paths`), their values (:func:`parse_stats`), and :class:`CgroupCounters`, the mixin
that reads them for an instance in a cgroup on this host or a remote one."""

from __future__ import annotations

from typing import Protocol

from ..errors import BackendError
from .cgroups import CgroupV1, Driver


def stat_paths(driver: Driver, name: str) -> dict[str, str]:
    """The files instance ``name``'s counters are read from: ``cpu`` (v1 ``cpuacct.usage``, v2
    ``cpu.stat``), ``throttle`` (``cpu.stat``: periods throttled) and ``memory`` (v1
    ``memory.usage_in_bytes``, v2 ``memory.current``)."""
    if isinstance(driver, CgroupV1):
        cpu_path, _ = driver.cpu_time(name)
        return {
            "cpu": cpu_path,
            "throttle": f"{driver.roots['cpu']}/{name}/cpu.stat",
            "memory": f"{driver.roots['memory']}/{name}/memory.usage_in_bytes",
        }
    d = f"{driver.root}/{name}"
    return {"cpu": f"{d}/cpu.stat", "throttle": f"{d}/cpu.stat", "memory": f"{d}/memory.current"}


def _keyed(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


def parse_stats(driver: Driver, texts: dict[str, str | None]) -> dict[str, float]:
    """The counters (``cpu_s``, ``throttled_periods``, ``throttled_s``, ``memory_bytes``: see
    :data:`labkit.backends.base.STAT_KEYS`) in the texts of :func:`stat_paths`' files (by their
    key; a file that could not be read is None and its counters are left out)."""
    out: dict[str, float] = {}
    cpu, throttle, memory = texts.get("cpu"), texts.get("throttle"), texts.get("memory")
    if cpu is not None:
        if isinstance(driver, CgroupV1):
            out["cpu_s"] = int(cpu.strip()) / 1e9
        elif "usage_usec" in _keyed(cpu):
            out["cpu_s"] = _keyed(cpu)["usage_usec"] / 1e6
    if throttle is not None:
        keyed = _keyed(throttle)
        if "nr_throttled" in keyed:
            out["throttled_periods"] = float(keyed["nr_throttled"])
        if "throttled_usec" in keyed:
            out["throttled_s"] = keyed["throttled_usec"] / 1e6
        elif "throttled_time" in keyed:  # v1: nanoseconds
            out["throttled_s"] = keyed["throttled_time"] / 1e9
    if memory is not None and memory.strip().isdigit():
        out["memory_bytes"] = float(memory.strip())
    return out


class DriverOwner(Protocol):
    """A backend with a cgroup driver (None when unconfined)."""

    driver: Driver | None


class CgroupCounters:
    """Mixin for an Instance in cgroup ``self.name`` of ``self.backend.driver`` (None when
    unconfined): the OOM and CPU-time counters, read with the hook ``_read(path) -> text``."""

    name: str
    backend: DriverOwner

    def _read(self, path: str) -> str:
        raise NotImplementedError

    def _oom_kills(self) -> int | None:
        driver = self.backend.driver
        if driver is None:
            return None
        path, parse = driver.oom_kills(self.name)
        return parse(self._read(path))

    def _read_many(self, paths: dict[str, str]) -> dict[str, str | None]:
        """The text of each of ``paths`` (by key; None where it cannot be read): one ``_read`` each."""
        out: dict[str, str | None] = {}
        for key, path in paths.items():
            try:
                out[key] = self._read(path)
            except (OSError, BackendError):
                out[key] = None
        return out

    def stats(self) -> dict[str, float]:
        """The instance's cgroup counters (:func:`parse_stats`); StatsUnavailable without a cgroup
        (limits not enforced) or when none of its files can be read (the instance is gone)."""
        from .base import StatsUnavailable

        driver = self.backend.driver
        if driver is None:
            raise StatsUnavailable(f"{self.name}: no cgroup (limits not enforced): no per-instance counters")
        out = parse_stats(driver, self._read_many(stat_paths(driver, self.name)))
        if not out:
            raise StatsUnavailable(f"{self.name}: its cgroup's counters cannot be read (is it gone?)")
        return out

    def cpu_time_s(self) -> float:
        """CPU time consumed by the instance's cgroup so far (seconds)."""
        driver = self.backend.driver
        if driver is None:
            raise BackendError("cpu_time_s needs enforced limits (a cgroup)")
        path, parse = driver.cpu_time(self.name)
        return parse(self._read(path))
