"""What a fleet worker may claim next, known without a store round trip.

The store decides every claim (:meth:`labkit.store.Store.claim_group`: a boot's runs together, one
transaction, a live lease wins); :class:`ClaimIndex` only spares it the candidates the engine already knows are stored. A
host with nothing left (waiting for the other hosts' last runs, or for a lost host's runs to move
to it) then polls without a transaction, and a claim reads the rows of a few candidates however
large the plan: with a thousand hosts the store is no longer the queue every worker waits in.

Its knowledge is the store's: :meth:`ClaimIndex.reset` takes the stored run ids when the engine
starts a pass, :meth:`~ClaimIndex.stored` adds each run the engine stores, and
:meth:`~ClaimIndex.forget` drops runs the engine deletes (a block re-run whole), so a run is never
hidden from a worker while the store does not hold it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator


class ClaimIndex:
    """Per host, its candidate run ids in plan order, skipping those known stored (thread-safe)."""

    def __init__(self):
        self.done: set[str] = set()
        self._lists: dict[str, list[str]] = {}
        self._start: dict[str, int] = {}
        self._lock = threading.Lock()

    def reset(self, stored: Iterable[str]) -> None:
        """A new pass: ``stored`` are the run ids the store holds; every host's list is rebuilt."""
        with self._lock:
            self.done = set(stored)
            self._lists.clear()
            self._start.clear()

    def invalidate(self) -> None:
        """The assignment changed (runs added, moved): every host's list is rebuilt on its next claim."""
        with self._lock:
            self._lists.clear()
            self._start.clear()

    def stored(self, run_id: str) -> None:
        with self._lock:
            self.done.add(run_id)

    def forget(self, run_ids: Iterable[str]) -> None:
        """Runs deleted from the store: claimable again."""
        with self._lock:
            self.done.difference_update(run_ids)
            self._start.clear()

    def claimable(self, host: str, build: Callable[[], dict[str, list[str]]]) -> Iterator[str]:
        """``host``'s candidates that are not known stored, in order; lazily, so the store reads only
        as many as it needs. ``build()`` gives every host's candidates (host -> run ids in plan order):
        called when the lists were cleared (a new pass, a changed assignment)."""
        with self._lock:
            if not self._lists:
                self._lists = dict(build())
            runs = self._lists.get(host, [])
            i = self._start.get(host, 0)
            while i < len(runs) and runs[i] in self.done:  # skipped for good (until forget)
                i += 1
            self._start[host] = i
            done = self.done
        return (r for r in runs[i:] if r not in done)
