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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends import backend_class, get_backend
from ..backends.base import Backend
from ..core.fingerprint import host_fingerprint, host_identity
from ..core.ids import campaign_prefix, check_campaign_id
from ..core.instance import InstanceSpec
from ..core.lock import LOCK_NAME, CampaignLock
from ..core.paths import check_data_dir
from ..core.redact import redact
from ..design import HOST_MAX, Design
from ..design.options import DEFAULT_INTERVAL, DEFAULT_THRESHOLDS, check_flag, check_thresholds
from ..errors import ConfigError, StoreError
from ..store import RUN_OUTPUT_CHOICES, Store, now_iso, run_output_policy
from ..store.codestate import record_code_diff
from ..store.forget import forget_failed, forget_suspect
from ..workloads import get_workload
from ..workloads.params import TIMEOUT
from . import network_setup as runnet
from .boot import BootRunner, BootSettings, Measured
from .engine import Dispatcher
from .guard import QuietHost
from .hooks import NoiseNeighbour, RunHook, around_campaign, check_hooks
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
#: the workload of a Campaign given none, when its design names none either (``labkit run`` instead
#: requires one: the command line's ``--workload`` or the design's ``workload:`` key)
DEFAULT_WORKLOAD = "nqueens"

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
    workload : workload name or a Workload instance; None: the design's ``workload:`` key (its
        parameters under ``workload_params``), else :data:`DEFAULT_WORKLOAD`
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
        without that factor. A Slurm testbed (a ``slurm`` section: :mod:`labkit.run.slurm_testbed`) asks the
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
    run_output : whose command output to keep beside the store as ``output/<run_id>.log``: ``all``
        (every run's), ``failed`` (the runs that did not end ok) or ``off``; default: the environment
        variable ``LABKIT_RUN_OUTPUT`` (for notebooks and scripts: :func:`labkit.store.run_output_policy`),
        else ``all``. ``labkit run --run-output`` passes it here.

    A design's ``runs_per_instance`` k makes each boot (one provisioning of a configuration's
    instances) run k runs back to back before its teardown (:meth:`BootRunner.measure_boot
    <labkit.run.boot.BootRunner.measure_boot>`).
    """

    def __init__(
        self,
        design: Design | dict | str | Path,
        backend: str | Backend | None = None,
        workload: str | Workload | None = None,
        *,
        campaign_id: str | None = None,
        data_dir: str | Path = "data",
        backend_options: dict | None = None,
        workload_params: dict | None = None,
        defaults: InstanceSpec | None = None,
        run_timeout: float | None = 3600,
        progress: bool = True,
        group_readable: bool = False,
        testbed=None,
        hooks: Sequence[RunHook] | None = None,
        telemetry: Any = DESIGN,
        exclusive: bool | None = None,
        quarantine: bool | None = None,
        thresholds: dict | None = None,
        run_output: str | None = None,
    ):
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
        named = design.named_workload  # the design file's ``workload:`` key, if it has one
        if workload is None:
            workload = named["name"] if named is not None else DEFAULT_WORKLOAD
        if named is not None and workload == named["name"]:  # its parameters, the given ones winning
            workload_params = {**named["params"], **(workload_params or {})}
        self.workload = get_workload(workload, **(workload_params or {}))
        self.defaults = defaults or InstanceSpec()
        if not isinstance(self.defaults, InstanceSpec):
            raise ConfigError(f"defaults must be an InstanceSpec, got {type(self.defaults).__name__}")
        for key, top in HOST_MAX.items():
            if getattr(self.defaults, key) > top:
                raise ConfigError(
                    f"defaults.{key} = {getattr(self.defaults, key)} is above the maximum {top}"
                )
        design.validate_for(self.workload)
        self.campaign_id = check_campaign_id(campaign_id or f"{design.name}-{design.seed}".lower())
        self.data_dir = Path(data_dir)
        if backend is None:  # local; ssh on remote hosts; slurm on a Slurm testbed
            backend = Testbed.load(testbed).default_platform if testbed is not None else "local"
        self._backend_arg = backend
        if backend_options is not None and not isinstance(backend_options, dict):
            raise ConfigError(f"backend_options must be a mapping, got {type(backend_options).__name__}")
        # passed through unchanged: each backend rejects unknown options (Backend.OPTIONS)
        self.backend_options = backend_options or {}
        self.run_timeout = TIMEOUT.check("run_timeout (--timeout, seconds)", run_timeout)
        self.progress = progress
        self.group_readable = group_readable
        if run_output is not None and run_output not in RUN_OUTPUT_CHOICES:
            raise ConfigError(
                f"run_output={str(run_output)[:40]!r}: use one of {', '.join(RUN_OUTPUT_CHOICES)}"
            )
        #: whose command output is kept (``all``, ``failed``, ``off``)
        self.run_output = run_output if run_output is not None else run_output_policy()
        self.backend: Backend | None = None  # set by a run on one backend
        self._versions_by: dict = {}  # tool versions, read once per platform (and host)
        self._signals = _Signals()
        self.testbed = _testbed(testbed, design, backend, self.backend_options)
        if telemetry is DESIGN:
            telemetry = DEFAULT_INTERVAL if design.telemetry is None else design.telemetry
        self.telemetry = check_interval(telemetry, "telemetry (seconds between samples, or 'off')")
        self.exclusive = bool(
            check_flag(exclusive, "exclusive", "Campaign") if exclusive is not None else design.exclusive
        )
        self.quarantine = bool(
            check_flag(quarantine, "quarantine", "Campaign") if quarantine is not None else design.quarantine
        )
        self.thresholds = (
            check_thresholds(thresholds, "Campaign") or design.thresholds or dict(DEFAULT_THRESHOLDS)
        )
        # one host sampler for the whole campaign: the telemetry's readings and the guard's look
        # before each run (with telemetry off it still reads the host for the guard, nothing is stored)
        self.host_sampler = HostSampler(self.telemetry or DEFAULT_INTERVAL)
        self.guard = QuietHost(
            self.campaign_id, exclusive=self.exclusive, thresholds=self.thresholds, sampler=self.host_sampler
        )
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
        return CampaignLock(
            self.lock_path,
            f"campaign {self.campaign_id!r}",
            dir_mode=0o750 if self.group_readable else 0o700,
            register={
                "campaign_id": self.campaign_id,
                "data_dir": self.data_dir,
                "backend": self.backend_name,
                "prefix": self.prefix,
                "testbed": testbed,
                "exclusive": self.exclusive,
            },
        )

    def run(
        self,
        *,
        retry_failed: bool = False,
        retries: int = 0,
        max_runs: int | None = None,
        new_store: bool = False,
    ) -> Store:
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
        testbed, pool, platform = self.slots()
        lock = self._lock()
        store = None
        hooked = contextlib.ExitStack()
        allocation = contextlib.ExitStack()
        try:
            lock.acquire()
            self.guard.check_start()  # registered: another campaign here warns, or refuses (exclusive)
            for line in start_warnings(self.backend):  # what will not be measured or enforced, said first
                log.warning("campaign %s: %s", self.campaign_id, line)
            hooked.enter_context(
                around_campaign(self.hooks, self)
            )  # in the lock, before the store: a hook may refuse
            store = Store.for_campaign(
                self.data_dir, self.campaign_id, group_readable=self.group_readable, allow_new=new_store
            )
            one = {"backend": self.backend.name} if self.backend is not None else {}
            self._check_or_write_meta(store, host_identity({"host": host_fingerprint(), "backend": one}))
            record_code_diff(store)  # a dirty checkout's diff: the code state can be rebuilt
            plan = self.design.plan()
            again = forget_failed(store, self.design, plan) if retry_failed else []
            with self._signals.installed():
                # a Slurm testbed's nodes: asked for here, given back in the finally (nothing otherwise)
                allocation.enter_context(testbed.allocated(store, self.campaign_id))
                engine = self.dispatcher(
                    testbed, store, default_platform=platform, pool=pool, guard=self._signals.deferred
                )
                self._feed(engine, store, plan, again, retries, max_runs)
                for line in short_run_warnings(store, self.workload):  # once per campaign
                    log.warning("campaign %s: %s", self.campaign_id, line)
                store.export()
        finally:
            with self._signals.installed(), self._signals.deferred():
                pool.close()
                allocation.close()
                if store is not None:
                    store.close()
                try:
                    hooked.close()  # inside the lock, as they were entered
                finally:
                    lock.release()
        return Store.for_campaign(self.data_dir, self.campaign_id, readonly=True)

    def _feed(
        self,
        engine: Dispatcher,
        store: Store,
        plan: list[Run],
        again: list[Run],
        retries: int,
        max_runs: int | None,
    ) -> None:
        """Feed the one engine (:class:`labkit.run.engine.Dispatcher`) from its plan sources, in turn: the
        fixed plan (with the runs ``retry_failed`` forgot that are not in it: adaptive rounds'
        runs), the adaptive rounds, then up to ``retries`` passes over the runs stored as failed,
        timed out or host-lost. The lock, the store, the resume check, the signals and the
        clean-up around it are :meth:`run`'s, the same for every path."""
        fixed = plan + [r for r in again if r.run_id not in {p.run_id for p in plan}]
        engine.prepare(fixed)
        self.guard.ready()  # the host's first sample before the first run, not in its time
        before = len(store.completed())
        engine.run(fixed, progress=self.progress, max_runs=max_runs)
        if self.design.adaptive is not None:  # replications: {target_ci: ...}
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
            log.warning(
                "%d run(s) failed or timed out; running them once more: %s",
                len(runs),
                ", ".join(sorted(r.run_id for r in runs)),
            )
            engine.extend(runs)
            engine.run(runs, progress=self.progress)
        if self.quarantine:
            runs = forget_suspect(store, self.design, plan)
            if runs:
                log.warning(
                    "quarantine: %d suspect run(s) run once more: %s",
                    len(runs),
                    ", ".join(sorted(r.run_id for r in runs)),
                )
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
        mine = redact(
            {
                "campaign_id": self.campaign_id,
                "design_digest": self.design.digest(),
                "design": self.design.to_dict(),
                "seed_drawn": self.design.seed_drawn,
                "backend": self.backend_name,
                "backend_options": self.backend_options,
                "workload": self.workload.describe(),
                "defaults": self.defaults.as_dict(),
                "host": host,
                "testbed": self.testbed.describe() if self.testbed else None,
            }
        )
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
                f"refusing to mix them in one store (use a new campaign_id). Stored vs now:\n  {shown}"
            )

    def _adopt_drawn_seed(self, meta: dict) -> None:
        """A design without a seed resumes with the seed drawn when the campaign started."""
        d = self.design
        if not d.seed_drawn:
            return
        stored = meta.get("design") if meta else None
        if meta and meta.get("seed_drawn") and isinstance(stored, dict):
            mine = {k: v for k, v in d.to_dict().items() if k != "seed"}
            if json_eq({k: v for k, v in stored.items() if k != "seed"}, mine) and isinstance(
                stored.get("seed"), int
            ):
                d.seed = stored["seed"]
                log.info("design has no seed: resuming with the seed drawn at the start, %d", d.seed)
                return
        log.warning(
            "design %r has no seed: drew seed %d and stored it with campaign %r; add `seed: %d` to "
            "the design to repeat the plan, or resume with the same campaign id",
            d.name,
            d.seed,
            self.campaign_id,
            d.seed,
        )

    def boots(self) -> BootRunner:
        """The boot runner of this campaign (:mod:`labkit.run.boot`): its settings taken from the
        campaign as it is now (its workload, instance defaults, prefix, hooks and run timeout), its
        teardown guarded by the campaign's signal deferral, its tool versions read once per campaign."""
        settings = BootSettings(
            workload=self.workload,
            defaults=self.defaults,
            prefix=self.prefix,
            hooks=tuple(self.hooks),
            run_timeout=self.run_timeout,
        )
        return BootRunner(settings, guard=self._signals.deferred, versions=self._versions_by)

    def dispatcher(
        self,
        testbed: Testbed,
        store: Store,
        *,
        default_platform: str,
        pool: BackendPool | None = None,
        guard: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ) -> Dispatcher:
        """The run engine (:class:`~labkit.run.engine.Dispatcher`) of this campaign on ``testbed``
        into ``store``: its boots run by :meth:`boots`, its runs' output kept as :attr:`run_output` says."""
        return Dispatcher(
            self.boots(),
            testbed,
            store,
            campaign_id=self.campaign_id,
            source=self.design.source,
            default_platform=default_platform,
            run_output=self.run_output,
            pool=pool,
            guard=guard,
        )

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
        :meth:`BootRunner.measure_boot <labkit.run.boot.BootRunner.measure_boot>`); returns its
        :class:`~labkit.run.boot.Measured`."""
        return self.boots().measure(run, backend, live=live, versions_key=versions_key, deferred=deferred)


def _testbed(testbed, design: Design, backend, backend_options: dict):
    """The campaign's Testbed: the one given, or this machine alone for a design with a ``platform``
    factor; None (one backend, as before testbeds) otherwise."""
    from .platforms import FACTOR, Platform, design_platforms

    if testbed is None and FACTOR not in design.factor_names:
        return None
    tb = Testbed.load(testbed)
    if not isinstance(backend, str):
        raise ConfigError(
            "with a testbed or a 'platform' factor, backend must be a platform name, not a Backend object"
        )
    if FACTOR in design.factor_names:
        if backend_options:
            raise ConfigError(
                "backend_options apply to one backend; with a 'platform' factor declare each "
                "platform's options under the testbed's 'platforms'"
            )
    elif backend_options:  # one platform: the options complete its declaration
        p = tb.platform(backend)
        tb.platforms[backend] = Platform(p.name, p.backend, {**p.options, **backend_options})
    tb.check_platforms(design_platforms(design) or [backend], design.source)  # before any store exists
    return tb


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
