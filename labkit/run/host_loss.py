"""Host loss in the run engine (:mod:`labkit.run.engine`): the monitor that probes a remote host whose
run has been in flight too long, a host marked lost (its in-flight run stored as ``host-lost``), and
its pending runs moved to live hosts or, with ``on_host_loss: fail-block``, its blocks run again whole.

:class:`HostLoss` is a part of :class:`~labkit.run.engine.Dispatcher` (its base class): the
attributes it declares are the dispatcher's.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends import teardown
from ..core.waiting import wait_until
from ..store import now_iso
from .boot import Measured
from .host_state import HostState, block_of

if TYPE_CHECKING:
    from ..design import Run
    from ..store import Store
    from ..store.group import GroupCommit
    from .claim_index import ClaimIndex
    from .platforms import BackendPool
    from .testbed import Testbed

log = logging.getLogger("labkit.run.engine")


class HostLoss:
    """The host-loss part of :class:`~labkit.run.engine.Dispatcher`: :meth:`lose` and what it calls,
    the monitor thread's probes (:attr:`Dispatcher.probe_after_s <labkit.run.engine.Dispatcher.probe_after_s>`,
    ``probe_interval_s``, ``lost_after``) and the check that a host still answers."""

    # the dispatcher's, set in its __init__, prepare() and run()
    tb: Testbed
    store: Store
    pool: BackendPool
    writer: GroupCommit
    index: ClaimIndex
    states: dict[str, HostState]
    plan: list[Run]
    assigned: dict[str, str]
    moved: dict[str, str]
    owner: str
    lock: threading.Lock
    db: contextlib.AbstractContextManager[Any]
    stop: threading.Event
    probe_interval_s: float
    probe_after_s: float
    lost_after: int
    platform_of: Callable[[Run], str]
    _record: Callable[..., bool]

    def _answers(self, h) -> bool:
        """Whether ``h`` answers (its sshd's banner, or its testbed's own probe: a Slurm node's state and
        a step on it), asked twice a second apart."""
        return bool(
            wait_until(
                lambda: self.tb.reachable(h, min(3.0, self.tb.connect_timeout), thorough=True)[0],
                timeout=1.0,
                interval=1.0,
                error=None,
                what=f"host {h.name} to answer",
            )
        )

    def _monitor(self) -> None:
        while not self.stop.wait(self.probe_interval_s):
            for state in list(self.states.values()):
                if (
                    state.lost
                    or state.current is None
                    or not state.host.remote
                    or time.monotonic() - state.since < self.probe_after_s
                ):
                    state.failures = 0
                    continue
                ok, why = self.tb.reachable(state.host, min(3.0, self.tb.connect_timeout))
                state.failures = 0 if ok else state.failures + 1
                if state.failures >= self.lost_after:
                    self.lose(state, f"{self.lost_after} probes failed ({why})")

    def lose(self, state: HostState, reason: str) -> None:
        """Mark ``state``'s host lost: store its in-flight run as host-lost and move its pending runs."""
        with self.lock:
            if state.lost:
                return
            state.lost, state.reason = True, reason
            run, live = state.current, list(state.live)
            rest = [r for r in state.claimed if run is None or r != run.run_id]
        h = state.host
        log.error("host %s lost: %s", h.name, reason)

        # its connections may hang on a dead link: close them and its instances off this thread
        def close_off() -> None:
            teardown(live)
            self.pool.drop(h.name)

        threading.Thread(target=close_off, daemon=True).start()
        if run is not None:
            platform = self.tb.platform(self.platform_of(run))
            self._record(
                state,
                run,
                platform,
                Measured("host-lost", f"host {h.name} lost: {reason}", [], {}, now_iso(), 0.0),
                status="host-lost",
            )
        self.writer.flush()  # what the host ran is read below (moves, fail-block): stored first
        with self.db:
            for rid in rest:  # the boot's runs it had not started: free for the host that takes them
                self.store.release_claims(run_id=rid, owner=self.owner)
            self._mark_lost(h.name, reason)
            if self.tb.on_host_loss == "fail-block":
                self._fail_blocks(h.name, run)
            self._move(h.name)
        if state.bar is not None:
            state.bar.set_description(f"{h.name} (lost)")

    def _mark_lost(self, name: str, reason: str) -> None:
        self.states[name].lost = True
        self.states[name].reason = reason
        hosts = self.store.meta().get("fleet_hosts") or {"lost": {}}
        hosts["lost"][name] = {"since": now_iso(), "reason": reason[:500]}
        self.store.set_meta(fleet_hosts=hosts)

    def _move(self, lost: str) -> None:
        """Give the lost host's pending runs (whole blocks together) to the least-loaded live hosts."""
        if self.tb.assign != "blocks":
            return  # random: any live host offering the platform takes them anyway
        done = self.store.completed()
        blocks: dict[int, list] = {}
        for r in self.plan:
            if self.assigned.get(r.run_id) == lost and r.run_id not in done:
                blocks.setdefault(block_of(r), []).append(r)
        moves = list(self.store.meta().get("fleet_moves") or [])
        for rep, runs in sorted(blocks.items()):
            plats = {self.platform_of(r) for r in runs}
            live = [
                s.host
                for s in self.states.values()
                if not s.lost and all(self.tb.offers(s.host, p) for p in plats)
            ]
            if not live:
                log.error(
                    "block %d of lost host %s: no live host offers %s; its %d run(s) wait for a resume",
                    rep,
                    lost,
                    sorted(plats),
                    len(runs),
                )
                continue
            load = {
                h.name: sum(
                    1 for r in self.plan if self.assigned.get(r.run_id) == h.name and r.run_id not in done
                )
                for h in live
            }
            to = min(live, key=lambda h: (load[h.name], h.name)).name
            for r in runs:
                self.assigned[r.run_id] = to
                self.moved[r.run_id] = lost
                moves.append({"run_id": r.run_id, "from": lost, "to": to, "at": now_iso()})
            log.warning("block %d: %d pending run(s) moved from lost host %s to %s", rep, len(runs), lost, to)
        self.store.set_meta(fleet_assignment=self.assigned, fleet_moves=moves)
        self.index.invalidate()

    def _fail_blocks(self, lost: str, inflight) -> None:
        """on_host_loss: fail-block: forget the runs the lost host stored in its blocks (kept in the
        meta as ``fleet_superseded``), so each block re-runs whole on one live host."""
        reps = {r.replicate for r in self.plan if self.assigned.get(r.run_id) == lost}
        if inflight is not None:
            reps.add(inflight.replicate)
        runs = self.store.runs()
        if runs.empty:
            return
        hosts = runs.metadata.map(lambda m: m.get("host"))
        gone = runs[(hosts == lost) & runs.replicate.isin(reps)]
        if gone.empty:
            return
        superseded = list(self.store.meta().get("fleet_superseded") or [])
        superseded += [
            {"run_id": r.run_id, "host": lost, "status": r.status, "started": r.started, "at": now_iso()}
            for r in gone.itertuples()
        ]
        self.store.delete_runs(gone.run_id)
        self.index.forget(gone.run_id)
        self.store.set_meta(fleet_superseded=superseded)
        log.warning(
            "on_host_loss fail-block: %d run(s) of block(s) %s on %s will run again whole",
            len(gone),
            sorted(reps),
            lost,
        )
