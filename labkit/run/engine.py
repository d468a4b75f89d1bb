"""The run engine: one worker thread per testbed host, each claiming the next pending run.

:class:`Dispatcher` dispatches a campaign's plan over the hosts of a :class:`~labkit.run.testbed.Testbed`.
It is the one engine of every path (:meth:`labkit.run.campaign.Campaign.run` owns the frame around it: lock,
store, resume check, signals): a campaign on one backend is a testbed of one slot, this machine offering
that backend; a ``platform`` factor or a testbed gives more slots. The fixed plan and the adaptive rounds
(:meth:`Dispatcher.extend`, then :meth:`Dispatcher.run` again) feed it the same way. It runs each boot
through a :class:`~labkit.run.boot.BootRunner` (the campaign's settings, not the campaign).

* **Platforms and backends.** Each (host, platform) backend is opened and checked once, before the first run
  (a platform a host cannot offer fails here, naming both), cleaned of the campaign's leftovers
  (``cleanup(prefix)``), fingerprinted, and closed at the end.
* **Assignment.** ``assign: blocks`` (default) gives each replicate block to one host (block r to the r-th
  host able to run every platform, round robin; with ``runs_per_instance`` k, the block of the k replicates
  of boot b goes to the b-th host, so a boot never spans hosts), stored in the store's meta as
  ``fleet_assignment`` so a resume keeps it; ``assign: random`` lets any host offering a run's platform take
  it.
* **Claims.** A worker claims its next boot's runs in the store (a lease renewed by a heartbeat thread; a
  boot is one run, or with ``runs_per_instance`` k the pending runs of one boot of a configuration, run on
  the same instances: :meth:`BootRunner.measure_boot <labkit.run.boot.BootRunner.measure_boot>`); the
  candidates come from the claim index (:class:`~labkit.run.claim_index.ClaimIndex`: each host's runs in plan
  order, those known stored skipped, told of each run as it is stored), grouped by boot, and the store reads
  only the rows of the first few (:meth:`Store.claim_group <labkit.store.Store.claim_group>`); storing a run
  drops its claim in the same transaction. Runs that end close together are stored in one transaction (group
  commit, :class:`~labkit.store.group.GroupCommit`: up to 64 runs or 50 ms), each reported done (claim
  index, progress) only once it committed; the queue is written before the engine reads the store and on
  every exit (end, exception, Ctrl-C, SIGTERM). Each stored run records its ``host`` and ``run_seq`` (its
  1-based order on that host, counted over the campaign's runs and attempts there; None for a run not run
  because an earlier run of its boot failed). A controller killed at any moment leaves claims whose runs
  were never stored: the next start (which holds the campaign lock) releases them and runs them; nothing is
  lost and nothing stored twice.
* **Host loss.** A monitor probes every remote host whose run has been in flight longer than
  :attr:`Dispatcher.probe_after_s` (TCP connect + SSH banner, every :attr:`Dispatcher.probe_interval_s`);
  after :attr:`Dispatcher.lost_after` failed probes in a row, or when a run fails and the host does not
  answer, the host is *lost*: its in-flight run is stored with status ``host-lost``, and its pending runs
  move to live hosts offering their platforms (``fleet_moves`` in the meta; ``moved_from`` in the run's
  metadata), or with ``on_host_loss: fail-block`` its blocks' runs on that host are removed (kept in the
  meta as ``fleet_superseded``) and the blocks re-run whole elsewhere.
* **Progress.** One tqdm bar per host plus a total (one bar in all for one host; the total alone for more
  than :attr:`Dispatcher.max_host_bars` hosts). Workers are daemon threads; the caller's thread only waits,
  so Ctrl-C (or SIGTERM) in a terminal or a notebook stops cleanly: in-flight instances are destroyed, their
  claims released, and the runs execute again on resume.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..backends import teardown
from ..core.fingerprint import fingerprint_id
from ..core.redact import redact
from ..errors import BackendUnavailable, LabkitError, StoreError
from ..store import now_iso
from ..store.group import GroupCommit
from .boot import BootRunner, Measured, keep_output
from .claim_index import ClaimIndex
from .host_loss import HostLoss
from .host_state import HostState, block_of
from .hosts import host_facts, identity_warnings
from .platforms import FACTOR, BackendPool

if TYPE_CHECKING:
    from ..design import Run
    from ..store import Store
    from .testbed import Testbed

log = logging.getLogger("labkit.run.engine")


class Dispatcher(HostLoss):
    """Dispatch a campaign's pending runs over the hosts of ``testbed``, each boot run by ``runner``,
    into ``store`` (see the module docstring). ``campaign_id`` names the progress bars; ``source``
    (the design's file) prefixes the errors of platforms no host offers; ``run_output``: whose
    command output is kept (:func:`~labkit.run.boot.keep_output`); ``guard``: entered around the
    clean-up after an interrupt (the campaign's signal deferral)."""

    lease_s = 30.0
    max_host_bars = 32  # more hosts than this: the total bar alone
    probe_interval_s = 2.0
    probe_after_s = 10.0  # a run in flight longer than this gets its host probed (sshd forks per probe)
    lost_after = 3

    def __init__(
        self,
        runner: BootRunner,
        testbed: Testbed,
        store: Store,
        *,
        campaign_id: str,
        default_platform: str,
        source: str = "design",
        run_output: str = "all",
        pool: BackendPool | None = None,
        guard: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ):
        self.runner, self.tb, self.store = runner, testbed, store
        self.campaign_id, self.source, self.run_output = campaign_id, source, run_output
        self.prefix = runner.settings.prefix
        self.guard = guard
        self.default_platform = default_platform
        self.pool = pool or BackendPool()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.db = threading.RLock()  # one SQLite connection: one user at a time
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.states = {h.name: HostState(h) for h in testbed.hosts}
        self.fp_ids: dict[tuple[str, str], str] = {}
        self.assigned: dict[str, str] = {}
        self.block_order: list[str] = []
        self.moved: dict[str, str] = {}
        self.index = ClaimIndex()  # what each host may claim, without a store round trip
        self.total = None
        self.seq: dict[str, int] = {}  # host -> run_seq of the last run recorded there
        # finished runs written in groups (one transaction for those ending close together), each
        # reported done (claim index, counts, bars: _stored) only once its transaction committed
        self.writer = GroupCommit(
            store, lock=self.db, owner=self.owner, on_done=self._stored, on_lost=self._not_stored
        )
        self.queued: dict[str, HostState] = {}  # run_id -> its host, while its group is not committed

    # -- set-up ------------------------------------------------------------
    def platform_of(self, run: Run) -> str:
        return run.levels.get(FACTOR, self.default_platform)

    def prepare(self, plan: list[Run]) -> None:
        """Check platforms, open every needed backend (in parallel), clean up, fingerprint,
        release stale claims and load or make the assignment. Raises before any run."""
        names = sorted({self.platform_of(r) for r in plan})
        self.tb.check_platforms(names, self.source)
        meta = self.store.meta()
        was_lost = set((meta.get("fleet_hosts") or {}).get("lost", {}))
        needed = [(h, self.tb.platform(p)) for h in self.tb.hosts for p in names if self.tb.offers(h, p)]

        def open_one(item):
            h, p = item
            try:
                be = self.pool.open(h, p)
            except BackendUnavailable as exc:
                if h.name in was_lost and not self.tb.reachable(h, self.tb.connect_timeout)[0]:
                    return h, p, exc  # lost before and still unreachable: stays lost
                raise
            be.cleanup(self.prefix)
            backend_fp = be.fingerprint()  # remote round trips: read here, in parallel
            return h, p, be, backend_fp, host_facts(h, be, backend_fp)

        with ThreadPoolExecutor(max_workers=min(16, len(needed)) or 1) as ex:
            opened = list(ex.map(open_one, needed))
        facts: dict[str, dict] = {}
        for h, p, be, *fps in opened:
            if isinstance(be, Exception):
                self._mark_lost(h.name, f"unreachable at start: {be}")
                continue
            backend_fp, this_facts = fps
            facts.setdefault(h.name, this_facts)
            fp = {"host": facts[h.name], "backend": backend_fp}
            fid = fingerprint_id(redact(fp))
            self.store.add_fingerprint(fid, fp)
            self.fp_ids[(h.name, p.name)] = fid
        warnings = identity_warnings(facts, self.tb.hosts)
        for w in warnings:
            log.warning("testbed %s: %s", self.tb.name, w)
        self.store.set_meta(fleet_fingerprint_warnings=warnings)
        stale = self.store.release_claims(not_owner=self.owner)
        for cl in stale:
            log.warning(
                "run %s was in flight on host %s when the last controller stopped: it runs again",
                cl["run_id"],
                cl["host"],
            )
        self.assigned = dict(meta.get("fleet_assignment") or {})
        self.moved = {m["run_id"]: m["from"] for m in meta.get("fleet_moves") or []}
        self.block_order = [h.name for h in self.tb.block_hosts(names)]
        if self.tb.assign == "blocks" and not self.assigned:
            order = self.block_order
            self.assigned = {r.run_id: order[(block_of(r) - 1) % len(order)] for r in plan}
            self.store.set_meta(fleet_assignment=self.assigned)
        absent = sorted(set(self.assigned.values()) - set(self.states))
        if absent:  # a resume on other hosts (a Slurm testbed's new allocation): moved as a lost host's
            self.plan = plan
            for name in absent:
                self._move(name)
        self.seq = run_seq_start(self.store)

    def extend(self, runs: list[Run]) -> None:
        """Runs added after :meth:`prepare` (adaptive rounds, retries): with ``assign: blocks`` each
        new replicate is a new block, given to a live host able to take whole blocks (round robin on
        the replicate number) and recorded in ``fleet_assignment``, as is a run again whose host was
        lost; with ``assign: random`` any host offering the run's platform takes it."""
        if self.tb.assign != "blocks":
            return
        live = [n for n in self.block_order if not self.states[n].lost]
        if not live:
            return  # no host can take them: run() says so, a resume runs them
        for r in runs:
            host = self.assigned.get(r.run_id)
            if host is None or host not in self.states or self.states[host].lost:
                self.assigned[r.run_id] = live[(block_of(r) - 1) % len(live)]
        self.store.set_meta(fleet_assignment=self.assigned)
        self.index.invalidate()

    # -- execution ---------------------------------------------------------
    def run(self, plan: list[Run], *, progress: bool = True, max_runs: int | None = None) -> None:
        """Execute every pending run of ``plan``; returns when done, all hosts lost, or ``max_runs``
        new runs are stored. KeyboardInterrupt stops the workers cleanly and is re-raised."""
        self.plan = plan
        self.runs_by_id = {r.run_id: r for r in plan}
        self.boot_runs: dict[str, list[str]] = {}  # boot group -> its run ids in plan order
        for r in plan:
            if r.boot_group != r.run_id:
                self.boot_runs.setdefault(r.boot_group, []).append(r.run_id)
        self.left = max_runs
        self.stop.clear()  # a later call (an adaptive round) after an earlier one ended
        done = self.store.completed()
        self.index.reset(done)
        self._bars(progress, len(plan), sum(r.run_id in done for r in plan))
        workers = [
            threading.Thread(target=self._work, args=(s,), daemon=True, name=f"labkit-fleet-{n}")
            for n, s in self.states.items()
            if not s.lost
        ]
        helpers = [
            threading.Thread(target=self._heartbeat, daemon=True, name="labkit-fleet-heartbeat"),
            threading.Thread(target=self._monitor, daemon=True, name="labkit-fleet-monitor"),
        ]
        try:
            for t in workers + helpers:  # inside the try: a signal may come while they start
                t.start()
            while any(t.is_alive() for t in workers):
                for t in workers:  # short waits: a signal another thread received is seen here
                    t.join(0.05)
            self.writer.flush()  # the runs still queued: stored and reported done before run() returns
        except BaseException:
            with self.guard():  # a second Ctrl-C or SIGTERM waits until the instances are gone
                self._cancel(workers)
            raise
        finally:
            self.stop.set()
            self._close_bars()
        stored = self.store.completed()
        left = [r.run_id for r in plan if r.run_id not in stored]
        if left and self.left != 0:
            log.error(
                "%d run(s) not executed: no live host offers their platform (lost: %s); resume when "
                "the hosts are back",
                len(left),
                ", ".join(n for n, s in self.states.items() if s.lost),
            )

    def _cancel(self, workers) -> None:
        self.stop.set()
        for s in self.states.values():
            with contextlib.suppress(Exception):
                teardown(list(s.live))
        deadline = time.monotonic() + 30
        for t in workers:
            if t.ident is not None:  # started
                t.join(max(0.0, deadline - time.monotonic()))
        try:
            self.writer.flush()  # runs that ended before the interrupt: stored, their claims with them
        except StoreError as exc:  # logged, not raised: the interrupt that brought us here is what propagates
            log.error("while stopping: %s", exc)
        finally:
            with self.db:
                self.store.release_claims(owner=self.owner)

    def candidates(self, state: HostState) -> list[str]:
        name = state.host.name
        if self.tb.assign == "blocks":
            return [r.run_id for r in self.plan if self.assigned.get(r.run_id) == name]
        return [r.run_id for r in self.plan if self.tb.offers(state.host, self.platform_of(r))]

    def candidate_lists(self) -> dict[str, list[str]]:
        """Every host's :meth:`candidates`, in one pass over the plan (hosts that offer the same
        platforms share one list)."""
        if self.tb.assign == "blocks":
            out: dict[str, list[str]] = {n: [] for n in self.states}
            for r in self.plan:
                host = self.assigned.get(r.run_id)
                if host in out:
                    out[host].append(r.run_id)
            return out
        shared: dict[tuple, list[str]] = {}
        for s in self.states.values():
            key = (s.host.platforms, s.host.remote)
            if key not in shared:
                shared[key] = self.candidates(s)
        return {n: shared[(s.host.platforms, s.host.remote)] for n, s in self.states.items()}

    def boots(self, state: HostState) -> Iterator[list[str]]:
        """The host's claimable candidates (:meth:`ClaimIndex.claimable
        <labkit.run.claim_index.ClaimIndex.claimable>`: not known stored) grouped by boot (:attr:`Run.boot_group
        <labkit.design.Run.boot_group>`: the runs of a boot of a configuration, in plan order), lazily, in
        the order of each boot's first candidate: what one claim takes together."""
        seen: set[str] = set()
        for rid in self.index.claimable(state.host.name, self.candidate_lists):
            group = self.runs_by_id[rid].boot_group
            if group == rid:  # a run of its own boot
                yield [rid]
            elif group not in seen:
                seen.add(group)
                yield [r for r in self.boot_runs[group] if self._offers(state, r)]

    def _offers(self, state: HostState, run_id: str) -> bool:
        """Whether ``run_id`` is among ``state``'s :meth:`candidates`."""
        if self.tb.assign == "blocks":
            return self.assigned.get(run_id) == state.host.name
        return self.tb.offers(state.host, self.platform_of(self.runs_by_id[run_id]))

    def _claim(self, state) -> list[Run]:
        """The pending runs of the next boot this host may run, claimed together ([] for none)."""
        with self.db:
            if self.left is not None and self.left <= 0:
                return []
            rids = self.store.claim_group(
                self.boots(state), state.host.name, self.owner, self.lease_s, limit=self.left
            )
            if self.left is not None:
                self.left -= len(rids)
        return [self.runs_by_id[r] for r in rids]

    def _work(self, state: HostState) -> None:
        h = state.host
        while not self.stop.is_set() and not state.lost:
            runs = self._claim(state)
            if not runs:
                with self.lock:
                    busy = any(s.current is not None and not s.lost for s in self.states.values())
                if not busy:
                    return
                self.stop.wait(0.3)
                continue
            with self.lock:
                state.current, state.live, state.since = runs[0], [], time.monotonic()
                state.claimed = [r.run_id for r in runs]
            platform = self.tb.platform(self.platform_of(runs[0]))
            try:
                backend = self.pool.open(h, platform)
                boot = self.runner.measure_boot(
                    runs,
                    backend,
                    live=state.live,
                    versions_key=(h.name, platform.name),
                    deferred=contextlib.nullcontext(),
                )
            except LabkitError as exc:  # the backend could not be (re)opened
                failed = Measured("failed", f"{type(exc).__name__}: {exc}", [], {}, now_iso(), 0.0)
                boot = iter([(r, failed) for r in runs])
            if not self._record_boot(state, platform, runs, boot):
                return

    def _record_boot(self, state: HostState, platform, runs: list[Run], boot) -> bool:
        """Record each run of a boot as it ends (``boot`` yields them); False when the worker must
        stop (interrupted, or its host lost)."""
        h, drop = state.host, False
        with contextlib.closing(boot):
            for j, (run, result) in enumerate(boot):
                if self.stop.is_set() or state.lost:
                    return False  # interrupted (claims released by _cancel) or recorded as host-lost
                if result.status != "ok" and h.remote and not self._answers(h):
                    self.lose(state, f"host stopped answering during run {run.run_id}: {result.error}")
                    return False
                drop = drop or (result.status != "ok" and h.remote)
                self._record(state, run, platform, result)
                if j + 1 < len(runs):
                    with self.lock:
                        state.current, state.since = runs[j + 1], time.monotonic()
        if drop:
            self.pool.drop(h.name)  # a dropped connection reconnects on the next run
        return True

    def _record(self, state, run, platform, result, status: str | None = None) -> bool:
        st, error, measurements, metadata, started, duration, output, samples = result
        metadata = {
            **metadata,
            "host": state.host.name,
            "platform": platform.name,
            "backend": platform.backend,
            "platform_options": platform.options,
        }
        if run.run_id in self.moved:
            metadata["moved_from"] = self.moved[run.run_id]
        with self.db:
            if self.store.claim_owner(run.run_id) != self.owner:
                return False
            seq = None
            if not metadata.get("not_run"):
                seq = self.seq[state.host.name] = self.seq.get(state.host.name, 0) + 1
            metadata["run_seq"] = seq
            keep_output(self.store, run.run_id, status or st, output, self.run_output)
            self.queued[run.run_id] = state
            # stored with the next group commit (while its claim is this owner's), reported done then (_stored)
            self.writer.add(
                run,
                status=status or st,
                started=started,
                duration_s=duration,
                measurements=measurements,
                error=error,
                metadata=metadata,
                fingerprint_id=self.fp_ids.get((state.host.name, platform.name)),
                samples=samples,
            )
        with self.lock:
            state.current = None
            if run.run_id in state.claimed:
                state.claimed.remove(run.run_id)
        if (status or st) != "ok":
            log.warning(
                "run %s on %s %s: %s",
                run.run_id,
                state.host.name,
                status or st,
                (error or "").splitlines()[0][:200] if error else "",
            )
        return True

    def _stored(self, run_id: str) -> None:
        """The transaction holding ``run_id`` committed (:class:`~labkit.store.group.GroupCommit`):
        reported done to the claim index, its host's count and the progress bars."""
        self.index.stored(run_id)
        state = self.queued.pop(run_id, None)
        if state is None:
            return
        with self.lock:
            state.done += 1
        for bar in (state.bar, self.total):
            if bar is not None:
                bar.update(1)

    def _not_stored(self, run_id: str) -> None:
        """A queued run its group commit did not store (its claim gone, or refused): forgotten here;
        it runs again on resume or on the controller that holds its claim now."""
        self.queued.pop(run_id, None)

    # -- liveness (and host loss: labkit.run.host_loss) ---------------------
    def _heartbeat(self) -> None:
        while not self.stop.wait(self.lease_s / 3):
            with self.db, contextlib.suppress(LabkitError):
                self.store.renew_claims(self.owner, self.lease_s)

    # -- progress ------------------------------------------------------------
    def _bars(self, progress: bool, total: int, initial: int) -> None:
        if not progress:
            return
        from tqdm.auto import tqdm

        if len(self.states) == 1:  # one slot (a campaign on one backend): one bar
            self.total = tqdm(total=total, initial=initial, desc=self.campaign_id, unit="run")
            return
        self.total = tqdm(
            total=total, initial=initial, desc=f"{self.campaign_id} (all hosts)", unit="run", position=0
        )
        if (
            len(self.states) > self.max_host_bars
        ):  # a large fleet (a Slurm allocation): `labkit status` per host
            return
        for i, (name, s) in enumerate(self.states.items(), start=1):
            n = len(self.candidates(s)) if self.tb.assign == "blocks" else None
            s.bar = tqdm(total=n, desc=name + (" (lost)" if s.lost else ""), unit="run", position=i)

    def _close_bars(self) -> None:
        for bar in [self.total] + [s.bar for s in self.states.values()]:
            if bar is not None:
                bar.close()

    def close(self) -> None:
        self.pool.close()


def run_seq_start(store) -> dict[str, int]:
    """host -> the highest ``run_seq`` its runs and attempts in ``store`` hold (a store of before
    levels: how many runs it ran there), so a resumed campaign numbers on."""
    out: dict[str, int] = {}
    runs, attempts = store.runs(), store.attempts()
    for frame in (runs, attempts):
        for md in [] if frame.empty else frame.metadata:
            md = md or {}
            host = md.get("host")
            if not isinstance(host, str):
                continue
            seq = md.get("run_seq") if "run_seq" in md else out.get(host, 0) + 1
            if isinstance(seq, int) and not isinstance(seq, bool):
                out[host] = max(out.get(host, 0), seq)
    return out
