"""The ``local`` backend: an instance is a cgroup on this machine (the embedded default).

* pinned   → cpuset = the chosen host CPUs (one per vCPU; wraps around when overcommitted)
* floating → cpuset = every CPU, CPU quota = vcpus CPUs' worth of time
* memory   → cgroup memory limit (and no swap)

Processes join the cgroup before they exec (a tiny ``sh`` wrapper writes its
pid to the cgroup's ``cgroup.procs`` files, then ``exec``\\s the command).
Without root or a usable cgroup the backend refuses with a clear error, unless
``enforce_limits=False``: then commands run unconfined (pinned instances still
get ``taskset``) and ``limits_enforced: False`` is recorded in each run's metadata.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from ..errors import BackendError, BackendUnavailable
from ..instance import InstanceSpec
from . import cgroups
from .base import Backend, Instance, RawResult
from .remote_cgroup import JOIN as _JOIN


class LocalInstance(Instance):
    def __init__(self, backend: "LocalBackend", name, spec, index, cpus, host_cpus: list[int] | None):
        super().__init__(backend, name, spec, index, cpus)
        self.host_cpu_ids = host_cpus  # real CPU ids when pinned
        self._dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=backend.workroot))
        self.metadata.update(host_cpu_ids=host_cpus, limits_enforced=backend.enforce,
                             cgroup_version=backend.driver.version if backend.driver else None)

    @property
    def workdir(self) -> str:
        return str(self._dir)

    def _wrap(self, argv: list[str]) -> tuple[list[str], dict]:
        be: LocalBackend = self.backend
        extra: dict = {}
        if be.driver is not None:
            extra["LABKIT_CGROUP_PROCS"] = " ".join(be.driver.procs_files(self.name))
            return ["/bin/sh", "-c", _JOIN, "labkit-join", *argv], extra
        if self.host_cpu_ids:
            return ["taskset", "-c", cgroups.format_cpulist(self.host_cpu_ids), *argv], extra
        return argv, extra

    def _exec(self, argv, timeout, env) -> RawResult:
        wrapped, extra = self._wrap(argv)
        full_env = {**os.environ, **(env or {}), **extra}
        try:
            proc = subprocess.Popen(wrapped, cwd=self._dir, env=full_env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True, text=True, errors="replace")
        except FileNotFoundError as exc:
            return RawResult(127, "", f"{exc}", False)
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            self._kill_all(proc)
            out, err = proc.communicate()
            timed_out = True
        except BaseException:
            self._kill_all(proc)
            proc.communicate()
            raise
        if proc.returncode == 125 and "cgroup.procs" in err:
            raise BackendError(f"could not join cgroup {self.name}: {err.strip()}")
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return RawResult(code, out, err, timed_out)

    def _kill_all(self, proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        be: LocalBackend = self.backend
        if be.driver is not None:
            for pid in be.driver.pids(self.name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def put(self, local_path, remote_path, mode=0o755) -> None:
        dest = Path(remote_path)
        if not dest.is_absolute():
            dest = self._dir / dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local_path, dest)
        os.chmod(dest, mode)

    def cpu_time_s(self) -> float:
        """CPU time consumed by the instance's cgroup so far (seconds)."""
        be: LocalBackend = self.backend
        if be.driver is None:
            raise BackendError("cpu_time_s needs enforced limits (a cgroup)")
        return be.driver.cpu_time_s(self.name)

    def _destroy(self) -> None:
        be: LocalBackend = self.backend
        try:
            if be.driver is not None:
                be.driver.remove(self.name)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


class LocalBackend(Backend):
    """Instances as cgroups on this machine.

    Options: ``enforce_limits`` (default True: refuse when cgroups can't be
    used), ``workroot`` (where instance work directories go, default
    ``<tmp>/labkit-instances``; nothing else is ever created or removed there).
    """

    name = "local"

    def __init__(self, enforce_limits: bool = True, workroot: str | None = None, **options):
        super().__init__(enforce_limits=enforce_limits, workroot=workroot, **options)
        self.enforce = bool(enforce_limits)
        self.workroot = workroot or os.path.join(tempfile.gettempdir(), "labkit-instances")
        os.makedirs(self.workroot, exist_ok=True)
        self.driver = None
        self._why_not = ""
        try:
            driver = cgroups.detect()
            driver.check_writable()
            self.driver = driver
        except BackendUnavailable as exc:
            self._why_not = str(exc)

    def check(self) -> None:
        if self.driver is None and self.enforce:
            raise BackendUnavailable(
                f"local backend cannot enforce instance limits: {self._why_not}. "
                "Run as root, or pass enforce_limits=False to run unconfined "
                "(recorded as limits_enforced=False in every run's metadata).")

    def _cpu_ids(self) -> list[int]:
        if self.driver is not None:
            return self.driver.available_cpus()
        return sorted(os.sched_getaffinity(0))

    def host_cpus(self) -> int:
        return len(self._cpu_ids())

    def _create(self, spec: InstanceSpec, name, index, cpus) -> LocalInstance:
        ids = self._cpu_ids()
        real = [ids[c] for c in cpus] if cpus is not None else None
        if self.driver is not None:
            try:
                self.driver.create(name, real if real is not None else ids,
                                   None if real is not None else spec.vcpus, spec.memory_mb)
            except BaseException:
                self.driver.remove(name)
                raise
        try:
            return LocalInstance(self, name, spec, index, cpus, real)
        except BaseException:
            if self.driver is not None:
                self.driver.remove(name)
            raise

    def cleanup(self, prefix: str) -> list[str]:
        """Remove cgroups and work dirs left by a killed process of this campaign (names with ``prefix``)."""
        if not prefix.startswith("labkit-"):
            raise BackendError(f"cleanup prefix must start with 'labkit-', got {prefix!r}")
        removed = set()
        if self.driver is not None:
            roots = self.driver.roots.values() if hasattr(self.driver, "roots") else [self.driver.root]
            for root in roots:
                for d in Path(root).glob(prefix + "*"):
                    if d.is_dir():
                        self.driver.remove(d.name)
                        removed.add(d.name)
        for d in Path(self.workroot).glob(prefix + "*"):
            shutil.rmtree(d, ignore_errors=True)
        return sorted(removed)

    def fingerprint(self) -> dict:
        return {"backend": self.name,
                "cgroup_version": self.driver.version if self.driver else None,
                "limits_enforced": self.driver is not None}
