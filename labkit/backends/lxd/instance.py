"""An ``lxd`` instance (:mod:`labkit.backends.lxd`): one system container, each command an exec
through pylxd (:class:`LxdInstance`), its counters from LXD's instance state (:func:`lxd_stats`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import BackendError
from ..base import Instance, RawResult, StatsUnavailable
from ..containers import SessionExec, oom_kill_count
from ..output import CappedOutput
from .api import execute, sdk
from .host import memory_cgroup_file

if TYPE_CHECKING:
    from .backend import LxdBackend


def lxd_stats(status: str | None, cpu: dict | None, memory: dict | None) -> dict[str, float]:
    """:data:`~labkit.backends.base.STAT_KEYS` counters from LXD's instance state; StatsUnavailable
    for an instance that is not running (LXD then reports zeros)."""
    if status != "Running" or not isinstance(cpu, dict) or "usage" not in cpu:
        raise StatsUnavailable(f"LXD reports no counters for an instance in state {status!r}")
    out = {"cpu_s": cpu["usage"] / 1e9}
    if isinstance(memory, dict) and memory.get("usage") is not None:
        out["memory_bytes"] = float(memory["usage"])
    return out


class LxdInstance(SessionExec, Instance):
    def __init__(self, backend: LxdBackend, name, spec, index, cpus, model):
        super().__init__(backend, name, spec, index, cpus)
        self.model = model  # pylxd's Instance

    def _run(self, argv, env) -> RawResult:
        try:
            out, err = CappedOutput(), CappedOutput()
            res = execute(self.model, argv, env or {}, out, err)
        except sdk().exceptions.LXDAPIException as exc:
            if "command not found" not in str(exc).lower():
                raise BackendError(f"LXD exec in {self.name} failed: {exc}") from exc
            # LXD fails an exec that exits 127 (a shell's "command not found") and drops its output
            return RawResult(127, "", "command not found (exit status 127; LXD drops the output)\n")
        return RawResult.from_sinks(int(res.exit_code), out, err)

    def _run_quick(self, argv) -> str:
        try:
            return execute(self.model, argv, {}).stdout
        except sdk().exceptions.NotFound:
            return ""  # the instance is gone, and its processes with it
        except sdk().exceptions.LXDAPIException as exc:
            raise BackendError(f"LXD: {argv[:2]} in {self.name} failed: {exc}") from exc

    def _oom_kills(self) -> int | None:
        pid = self.model.state().pid
        path = memory_cgroup_file(Path(f"/proc/{pid}/cgroup").read_text(), self.name)
        return None if path is None else oom_kill_count(Path(path).read_text())

    def stats(self) -> dict[str, float]:
        """LXD's instance state (``GET /1.0/instances/<name>/state``): ``cpu_s`` (``cpu.usage``)
        and ``memory_bytes`` (``memory.usage``); StatsUnavailable when the instance is not
        running or the daemon does not answer."""
        try:
            state = self.model.state()
        except sdk().exceptions.LXDAPIException as exc:
            raise StatsUnavailable(f"LXD state of {self.name} failed: {exc}") from exc
        return lxd_stats(
            getattr(state, "status", None), getattr(state, "cpu", None), getattr(state, "memory", None)
        )

    def host_command(self, argv: list[str]) -> list[str]:
        """An argv for this host that runs ``argv`` in the container (an MPI launch agent's
        command; the lxc CLI must be on this host)."""
        return ["lxc", "exec", self.name, "--", *argv]

    def put(self, local_path: str | os.PathLike, remote_path: str, mode: int = 0o755) -> None:
        api_error = sdk().exceptions.LXDAPIException
        data = Path(local_path).read_bytes()
        try:
            self.model.files.put(remote_path, data, mode=mode, uid=0, gid=0)
            return
        except api_error:  # most likely its directory does not exist yet
            self.exec(["mkdir", "-p", os.path.dirname(remote_path) or "/"], timeout=30)
        try:
            self.model.files.put(remote_path, data, mode=mode, uid=0, gid=0)
        except api_error as exc:
            raise BackendError(f"copying {local_path} to {self.name}:{remote_path} failed: {exc}") from exc

    def _destroy(self):
        self.backend.remove(self.name)
