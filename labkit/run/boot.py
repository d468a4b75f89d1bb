"""The boot runner: one boot of a configuration's instances, run after run, on one backend.

:class:`BootRunner` is what the run engine (:mod:`labkit.run.engine`) calls on a host's backend for
the runs it claimed together: provision the instances once (inside the first run's hooks), run the
workload for each run in turn on them, tear them down once, and yield each run's :class:`Measured`.
It carries its own settings (:class:`BootSettings`: the workload, the instance defaults, the
instance-name prefix, the run hooks and the run timeout), taken from the campaign
(:meth:`labkit.run.campaign.Campaign.boots`), not the campaign itself: this module imports neither
the campaign nor the engine.

* :func:`run_together`: the workload in every instance of a run at the same moment (a workload that
  spans the instances runs once over all of them: :func:`labkit.run.network_setup.run_workload`).
* :func:`keep_output`: a run's command output kept beside the store, as the run-output policy says.
* :func:`oom_killed`: whether a failure carries the backend's out-of-memory verdict.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ..backends import teardown
from ..backends.base import exec_log_text, restart_exec_logs
from ..core.instance import InstanceSpec
from ..errors import CommandTimeout, ConfigError, LabkitError, StoreError
from ..store import now_iso
from ..workloads.params import TIMEOUT
from . import network_setup as runnet
from .hooks import RunContext, RunHook, around_run, instances_ready

if TYPE_CHECKING:
    from ..backends.base import Backend, Instance
    from ..design import Run
    from ..store import Store
    from ..workloads.base import Measurement, Workload

log = logging.getLogger("labkit.run.boot")
T = TypeVar("T")


@dataclass(frozen=True)
class BootSettings:
    """What a boot needs of its campaign. ``workload``: the workload (prepared and run in each
    instance); ``defaults``: the :class:`InstanceSpec` of host factors a run's levels do not set;
    ``prefix``: the campaign's instance-name prefix; ``hooks``: the run hooks entered around every
    run, in order (:mod:`labkit.run.hooks`); ``run_timeout``: seconds a run may take once its hooks
    are in place (provisioning included for a boot's first run), or None."""

    workload: Workload
    defaults: InstanceSpec
    prefix: str
    hooks: tuple[RunHook, ...] = ()
    run_timeout: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.defaults, InstanceSpec):
            raise ConfigError(
                f"BootSettings.defaults must be an InstanceSpec, got {type(self.defaults).__name__}"
            )
        if not isinstance(self.prefix, str) or not self.prefix:
            raise ConfigError(f"BootSettings.prefix must be a non-empty string, got {self.prefix!r}")
        object.__setattr__(
            self, "run_timeout", TIMEOUT.check("BootSettings.run_timeout (seconds)", self.run_timeout)
        )
        object.__setattr__(self, "hooks", tuple(self.hooks))


class BootRunner:
    """Runs boots with ``settings``. ``guard``: entered around each boot's teardown unless the
    caller gives its own (the campaign's signal deferral: a second Ctrl-C waits until the instances
    are gone); ``versions``: the tool versions read once per key (a platform, a host), shared by
    the runners of one campaign."""

    def __init__(
        self,
        settings: BootSettings,
        *,
        guard: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
        versions: dict | None = None,
    ):
        if not isinstance(settings, BootSettings):
            raise ConfigError(f"BootRunner needs BootSettings, got {type(settings).__name__}")
        self.settings = settings
        self.guard = guard
        self.versions: dict = {} if versions is None else versions

    def measure(
        self,
        run: Run,
        backend: Backend,
        *,
        live: list | None = None,
        versions_key: Any = None,
        deferred: contextlib.AbstractContextManager | None = None,
    ) -> Measured:
        """Provision, run and tear down one run on ``backend`` (a boot of one run:
        :meth:`measure_boot`); returns its :class:`Measured`."""
        [(_, result)] = list(
            self.measure_boot([run], backend, live=live, versions_key=versions_key, deferred=deferred)
        )
        return result

    def measure_boot(
        self,
        runs: Sequence[Run],
        backend: Backend,
        *,
        live: list | None = None,
        versions_key: Any = None,
        deferred: contextlib.AbstractContextManager | None = None,
    ) -> Iterator[tuple[Run, Measured]]:
        """Run one boot on ``backend``: provision the instances of ``runs`` (a configuration's, one
        or more of its replicates) once, run the workload for each run in turn on them, tear them
        down once; yields ``(run, Measured)`` as each run ends (the last after the teardown, which
        fails it if the teardown fails: a run of one boot is exactly what :meth:`measure` did).
        What the engine's host workers call on their host's backend.

        Each run has its own hooks, telemetry, deadline (``run_timeout``, the first run's including
        the provisioning), start time, duration and metadata (``boot_group``, ``boot_position``).
        A run that does not end ok ends the boot: the runs after it are yielded as failed, not run
        (``--retry-failed`` or ``retries`` run them again on a fresh boot). ``live`` receives the
        instances while they exist (so another thread can destroy them); ``deferred`` guards
        teardown (default: :attr:`guard`). Closing the generator early tears down at once."""
        spec = InstanceSpec.from_levels(runs[0].levels, self.settings.defaults)
        params = self.settings.workload.params_for(runs[0].levels, spec.vcpus)
        boot = _Boot(instances=[] if live is None else live)
        last: tuple[Run, Measured, float] | None = None
        errors: list = []
        try:
            failed: str | None = None
            for i, run in enumerate(runs):
                t0 = time.perf_counter()
                if failed is None:
                    result = self._run_in_boot(run, i, len(runs), backend, spec, params, boot, versions_key)
                    if result.status != "ok":
                        failed = f"{run.run_id} ({result.status})"
                else:
                    result = Measured(
                        "failed",
                        f"not run: run {failed} of the same boot did not end ok; its "
                        "instances were torn down (--retry-failed or retries run it on a fresh boot)",
                        [],
                        {
                            "spec": spec.as_dict(),
                            "boot_group": run.boot_group,
                            "boot_position": i + 1,
                            "not_run": True,
                        },
                        now_iso(),
                        0.0,
                    )
                if i + 1 < len(runs):
                    yield run, result
                else:
                    last = (run, result, t0)
        finally:
            with deferred or self.guard():
                errors = teardown(boot.instances) + runnet.close_network(boot.net)
        if last is not None:
            run, result, t0 = last
            if errors and result.status == "ok":
                result = result.but(status="failed", error=f"teardown: {errors[0]}")
            if not result.metadata.get("not_run"):
                result = result.but(duration_s=time.perf_counter() - t0)
            yield run, result

    def _run_in_boot(
        self,
        run: Run,
        position: int,
        of: int,
        backend: Backend,
        spec: InstanceSpec,
        params: dict,
        boot: _Boot,
        versions_key: Any,
    ) -> Measured:
        """Run ``run``, the ``position``-th (0-based) of ``of`` runs of ``boot``: the first one makes
        the boot's network and instances (inside its hooks) and prepares the workload in them."""
        s = self.settings
        started, t0 = now_iso(), time.perf_counter()
        metadata: dict = {"spec": spec.as_dict(), "boot_group": run.boot_group, "boot_position": position + 1}
        if of > 1:
            metadata["boot_runs"] = of
        measurements: list = []
        status, error = "ok", None
        instances = boot.instances
        ctx = RunContext(run, spec, metadata, backend, s.prefix, instances=instances)
        try:
            metadata["overcommitted"] = spec.overcommitted(backend.host_cpus())
            with around_run(s.hooks, ctx) as neighbours:
                # the run's time starts once its hooks are in place (the guard's look at the host,
                # the neighbours started): provisioning, preparing and the workload count
                deadline = None if s.run_timeout is None else time.monotonic() + s.run_timeout
                if neighbours:
                    metadata["neighbours"] = list(neighbours)
                if position == 0:
                    ctx.provisioning = True
                    try:
                        boot.net = runnet.open_network(
                            backend, run.levels, s.workload, params, spec.count, s.prefix, boot.net_metadata
                        )
                        metadata.update(boot.net_metadata)  # kept by a run whose provisioning fails
                        instances.extend(backend.provision(spec, prefix=s.prefix, network=boot.net))
                    finally:
                        ctx.provisioning = False
                    boot.provisioned = instance_measurements(instances)
                    instances_ready(s.hooks, ctx)
                    _before(
                        deadline, "preparing the workload", lambda: list(map(s.workload.prepare, instances))
                    )
                metadata.update(boot.net_metadata)
                metadata["instances"] = [i.metadata for i in instances]
                if versions_key not in self.versions:
                    self.versions[versions_key] = _before(
                        deadline, "reading tool versions", lambda: s.workload.version(instances[0])
                    )
                metadata["versions"] = self.versions[versions_key]
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise CommandTimeout(
                        f"run timeout of {s.run_timeout}s used up before the workload started"
                    )
                measurements, metadata["workload_s"] = runnet.run_workload(
                    s.workload, instances, params, left, run_together
                )
        except CommandTimeout as exc:
            status, error = "timeout", str(exc)
        except LabkitError as exc:
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            if oom_killed(exc):
                metadata["oom_killed"] = True
                error = (
                    f"OOM: the workload was killed for lack of memory (out-of-memory killer; "
                    f"memory limit {spec.memory_mb} MB). {error}"
                )
        except (KeyboardInterrupt, SystemExit):
            raise  # not stored: the run will execute again on resume
        except Exception as exc:  # a bug in a workload: store it, keep the campaign going
            status, error = "failed", "".join(traceback.format_exception(exc))[-4000:]
        # what keep_output keeps: this run's commands (the boot's instances then log the next run's afresh)
        output = exec_log_text(instances)
        restart_exec_logs(instances)
        provisioned = boot.provisioned if position == 0 else []
        return Measured(
            status,
            error,
            provisioned + list(measurements),
            metadata,
            started,
            time.perf_counter() - t0,
            output,
            ctx.samples,
        )


@dataclass
class _Boot:
    """What the runs of one boot share: its instances (the live list), network, the network's
    metadata keys and the instances' own measurements (the first run's)."""

    instances: list
    net: Any = None
    net_metadata: dict = field(default_factory=dict)
    provisioned: list = field(default_factory=list)


class Measured(NamedTuple):
    """What :meth:`BootRunner.measure` returns for one run. ``output``: the commands the run's
    instances ran for it with their output (the first and last MiB of each instance's log: bounded;
    in a boot of several runs, each run's own commands, the first run's with the workload's
    preparation). ``samples``: the run's telemetry rows ``(t, metric, value[, instance id])``
    (:mod:`labkit.run.telemetry`)."""

    status: str
    error: str | None
    measurements: list
    metadata: dict
    started: str
    duration_s: float
    output: str = ""
    samples: list | tuple = ()

    def but(self, **changes: Any) -> Measured:
        """A copy with ``changes`` (field -> value)."""
        return self._replace(**changes)


def instance_measurements(instances: list[Instance]) -> list:
    """The ``run_metrics`` of ``instances`` (provisioning time on cloud platforms) as
    :class:`~labkit.workloads.base.Measurement` rows (metric, value, unit, the instance's index);
    [] when none has any."""
    from ..workloads.base import Measurement

    return [
        Measurement(metric, float(value), unit, inst.index)
        for inst in instances
        for metric, (value, unit) in getattr(inst, "run_metrics", {}).items()
    ]


def keep_output(store: Store, run_id: str, status: str, output: str, policy: str = "all") -> None:
    """Keep a run's command output beside the store (``output/<run_id>.log``, 0600, its first
    and last MiB and its size: :meth:`Store.write_run_output`) before the run itself is stored:
    every run's (``policy`` ``all``), the runs that did not end ok (``failed``) or none (``off``:
    ``Campaign(run_output=...)``, ``labkit run --run-output``); a failure to write it is logged,
    never fatal."""
    if not output or policy == "off" or (policy == "failed" and status == "ok"):
        return
    try:
        store.write_run_output(run_id, output, status)
    except StoreError as exc:
        log.warning("run %s: its output was not kept: %s", run_id, exc)


def oom_killed(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) carries a result the backend marked
    ``oom_killed`` (ExecResult.oom_killed; False for backends that do not report it)."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 10:
        if getattr(getattr(cur, "result", None), "oom_killed", False) is True:
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return False


def _before(deadline: float | None, doing: str, fn: Callable[[], T]) -> T:
    """``fn()``, or CommandTimeout if it is still running at ``deadline`` (monotonic; None: no limit).

    ``fn`` runs in a helper thread; past the deadline it is abandoned: the run's teardown
    destroys the instance, which ends the command it was waiting for.
    """
    if deadline is None:
        return fn()
    done: Future[T] = Future()

    def work() -> None:
        done.set_running_or_notify_cancel()
        try:
            done.set_result(fn())
        except BaseException as exc:  # re-raised in the campaign thread by done.result()
            done.set_exception(exc)

    # a daemon thread, not an executor's: an abandoned command must not hold up the interpreter's exit
    threading.Thread(target=work, daemon=True, name=f"labkit-{doing}").start()
    try:
        return done.result(timeout=max(0.0, deadline - time.monotonic()))
    except FutureTimeout:
        raise CommandTimeout(f"run timeout reached while {doing}") from None


def run_together(
    workload: Workload, instances: Sequence[Instance], params: dict, timeout: float | None
) -> tuple[list[Measurement], list[float]]:
    """Run the workload in every instance at the same time; returns (measurements, per-instance seconds)."""
    if timeout is not None and params.get("timeout_s") is None:
        params = {**params, "timeout_s": timeout}
    elif timeout is not None:
        params = {**params, "timeout_s": min(timeout, params["timeout_s"])}
    if len(instances) == 1:
        t = time.perf_counter()
        rows = workload.run(instances[0], params)
        return rows, [time.perf_counter() - t]
    results: list = [None] * len(instances)
    barrier = threading.Barrier(len(instances))

    def work(i, inst):
        try:
            barrier.wait()
            t = time.perf_counter()
            rows = workload.run(inst, params)
            results[i] = (rows, time.perf_counter() - t)
        except BaseException as exc:  # re-raised in the campaign thread
            results[i] = exc

    threads = [threading.Thread(target=work, args=(i, inst), daemon=True) for i, inst in enumerate(instances)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return [m for rows, _ in results for m in rows], [s for _, s in results]
