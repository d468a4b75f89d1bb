"""A campaign: run a design's plan on a backend with a workload, into a store.

For each run, in the plan's random order: provision ``count`` instances with
the run's :class:`InstanceSpec`, prepare the workload in each, start it in all
of them at the same moment, collect the measurements, tear everything down,
and commit the run to the store. A failed or timed-out run is stored with its
status and error text and the campaign goes on. Teardown happens on every
path, including KeyboardInterrupt and SIGTERM; a second Ctrl-C or SIGTERM
during teardown waits until teardown is done. Starting the same campaign id
again resumes it: stored runs are skipped, and a resume with another design,
backend, backend options, workload, parameters, instance defaults or host is
refused with the difference shown. One process at a time runs a campaign (an
OS lock beside its store, see :mod:`labkit.core.lock`), and a campaign id runs once per
host whatever its data dir (the registry of running campaigns, :mod:`labkit.core.registry`):
a second start refuses before cleaning up or creating anything, naming the other.
A data dir another user could change is refused (:func:`labkit.core.paths.check_data_dir`).

>>> from labkit.run.campaign import Campaign
>>> from labkit.design import Design
>>> d = Design.from_dict({"factors": {"vcpus": [1, 2], "affinity": ["floating", "pinned"]},
...                       "replications": 2, "seed": 1})
>>> store = Campaign(d, backend="local", workload="nqueens",
...                  workload_params={"board": 12}, campaign_id="demo").run()
"""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..backends import backend_class, get_backend, teardown
from ..backends.base import Backend, Instance, exec_log_text, restart_exec_logs
from ..core.fingerprint import host_fingerprint, host_identity
from ..core.ids import campaign_prefix, check_campaign_id
from ..core.instance import InstanceSpec
from ..core.lock import LOCK_NAME, CampaignLock
from ..core.paths import check_data_dir
from ..core.redact import redact
from ..design import HOST_MAX, Design
from ..design.options import DEFAULT_INTERVAL, DEFAULT_THRESHOLDS, check_flag, check_thresholds
from ..errors import CommandTimeout, ConfigError, LabkitError, StoreError
from ..store import Store, now_iso, run_output_policy
from ..store.codestate import record_code_diff
from ..workloads import get_workload
from ..workloads.params import TIMEOUT
from . import network as runnet
from .guard import QuietHost
from .hooks import (
    NoiseNeighbour,
    RunContext,
    RunHook,
    around_campaign,
    around_run,
    check_hooks,
    instances_ready,
)
from .platforms import BackendPool, Platform
from .runlength import short_run_warnings
from .sampler import HostSampler
from .telemetry import Telemetry, check_interval, start_warnings
from .testbed import Host, Testbed
from .treatments import TreatmentChecks

if TYPE_CHECKING:
    from ..design import Run
    from ..workloads.base import Workload

log = logging.getLogger("labkit.run.campaign")
# what a resume must match (stored in the store's meta at creation)
RESUME_KEYS = ("design_digest", "backend", "backend_options", "workload", "defaults", "host", "testbed")
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: ``Campaign(telemetry=DESIGN)`` (the default): the design's ``telemetry``, else every second
DESIGN: Any = object()


class Interrupted(KeyboardInterrupt):
    """Raised in the campaign's thread when SIGTERM or SIGINT arrives, so teardown runs."""


class _Signals:
    """SIGTERM and SIGINT become :class:`Interrupted`, except inside teardown, where they wait
    until teardown ends (a second Ctrl-C must not leave cgroups and workloads behind)."""

    def __init__(self):
        self.critical = 0
        self.pending = None

    def handler(self, signum, frame):
        if self.critical:
            self.pending = signum
            return
        raise Interrupted(f"signal {signum}")

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.signal(s, self.handler) for s in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    @contextlib.contextmanager
    def deferred(self):
        self.critical += 1
        try:
            yield
        finally:
            self.critical -= 1
            if not self.critical and self.pending is not None:
                signum, self.pending = self.pending, None
                raise Interrupted(f"signal {signum}")


class Campaign:
    """Run ``design`` with ``workload`` on ``backend`` and store every measurement.

    Parameters
    ----------
    design : Design | dict | path to YAML
    backend : backend name ("local", "docker", "lxd", "libvirt", "ssh", ...) or a Backend; default
        "local" ("ssh" on a testbed whose hosts are all remote, "slurm" on a Slurm testbed); with a
        testbed, a platform name
    workload : workload name or a Workload instance
    campaign_id : 1-48 lowercase letters, digits, ``-``/``_`` (no ``--``, no trailing ``-``);
        default: design name + seed
    data_dir : where ``<campaign_id>/store.sqlite`` goes (default ``data``)
    backend_options, workload_params : passed to the backend / workload (secrets in
        backend_options are never stored: see :func:`labkit.core.redact.redact`)
    defaults : InstanceSpec for host factors the design does not vary
    run_timeout : seconds a run may take from provisioning (the first run of a boot) or its
        workload (a later one) to its end, once its hooks are in place (finite, > 0), or None;
        past it the run is stored as ``timeout``
    progress : show a tqdm progress bar (terminal or notebook; with a testbed one per host)
    testbed : a :class:`~labkit.run.testbed.Testbed`, a dict or a YAML path: run on its hosts in
        parallel (:mod:`labkit.run.engine`). A design with a ``platform`` factor runs on a testbed
        (this machine alone when none is given); ``backend`` then names the platform of designs
        without that factor. A Slurm testbed (a ``slurm`` section: :mod:`labkit.run.slurm`) asks the
        cluster for its nodes when the run starts and gives them back when it ends.
    group_readable : store files 0640 (directory 0750) instead of 0600 (0700)
    hooks : :class:`~labkit.run.hooks.RunHook` objects entered around every run on every path (KSM
        switching, k neighbours, ...: :mod:`labkit.run.hooks`), before the campaign's own noise
        neighbour (a ``noise`` level)
    telemetry : seconds between samples of the host and the instances during each run (None, 0
        or ``"off"``: none); default: the design's ``telemetry``, else 1.0. Stored in the store's
        ``samples`` table with a summary in each run's metadata (:mod:`labkit.run.telemetry`)
    exclusive : refuse to start beside another campaign running on this host, and make a later one
        refuse (default: the design's ``exclusive``, else False: warn and flag the runs that
        overlap as suspect; :mod:`labkit.run.guard`)
    quarantine : run the runs flagged suspect once more at the end, their first attempt kept in
        ``Store.attempts()`` (default: the design's ``quarantine``, else False)
    thresholds : when a run is flagged suspect (default: the design's, else
        :data:`labkit.design.options.DEFAULT_THRESHOLDS`)

    A design's ``runs_per_instance`` k makes each boot (one provisioning of a configuration's
    instances) run k runs back to back before its teardown (:meth:`measure_boot`).
    """

    def __init__(self, design: Design | dict | str | Path, backend: str | Backend | None = None,
                 workload: str | Workload = "nqueens", *, campaign_id: str | None = None,
                 data_dir: str | Path = "data", backend_options: dict | None = None,
                 workload_params: dict | None = None, defaults: InstanceSpec | None = None,
                 run_timeout: float | None = 3600, progress: bool = True, group_readable: bool = False,
                 testbed=None, hooks: Sequence[RunHook] | None = None, telemetry: Any = DESIGN,
                 exclusive: bool | None = None, quarantine: bool | None = None, thresholds: dict | None = None):
        if isinstance(design, (str, Path)):
            design = Design.from_yaml(design)
        elif isinstance(design, dict):
            design = Design.from_dict(design)
        if not isinstance(design, Design):
            raise ConfigError(f"design must be a Design, a dict or a YAML path, got {type(design).__name__}")
        self.design = design
        if workload_params is not None and not isinstance(workload_params, dict):
            raise ConfigError(f"workload_params must be a mapping, got {type(workload_params).__name__}")
        if any(not isinstance(k, str) for k in workload_params or {}):
            raise ConfigError("workload_params: parameter names must be strings")
        self.workload = get_workload(workload, **(workload_params or {}))
        self.defaults = defaults or InstanceSpec()
        if not isinstance(self.defaults, InstanceSpec):
            raise ConfigError(f"defaults must be an InstanceSpec, got {type(self.defaults).__name__}")
        for key, top in HOST_MAX.items():
            if getattr(self.defaults, key) > top:
                raise ConfigError(f"defaults.{key} = {getattr(self.defaults, key)} is above the maximum {top}")
        design.validate_for(self.workload)
        self.campaign_id = check_campaign_id(campaign_id or f"{design.name}-{design.seed}".lower())
        self.data_dir = Path(data_dir)
        if backend is None:   # local; ssh on remote hosts; slurm on a Slurm testbed
            backend = Testbed.load(testbed).default_platform if testbed is not None else "local"
        self._backend_arg = backend
        if backend_options is not None and not isinstance(backend_options, dict):
            raise ConfigError(f"backend_options must be a mapping, got {type(backend_options).__name__}")
        # passed through unchanged: each backend rejects unknown options (Backend.OPTIONS)
        self.backend_options = backend_options or {}
        self.run_timeout = TIMEOUT.check("run_timeout (--timeout, seconds)", run_timeout)
        self.progress = progress
        self.group_readable = group_readable
        self.backend: Backend | None = None   # set by a run on one backend
        self._versions_by: dict = {}   # tool versions, read once per platform (and host)
        self._signals = _Signals()
        self.testbed = _testbed(testbed, design, backend, self.backend_options)
        if telemetry is DESIGN:
            telemetry = DEFAULT_INTERVAL if design.telemetry is None else design.telemetry
        self.telemetry = check_interval(telemetry, "telemetry (seconds between samples, or 'off')")
        self.exclusive = bool(check_flag(exclusive, "exclusive", "Campaign") if exclusive is not None
                              else design.exclusive)
        self.quarantine = bool(check_flag(quarantine, "quarantine", "Campaign") if quarantine is not None
                               else design.quarantine)
        self.thresholds = check_thresholds(thresholds, "Campaign") or design.thresholds or dict(DEFAULT_THRESHOLDS)
        # one host sampler for the whole campaign: the telemetry's readings and the guard's look
        # before each run (with telemetry off it still reads the host for the guard, nothing is stored)
        self.host_sampler = HostSampler(self.telemetry or DEFAULT_INTERVAL)
        self.guard = QuietHost(self.campaign_id, exclusive=self.exclusive, thresholds=self.thresholds,
                               sampler=self.host_sampler)
        sampler = [Telemetry(self.telemetry, sampler=self.host_sampler)] if self.telemetry is not None else []
        # the guard first (its look at the host precedes the campaign's load; it judges the run
        # last), telemetry last (entered once the neighbours run, left before they stop); the
        # treatment checks once every neighbour runs and KSM is switched, left while they still run
        checks = [] if design.treatment_checks is False else [TreatmentChecks()]
        self.hooks: list[RunHook] = [self.guard, *check_hooks(hooks), NoiseNeighbour(), *checks, *sampler]

    @property
    def prefix(self) -> str:
        return campaign_prefix(self.campaign_id)

    @property
    def backend_name(self) -> str:
        b = self._backend_arg
        return b if isinstance(b, str) else b.name

    @property
    def lock_path(self) -> Path:
        return self.data_dir / self.campaign_id / LOCK_NAME

    def _lock(self) -> CampaignLock:
        """The campaign's lock, registering it in the host's registry of running campaigns
        (:mod:`labkit.core.registry`) while held: a campaign id runs once per host, whatever its data dir.
        The data dir is checked first (:func:`labkit.core.paths.check_data_dir`)."""
        check_data_dir(self.data_dir)
        testbed = self.testbed.name if self.testbed is not None else None
        return CampaignLock(self.lock_path, f"campaign {self.campaign_id!r}",
                            dir_mode=0o750 if self.group_readable else 0o700,
                            register={"campaign_id": self.campaign_id, "data_dir": self.data_dir,
                                      "backend": self.backend_name, "prefix": self.prefix, "testbed": testbed,
                                      "exclusive": self.exclusive})

    def run(self, *, retry_failed: bool = False, retries: int = 0, max_runs: int | None = None,
            new_store: bool = False) -> Store:
        """Execute every run not yet stored; returns the store, opened read-only.

        ``retry_failed`` forgets failed/timed-out runs first so they run again;
        ``retries``: then the runs stored as failed or timed out (in this call or an earlier one)
        run again, up to that many more times (a daemon hiccup, a guest that stalled while
        booting on a loaded host); a 2^k analysis needs every cell. ``max_runs`` stops after
        that many new runs (the rest on the next call); ``new_store`` allows starting a new
        store beside the ``results.csv`` of a lost one. A run run again keeps its earlier
        attempts in :meth:`Store.attempts <labkit.store.Store.attempts>`.

        A backend that cannot run here fails before any store is created; a campaign already
        running in another process fails at once (StoreError naming it).
        """
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"retries must be a whole number of times >= 0, got {retries!r}")
        from .engine import Fleet
        testbed, pool, platform = self.slots()
        lock = self._lock()
        store = None
        hooked = contextlib.ExitStack()
        allocation = contextlib.ExitStack()
        try:
            lock.acquire()
            self.guard.check_start()   # registered: another campaign here warns, or refuses (exclusive)
            for line in start_warnings(self.backend):   # what will not be measured or enforced, said first
                log.warning("campaign %s: %s", self.campaign_id, line)
            hooked.enter_context(around_campaign(self.hooks, self))   # in the lock, before the store: a hook may refuse
            store = Store.for_campaign(self.data_dir, self.campaign_id, group_readable=self.group_readable,
                                       allow_new=new_store)
            one = {"backend": self.backend.name} if self.backend is not None else {}
            self._check_or_write_meta(store, host_identity({"host": host_fingerprint(), "backend": one}))
            record_code_diff(store)   # a dirty checkout's diff: the code state can be rebuilt
            plan = self.design.plan()
            again = forget_failed(store, self.design, plan) if retry_failed else []
            with self._signals.installed():
                # a Slurm testbed's nodes: asked for here, given back in the finally (nothing otherwise)
                allocation.enter_context(testbed.allocated(store, self.campaign_id))
                engine = Fleet(self, testbed, store, default_platform=platform, pool=pool,
                               guard=self._signals.deferred)
                self._feed(engine, store, plan, again, retries, max_runs)
                for line in short_run_warnings(store, self.workload):   # once per campaign
                    log.warning("campaign %s: %s", self.campaign_id, line)
                store.export()
        finally:
            with self._signals.installed(), self._signals.deferred():
                pool.close()
                allocation.close()
                if store is not None:
                    store.close()
                try:
                    hooked.close()   # inside the lock, as they were entered
                finally:
                    lock.release()
        return Store.for_campaign(self.data_dir, self.campaign_id, readonly=True)

    def _feed(self, engine, store: Store, plan: list[Run], again: list[Run], retries: int,
              max_runs: int | None) -> None:
        """Feed the one engine (:class:`labkit.run.engine.Fleet`) from its plan sources, in turn: the
        fixed plan (with the runs ``retry_failed`` forgot that are not in it: adaptive rounds'
        runs), the adaptive rounds, then up to ``retries`` passes over the runs stored as failed,
        timed out or host-lost. The lock, the store, the resume check, the signals and the
        clean-up around it are :meth:`run`'s, the same for every path."""
        fixed = plan + [r for r in again if r.run_id not in {p.run_id for p in plan}]
        engine.prepare(fixed)
        self.guard.ready()   # the host's first sample before the first run, not in its time
        before = len(store.completed())
        engine.run(fixed, progress=self.progress, max_runs=max_runs)
        if self.design.adaptive is not None:   # replications: {target_ci: ...}
            from .adaptive import run_adaptive

            def execute(runs):
                engine.extend(runs)
                engine.run(runs, progress=self.progress)
            left = None if max_runs is None else max(0, max_runs - (len(store.completed()) - before))
            run_adaptive(self.design, store, execute, response=self.workload.response, budget=left)
        for _ in range(retries):
            runs = forget_failed(store, self.design, plan)
            if not runs:
                break
            log.warning("%d run(s) failed or timed out; running them once more: %s", len(runs),
                        ", ".join(sorted(r.run_id for r in runs)))
            engine.extend(runs)
            engine.run(runs, progress=self.progress)
        if self.quarantine:
            runs = forget_suspect(store, self.design, plan)
            if runs:
                log.warning("quarantine: %d suspect run(s) run once more: %s", len(runs),
                            ", ".join(sorted(r.run_id for r in runs)))
                engine.extend(runs)
                engine.run(runs, progress=self.progress)

    def slots(self) -> tuple[Testbed, BackendPool, str]:
        """What the engine runs on: (testbed, backend pool, platform of runs without a ``platform``
        level). With a testbed (or a ``platform`` factor) its hosts and platforms, the backends opened
        by the engine; on one backend, this machine alone offering that backend, opened here (so a
        backend that cannot run here fails before any store exists; a ``nics`` level it cannot bond
        fails before it connects) and kept as :attr:`backend`."""
        if self.testbed is not None:
            return self.testbed, BackendPool(), self.backend_name
        b = self._backend_arg
        runnet.check_nics(backend_class(b) if isinstance(b, str) else b, self.design.plan())
        self.backend = backend = get_backend(b, **self.backend_options)
        name = backend.name
        tb = Testbed([Host("local")], {name: Platform(name, name, dict(self.backend_options))}, name="local")
        pool = BackendPool()
        pool.adopt(tb.hosts[0], tb.platforms[name], backend)
        return tb, pool, name

    # -- internals -------------------------------------------------------------
    def _check_or_write_meta(self, store: Store, host: dict | None = None) -> None:
        """Write the campaign's settings into a new store, or check a resumed one matches them
        (every key of RESUME_KEYS); StoreError listing every difference otherwise."""
        meta = store.meta()
        self._adopt_drawn_seed(meta)
        mine = redact({"campaign_id": self.campaign_id, "design_digest": self.design.digest(),
                       "design": self.design.to_dict(), "seed_drawn": self.design.seed_drawn,
                       "backend": self.backend_name, "backend_options": self.backend_options,
                       "workload": self.workload.describe(), "defaults": self.defaults.as_dict(),
                       "host": host, "testbed": self.testbed.describe() if self.testbed else None})
        if not meta:
            store.set_meta(created=now_iso(), **mine)
            return
        diffs = []
        for key in RESUME_KEYS:
            if json_eq(meta.get(key), mine[key]) is False:
                diffs += differences(key, meta.get(key), mine[key])
                if key == "design_digest" and isinstance(meta.get("design"), dict):
                    diffs += differences("design", meta["design"], mine["design"])
        if diffs:
            shown = "\n  ".join(diffs[:20])
            raise StoreError(
                f"{store.path}: campaign {self.campaign_id!r} was started with other settings; "
                f"refusing to mix them in one store (use a new campaign_id). Stored vs now:\n  {shown}")

    def _adopt_drawn_seed(self, meta: dict) -> None:
        """A design without a seed resumes with the seed drawn when the campaign started."""
        d = self.design
        if not d.seed_drawn:
            return
        stored = meta.get("design") if meta else None
        if meta and meta.get("seed_drawn") and isinstance(stored, dict):
            mine = {k: v for k, v in d.to_dict().items() if k != "seed"}
            if json_eq({k: v for k, v in stored.items() if k != "seed"}, mine) and isinstance(stored.get("seed"), int):
                d.seed = stored["seed"]
                log.info("design has no seed: resuming with the seed drawn at the start, %d", d.seed)
                return
        log.warning("design %r has no seed: drew seed %d and stored it with campaign %r; add `seed: %d` to "
                    "the design to repeat the plan, or resume with the same campaign id",
                    d.name, d.seed, self.campaign_id, d.seed)

    def measure(self, run: Run, backend: Backend, *, live: list | None = None, versions_key: Any = None,
                deferred: contextlib.AbstractContextManager | None = None) -> Measured:
        """Provision, run and tear down one run on ``backend`` (a boot of one run:
        :meth:`measure_boot`); returns its :class:`Measured`."""
        [(_, result)] = list(self.measure_boot([run], backend, live=live, versions_key=versions_key,
                                               deferred=deferred))
        return result

    def measure_boot(self, runs: Sequence[Run], backend: Backend, *, live: list | None = None,
                     versions_key: Any = None,
                     deferred: contextlib.AbstractContextManager | None = None) -> Iterator[tuple[Run, Measured]]:
        """Run one boot on ``backend``: provision the instances of ``runs`` (a configuration's, one
        or more of its replicates) once, run the workload for each run in turn on them, tear them
        down once; yields ``(run, Measured)`` as each run ends (the last after the teardown, which
        fails it if the teardown fails: a run of one boot is exactly what :meth:`measure` did).
        What the fleet's workers call on their host's backend.

        Each run has its own hooks, telemetry, deadline (``run_timeout``, the first run's including
        the provisioning), start time, duration and metadata (``boot_group``, ``boot_position``).
        A run that does not end ok ends the boot: the runs after it are yielded as failed, not run
        (``--retry-failed`` or ``retries`` run them again on a fresh boot). ``live`` receives the
        instances while they exist (so another thread can destroy them); ``deferred`` guards
        teardown (default: the signal deferral). Closing the generator early tears down at once."""
        spec = InstanceSpec.from_levels(runs[0].levels, self.defaults)
        params = self.workload.params_for(runs[0].levels, spec.vcpus)
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
                    result = Measured("failed", f"not run: run {failed} of the same boot did not end ok; its "
                                      "instances were torn down (--retry-failed or retries run it on a fresh boot)",
                                      [], {"spec": spec.as_dict(), "boot_group": run.boot_group,
                                           "boot_position": i + 1, "not_run": True}, now_iso(), 0.0)
                if i + 1 < len(runs):
                    yield run, result
                else:
                    last = (run, result, t0)
        finally:
            with deferred or self._signals.deferred():
                errors = teardown(boot.instances) + runnet.close_network(boot.net)
        if last is not None:
            run, result, t0 = last
            if errors and result.status == "ok":
                result = result.but(status="failed", error=f"teardown: {errors[0]}")
            if not result.metadata.get("not_run"):
                result = result.but(duration_s=time.perf_counter() - t0)
            yield run, result

    def _run_in_boot(self, run: Run, position: int, of: int, backend: Backend, spec: InstanceSpec, params: dict,
                     boot: _Boot, versions_key: Any) -> Measured:
        """Run ``run``, the ``position``-th (0-based) of ``of`` runs of ``boot``: the first one makes
        the boot's network and instances (inside its hooks) and prepares the workload in them."""
        started, t0 = now_iso(), time.perf_counter()
        metadata: dict = {"spec": spec.as_dict(), "boot_group": run.boot_group, "boot_position": position + 1}
        if of > 1:
            metadata["boot_runs"] = of
        measurements: list = []
        status, error = "ok", None
        instances = boot.instances
        ctx = RunContext(run, spec, metadata, backend, self.prefix, instances=instances)
        try:
            metadata["overcommitted"] = spec.overcommitted(backend.host_cpus())
            with around_run(self.hooks, ctx) as neighbours:
                # the run's time starts once its hooks are in place (the guard's look at the host,
                # the neighbours started): provisioning, preparing and the workload count
                deadline = None if self.run_timeout is None else time.monotonic() + self.run_timeout
                if neighbours:
                    metadata["neighbours"] = list(neighbours)
                if position == 0:
                    ctx.provisioning = True
                    try:
                        boot.net = runnet.open_network(backend, run.levels, self.workload, params, spec.count,
                                                       self.prefix, boot.net_metadata)
                        metadata.update(boot.net_metadata)   # kept by a run whose provisioning fails
                        instances.extend(backend.provision(spec, prefix=self.prefix, network=boot.net))
                    finally:
                        ctx.provisioning = False
                    boot.provisioned = instance_measurements(instances)
                    instances_ready(self.hooks, ctx)
                    _before(deadline, "preparing the workload",
                            lambda: list(map(self.workload.prepare, instances)))
                metadata.update(boot.net_metadata)
                metadata["instances"] = [i.metadata for i in instances]
                if versions_key not in self._versions_by:
                    self._versions_by[versions_key] = _before(deadline, "reading tool versions",
                                                              lambda: self.workload.version(instances[0]))
                metadata["versions"] = self._versions_by[versions_key]
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise CommandTimeout(f"run timeout of {self.run_timeout}s used up before the workload started")
                measurements, metadata["workload_s"] = runnet.run_workload(self.workload, instances, params,
                                                                           left, _run_together)
        except CommandTimeout as exc:
            status, error = "timeout", str(exc)
        except LabkitError as exc:
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            if oom_killed(exc):
                metadata["oom_killed"] = True
                error = (f"OOM: the workload was killed for lack of memory (out-of-memory killer; "
                         f"memory limit {spec.memory_mb} MB). {error}")
        except (KeyboardInterrupt, SystemExit):
            raise  # not stored: the run will execute again on resume
        except Exception as exc:  # a bug in a workload: store it, keep the campaign going
            status, error = "failed", "".join(traceback.format_exception(exc))[-4000:]
        # what keep_output keeps: this run's commands (the boot's instances then log the next run's afresh)
        output = exec_log_text(instances)
        restart_exec_logs(instances)
        provisioned = boot.provisioned if position == 0 else []
        return Measured(status, error, provisioned + list(measurements), metadata, started,
                        time.perf_counter() - t0, output, ctx.samples)


@dataclass
class _Boot:
    """What the runs of one boot share: its instances (the live list), network, the network's
    metadata keys and the instances' own measurements (the first run's)."""
    instances: list
    net: Any = None
    net_metadata: dict = field(default_factory=dict)
    provisioned: list = field(default_factory=list)


class Measured(NamedTuple):
    """What :meth:`Campaign.measure` returns for one run. ``output``: the commands the run's
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
    return [Measurement(metric, float(value), unit, inst.index)
            for inst in instances for metric, (value, unit) in getattr(inst, "run_metrics", {}).items()]


def keep_output(store: Store, run_id: str, status: str, output: str) -> None:
    """Keep a run's command output beside the store (``output/<run_id>.log``, 0600, its first
    and last MiB and its size: :meth:`Store.write_run_output`) before the run itself is stored:
    every run's, or as :func:`run_output_policy` says (``labkit run --run-output``); a failure
    to write it is logged, never fatal."""
    policy = run_output_policy()
    if not output or policy == "off" or (policy == "failed" and status == "ok"):
        return
    try:
        store.write_run_output(run_id, output, status)
    except StoreError as exc:
        log.warning("run %s: its output was not kept: %s", run_id, exc)


def forget_failed(store: Store, design: Design, plan: list[Run]) -> list[Run]:
    """Forget the runs stored as failed, timed out or host-lost so they run again (each stays in
    ``store.attempts()``); returns them as runs of ``plan`` or, for runs an adaptive round added,
    rebuilt from the store (configuration, replicate and order as stored)."""
    runs = store.runs()
    if runs.empty:
        return []
    return _forget(store, design, plan, runs[runs.status != "ok"])


def forget_suspect(store: Store, design: Design, plan: list[Run]) -> list[Run]:
    """Quarantine: forget the runs stored ok but flagged suspect (:mod:`labkit.run.guard`) so they run
    again, each first attempt kept in ``store.attempts()`` as :func:`forget_failed` keeps it; a run
    already run again for being suspect (an attempt of it was suspect) is not quarantined twice."""
    runs = store.runs()
    if runs.empty:
        return []
    attempts = store.attempts()
    again = {a.run_id for a in attempts.itertuples() if (a.metadata or {}).get("suspect")}
    return _forget(store, design, plan, runs[(runs.status == "ok") & runs.suspect & ~runs.run_id.isin(again)])


def _forget(store: Store, design: Design, plan: list[Run], bad) -> list[Run]:
    """Forget the stored runs of the frame ``bad`` (rows of ``store.runs()``); returns them as runs
    of ``plan`` (their boots kept) or rebuilt from the store."""
    from ..design import Run
    if bad.empty:
        return []
    known = {r.run_id: r for r in plan}
    configs = design.configurations()
    out = [known.get(row.run_id) or Run(row.run_id, int(row.run_order), int(row.config), int(row.replicate),
                                        dict(configs[int(row.config)]))
           for row in bad[["run_id", "run_order", "config", "replicate"]].itertuples()]
    store.delete_runs(bad.run_id)
    return out


def _testbed(testbed, design: Design, backend, backend_options: dict):
    """The campaign's Testbed: the one given, or this machine alone for a design with a ``platform``
    factor; None (one backend, as before testbeds) otherwise."""
    from .platforms import FACTOR, Platform, design_platforms
    if testbed is None and FACTOR not in design.factor_names:
        return None
    tb = Testbed.load(testbed)
    if not isinstance(backend, str):
        raise ConfigError("with a testbed or a 'platform' factor, backend must be a platform name, "
                          "not a Backend object")
    if FACTOR in design.factor_names:
        if backend_options:
            raise ConfigError("backend_options apply to one backend; with a 'platform' factor declare each "
                              "platform's options under the testbed's 'platforms'")
    elif backend_options:   # one platform: the options complete its declaration
        p = tb.platform(backend)
        tb.platforms[backend] = Platform(p.name, p.backend, {**p.options, **backend_options})
    tb.check_platforms(design_platforms(design) or [backend], design.source)   # before any store exists
    return tb


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


def _before(deadline, doing: str, fn):
    """``fn()``, or CommandTimeout if it is still running at ``deadline`` (monotonic; None: no limit).

    ``fn`` runs in a helper thread; past the deadline it is abandoned: the run's teardown
    destroys the instance, which ends the command it was waiting for.
    """
    if deadline is None:
        return fn()
    out: list = []

    def work():
        try:
            out.append((True, fn()))
        except BaseException as exc:  # re-raised in the campaign thread
            out.append((False, exc))

    t = threading.Thread(target=work, daemon=True, name=f"labkit-{doing}")
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
    if not out:
        raise CommandTimeout(f"run timeout reached while {doing}")
    ok, value = out[0]
    if not ok:
        raise value
    return value


def _run_together(workload, instances, params, timeout):
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
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return [m for rows, _ in results for m in rows], [s for _, s in results]


def json_eq(a: Any, b: Any) -> bool | None:
    """Whether a and b are equal as JSON; None when ``a`` is None (not recorded: nothing to compare)."""
    import json
    if a is None:
        return None
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def differences(key: str, stored: Any, now: Any) -> list[str]:
    """Human-readable lines ``key.sub: stored X, now Y`` for every leaf that differs."""
    if isinstance(stored, dict) and isinstance(now, dict):
        out = []
        for k in sorted(set(stored) | set(now), key=str):
            if json_eq(stored.get(k, "<absent>"), now.get(k, "<absent>")) is False:
                out += differences(f"{key}.{k}", stored.get(k, "<absent>"), now.get(k, "<absent>"))
        return out
    def short(v):
        t = repr(v)
        return t if len(t) <= 120 else t[:117] + "..."
    return [f"{key}: stored {short(stored)}, now {short(now)}"]

