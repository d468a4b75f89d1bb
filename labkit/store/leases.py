"""The fleet's leases on runs (:mod:`labkit.run.engine`): a worker claims the runs of a boot
for a host, under a lease it renews while it runs them; a run stored drops its claim; a lease
that lapses frees its runs for another worker. One transaction per claim: two workers never
claim the same run. Kept in the store's ``claims`` table."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence

from ..core.clock import now_iso
from .sqlite import StoreFile

#: candidates a claim looks up in one query (:meth:`Store.claim_group`), below SQLite's 999 variables
CLAIM_CHUNK = 256


class Leases(StoreFile):
    """The claims on runs in flight of :class:`labkit.store.Store`."""

    def claim(self, candidates: Iterable[str], host: str, owner: str, lease_s: float) -> str | None:
        """Claim the first of ``candidates`` (run_ids, in order) neither stored nor claimed under a
        live lease, for ``host`` on behalf of ``owner``, until now + ``lease_s``; returns its run_id
        or None. One transaction: two workers never claim the same run (:meth:`claim_group` of
        one-run groups)."""
        got = self.claim_group(([r] for r in candidates), host, owner, lease_s)
        return got[0] if got else None

    def claim_group(
        self,
        groups: Iterable[Sequence[str]],
        host: str,
        owner: str,
        lease_s: float,
        *,
        limit: int | None = None,
    ) -> list[str]:
        """Claim together the runs of the first of ``groups`` (lists of run_ids, in order: a boot's
        runs) that has runs neither stored nor claimed under a live lease: those runs (at most
        ``limit``), for ``host`` on behalf of ``owner``, until now + ``lease_s``. Returns their
        run_ids ([] when no group has any). One transaction: two workers never claim the same run.

        ``groups`` is read lazily, about :data:`CLAIM_CHUNK` run ids at a time, and a claim reads
        the rows of those runs only, not the whole store (a worker's next boot is nearly always
        among its first few candidates); no groups, no transaction."""
        now = time.time()
        todo = iter(groups)
        batch = _group_batch(todo)
        if not batch:
            return []  # nothing to claim: no transaction
        with self._tx():
            while batch:
                ids = list(dict.fromkeys(r for g in batch for r in g))
                taken: set[str] = set()
                for i in range(0, len(ids), CLAIM_CHUNK):
                    chunk = ids[i : i + CLAIM_CHUNK]
                    marks = ",".join("?" * len(chunk))
                    taken.update(
                        r
                        for (r,) in self._db.execute(
                            f"SELECT run_id FROM runs WHERE run_id IN ({marks})", chunk
                        )
                    )
                    taken.update(
                        r
                        for (r,) in self._db.execute(
                            f"SELECT run_id FROM claims WHERE lease_until >= ? AND run_id IN ({marks})",
                            (now, *chunk),
                        )
                    )
                for group in batch:
                    free = [r for r in group if r not in taken][:limit]
                    if free:
                        self._db.executemany(
                            "INSERT OR REPLACE INTO claims VALUES (?,?,?,?,?)",
                            [(r, host, owner, now + lease_s, now_iso()) for r in free],
                        )
                        return free
                batch = _group_batch(todo)
        return []

    def claim_owner(self, run_id: str) -> str | None:
        """The owner of the claim on ``run_id`` (live or not), or None when it is not claimed."""
        try:
            row = self._db.execute("SELECT owner FROM claims WHERE run_id = ?", (run_id,)).fetchone()
        except sqlite3.OperationalError:  # a store written before claims existed
            return None
        return None if row is None else row[0]

    def renew_claims(self, owner: str, lease_s: float) -> int:
        """Heartbeat: extend every claim of ``owner`` to now + ``lease_s``; returns how many."""
        with self._tx():
            cur = self._db.execute(
                "UPDATE claims SET lease_until = ? WHERE owner = ?", (time.time() + lease_s, owner)
            )
        return cur.rowcount

    def release_claims(
        self, *, run_id: str | None = None, owner: str | None = None, not_owner: str | None = None
    ) -> list[dict]:
        """Drop claims (of one run, of an owner, or of every owner but one); returns them."""
        where, args = [], []
        for clause, value in (("run_id = ?", run_id), ("owner = ?", owner), ("owner != ?", not_owner)):
            if value is not None:
                where.append(clause)
                args.append(value)
        sql = " WHERE " + " AND ".join(where) if where else ""
        with self._tx():
            gone = self._claim_rows(sql, args)
            self._db.execute("DELETE FROM claims" + sql, args)
        return gone

    def claims(self) -> list[dict]:
        """Runs in flight: run_id, host, owner, lease_until (epoch s), claimed (ISO time)."""
        return self._claim_rows("", [])

    def _claim_rows(self, sql: str, args) -> list[dict]:
        try:
            rows = self._db.execute(
                "SELECT run_id, host, owner, lease_until, claimed FROM claims" + sql, args
            )
        except sqlite3.OperationalError:  # a store written before claims existed
            return []
        return [dict(zip(("run_id", "host", "owner", "lease_until", "claimed"), r)) for r in rows]


def _group_batch(groups: Iterator[Sequence[str]]) -> list[Sequence[str]]:
    """The next groups of ``groups`` holding about :data:`CLAIM_CHUNK` run ids in all (at least one
    group while any is left; [] at the end)."""
    batch: list[Sequence[str]] = []
    n = 0
    for group in groups:
        batch.append(group)
        n += len(group)
        if n >= CLAIM_CHUNK:
            break
    return batch
