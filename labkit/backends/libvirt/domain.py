"""A libvirt instance: one running VM, a transient domain (:class:`LibvirtInstance`: commands
through the QEMU guest agent, counters from libvirt, the serial console's tail), and what its
removal leaves to clean (its guest agent socket, its cgroups without systemd)."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import libvirt

from ...core.instance import InstanceSpec
from ...core.waiting import wait_until
from ...errors import BackendError, tail
from ..base import Instance, RawResult, StatsUnavailable, parse_proc_stat
from . import agent
from . import mounts as libvirt_mounts
from .xml import parse_pinning

if TYPE_CHECKING:
    from .backend import LibvirtBackend

log = logging.getLogger("labkit.backends.libvirt")


class LibvirtInstance(Instance):
    """One running VM. ``dom`` is its ``virDomain``; commands go through the guest agent."""

    backend: LibvirtBackend

    def __init__(
        self,
        backend: LibvirtBackend,
        name: str,
        spec: InstanceSpec,
        index: int,
        cpus: list[int] | None,
        *,
        dom: libvirt.virDomain,
        disk: str,
        console_log: str,
        domain_type: str,
        started: float,
    ):
        super().__init__(backend, name, spec, index, cpus)
        self.dom = dom
        self.disk = disk
        self.console_log = console_log
        self.started = started  # when provisioning began
        self.metadata.update(
            {
                "domain_type": domain_type,
                "uri": backend.uri,
                **({"host_key_policy": backend.ssh.policy} if backend.ssh.policy else {}),
                "disk_format": backend.disk_format,
                **(
                    {"tcg_cpu": backend.tcg_cpu}
                    if backend.tcg_cpu != "qemu64" and domain_type != "kvm"
                    else {}
                ),
                "guest_kernel": backend.image_info().get("kernel_version"),
            }
        )

    # -- hooks -------------------------------------------------------------
    def _start(self, argv, env) -> agent.GuestCommand:
        return agent.start(self.dom, argv, env)

    def _wait(self, handle: agent.GuestCommand, timeout) -> RawResult | None:
        return agent.wait(self.dom, handle.pid, timeout, alive=self._alive)

    def _kill(self, handle: agent.GuestCommand) -> None:
        if self._alive():  # a stopped guest has nothing left to kill
            agent.kill_tree(self.dom, handle)

    def _oom_kills(self) -> int | None:
        for line in agent.read_file(self.dom, "/proc/vmstat").decode().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return None  # a kernel older than 4.13 does not count

    def stats(self) -> dict[str, float]:
        """libvirt's domain statistics: ``cpu_s`` (``getCPUStats``: the whole domain, emulator
        included), ``vcpu_s`` (the vCPUs' times, ``vcpus()``), ``memory_bytes`` (``memoryStats``:
        the QEMU process's resident set), and from the guest's own /proc/stat, read through the
        guest agent, ``steal_s`` and ``cpu_total_s`` (left out when the agent does not answer).
        StatsUnavailable when the domain is not running."""
        try:
            total = self.dom.getCPUStats(True)[0]
            out = {"cpu_s": total["cpu_time"] / 1e9}
            out["vcpu_s"] = sum(v[2] for v in self.dom.vcpus()[0]) / 1e9
            mem = self.dom.memoryStats()
        except libvirt.libvirtError as exc:
            raise StatsUnavailable(f"libvirt statistics of {self.name} failed: {exc}") from exc
        if mem.get("rss") is not None:
            out["memory_bytes"] = float(mem["rss"]) * 1024
        try:
            out.update(
                parse_proc_stat(agent.read_file(self.dom, "/proc/stat", limit=1 << 16, timeout=5).decode())
            )
        except (BackendError, libvirt.libvirtError, UnicodeDecodeError, ValueError):
            pass  # the guest's view needs its agent; the host's counters above stand
        return out

    def host_command(self, argv: list[str]) -> list[str]:
        """An argv for this host that runs ``argv`` in the guest through its agent and returns
        its output and status when it ends (:mod:`~labkit.backends.libvirt.relay`): an MPI
        launch agent's command. No standard input reaches it."""
        package_root = str(Path(__file__).resolve().parents[3])  # the directory holding labkit/
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        return [
            "env",
            f"PYTHONPATH={path}",
            sys.executable,
            "-m",
            "labkit.backends.libvirt.relay",
            self.backend.ssh.open_uri,
            self.name,
            *argv,
        ]

    def put(self, local_path: str | os.PathLike, remote_path: str, mode: int = 0o755) -> None:
        data = Path(local_path).read_bytes()
        self.exec(["mkdir", "-p", str(Path(remote_path).parent)], timeout=60)
        agent.write_file(self.dom, remote_path, data)
        self.exec(["chmod", format(mode, "o"), remote_path], timeout=60)

    def _destroy(self) -> None:
        errors = []
        for step in (
            lambda: self.backend.remove_domain(self.name),
            lambda: self.backend.pool.remove(self.disk),
            lambda: self.backend.pool.remove(self.console_log),
            lambda: libvirt_mounts.release(self.name),
        ):
            try:  # every step is tried: a failed destroy must not leave the disk behind
                step()
            except BackendError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    # -- libvirt facts -----------------------------------------------------
    def _alive(self) -> bool:
        try:
            return bool(self.dom.isActive())
        except libvirt.libvirtError:
            return False

    def pinning(self) -> dict:
        """What libvirt reports: ``vcpupin`` (effective CPUs of each vCPU) and ``vcpupin_xml``
        (the ``<cputune>`` pins; empty when floating)."""
        info = self.dom.vcpuPinInfo(0)
        return {
            "vcpupin": {j: [c for c, on in enumerate(row) if on] for j, row in enumerate(info)},
            "vcpupin_xml": parse_pinning(self.dom.XMLDesc(0)),
        }

    def console_tail(self, lines: int = 30) -> str:
        return self.backend.pool.tail(self.console_log, lines)

    def wait_ready(self, timeout: float) -> float:
        """Wait for the guest agent; returns seconds waited. BackendError with the console tail if not."""
        start = time.monotonic()

        def answers() -> bool:
            if agent.ping(self.dom, timeout=2):
                return True
            if not self._alive():
                raise BackendError(
                    f"VM {self.name} stopped during boot; serial console (tail):\n{tail(self.console_tail())}"
                )
            return False

        wait_until(
            answers,
            timeout=timeout,
            interval=0.1,
            what=f"VM {self.name} ({self.metadata.get('domain_type')}) to answer on the guest agent",
            detail=lambda: f"serial console (tail):\n{tail(self.console_tail())}",
        )
        return time.monotonic() - start


def unlink_socket(path: str | None) -> None:
    """Remove a guest agent socket QEMU left (quiet when there is none)."""
    if path is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.debug("agent socket %s left in place: %s", path, exc)


#: where libvirt's QEMU driver puts a domain's cgroup without systemd (v1: under every controller)
MACHINE_CGROUPS = ("{root}/*/machine/qemu-*-{name}.libvirt-qemu", "{root}/machine/qemu-*-{name}.libvirt-qemu")
#: how long a teardown waits for a destroyed domain's QEMU threads to leave its cgroups: under TCG on
#: a loaded host they took longer than 5 s, and the groups stayed (the wait ends when they are gone)
MACHINE_EXIT_WAIT_S = 30.0


def remove_machine_cgroups(name: str, *, root: str = "/sys/fs/cgroup", wait_s: float = 0.0) -> list[str]:
    """Remove the empty cgroups libvirt left for stopped domain(s) ``name`` (a glob such as
    ``prefix*``); returns the paths removed.

    libvirt removes a domain's ``machine/qemu-<id>-<name>.libvirt-qemu`` groups when it stops
    it, but under cgroup v1 an ``rmdir`` that races the exit of QEMU's last threads fails and
    the empty groups stay. This waits up to ``wait_s`` for their processes to be gone, then
    removes what is left, deepest first. A group that still holds a process is never removed
    (the kernel refuses the ``rmdir``), so a running domain keeps its cgroups.
    """
    import glob
    import os

    def left() -> list[str]:
        return sorted(
            {p for pattern in MACHINE_CGROUPS for p in glob.glob(pattern.format(root=root, name=name))}
        )

    def busy(group: str) -> bool:
        try:
            return bool(Path(group, "cgroup.procs").read_text().strip())
        except OSError:
            return False

    wait_until(
        lambda: not any(busy(g) for g in left()),
        timeout=wait_s,
        interval=0.1,
        error=None,
        what=f"the processes of the cgroups of {name} to end",
    )
    removed = []
    for top in left():
        try:
            for path in sorted((d for d, _s, _f in os.walk(top)), key=len, reverse=True):
                os.rmdir(path)
        except OSError as exc:
            log.warning("cgroup %s left in place (labkit clean removes it once it is empty): %s", top, exc)
        else:
            removed.append(top)
    return removed
