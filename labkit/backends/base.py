"""The backend contract: a base class does the shared work, backends write hooks.

A :class:`Backend` provisions :class:`Instance` objects from an
:class:`~labkit.instance.InstanceSpec`. ``Instance.exec`` does timing, logging,
timeouts and ``check``; a backend implements only ``_exec`` (run one argv,
return exit code and output), ``put`` (copy a file in) and ``_destroy``.

Hooks a backend writes::

    class MyBackend(Backend):
        name = "mine"
        def check(self): ...                      # raise BackendUnavailable with a fix
        def host_cpus(self) -> int: ...
        def _create(self, spec, name, index, cpus) -> Instance: ...   # started, ready for exec
        def fingerprint(self) -> dict: ...         # backend part of the host fingerprint

    class MyInstance(Instance):
        def _exec(self, argv, timeout, env) -> RawResult: ...
        def put(self, local_path, remote_path, mode=0o755): ...
        def _destroy(self): ...                    # must be idempotent, must not raise if gone
"""
from __future__ import annotations

import logging
import os
import secrets
import shlex
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

from ..errors import BackendError, CommandError, CommandTimeout, tail
from ..instance import InstanceSpec

log = logging.getLogger("labkit.backends")

NAME_PREFIX = "labkit-"


def new_name(prefix: str = "labkit") -> str:
    """A fresh instance name ``<prefix>-<8 hex>``; every name labkit creates starts with ``labkit-``."""
    if not prefix.startswith("labkit"):
        prefix = "labkit-" + prefix
    return f"{prefix}-{secrets.token_hex(4)}"


@dataclass
class RawResult:
    """What a backend's ``_exec`` hook returns."""
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


@dataclass
class ExecResult:
    """A finished command with its context."""
    command: list[str]
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    instance: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def describe(self) -> str:
        return (f"command {shlex.join(self.command)!r} in {self.instance or 'instance'} "
                f"exited {self.exit_code} after {self.duration_s:.2f}s\n"
                f"  stdout (tail):\n{tail(self.stdout)}\n  stderr (tail):\n{tail(self.stderr)}")


class Instance(ABC):
    """One running instance (cgroup, container, VM or host).

    ``cpus`` is the list of host CPUs it is pinned to (None when floating);
    ``metadata`` is recorded with every run that used it.
    """

    def __init__(self, backend: "Backend", name: str, spec: InstanceSpec, index: int,
                 cpus: list[int] | None):
        self.backend = backend
        self.name = name
        self.spec = spec
        self.index = index
        self.cpus = cpus
        self.metadata: dict = {"name": name, "index": index, "cpus": cpus}
        self._destroyed = False

    # -- shared work -------------------------------------------------------
    def exec(self, command: str | Sequence[str], *, timeout: float | None = None,
             check: bool = True, env: dict | None = None) -> ExecResult:
        """Run ``command`` in the instance and wait for it.

        ``command`` is an argv list, or a string run by ``sh -c``. Raises
        :class:`CommandTimeout` when it runs past ``timeout`` seconds (it is
        killed), and :class:`CommandError` on a non-zero exit when ``check``.
        """
        argv = ["sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
        if not argv:
            raise BackendError("exec: empty command")
        start = time.perf_counter()
        raw = self._exec(argv, timeout, env)
        result = ExecResult(argv, raw.exit_code, raw.stdout, raw.stderr,
                            time.perf_counter() - start, self.name)
        log.debug("%s: %s -> %s (%.3fs)", self.name, argv, raw.exit_code, result.duration_s)
        if raw.timed_out:
            raise CommandTimeout(f"timed out after {timeout}s: " + result.describe(), result)
        if check and not result.ok:
            raise CommandError(result.describe(), result)
        return result

    def destroy(self) -> None:
        """Tear the instance down; safe to call twice."""
        if self._destroyed:
            return
        self._destroyed = True
        self._destroy()

    # -- hooks -------------------------------------------------------------
    @abstractmethod
    def _exec(self, argv: list[str], timeout: float | None, env: dict | None) -> RawResult:
        """Run argv to completion (kill it past ``timeout`` and set timed_out)."""

    @abstractmethod
    def put(self, local_path: str | os.PathLike, remote_path: str, mode: int = 0o755) -> None:
        """Copy a file from the controller into the instance."""

    @abstractmethod
    def _destroy(self) -> None:
        """Remove everything this instance owns. Idempotent; quiet if already gone."""

    @property
    def workdir(self) -> str:
        """A directory inside the instance where workloads may write."""
        return "/tmp/labkit"

    def __repr__(self):
        return f"<{type(self).__name__} {self.name} {self.spec}>"


class Backend(ABC):
    """Provisions instances. Subclasses set ``name`` and write the hooks."""

    name = "base"

    def __init__(self, **options):
        self.options = options

    def check(self) -> None:
        """Raise BackendUnavailable (with how to fix it) if this backend can't run here."""

    @abstractmethod
    def host_cpus(self) -> int:
        """How many CPUs the host (that instances run on) has."""

    @abstractmethod
    def _create(self, spec: InstanceSpec, name: str, index: int, cpus: list[int] | None) -> Instance:
        """Create and start one instance, ready for exec."""

    def fingerprint(self) -> dict:
        """Backend-specific facts for the host fingerprint (versions, hypervisor...)."""
        return {"backend": self.name}

    def provision(self, spec: InstanceSpec, *, prefix: str = "labkit") -> list[Instance]:
        """Create ``spec.count`` instances; on any failure, destroy those made and re-raise."""
        placement = spec.placement(self.host_cpus()) if spec.affinity == "pinned" else [None] * spec.count
        made: list[Instance] = []
        try:
            for i in range(spec.count):
                made.append(self._create(spec, new_name(prefix), i, placement[i]))
        except BaseException:
            teardown(made)
            raise
        return made

    def close(self) -> None:
        """Release client connections."""


def teardown(instances) -> list[Exception]:
    """Destroy every instance, trying all of them; returns the errors (logged)."""
    errors = []
    for inst in reversed(list(instances)):
        try:
            inst.destroy()
        except Exception as exc:  # keep tearing down the others
            log.error("teardown of %s failed: %s", getattr(inst, "name", inst), exc)
            errors.append(exc)
    return errors
