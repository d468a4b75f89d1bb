"""Slurm testbeds: nodes asked of a cluster's scheduler, held for a campaign and given back.

A testbed with a ``slurm`` section instead of ``hosts``::

    name: cluster-a
    slurm:
      partition: compute        # default: the cluster's default partition
      nodes: 4                  # how many nodes (default 1)
      exclusive: true           # whole nodes, shared with no other job (default true)
      time: "02:00:00"          # the allocation's time limit (Slurm's formats; default: the partition's)
      account: lab-perf         # optional: the account charged
      constraint: "epyc&ib"     # optional: node features (Slurm's --constraint)
      qos: normal               # optional
      reservation: perf-week    # optional
      wait: 3600                # optional: seconds to wait for the nodes (default: as long as it takes)
    platforms:                  # optional; each runs as job steps (backend slurm) on every node
      native: {backend: slurm}
      unconfined: {backend: slurm, enforce_limits: false}

When the campaign starts (holding its lock, its store open), labkit asks for the allocation with
``salloc --no-shell --no-kill --job-name=labkit-<campaign>--alloc-<hex> ...`` (the job's name and
then its id are recorded in the store's meta, ``slurm_jobs``, before the nodes are granted), reads
its nodes (``scontrol show job``/``hostnames``/``node``) and runs the campaign on them as a fleet
(:mod:`labkit.run.engine`): host = node, a replicate block is a node, each run a set of job steps
pinned to its node (the ``slurm`` backend). ``--no-kill``: a node that fails does not end the job;
the engine finds it lost (:meth:`Allocation.probe`: the node's Slurm state, and after a failed run a
step on it) and moves its pending runs to live nodes. The allocation is cancelled (``scancel``)
when the campaign ends, on Ctrl-C or SIGTERM, and by ``labkit clean <campaign>``
(:func:`clean`); a campaign that resumes after its controller was killed cancels the killed
controller's allocation and asks for a new one (runs assigned to nodes it does not get move to
the nodes it gets, as a lost host's).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from ..backends import slurm_cli
from ..backends.base import NAME_PREFIX, check_prefix
from ..errors import BackendError, BackendUnavailable, ConfigError, LabkitError
from ..store import now_iso

log = logging.getLogger("labkit.run.slurm_testbed")

SLURM_KEYS = (
    "partition",
    "nodes",
    "exclusive",
    "time",
    "account",
    "constraint",
    "qos",
    "reservation",
    "wait",
)
#: seconds a query of the controller (scontrol, squeue, scancel) may take
QUERY_TIMEOUT_S = 30.0
#: how long a node's state read from the controller stands for the liveness probes
STATE_FRESH_S = 1.0
#: seconds the step of a thorough probe may take at least (a busy controller is not a lost node)
STEP_PROBE_S = 20.0
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,-]{0,127}")
_TIME = re.compile(r"(?:\d{1,4}-)?\d{1,6}(?::\d{1,2}){0,2}|(?:\d{1,4}-)\d{1,2}|UNLIMITED|INFINITE", re.I)
_CONSTRAINT = re.compile(r"[A-Za-z0-9_.&|\[\]*:,!()-]{1,512}")
_JOB_LINE = re.compile(r"job(?: allocation)? (\d+)")


@dataclass(frozen=True)
class SlurmRequest:
    """A testbed's ``slurm`` section: what to ask the cluster for (see the module docstring)."""

    nodes: int = 1
    partition: str | None = None
    exclusive: bool = True
    time: str | None = None
    account: str | None = None
    constraint: str | None = None
    qos: str | None = None
    reservation: str | None = None
    wait: float | None = None

    @classmethod
    def parse(cls, raw, source: str, max_nodes: int) -> SlurmRequest:
        where = f"{source}: slurm"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: a mapping with keys {', '.join(SLURM_KEYS)}")
        unknown = sorted(str(k)[:64] for k in raw if k not in SLURM_KEYS)
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(SLURM_KEYS)}"
            )
        nodes = raw.get("nodes", 1)
        if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= max_nodes:
            raise ConfigError(
                f"{where}.nodes: a whole number of nodes from 1 to {max_nodes}, got {str(nodes)[:32]!r}"
            )
        exclusive = raw.get("exclusive", True)
        if not isinstance(exclusive, bool):
            raise ConfigError(
                f"{where}.exclusive: true (whole nodes, the default) or false, got {str(exclusive)[:32]!r}"
            )
        limit = raw.get("time")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            limit = str(limit)  # minutes, as Slurm reads a bare number
        if limit is not None and (not isinstance(limit, str) or not _TIME.fullmatch(limit)):
            raise ConfigError(
                f"{where}.time: a Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS or "
                f"UNLIMITED), got {str(limit)[:40]!r}"
            )
        words = {}
        for key in ("partition", "account", "qos", "reservation"):
            value = raw.get(key)
            if value is not None and (not isinstance(value, str) or not _WORD.fullmatch(value)):
                raise ConfigError(
                    f"{where}.{key}: a Slurm {key} name (letters, digits, '_', '.', '-'), "
                    f"got {str(value)[:64]!r}"
                )
            words[key] = value
        constraint = raw.get("constraint")
        if constraint is not None and (
            not isinstance(constraint, str) or not _CONSTRAINT.fullmatch(constraint)
        ):
            raise ConfigError(
                f"{where}.constraint: a Slurm feature expression (features joined by & | , with "
                f"[] * ! ()), got {str(constraint)[:64]!r}"
            )
        wait = raw.get("wait")
        if wait is not None and (
            isinstance(wait, bool)
            or not isinstance(wait, (int, float))
            or not math.isfinite(wait)
            or not 1 <= wait <= 30 * 86400
        ):
            raise ConfigError(
                f"{where}.wait: seconds to wait for the nodes, 1 to {30 * 86400}, got {str(wait)[:32]!r}"
            )
        return cls(
            nodes,
            words["partition"],
            exclusive,
            limit,
            words["account"],
            constraint,
            words["qos"],
            words["reservation"],
            None if wait is None else float(wait),
        )

    def salloc_argv(self, job_name: str) -> list[str]:
        """The ``salloc`` command that asks for this allocation under ``job_name``."""
        argv = ["salloc", "--no-shell", "--no-kill", f"--job-name={job_name}", f"--nodes={self.nodes}"]
        if self.exclusive:
            argv.append("--exclusive")
        for key in ("partition", "time", "account", "constraint", "qos", "reservation"):
            value = getattr(self, key)
            if value is not None:
                argv.append(f"--{key}={value}")
        if self.wait is not None:
            argv.append(f"--immediate={math.ceil(self.wait)}")
        return argv

    def describe(self) -> dict:
        return {k: getattr(self, k) for k in SLURM_KEYS if getattr(self, k) is not None}


@dataclass(frozen=True)
class Node:
    """One allocated node: its name, address and what Slurm says of it."""

    name: str
    address: str
    cpus: int | None = None
    features: str = ""
    partitions: str = ""


@dataclass
class Allocation:
    """A granted allocation: Slurm job ``job_id`` (named ``name``) holding ``nodes``."""

    job_id: str
    name: str
    nodes: list[Node]
    released: bool = False
    _states: tuple[float, dict] = field(default_factory=lambda: (0.0, {}), repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def states(self) -> dict[str, str]:
        """Node name -> ``State`` as the controller has it, and ``"(job <state>)"`` for every node when
        the job no longer runs or ``"(not in the job)"`` for a node the job lost; read at most once
        every :data:`STATE_FRESH_S` s (every host's probe shares one reading)."""
        with self._lock:
            taken, states = self._states
            if time.monotonic() - taken < STATE_FRESH_S:
                return states
            job = slurm_cli.show_job(self.job_id, QUERY_TIMEOUT_S)
            if job is None or job.get("JobState") != "RUNNING":
                why = f"(job {self.job_id} {'gone' if job is None else job.get('JobState')})"
                states = {n.name: why for n in self.nodes}
            else:
                held = set(slurm_cli.hostnames(job.get("NodeList", ""), QUERY_TIMEOUT_S))
                recs = slurm_cli.show_nodes([n.name for n in self.nodes if n.name in held], QUERY_TIMEOUT_S)
                states = {
                    n.name: recs.get(n.name, {}).get("State", "(unknown to Slurm)")
                    if n.name in held
                    else "(not in the job)"
                    for n in self.nodes
                }
            self._states = (time.monotonic(), states)
            return states

    def probe(self, host, timeout: float, thorough: bool = False) -> tuple[bool, str]:
        """(True, "") if node ``host.name`` can run steps: the job runs, holds the node and the node's
        state has no failure flag (DOWN, NOT_RESPONDING, ...); ``thorough`` (after a failed run) also
        runs ``true`` as a step on it, given ``timeout`` s but at least :data:`STEP_PROBE_S` (a node
        whose slurmd died fails this before the controller marks it). (False, why) otherwise."""
        try:
            state = self.states().get(host.name, "(not allocated)")
        except BackendError as exc:
            if not thorough:
                return True, f"state not read ({exc})"  # the controller is slow: not a reason to drop a node
            state = ""  # the step decides
        if state.startswith("("):
            return False, f"node {host.name}: {state}"
        failed = slurm_cli.node_failure(state)
        if failed:
            return False, f"node {host.name} is {state} in Slurm"
        if not thorough:
            return True, ""
        argv = [
            "srun",
            f"--jobid={self.job_id}",
            f"--nodelist={slurm_cli.check_node(host.name)}",
            "--nodes=1",
            "--ntasks=1",
            "--overlap",
            "--quiet",
            "--chdir=/",
            f"--job-name={self.name}-probe",
            "true",
        ]
        try:
            res = slurm_cli.run(
                argv, timeout=max(timeout, STEP_PROBE_S), what=f"probing node {host.name}", check=False
            )
        except BackendError as exc:
            return False, str(exc)
        if res.returncode != 0:
            return False, f"a step on node {host.name} failed: {res.stderr.strip()[-300:]}"
        return True, ""

    def release(self) -> None:
        """Cancel the job (quiet if it has ended)."""
        if not self.released:
            slurm_cli.cancel([self.job_id], timeout=QUERY_TIMEOUT_S)
            self.released = True


def job_name(campaign_id: str) -> str:
    """The name of a new allocation of ``campaign_id``: ``labkit-<id>--alloc-<8 hex>``."""
    from ..core.ids import campaign_prefix

    return f"{campaign_prefix(campaign_id)}alloc-{secrets.token_hex(4)}"


def allocate(request: SlurmRequest, name: str, on_job, *, log_every: float = 60.0) -> Allocation:
    """Ask for ``request`` as job ``name`` and wait until it is granted; ``on_job(job_id)`` is called
    as soon as Slurm gives the job an id (before the nodes are granted). Any failure or interrupt
    (KeyboardInterrupt, the campaign's signals) cancels what was asked before it propagates.
    ConfigError for a request the cluster refuses outright, BackendError otherwise."""
    argv = request.salloc_argv(name)
    job: str | None = None
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=slurm_cli.environment(),
            cwd="/",
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise BackendUnavailable(
            f"Slurm testbed: salloc is not installed here; {slurm_cli.TOOLS_HINT}"
        ) from exc
    lines: list[str] = []
    try:
        last = time.monotonic()
        for line in (
            proc.stderr or ()
        ):  # blocking reads: a signal interrupts them (the campaign's handler raises)
            lines.append(line.rstrip())
            del lines[:-50]
            m = _JOB_LINE.search(line)
            if m and job is None:
                job = m.group(1)
                on_job(job)
            if job is not None and time.monotonic() - last > log_every:
                log.info("waiting for Slurm job %s (%s): %s", job, name, line.strip())
                last = time.monotonic()
        code = proc.wait()
        if code != 0 or job is None:
            text = "\n".join(lines[-10:])
            if any(
                w in text
                for w in (
                    "Invalid account",
                    "invalid partition",
                    "Invalid qos",
                    "Requested node configuration is not available",
                    "Invalid feature",
                    "Invalid reservation",
                )
            ):
                raise ConfigError(f"Slurm refused the testbed's request ({' '.join(argv[1:])}): {text}")
            raise BackendError(f"Slurm allocation {name} failed (salloc exited {code}): {text}")
        return _granted(job, name)
    except BaseException:
        with contextlib.suppress(Exception):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # salloc withdraws its request (SIGINT may be ignored)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
                if proc.poll() is None:
                    proc.kill()
        cancel_named([job] if job else [], [name])
        raise


def _granted(job_id: str, name: str) -> Allocation:
    """The nodes of granted job ``job_id``."""
    job = slurm_cli.show_job(job_id, QUERY_TIMEOUT_S)
    if job is None or job.get("JobState") != "RUNNING":
        raise BackendError(
            f"Slurm job {job_id} ({name}) was granted but is {'gone' if job is None else job.get('JobState')}"
        )
    names = slurm_cli.hostnames(job.get("NodeList", ""), QUERY_TIMEOUT_S)
    recs = slurm_cli.show_nodes(names, QUERY_TIMEOUT_S)
    nodes = []
    for n in names:
        rec = recs.get(n, {})
        cpus = rec.get("CPUTot", "")
        nodes.append(
            Node(
                n,
                rec.get("NodeAddr") or n,
                int(cpus) if cpus.isdigit() else None,
                "" if rec.get("AvailableFeatures") in (None, "(null)") else rec["AvailableFeatures"],
                rec.get("Partitions", ""),
            )
        )
    if not nodes:
        raise BackendError(f"Slurm job {job_id} ({name}) holds no nodes")
    return Allocation(job_id, name, nodes)


def jobs_named(names: list[str]) -> list[str]:
    """Ids of this user's jobs in the queue named one of ``names``."""
    if not names:
        return []
    res = slurm_cli.run(
        ["squeue", "-h", "--me", "-o", "%i", f"--name={','.join(names)}"],
        timeout=QUERY_TIMEOUT_S,
        what="listing labkit's Slurm jobs",
    )
    return [j.strip() for j in res.stdout.split() if j.strip().isdigit()]


def cancel_named(job_ids: list[str], names: list[str]) -> list[str]:
    """Cancel the jobs ``job_ids`` and this user's queued jobs named one of ``names`` (a job asked
    for whose id was never seen); returns the ids cancelled (that were still in the queue)."""
    ids = sorted({*job_ids, *jobs_named(names)}, key=int)
    live = [
        j
        for j in ids
        if (slurm_cli.show_job(j, QUERY_TIMEOUT_S) or {}).get("JobState") not in (None, *slurm_cli.JOB_ENDED)
    ]
    slurm_cli.cancel(live, timeout=QUERY_TIMEOUT_S)
    return live


def recorded(meta: dict) -> list[dict]:
    """The allocations a store's meta records (``slurm_jobs``)."""
    jobs = meta.get("slurm_jobs") or []
    return [j for j in jobs if isinstance(j, dict) and isinstance(j.get("name"), str)]


class Recorder:
    """Keeps a campaign's allocations in its store's meta (``slurm_jobs``: name, job id, nodes,
    asked / granted / released times, state)."""

    def __init__(self, store):
        self.store = store
        self.jobs = recorded(store.meta())

    def update(self, name: str, **items) -> None:
        for j in self.jobs:
            if j["name"] == name:
                j.update(items)
                break
        else:
            self.jobs.append({"name": name, **items})
        self.store.set_meta(slurm_jobs=self.jobs)

    def stale(self) -> list[dict]:
        return [j for j in self.jobs if j.get("state") not in ("released", "gone")]


@contextlib.contextmanager
def allocated(request: SlurmRequest, store, campaign_id: str):
    """The campaign's allocation while the block runs (see the module docstring): a killed
    controller's allocations first cancelled, a new one asked for and recorded, released on every
    way out of the block."""
    rec = Recorder(store)
    stale = rec.stale()
    if stale:
        gone = cancel_named([j["job_id"] for j in stale if j.get("job_id")], [j["name"] for j in stale])
        for j in stale:
            rec.update(j["name"], state="released" if j.get("job_id") in gone else "gone", released=now_iso())
        if gone:
            log.warning(
                "cancelled Slurm job(s) %s of an earlier controller of campaign %s",
                ", ".join(gone),
                campaign_id,
            )
    name = job_name(campaign_id)
    rec.update(name, state="asked", asked=now_iso(), request=request.describe())
    alloc = allocate(request, name, lambda job: rec.update(name, job_id=job, state="pending"))
    try:
        rec.update(name, state="running", granted=now_iso(), nodes=[n.name for n in alloc.nodes])
        log.info("Slurm job %s (%s): nodes %s", alloc.job_id, name, ", ".join(n.name for n in alloc.nodes))
        yield alloc
    finally:
        try:
            alloc.release()
            rec.update(name, state="released", released=now_iso())
        except LabkitError as exc:
            log.error(
                "Slurm job %s (%s) could not be cancelled: %s; cancel it with `scancel %s` or "
                "`labkit clean %s`",
                alloc.job_id,
                name,
                exc,
                alloc.job_id,
                campaign_id,
            )


def clean_nodes(job_id: str, prefix: str, options: dict | None = None) -> dict[str, list[str]]:
    """On every node of Slurm job ``job_id`` if it is running, remove the instances named
    ``prefix*`` (``cleanup(prefix)`` through a step); ``"node/slurm"`` -> removed names (or why not)."""
    from ..backends import get_backend

    info = slurm_cli.show_job(job_id, QUERY_TIMEOUT_S)
    if info is None or info.get("JobState") != "RUNNING":
        return {}
    out: dict[str, list[str]] = {}
    for node in slurm_cli.hostnames(info.get("NodeList", ""), QUERY_TIMEOUT_S):
        try:
            be = get_backend(
                "slurm",
                job_id=job_id,
                node=node,
                **{k: v for k, v in (options or {}).items() if k in ("enforce_limits", "step_timeout")},
            )
            try:
                out[f"{node}/slurm"] = be.cleanup(prefix)
            finally:
                be.close()
        except LabkitError as exc:
            out[f"{node}/slurm"] = [f"(not cleaned: {str(exc).splitlines()[0][:160]})"]
    return out


def clean(meta: dict, prefix: str, platforms: dict) -> dict[str, list[str]]:
    """``labkit clean <campaign>`` of a Slurm testbed's campaign: on every node of its allocations
    still running, remove the campaign's instances (``cleanup(prefix)`` through a step), then
    cancel the allocations (and queued jobs under their names). Returns ``"node/platform"`` ->
    removed names and ``"slurm"`` -> ``["job <id>", ...]`` cancelled."""
    out: dict[str, list[str]] = {}
    jobs = [j for j in recorded(meta) if j.get("state") not in ("released", "gone")]
    options = next((p.get("options") or {} for p in platforms.values() if p.get("backend") == "slurm"), {})
    for j in jobs:
        if j.get("job_id"):
            out.update(clean_nodes(j["job_id"], prefix, options))
    cancelled = cancel_named([j["job_id"] for j in jobs if j.get("job_id")], [j["name"] for j in jobs])
    out["slurm"] = [f"job {j}" for j in cancelled]
    return out


def _epoch(text: str) -> float | None:
    """A Slurm time stamp (``2026-11-27T08:44:01``, the controller's local time) as epoch seconds."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:  # Unknown, None, N/A
        return None


class QueuedJobs:
    """This user's Slurm jobs named ``labkit-*`` as ``labkit clean`` without a campaign id sees a
    backend's objects (:mod:`labkit.run.clean`): :meth:`list_labkit` their names, :meth:`created`
    each one's newest sign of life, :meth:`cleanup` cleans a campaign's nodes and cancels its
    jobs. The job of a running campaign (registered on this host) is kept like its instances; a
    job no registry here knows (its campaign may run from another login node) is kept until its
    newest sign of life -- submitted, a step running now (then: now), a step's start or end in
    the accounting -- is older than the grace period. BackendUnavailable without the Slurm tools."""

    def __init__(self):
        self.jobs: dict[str, list[tuple[str, str, str]]] = {}  # name -> [(job id, state, submitted)]
        self._read()

    def _read(self) -> None:
        res = slurm_cli.run(
            ["squeue", "-h", "--me", "-o", "%i|%j|%T|%V"],
            timeout=QUERY_TIMEOUT_S,
            what="listing this user's Slurm jobs",
        )
        self.jobs = {}
        for line in res.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4 and parts[0].isdigit() and parts[1].startswith(NAME_PREFIX):
                self.jobs.setdefault(parts[1], []).append((parts[0], parts[2], parts[3]))

    def list_labkit(self, prefix: str = NAME_PREFIX) -> list[str]:
        self._read()
        return sorted(n for n in self.jobs if n.startswith(prefix))

    def created(self, names: list[str]) -> dict[str, float | None]:
        running_steps = {
            line.split(".")[0]
            for line in slurm_cli.run(
                ["squeue", "-h", "--me", "--steps", "-o", "%i"],
                timeout=QUERY_TIMEOUT_S,
                what="listing this user's Slurm steps",
            ).stdout.split()
        }
        out: dict[str, float | None] = {}
        for name in names:
            signs: list[float | None] = []
            for job_id, _, submitted in self.jobs.get(name, []):
                if job_id in running_steps:
                    signs.append(time.time())
                    continue
                signs.append(_epoch(submitted))
                try:
                    for step in slurm_cli.sacct_steps(job_id, QUERY_TIMEOUT_S):
                        signs += [_epoch(step.get("Start", "")), _epoch(step.get("End", ""))]
                except BackendUnavailable:
                    pass  # no accounting: the submit time is all there is
            known = [t for t in signs if t is not None]
            out[name] = max(known) if known else None
        return out

    def cleanup(self, prefix: str) -> list[str]:
        """Clean the nodes of the jobs named ``prefix*`` of instances named ``prefix*``, then
        cancel the jobs; returns the jobs' names."""
        check_prefix(prefix)
        names = self.list_labkit(prefix)
        ids = [job_id for n in names for job_id, _, _ in self.jobs[n]]
        for job_id in ids:
            for where, removed in clean_nodes(job_id, prefix).items():
                if removed:
                    log.info("%s: removed %s", where, " ".join(removed))
        cancel_named(ids, names)
        return names

    def close(self) -> None:
        pass
