"""A store's runs: recording one (:meth:`RunRecords.record_run`) or a batch prepared
beforehand (:meth:`RunRecords.prepare_run`, :meth:`RunRecords.record_prepared`, written together
by :class:`labkit.store.group.GroupCommit`), forgetting runs to run them again (their earlier
attempts kept), and reading the runs back with their levels (:mod:`labkit.store.levels`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple

from ..core.redact import redact
from ..errors import StoreError, shorten
from .bulk import gc_paused
from .campaign_meta import CampaignMeta
from .levels import run_levels
from .rows import Malformed, json_object, parse_run
from .samples import checked_samples, insert_samples
from .schema import RUN_COLUMNS, STATUSES

if TYPE_CHECKING:
    import pandas as pd

    from ..design import Run
    from ..workloads.base import Measurement


class RunRecords(CampaignMeta):
    """The runs of :class:`labkit.store.Store`: written one transaction per run (or per batch),
    read back one row per run."""

    def _run_rows(self) -> list[dict]:
        """Every ``runs`` row that reads (:func:`parse_run`), in run order; the others reported."""
        out = []
        for row in self._db.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY run_order"):
            try:
                out.append(parse_run(row))
            except Malformed as exc:
                self._malformed(f"run {str(row[0])[:80]}", exc)
        return out

    def completed(self) -> set[str]:
        """run_ids already stored (whatever their status)."""
        return {r for (r,) in self._db.execute("SELECT run_id FROM runs")}

    def record_run(
        self,
        run: Run,
        *,
        status: str,
        started: str,
        duration_s: float,
        measurements: Iterable[Measurement] = (),
        error: str | None = None,
        metadata: dict | None = None,
        fingerprint_id: str | None = None,
        samples: Iterable[tuple] = (),
    ) -> None:
        """Store one run, its measurements and its telemetry ``samples`` (``(t, metric, value)``
        or ``(t, metric, value, instance)`` rows: :meth:`record_samples`) atomically. Storing a
        run_id twice is an error. A measurement's ``iteration`` (1-based, or None when it is not one
        of repeated iterations inside the run) is part of its key.

        ``error`` is kept up to :data:`~labkit.errors.TEXT_CAP` characters (its head and
        tail around a marker saying how many were omitted): a failed run's output can be huge.
        One transaction per run; :class:`labkit.store.group.GroupCommit` writes runs that end close
        together in one (:meth:`prepare_run`, :meth:`record_prepared`)."""
        rec = self.prepare_run(
            run,
            status=status,
            started=started,
            duration_s=duration_s,
            measurements=measurements,
            error=error,
            metadata=metadata,
            fingerprint_id=fingerprint_id,
            samples=samples,
        )
        try:
            with self._tx():
                self._insert_run(rec)
                insert_samples(self._db, rec.samples)
        except sqlite3.IntegrityError as exc:
            raise StoreError(
                f"{self.path}: run {run.run_id} could not be stored ({exc}); a run is stored once"
            ) from exc

    def prepare_run(
        self,
        run: Run,
        *,
        status: str,
        started: str,
        duration_s: float,
        measurements: Iterable[Measurement] = (),
        error: str | None = None,
        metadata: dict | None = None,
        fingerprint_id: str | None = None,
        samples: Iterable[tuple] = (),
    ) -> PreparedRun:
        """The rows :meth:`record_run` would write for this run, checked (StoreError for a status,
        a measurement's iteration or a telemetry row that is not valid) and not written:
        :meth:`record_prepared` writes them."""
        if status not in STATUSES:
            raise StoreError(f"run status must be one of {', '.join(STATUSES)}, got {status!r}")
        error = None if error is None else shorten(error)
        row = (
            run.run_id,
            run.order,
            run.config,
            run.replicate,
            json.dumps(run.levels, default=str),
            status,
            error,
            started,
            duration_s,
            json.dumps(redact(metadata or {}), default=str),
            fingerprint_id,
        )
        values = [
            (run.run_id, m.instance, m.metric, float(m.value), m.unit, _iteration(run.run_id, m))
            for m in measurements
        ]
        return PreparedRun(run.run_id, row, values, checked_samples(run.run_id, samples))

    def record_prepared(self, runs: Sequence[PreparedRun], *, owner: str | None = None) -> RecordedBatch:
        """Write ``runs`` (:meth:`prepare_run`) in one transaction, each as :meth:`record_run` would
        (its claim dropped with it). With ``owner``, a run whose claim is not ``owner``'s (released,
        or taken over by another controller) is not written: it is in ``skipped``. A run that cannot
        be stored (stored already) is rolled back alone (a savepoint) and named in ``failed`` with
        its StoreError; every other run commits. A StoreError for the transaction as a whole (a
        full disk, a locked store) means none was written. The telemetry of the runs written goes in
        with one statement for the batch (:func:`~labkit.store.samples.insert_samples`), last."""
        stored: list[str] = []
        skipped: list[str] = []
        failed: dict[str, StoreError] = {}
        telemetry: list[list[tuple]] = []  # of the runs written
        if not runs:
            return RecordedBatch(stored, skipped, failed)
        with self._tx():
            for rec in runs:
                if owner is not None:
                    row = self._db.execute(
                        "SELECT owner FROM claims WHERE run_id = ?", (rec.run_id,)
                    ).fetchone()
                    if row is None or row[0] != owner:
                        skipped.append(rec.run_id)
                        continue
                self._db.execute("SAVEPOINT labkit_run")
                try:
                    self._insert_run(rec)
                except sqlite3.IntegrityError as exc:
                    self._db.execute("ROLLBACK TO labkit_run")
                    failed[rec.run_id] = StoreError(
                        f"{self.path}: run {rec.run_id} could not be stored ({exc}); a run is stored once"
                    )
                else:
                    stored.append(rec.run_id)
                    telemetry.append(rec.samples)
                self._db.execute("RELEASE labkit_run")  # (another error: the whole transaction rolls back)
            insert_samples(self._db, chain.from_iterable(telemetry))
        return RecordedBatch(stored, skipped, failed)

    def _insert_run(self, rec: PreparedRun) -> None:
        self._db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?)", rec.row)
        self._db.executemany(
            "INSERT INTO measurements (run_id, instance, metric, value, unit, iteration) "
            "VALUES (?,?,?,?,?,?)",
            rec.measurements,
        )
        self._db.execute("DELETE FROM claims WHERE run_id = ?", (rec.run_id,))

    def config_runs(self, config: int) -> list[str]:
        """The run ids stored for configuration ``config``, in run order."""
        return [
            r for (r,) in self._read("SELECT run_id FROM runs WHERE config = ? ORDER BY run_order", (config,))
        ]

    def run_config(self, run_id: str) -> int | None:
        """The configuration of the stored run ``run_id`` (None when it is not stored)."""
        row = self._read("SELECT config FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else int(row[0])

    def delete_runs(self, run_ids: Iterable[str]) -> int:
        """Forget runs (e.g. failed ones, to run them again). Returns how many were removed.

        Each forgotten run stays in :meth:`attempts` (status, error, start, duration, metadata):
        running a run again never erases what happened the first time (its telemetry samples go;
        their summary stays in the attempt's metadata)."""
        ids = list(run_ids)
        with self._tx():
            self._db.executemany(
                "INSERT INTO attempts SELECT run_id, status, error, started, duration_s, metadata, "
                "fingerprint_id FROM runs WHERE run_id = ?",
                [(i,) for i in ids],
            )
            self._db.executemany("DELETE FROM measurements WHERE run_id = ?", [(i,) for i in ids])
            self._db.executemany("DELETE FROM samples WHERE run_id = ?", [(i,) for i in ids])
            cur = self._db.executemany("DELETE FROM runs WHERE run_id = ?", [(i,) for i in ids])
        return cur.rowcount if cur.rowcount >= 0 else len(ids)

    def runs(self) -> pd.DataFrame:
        """One row per run: run_id, run_order, config, replicate, factor columns, status, error,
        started, duration_s, metadata (dict), fingerprint_id, and the run's levels and flag
        (:mod:`labkit.store.levels`): host, run_seq (order on its host, 1-based), suspect (bool) and
        suspect_reason (why the quiet-host guard doubts it, :mod:`labkit.run.guard`; None if not)."""
        with gc_paused():  # no reference cycle among the rows: the collector only slows them
            return self._runs_frame()

    def _runs_frame(self) -> pd.DataFrame:
        """:meth:`runs`'s frame."""
        import pandas as pd

        rows = []
        for r in self._run_rows():
            rows.append(
                {
                    "run_id": r["run_id"],
                    "run_order": r["run_order"],
                    "config": r["config"],
                    "replicate": r["replicate"],
                    **r["levels"],
                    "status": r["status"],
                    "error": r["error"],
                    "started": r["started"],
                    "duration_s": r["duration_s"],
                    "metadata": r["metadata"],
                    "fingerprint_id": r["fingerprint_id"],
                }
            )
        if not rows:
            return pd.DataFrame(rows)
        lv = run_levels((r["run_id"], r["run_order"], r["started"], r["metadata"]) for r in rows)
        for r in rows:
            x = lv[r["run_id"]]
            r.update(
                host=x.host,
                run_seq=x.run_seq,
                suspect=x.suspect_reason is not None,
                suspect_reason=x.suspect_reason,
            )
        out = pd.DataFrame(rows)
        out["run_seq"] = out["run_seq"].astype("Int64")
        # pandas turns None into NaN in a column that also holds strings: keep the documented None
        out["suspect_reason"] = (
            out["suspect_reason"].astype(object).where(out["suspect_reason"].notna(), None)
        )
        return out

    def attempts(self) -> pd.DataFrame:
        """The earlier attempts of runs that were run again (:meth:`delete_runs`), oldest first:
        run_id, status, error, started, duration_s, metadata (dict), fingerprint_id. Empty for a
        store written before attempts were kept."""
        import pandas as pd

        cols = ["run_id", "status", "error", "started", "duration_s", "metadata", "fingerprint_id"]
        if not self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'attempts'"
        ).fetchone():
            return pd.DataFrame(columns=cols)
        rows = []
        for rid, st, err, start, dur, md, fp in self._db.execute(
            f"SELECT {', '.join(cols)} FROM attempts ORDER BY rowid"
        ):
            try:
                rows.append((rid, st, err, start, dur, json_object(md, "metadata"), fp))
            except Malformed as exc:
                self._malformed(f"earlier attempt of run {str(rid)[:80]}", exc)
        return pd.DataFrame(rows, columns=cols)

    def run_counts(self) -> dict:
        """What ``labkit list`` and ``show`` print, by SQL aggregates (no run's JSON is parsed; a run
        whose metadata is not JSON at all is named, as reading it would: :attr:`problems`):
        ``runs`` (stored), ``by_status`` (status -> count), ``first_run`` and ``last_run`` (the
        smallest and largest ``started``; None without runs)."""
        by = {
            str(s): int(n)
            for s, n in self._read("SELECT status, count(*) FROM runs GROUP BY status ORDER BY status")
        }
        first, last = self._read("SELECT min(started), max(started) FROM runs").fetchone()
        self._name_unreadable_metadata()
        return {"runs": sum(by.values()), "by_status": by, "first_run": first, "last_run": last}

    def _name_unreadable_metadata(self, limit: int = 20) -> None:
        """Name (:meth:`_malformed`) the first ``limit`` runs whose metadata is not JSON at all, by
        one SQL scan: what reads no run's JSON in Python (``list``, ``show``, the streaming export)
        still says which runs every other reader leaves out. Only the rows SQLite cannot read are
        parsed, as :func:`~labkit.store.rows.parse_run` would: a NaN Python wrote reads there and is
        not named, and a run is named in the very words every other reader uses (said once)."""
        named = 0
        for rid, text in self._read("SELECT run_id, metadata FROM runs WHERE NOT json_valid(metadata)"):
            try:
                json_object(text, "metadata")
            except Malformed as exc:
                self._malformed(f"run {str(rid)[:80]}", exc)
                named += 1
                if named >= limit:
                    return

    def measurement_metadata(self) -> pd.DataFrame:
        """One row per run, column ``metadata`` holding only what
        :func:`labkit.run.telemetry.measurement_notes` reads (``telemetry.host``, whether any
        ``limits_enforced`` is false and whether the guard was blind to it), read by SQL aggregates: ``labkit show`` parses no run's JSON.
        A run whose metadata SQLite cannot read counts as measured."""
        import pandas as pd

        rows: list[dict] = []
        for host, unconfined, blind, n in self._read(
            "SELECT json_extract(metadata, '$.telemetry.host'), "
            "EXISTS (SELECT 1 FROM json_tree(metadata) WHERE key = 'limits_enforced' AND type = 'false'), "
            "json_type(metadata, '$.quiet_check.measured') = 'false' "
            "AND json_type(metadata, '$.telemetry.cpu_other_mean_pct') IS NULL, "
            "count(*) FROM runs WHERE json_valid(metadata) GROUP BY 1, 2, 3"
        ):
            md: dict = {"telemetry": {"host": host}}
            if unconfined:
                md["limits_enforced"] = False
            if blind:  # the guard judged it neither before nor during (labkit.run.telemetry)
                md["quiet_check"] = {"measured": False}
            rows += [md] * int(n)
        n_other = self._read("SELECT count(*) FROM runs WHERE NOT json_valid(metadata)").fetchone()[0]
        rows += [{}] * int(n_other)
        return pd.DataFrame({"metadata": rows})


class PreparedRun(NamedTuple):
    """A run's rows, checked and ready to write (:meth:`Store.prepare_run`)."""

    run_id: str
    row: tuple
    measurements: list[tuple]
    samples: list[tuple]


class RecordedBatch(NamedTuple):
    """What :meth:`Store.record_prepared` did with each run of a batch."""

    stored: list[str]
    skipped: list[str]  # not written: its claim is not the writer's
    failed: dict[str, StoreError]  # not written: could not be stored (stored already)


def _iteration(run_id: str, m: Measurement) -> int:
    """The stored iteration of measurement ``m``: its 1-based ``iteration``, or 0 for none."""
    it = getattr(m, "iteration", None)
    if it is None:
        return 0
    if isinstance(it, bool) or not isinstance(it, int) or it < 1:
        raise StoreError(
            f"run {run_id}: measurement {m.metric!r}: iteration must be a whole number >= 1 "
            f"or None, got {it!r}"
        )
    return it
