"""A campaign: run a design's plan on a backend with a workload, into a store.

For each run, in the plan's random order: provision ``count`` instances with
the run's :class:`InstanceSpec`, prepare the workload in each, start it in all
of them at the same moment, collect the measurements, tear everything down,
and commit the run to the store. A failed or timed-out run is stored with its
status and error text and the campaign goes on. Teardown happens on every
path, including KeyboardInterrupt and SIGTERM. Starting the same campaign id
again resumes it: stored runs are skipped.

>>> from labkit.campaign import Campaign
>>> from labkit.design import Design
>>> d = Design.from_dict({"factors": {"vcpus": [1, 2], "affinity": ["floating", "pinned"]},
...                       "replications": 2, "seed": 1})
>>> store = Campaign(d, backend="local", workload="nqueens",
...                  workload_params={"board": 12}, campaign_id="demo").run()
"""
from __future__ import annotations

import contextlib
import logging
import re
import signal
import threading
import time
import traceback
from pathlib import Path

from .backends import get_backend, teardown
from .design import Design
from .errors import CommandTimeout, ConfigError, LabkitError, StoreError
from .fingerprint import fingerprint_id, host_fingerprint
from .instance import InstanceSpec
from .store import Store, now_iso
from .workloads import get_workload

log = logging.getLogger("labkit.campaign")
_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,47}$")


class Interrupted(KeyboardInterrupt):
    """Raised in the campaign's thread when SIGTERM arrives, so teardown runs."""


class _Signals:
    """SIGTERM becomes :class:`Interrupted`, except inside teardown, where it waits until teardown ends."""

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
        previous = signal.signal(signal.SIGTERM, self.handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

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
    backend : backend name ("local", "docker", "lxd", "libvirt", "ssh") or a Backend
    workload : workload name or a Workload instance
    campaign_id : lowercase letters, digits, ``-``/``_``; default: design name + seed
    data_dir : where ``<campaign_id>/store.sqlite`` goes (default ``data``)
    backend_options, workload_params : passed to the backend / workload
    defaults : InstanceSpec for host factors the design does not vary
    run_timeout : seconds before a workload is killed and the run stored as ``timeout``
    progress : show a tqdm progress bar (terminal or notebook)
    """

    def __init__(self, design, backend="local", workload="nqueens", *, campaign_id: str | None = None,
                 data_dir: str | Path = "data", backend_options: dict | None = None,
                 workload_params: dict | None = None, defaults: InstanceSpec | None = None,
                 run_timeout: float | None = 3600, progress: bool = True):
        if isinstance(design, (str, Path)):
            design = Design.from_yaml(design)
        elif isinstance(design, dict):
            design = Design.from_dict(design)
        if not isinstance(design, Design):
            raise ConfigError(f"design must be a Design, a dict or a YAML path, got {type(design).__name__}")
        self.design = design
        self.workload = get_workload(workload, **(workload_params or {}))
        self.defaults = defaults or InstanceSpec()
        design.validate_for(self.workload)
        self.campaign_id = campaign_id or f"{design.name}-{design.seed}"
        if not _ID.match(self.campaign_id):
            raise ConfigError(f"campaign_id {self.campaign_id!r}: use 1-48 lowercase letters, digits, - or _")
        self.data_dir = Path(data_dir)
        self._backend_arg = backend
        self.backend_options = backend_options or {}
        self.run_timeout = run_timeout
        self.progress = progress
        self.backend = None
        self._versions: dict | None = None
        self._signals = _Signals()

    @property
    def prefix(self) -> str:
        return f"labkit-{self.campaign_id}"

    @property
    def backend_name(self) -> str:
        b = self._backend_arg
        return b if isinstance(b, str) else b.name

    def run(self, *, retry_failed: bool = False, max_runs: int | None = None) -> Store:
        """Execute every run not yet stored; returns the store, opened read-only.

        ``retry_failed`` forgets failed/timed-out runs first so they run again;
        ``max_runs`` stops after that many new runs (the rest on the next call).
        A backend that cannot run here fails before any store is created.
        """
        self.backend = get_backend(self._backend_arg, **self.backend_options)
        try:
            store = Store.for_campaign(self.data_dir, self.campaign_id)
        except BaseException:
            self.backend.close()
            raise
        try:
            self._check_or_write_meta(store)
            if retry_failed:
                failed = store.runs()
                if not failed.empty:
                    store.delete_runs(failed.loc[failed.status != "ok", "run_id"])
            fp = {"host": host_fingerprint(), "backend": self.backend.fingerprint()}
            fp_id = fingerprint_id(fp)
            store.add_fingerprint(fp_id, fp)
            self._cleanup_leftovers()
            plan = self.design.plan()
            done = store.completed()
            pending = [r for r in plan if r.run_id not in done]
            if max_runs is not None:
                pending = pending[:max_runs]
            already = sum(r.run_id in done for r in plan)
            with self._signals.installed(), self._bar(len(plan), already) as bar:
                for run in pending:
                    self._execute(run, store, fp_id)
                    bar.update(1)
            store.export()
        finally:
            self.backend.close()
            store.close()
        return Store.for_campaign(self.data_dir, self.campaign_id, readonly=True)

    # -- internals -------------------------------------------------------------
    def _bar(self, total, initial):
        if not self.progress:
            return contextlib.nullcontext(_NoBar())
        from tqdm.auto import tqdm
        return tqdm(total=total, initial=initial, desc=self.campaign_id, unit="run")

    def _check_or_write_meta(self, store: Store) -> None:
        meta = store.meta()
        mine = {"campaign_id": self.campaign_id, "design_digest": self.design.digest(),
                "design": self.design.to_dict(), "backend": self.backend_name,
                "backend_options": self.backend_options, "workload": self.workload.describe(),
                "defaults": self.defaults.as_dict()}
        if not meta:
            store.set_meta(created=now_iso(), **mine)
            return
        for key in ("design_digest", "backend", "workload"):
            if json_eq(meta.get(key), mine[key]) is False:
                raise StoreError(
                    f"{store.path}: campaign {self.campaign_id!r} was started with a different {key} "
                    f"({meta.get(key)!r}, now {mine[key]!r}); use a new campaign_id")

    def _cleanup_leftovers(self) -> None:
        cleanup = getattr(self.backend, "cleanup", None)
        if cleanup is not None:
            cleanup(self.prefix + "-")

    def _execute(self, run, store: Store, fp_id: str) -> None:
        spec = InstanceSpec.from_levels(run.levels, self.defaults)
        params = self.workload.params_for(run.levels, spec.vcpus)
        started, t0 = now_iso(), time.perf_counter()
        metadata: dict = {"spec": spec.as_dict(), "overcommitted": spec.overcommitted(self.backend.host_cpus())}
        measurements, status, error = [], "ok", None
        instances: list = []
        try:
            with self._noise(run, spec, metadata) as neighbours:
                if neighbours:
                    metadata["neighbours"] = list(neighbours)
                instances = self.backend.provision(spec, prefix=self.prefix)
                metadata["instances"] = [i.metadata for i in instances]
                for inst in instances:
                    self.workload.prepare(inst)
                if self._versions is None:
                    self._versions = self.workload.version(instances[0])
                metadata["versions"] = self._versions
                measurements, metadata["workload_s"] = _run_together(self.workload, instances, params,
                                                                     self.run_timeout)
        except CommandTimeout as exc:
            status, error = "timeout", str(exc)
        except LabkitError as exc:
            status, error = "failed", f"{type(exc).__name__}: {exc}"
        except (KeyboardInterrupt, SystemExit):
            raise  # not stored: the run will execute again on resume
        except Exception as exc:  # a bug in a workload: store it, keep the campaign going
            status, error = "failed", "".join(traceback.format_exception(exc))[-4000:]
        finally:
            with self._signals.deferred():
                errors = teardown(instances)
            if errors and status == "ok":
                status, error = "failed", f"teardown: {errors[0]}"
        store.record_run(run, status=status, started=started, duration_s=time.perf_counter() - t0,
                         measurements=measurements, error=error, metadata=metadata, fingerprint_id=fp_id)
        if status != "ok":
            log.warning("run %s %s: %s", run.run_id, status, (error or "").splitlines()[0][:200])

    def _noise(self, run, spec, metadata):
        kind = run.levels.get("noise", "none")
        if kind == "none":
            return contextlib.nullcontext([])
        from .noise import neighbours
        metadata["noise"] = kind
        return neighbours(self.backend, InstanceSpec(spec.vcpus, spec.memory_mb, spec.affinity, 1), kind,
                          count=1, prefix=self.prefix + "-noise")


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


def json_eq(a, b):
    import json
    if a is None:
        return None
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


class _NoBar:
    def update(self, n):
        pass
