"""Group commit: runs that end close together written to the store in one transaction.

A run is *reported done* (to the progress bars, to the fleet's claim index, to whoever waits for it)
only once the transaction that wrote it committed: :class:`GroupCommit` calls ``on_done(run_id)``
for each run of a batch after its commit, never before. Its queue is written when it holds
:attr:`GroupCommit.max_runs` runs (by the thread that adds the last one), when its oldest run has
waited :attr:`GroupCommit.max_wait_s` (by a short-lived timer thread), and on :meth:`GroupCommit.flush`,
which the engine calls before it reads the store, on every exit (normal end, exception, Ctrl-C or
SIGTERM: :meth:`labkit.run.engine.Dispatcher.run`) and on :meth:`GroupCommit.close`.

What a crash loses: a process killed (even SIGKILL) loses at most the runs still queued, none of which
was reported done; their claims stay in the store and are released by the next start, which runs
them again (a run's output file, written before it was queued, is overwritten then). A run is never
stored twice: ``run_id`` is the key of ``runs``, and with ``owner`` a run is written only while the
writer's claim on it stands (:meth:`labkit.store.Store.record_prepared`, in the same transaction).

The telemetry of a batch (200 rows a run at 1 Hz for 10 s, what dominates the cost of recording a run)
is written with one statement for all the runs the batch stores (:meth:`labkit.store.Store.record_prepared`,
:func:`labkit.store.samples.insert_samples`), as tuples made when the run was queued; a row the table could
not hold (NaN) is refused then, by :meth:`add`, so that statement cannot fail for one run alone.

``max_runs=1`` is the old way, one transaction per run, each committed before :meth:`add` returns
(``benchmarks/bench_record.py`` compares the two).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import StoreError

if TYPE_CHECKING:
    from ..design import Run
    from .runs import PreparedRun, RecordedBatch
    from .store import Store

log = logging.getLogger(__name__)

#: runs written together at most, and how long the first of them waits for the others (seconds)
GROUP_RUNS, GROUP_WAIT_S = 64, 0.05


class GroupCommit:
    """A queue of finished runs in front of ``store``, written in groups (see the module docstring).

    ``max_runs`` (default :data:`GROUP_RUNS`) and ``max_wait_s`` (default :data:`GROUP_WAIT_S`) bound a
    batch; ``lock``: the lock every user of the store's connection holds (the fleet's, one connection shared
    by its threads; whoever else uses that connection while runs are queued holds it too: the timer
    writes on a thread of its own); ``owner``: write a run only while the store's claim on it is this owner's
    (:meth:`labkit.store.Store.claim_group`); ``on_done(run_id)``: called for each run after its commit
    (outside ``lock``); ``on_lost(run_id)``: called for each run of a written batch that was not stored
    (its claim gone, or its row refused), so that its caller forgets it. A run that could not be stored (stored already), or a batch whose transaction
    failed (a full disk), is a :class:`~labkit.errors.StoreError` raised by the :meth:`add` or
    :meth:`flush` that wrote it, or, for a batch the timer wrote, by the next :meth:`add`,
    :meth:`flush` or :meth:`close`; the runs it concerns are not reported done.
    """

    def __init__(
        self,
        store: Store,
        *,
        max_runs: int | None = None,
        max_wait_s: float | None = None,
        lock: Any = None,
        owner: str | None = None,
        on_done: Callable[[str], None] | None = None,
        on_lost: Callable[[str], None] | None = None,
    ):
        max_runs = GROUP_RUNS if max_runs is None else max_runs
        max_wait_s = GROUP_WAIT_S if max_wait_s is None else max_wait_s
        if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
            raise StoreError(f"group commit: max_runs must be a whole number of runs >= 1, got {max_runs!r}")
        if (
            isinstance(max_wait_s, bool)
            or not isinstance(max_wait_s, (int, float))
            or not 0 < max_wait_s <= 60
        ):
            raise StoreError(f"group commit: max_wait_s must be seconds in (0, 60], got {max_wait_s!r}")
        self.store = store
        self.max_runs, self.max_wait_s = max_runs, float(max_wait_s)
        self.lock = lock if lock is not None else threading.RLock()
        self.owner = owner
        self.on_done = on_done
        self.on_lost = on_lost
        self.committed = 0  # runs written so far (reported done)
        self.transactions = 0  # batches written so far
        self._queue: list[PreparedRun] = []
        self._qlock = threading.Lock()
        self._batch = 0  # which batch the timer of the queue's first run is for
        self._errors: list[StoreError] = []
        self._closed = False

    # -- what the engine calls --------------------------------------------------------
    def add(self, run: Run, **result: Any) -> None:
        """Queue ``run`` with what :meth:`Store.record_run <labkit.store.Store.record_run>` takes
        (``status``, ``started``, ``duration_s``, ``measurements``, ...), checked now (a StoreError
        for a row that is not valid, nothing queued); written with the next batch."""
        self._raise_kept()
        if self._closed:
            raise StoreError(f"{self.store.path}: group commit closed: run {run.run_id} was not stored")
        prepared = self.store.prepare_run(run, **result)
        with self._qlock:
            self._queue.append(prepared)
            full = len(self._queue) >= self.max_runs
            first = len(self._queue) == 1
            batch = self._batch
        if full:
            self.flush()
        elif first:
            timer = threading.Timer(self.max_wait_s, self._timed, args=(batch,))
            timer.daemon = True
            timer.name = "labkit-group-commit"
            timer.start()

    def flush(self) -> list[str]:
        """Write every queued run now (one transaction) and report each done; the run ids written.
        Raises the StoreError of a run (or batch) that could not be stored, after the others were."""
        done = self._write()
        self._raise_kept()
        return done

    def pending(self) -> int:
        """Runs queued and not written yet."""
        with self._qlock:
            return len(self._queue)

    def close(self) -> None:
        """Flush, then refuse further runs."""
        try:
            self.flush()
        finally:
            self._closed = True

    def __enter__(self) -> GroupCommit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------
    def _timed(self, batch: int) -> None:
        """The timer of batch ``batch``: writes it if it is still queued (not written by a full queue
        or a flush meanwhile); an error is kept for the next caller."""
        with self._qlock:
            if batch != self._batch or not self._queue:
                return
        try:
            self._write()
        except StoreError as exc:
            log.error("%s", exc)
            self._errors.append(exc)

    def _write(self) -> list[str]:
        with self.lock:  # the connection's lock first, then the queue's: batches are written in order
            with self._qlock:
                runs, self._queue = self._queue, []
                self._batch += 1
            if not runs:
                return []
            t0 = time.perf_counter()
            try:
                got: RecordedBatch = self.store.record_prepared(runs, owner=self.owner)
            except StoreError as exc:
                raise StoreError(f"{exc} ({len(runs)} run(s) not stored: they run again on resume)") from exc
            self.transactions += 1
            self.committed += len(got.stored)
        log.debug("group commit: %d run(s) in %.1f ms", len(got.stored), 1e3 * (time.perf_counter() - t0))
        for rid in got.skipped:
            log.warning(
                "run %s: not stored: its claim is no longer this controller's (released or taken over)", rid
            )
        self._errors.extend(got.failed.values())
        if self.on_lost is not None:
            for rid in [*got.skipped, *got.failed]:
                self.on_lost(rid)
        if self.on_done is not None:
            for rid in got.stored:
                self.on_done(rid)
        return got.stored

    def _raise_kept(self) -> None:
        if self._errors:
            first, self._errors = self._errors[0], []
            raise first
