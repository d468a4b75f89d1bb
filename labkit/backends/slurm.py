"""The ``slurm`` backend: one node of a Slurm allocation; every command a job step on that node.

A Slurm testbed (:mod:`labkit.run.slurm_testbed`) asks the cluster for an allocation and opens this
backend once per (node, platform) with the allocation's ``job_id`` and the ``node``. The node is
the instance host, as on the ``ssh`` backend (the native-host model of :mod:`.native`): an
instance is a cgroup on the node (made by :mod:`.cgroups`' driver) plus a private work directory
``~/.cache/labkit/instances/<name>`` (on a cluster's shared home, the clean-up of a campaign's
leftovers from any node also removes the work dirs a node that died left); pinned → cpuset, floating → quota, memory → limit;
without root on the node, ``enforce_limits=False`` runs unconfined (pinned through ``taskset``)
and records ``limits_enforced: False``.

Every command is a step of the job, pinned to the node::

    srun --jobid=J --nodelist=<node> --nodes=1 --ntasks=1 --overlap --whole --mem=0 --chdir=/
         --export=HOME,PATH,USER,LOGNAME,LANG --job-name=<instance>.<n> /bin/sh -c <script>

``--overlap`` lets steps share the node (a run's instances, its control scripts), ``--whole`` gives
each step every CPU the job holds there, so labkit's own pinning decides where the workload runs.
Only ``HOME``, ``PATH``, ``USER``, ``LOGNAME`` and ``LANG`` of the controller reach the node. The
step's stdout and stderr come back through ``srun`` into capped sinks as they arrive; ``srun``'s own
lines (``srun: ...``: it runs with ``-v`` to name the step it launched) are kept apart, so the
command's stderr is its own, and a step that could not be launched (node gone, allocation ended)
is a :class:`BackendError`, not the command's failure. Control scripts (probe, create, list,
kill, remove) are steps too; files are copied by a step reading its stdin.

Each instance records the steps of its commands (``metadata["slurm"]``: job id, node, and per
step its id, name, command, exit code) and, at teardown, the accounting the cluster keeps for
them (``sacct``: state, exit code, elapsed, CPU time, MaxRSS, ...); on a cluster without
accounting it says so instead.

>>> be = get_backend("slurm", job_id="4242", node="n1")   # inside allocation 4242, on node n1
"""

from __future__ import annotations

import os
import posixpath
import shlex
import signal
import subprocess
import threading
import time

from ..core.instance import InstanceSpec
from ..errors import BackendError, BackendUnavailable, ConfigError
from . import cgroups, native, slurm_cli
from .base import NAME_PREFIX, Backend, Instance, RawResult, check_prefix
from .cgroup_counters import CgroupCounters
from .child import exited
from .private_network import Network
from .slurm_files import FileReader
from .slurm_steps import Step

q = shlex.quote
#: seconds a control step (probe, create, list, kill, remove, copy) may take
CONTROL_TIMEOUT_S = 120.0
#: how long teardown waits for the cluster's accounting of an instance's steps to appear
ACCOUNTING_WAIT_S = 10.0
#: the controller's variables a step gets (``srun --export``)
EXPORTED = "HOME,PATH,USER,LOGNAME,LANG"
#: at most this many steps an instance records (its first ones; the others are counted)
MAX_STEPS = 256


class SlurmInstance(CgroupCounters, Instance):
    """A cgroup (when limits are enforced) and a private work dir on an allocated node."""

    backend: SlurmBackend

    def __init__(self, backend: SlurmBackend, name, spec, index, cpus, host_cpu_ids):
        super().__init__(backend, name, spec, index, cpus)
        self.host_cpu_ids = host_cpu_ids
        self.steps: list[dict] = []
        self.started = 0  # commands started (steps launched for them)
        self._lock = threading.Lock()
        self.metadata.update(
            native.instance_facts(backend.driver, host_cpu_ids),
            slurm={"job_id": backend.job_id, "node": backend.node, "steps": self.steps},
        )

    @property
    def workdir(self) -> str:
        return f"{self.backend.workroot}/{self.name}"

    # -- exec hooks --------------------------------------------------------
    def _start(self, argv, env):
        be = self.backend
        with self._lock:
            self.started += 1
            name = f"{self.name}.{self.started}"
            record: dict = {"step": None, "name": name, "command": shlex.join(argv)[:200]}
            if len(self.steps) < MAX_STEPS:  # a bounded record, whatever an instance runs
                self.steps.append(record)
            else:
                self.metadata["slurm"]["steps_not_recorded"] = self.started - MAX_STEPS
        pidfile = f"{self.workdir}/.exec-{os.urandom(6).hex()}.pid"
        script = native.command_line(
            be.driver, self.name, self.workdir, argv, pidfile, env, self.host_cpu_ids
        )
        return Step(be.spawn(name, script), pidfile, record)

    def _wait(self, handle: Step, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        if not exited(handle.proc, timeout):
            return None
        code = handle.proc.wait()
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not handle.reader.join(left):
            return None
        handle.srun.flush()
        handle.record["step"] = handle.srun.step()
        code = code if code >= 0 else 128 - code
        handle.record["exit_code"] = code
        bad = handle.srun.step_errors()
        if bad:
            handle.record["srun"] = bad[-5:]
            raise BackendError(
                f"{self.backend.where}: step {handle.record['step'] or handle.record['name']} of {self.name} "
                f"failed in Slurm (exit {code}): " + " | ".join(bad[-5:])
            )
        return RawResult.from_sinks(code, handle.out, handle.err)

    def _kill(self, handle: Step) -> None:
        try:
            self.backend.run_script(
                native.kill_script(self.backend.driver, self.name, handle.pidfile),
                f"killing a command in {self.name}",
            )
        except BackendError:
            pass  # the node cannot be reached: at least srun goes
        if handle.proc.poll() is None and not exited(handle.proc, 5.0):
            try:
                os.killpg(handle.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _read(self, path: str) -> str:
        return self.backend.run_script(f"cat {q(path)}", f"reading {path} of {self.name}").stdout

    def _read_many(self, paths: dict[str, str]) -> dict[str, str | None]:
        """Every file of ``paths`` through the node's file reader step (None where it cannot be read)."""
        return self.backend.files.read(paths)

    def stats(self) -> dict[str, float]:
        """Its cgroup's counters and the node's steal time (:func:`.native.instance_stats`), read by the
        node's one file reader step (:class:`.slurm_files.FileReader`); without a cgroup (limits not enforced) only
        the steal counters."""
        driver = self.backend.driver
        return native.instance_stats(
            driver,
            self._read_many(native.stat_paths(driver, self.name)),
            f"{self.name} on {self.backend.where}",
        )

    def put(self, local_path, remote_path: str, mode: int = 0o755) -> None:
        path = str(remote_path)
        if not posixpath.isabs(path):
            path = posixpath.join(self.workdir, path)
        tmp = f"{path}.labkit-{os.urandom(4).hex()}"
        script = (
            f"mkdir -p {q(posixpath.dirname(path) or '/')} && cat > {q(tmp)} && chmod {mode:o} {q(tmp)} "
            f"&& mv -f {q(tmp)} {q(path)} || {{ rm -f {q(tmp)}; exit 1; }}"
        )
        with open(local_path, "rb") as fh:
            self.backend.run_script(script, f"copying {local_path} to {path}", stdin=fh)

    def _destroy(self) -> None:
        try:
            self.backend.remove([self.name])
        finally:
            self.backend.account(self.steps)


class SlurmBackend(Backend):
    """Instances on node ``node`` of Slurm job ``job_id`` (see the module docstring).

    Options: ``job_id`` and ``node`` (required: a Slurm testbed gives them), ``enforce_limits``
    (default True: refuse when the node's cgroups cannot be used), ``step_timeout`` (seconds a
    control step may take, default 120).
    """

    name = "slurm"
    OPTIONS = ("job_id", "node", "enforce_limits", "step_timeout")

    def __init__(
        self,
        job_id=None,
        node=None,
        enforce_limits: bool = True,
        step_timeout: float = CONTROL_TIMEOUT_S,
        **unknown,
    ):
        super().__init__(**unknown)
        if job_id is None or node is None:
            raise ConfigError(
                "slurm backend: options job_id and node are required (the allocation and the node "
                "a Slurm testbed gives; see the README's Slurm section)"
            )
        self.job_id = slurm_cli.check_job_id(job_id, "slurm backend")
        self.node = slurm_cli.check_node(node, "slurm backend")
        if (
            isinstance(step_timeout, bool)
            or not isinstance(step_timeout, (int, float))
            or not 0 < step_timeout <= 3600
        ):
            raise ConfigError(
                f"slurm backend: step_timeout must be seconds in (0, 3600], got {step_timeout!r}"
            )
        if not isinstance(enforce_limits, bool):
            raise ConfigError(f"slurm backend: enforce_limits must be true or false, got {enforce_limits!r}")
        self.options = {
            "job_id": self.job_id,
            "node": self.node,
            "enforce_limits": enforce_limits,
            "step_timeout": float(step_timeout),
        }
        self.enforce = enforce_limits
        self.step_timeout = float(step_timeout)
        self.facts: native.HostFacts | None = None
        self.driver: cgroups.Driver | None = None
        self.workroot = ""
        self._why_not = ""
        self._lock = threading.Lock()
        self._accounting: str | None = None  # why the cluster keeps no accounting, once known
        self._running: set[subprocess.Popen] = set()  # the srun of every command in flight
        #: the node's file reader step (the instances' counters)
        self.files = FileReader(self)

    @property
    def where(self) -> str:
        return f"node {self.node} of Slurm job {self.job_id}"

    # -- steps ----------------------------------------------------------------------------------
    def step_argv(self, name: str, verbose: bool = False) -> list[str]:
        """The ``srun`` argv of a step named ``name`` on this backend's node (the command follows)."""
        return [
            "srun",
            f"--jobid={self.job_id}",
            f"--nodelist={self.node}",
            "--nodes=1",
            "--ntasks=1",
            "--overlap",
            "--whole",
            "--mem=0",
            "--chdir=/",
            f"--export={EXPORTED}",
            f"--job-name={name}",
            "-v" if verbose else "--quiet",
        ]

    def spawn(
        self, name: str, script: str, *, stdin=subprocess.DEVNULL, verbose: bool = True
    ) -> subprocess.Popen:
        """Start ``script`` (sh) as step ``name`` on the node without waiting; its own session, stdin
        empty (or ``stdin``); stderr piped with srun's ``-v`` lines (``verbose``), else dropped."""
        try:
            proc = subprocess.Popen(
                self.step_argv(name, verbose=verbose) + ["/bin/sh", "-c", script],
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if verbose else subprocess.DEVNULL,
                env=slurm_cli.environment(),
                cwd="/",
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise BackendUnavailable(
                f"slurm backend: srun is not installed here; {slurm_cli.TOOLS_HINT}"
            ) from exc
        with self._lock:
            self._running = {p for p in self._running if p.poll() is None} | {proc}
        return proc

    def close(self) -> None:
        """Stop the ``srun`` of every command still in flight (a lost node's: the engine drops its
        backends) and of the file reader (:class:`.slurm_files.FileReader`), so no thread waits on a step of a node
        that is gone."""
        self.files.stop()
        with self._lock:
            running, self._running = self._running, set()
        for proc in running:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def run_script(
        self, script: str, what: str, timeout: float | None = None, stdin=None
    ) -> subprocess.CompletedProcess:
        """A control script (sh) as a step on the node; BackendError unless it exits 0 in time."""
        argv = self.step_argv(f"{NAME_PREFIX}control") + ["/bin/sh", "-c", script]
        res = slurm_cli.run(
            argv, timeout=timeout or self.step_timeout, what=f"{self.where}: {what}", check=False, stdin=stdin
        )
        if res.returncode != 0:
            raise BackendError(
                f"{self.where}: {what} failed (exit {res.returncode}): "
                f"{(res.stderr or res.stdout).strip()[-2000:]}"
            )
        return res

    # -- facts ------------------------------------------------------------------------------------
    def host_facts(self) -> native.HostFacts:
        """What the probe step found on the node (probing it the first time)."""
        with self._lock:
            if self.facts is None:
                script = native.PROBE + native.WORK_ROOT + "true\n"
                try:
                    facts = native.HostFacts(
                        self.run_script(script, "probing the node", max(30.0, self.step_timeout)).stdout
                    )
                except BackendError as exc:
                    raise BackendUnavailable(f"slurm backend: {exc}") from exc
                self.workroot = facts.get("workroot")
                self.driver, self._why_not = native.detect_driver(facts, self.where)
                self.facts = facts
            return self.facts

    def check(self) -> None:
        native.check_host(self.name, self.host_facts(), self.driver, self._why_not, self.enforce, self.where)

    def host_cpus(self) -> int:
        return len(native.cpu_ids(self.host_facts(), self.driver))

    def fingerprint(self) -> dict:
        facts = self.host_facts()
        try:
            node = slurm_cli.show_nodes([self.node], 30.0).get(self.node, {})
            slurm = {
                "version": slurm_cli.version(),
                "node": self.node,
                **{
                    k.lower(): node.get(k)
                    for k in ("Partitions", "AvailableFeatures", "CPUTot", "RealMemory", "Arch", "OS")
                    if node.get(k)
                },
            }
        except BackendError as exc:  # a fact we cannot read is recorded as such
            slurm = {"node": self.node, "error": str(exc)[:200]}
        return {"backend": self.name, **native.host_fingerprint(facts, self.driver), "slurm": slurm}

    # -- instances ----------------------------------------------------------------------------------
    def _create(
        self,
        spec: InstanceSpec,
        name: str,
        index: int,
        cpus: list[int] | None,
        network: Network | None = None,
    ) -> SlurmInstance:
        self.refuse_network(network)
        real, script = native.create_script(
            self.host_facts(), self.driver, self.workroot, spec, name, cpus, self.where
        )
        return native.create(
            name,
            lambda: self.run_script(script, f"creating instance {name}"),
            self.remove,
            lambda: SlurmInstance(self, name, spec, index, cpus, real),
        )

    def remove(self, names: list[str]) -> None:
        """Kill the instances' processes, remove their cgroups and work dirs."""
        self.host_facts()
        script = native.remove_script(self.driver, self.workroot, names)
        if script:
            self.run_script(script, f"removing {', '.join(names)}")

    def list_labkit(self, prefix: str = NAME_PREFIX) -> list[str]:
        check_prefix(prefix)
        self.host_facts()
        out = self.run_script(
            native.list_script(self.driver, self.workroot, prefix), f"listing {prefix}* instances"
        )
        return native.listed_names(self.driver, native.HostFacts(out.stdout, probe=False).listed, prefix)

    def cleanup(self, prefix: str) -> list[str]:
        """Remove what instances named ``prefix*`` left on the node (a killed campaign's)."""
        names = self.list_labkit(prefix)
        self.remove(names)
        return names

    # -- accounting -------------------------------------------------------------------------------
    def account(self, steps: list[dict]) -> None:
        """Add the cluster's accounting (sacct) to each of ``steps`` (records of an instance's
        commands, :attr:`SlurmInstance.steps`), waiting up to :data:`ACCOUNTING_WAIT_S` for the
        records to be written; where the cluster keeps none, each step says so."""
        wanted = {s["step"]: s for s in steps if s.get("step")}
        if not wanted:
            return
        if self._accounting is not None:
            for s in wanted.values():
                s["accounting"] = self._accounting
            return
        deadline = time.monotonic() + ACCOUNTING_WAIT_S
        while True:
            try:
                rows = {r["JobID"]: r for r in slurm_cli.sacct_steps(self.job_id, 30.0)}
            except BackendUnavailable as exc:
                self._accounting = f"not kept: {exc}"[:300]
                for s in wanted.values():
                    s["accounting"] = self._accounting
                return
            except BackendError as exc:
                for s in wanted.values():
                    s.setdefault("accounting", f"not read: {exc}"[:300])
                return
            final = {
                sid: rows[sid]
                for sid in wanted
                if sid in rows and rows[sid]["State"] not in ("RUNNING", "PENDING")
            }
            if len(final) == len(wanted) or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        for sid, s in wanted.items():
            row = rows.get(sid)
            if row is None:
                s["accounting"] = f"not recorded by the cluster within {ACCOUNTING_WAIT_S:g} s"
                continue
            s["state"] = row["State"]
            s["accounting"] = {
                k.lower(): v for k, v in row.items() if k not in ("JobID", "JobName") and v != ""
            }
