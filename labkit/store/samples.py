"""A store's telemetry samples (:mod:`labkit.run.telemetry`): written with their run, read
back whole (:meth:`Samples.samples`), a range of runs at a time as Arrow tables for the export
(:meth:`Samples.sample_tables`), or averaged in SQL over spans of run time for a display
(:meth:`Samples.sample_bins`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from ..errors import StoreError
from .schema import SAMPLE_COLUMNS
from .sqlite import StoreFile

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa  # type: ignore[import-untyped]

#: the Arrow types of :data:`SAMPLE_COLUMNS` (:meth:`Samples.sample_tables`)
SAMPLE_TYPES = {
    "run_id": "string",
    "t": "double",
    "metric": "string",
    "value": "double",
    "instance": "string",
}


def sample_schema() -> pa.Schema:
    """The Arrow schema of :meth:`Samples.sample_tables` (:data:`SAMPLE_COLUMNS`, :data:`SAMPLE_TYPES`)."""
    import pyarrow as pa

    return pa.schema([(c, pa.type_for_alias(SAMPLE_TYPES[c])) for c in SAMPLE_COLUMNS])


class Samples(StoreFile):
    """The telemetry of :class:`labkit.store.Store`."""

    def record_samples(self, run_id: str, rows: Iterable[tuple]) -> None:
        """Add telemetry rows ``(t, metric, value)`` (host) or ``(t, metric, value, instance)`` (one
        instance's, by its id) of run ``run_id`` (``t``: seconds since its telemetry started;
        :mod:`labkit.run.telemetry`) in one transaction; StoreError for a row that is not
        (number, non-empty text, number[, text or None]), or whose t or value is NaN."""
        with self._tx():
            self._insert_samples(run_id, rows)

    def _insert_samples(self, run_id: str, rows: Iterable[tuple]) -> None:
        insert_samples(self._db, checked_samples(run_id, rows))

    def samples(self, run_id: str | None = None) -> pd.DataFrame:
        """Telemetry samples, of one run or of all, in time order: columns run_id, t, metric, value
        and instance (the instance's id for its own counters, as in :meth:`tidy`; None for the
        host's). Empty for a store written before telemetry was kept (opened read-only); instance
        None throughout for one written before instances were sampled."""
        import pandas as pd

        if not self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'samples'"
        ).fetchone():
            return pd.DataFrame(columns=SAMPLE_COLUMNS)
        has_inst = "instance" in self._columns("samples")  # not in a store of before (read-only)
        where, args = ("WHERE run_id = ?", (run_id,)) if run_id is not None else ("", ())
        rows = self._db.execute(
            f"SELECT run_id, t, metric, value, {'instance' if has_inst else 'NULL'} FROM samples "
            f"{where} ORDER BY run_id, t, {'instance, ' if has_inst else ''}metric",
            args,
        ).fetchall()
        return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)

    def sample_ranges(self, rows: int) -> list[tuple[str, str | None]]:
        """Consecutive ranges ``[lo, hi)`` of run ids (``hi`` None: to the last) that together hold
        every telemetry row, in run id order, each of at most ``rows`` rows (a run with more is a
        range alone). Read from the index on ``run_id`` (a jump of ``rows`` entries per range);
        empty when there are no samples."""
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise StoreError(f"sample_ranges: rows must be a whole number >= 1, got {rows!r}")
        if not self._read("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'samples'").fetchone():
            return []
        lo = self._read("SELECT min(run_id) FROM samples").fetchone()[0]
        out: list[tuple[str, str | None]] = []
        while lo is not None:
            got = self._read(
                "SELECT run_id FROM samples WHERE run_id >= ? ORDER BY run_id LIMIT 1 OFFSET ?", (lo, rows)
            ).fetchone()
            hi = got[0] if got else None
            if hi == lo:  # one run of more than ``rows`` rows: a range of its own
                hi = self._read("SELECT min(run_id) FROM samples WHERE run_id > ?", (lo,)).fetchone()[0]
            out.append((lo, hi))
            lo = hi
        return out

    def range_tables(self, lo: str, hi: str | None, rows: int) -> Iterator[pa.Table]:
        """The telemetry rows of the runs with ids in ``[lo, hi)`` (:meth:`sample_ranges`), in
        :meth:`samples`' order, as Arrow tables of at most ``rows`` rows (none when there are no
        rows). A value that is not what labkit writes (a text where a number belongs) is a
        StoreError naming the run."""
        import pyarrow as pa

        kind = pa.struct(sample_schema())
        inst = "instance" in self._columns("samples")  # not in a store of before (read-only)
        where, args = ("run_id >= ? AND run_id < ?", (lo, hi)) if hi is not None else ("run_id >= ?", (lo,))
        cur = self._read(
            f"SELECT run_id, t, metric, value, {'instance' if inst else 'NULL'} FROM samples "
            f"WHERE {where} ORDER BY run_id, t, {'instance, ' if inst else ''}metric",
            args,
        )
        for got in self._chunks(cur, rows):
            if not got:
                return
            try:
                yield pa.Table.from_struct_array(pa.array(got, type=kind))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                bad = next(
                    (
                        r
                        for r in got
                        if not (
                            isinstance(r[1], float)
                            and isinstance(r[3], float)
                            and all(x is None or isinstance(x, str) for x in r[::2])
                        )
                    ),
                    got[0],
                )
                raise StoreError(
                    f"{self.path}: telemetry of run {str(bad[0])[:80]}: a row that is not "
                    f"(run_id, t, metric, value, instance) of text and numbers ({exc}); "
                    f"`labkit check {self.campaign}` lists what is damaged"
                ) from None

    def sample_tables(
        self, rows: int = 50_000, *, workers: int = 1, share: float = 0.5
    ) -> Iterator[pa.Table]:
        """:meth:`samples`' rows, in its order, as Arrow tables of at most ``rows`` rows (columns
        :data:`SAMPLE_COLUMNS`, types :data:`SAMPLE_TYPES`); at least one, empty when there are
        no samples. Read a range of runs at a time (:meth:`sample_ranges`, :meth:`range_tables`)
        with ``fetchmany`` and converted in Arrow (never through pandas), so memory stays bounded
        by the chunk whatever the number of samples. ``workers=2`` reads ``share`` of the ranges in
        a second process (:func:`labkit.store.sample_worker.parallel_tables`: the reading is
        Python's, one core each) when there are at least 4 ranges."""
        import pyarrow as pa

        if isinstance(workers, bool) or workers not in (1, 2):
            raise StoreError(f"sample_tables: workers must be 1 or 2, got {workers!r}")
        ranges = self.sample_ranges(rows)
        if not ranges:
            yield pa.Table.from_struct_array(pa.array([], type=pa.struct(sample_schema())))
            return
        if workers == 2 and len(ranges) >= 4:
            from .sample_worker import parallel_tables

            yield from parallel_tables(self, ranges, rows, share)
            return
        for lo, hi in ranges:
            yield from self.range_tables(lo, hi, rows)

    def sample_bins(
        self,
        run_ids: Sequence[str],
        *,
        bins: int,
        metrics: Sequence[str] | None = None,
        min_width_s: float = 1.0,
    ) -> pd.DataFrame:
        """The host telemetry (rows without an instance) of ``run_ids``, averaged in SQL over spans of
        run time: at most ``bins`` spans of equal width (never narrower than ``min_width_s``), so a
        campaign of any size and runs of any length give at most ``len(run_ids) x metrics x bins``
        rows. Columns run_id, metric, bin (0-based), t (the span's start, seconds), value (the mean),
        n (samples averaged); ``attrs["width_s"]`` the span's width, ``attrs["samples"]`` how many
        samples they summarise. Only ``metrics`` when given."""
        import pandas as pd

        cols = ["run_id", "metric", "bin", "t", "value", "n"]
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise StoreError(f"sample_bins: bins must be a whole number >= 1, got {bins!r}")
        ids = list(dict.fromkeys(str(r) for r in run_ids))
        if not ids or "samples" not in {
            n for (n,) in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }:
            return pd.DataFrame(columns=cols)
        inst = "instance IS NULL" if "instance" in self._columns("samples") else "1"
        want = list(dict.fromkeys(metrics)) if metrics is not None else None
        where = f"run_id IN ({','.join('?' * len(ids))}) AND {inst}"
        args: list = list(ids)
        if want is not None:
            where += f" AND metric IN ({','.join('?' * len(want))})"
            args += want
        if len(args) > 900:  # below SQLite's 999 variables: the caller asks for a bounded few runs
            raise StoreError(
                f"sample_bins: {len(ids)} runs and {len(want or [])} metrics asked at once; "
                "ask for fewer (the display needs a bounded sample of runs)"
            )
        lo, hi, total = self._read(
            f"SELECT min(t), max(t), count(*) FROM samples WHERE {where}", args
        ).fetchone()
        if not total:
            return pd.DataFrame(columns=cols)
        width = max(float(min_width_s), (float(hi) - float(lo)) / bins if hi > lo else 0.0, 1e-9)
        rows = self._read(
            f"SELECT run_id, metric, min(CAST((t - ?) / ? AS INTEGER), ?) AS b, avg(value), count(*) FROM samples "
            f"WHERE {where} GROUP BY run_id, metric, b ORDER BY metric, b, run_id",
            [lo, width, bins - 1, *args],
        ).fetchall()
        out = pd.DataFrame([(r, m, b, lo + b * width, v, n) for r, m, b, v, n in rows], columns=cols)
        out.attrs.update(width_s=width, samples=int(total))
        return out

    def sample_count(self, run_id: str) -> int:
        """How many telemetry samples run ``run_id`` has (0 for a store written before telemetry)."""
        try:
            return int(self._read("SELECT count(*) FROM samples WHERE run_id = ?", (run_id,)).fetchone()[0])
        except sqlite3.OperationalError:  # no samples table (a store of before, read-only)
            return 0


#: the one statement that writes telemetry rows as :func:`checked_samples` makes them
INSERT_SAMPLES = "INSERT INTO samples (run_id, t, metric, value, instance) VALUES (?,?,?,?,?)"


def insert_samples(db: sqlite3.Connection, rows: Iterable[tuple]) -> None:
    """Write telemetry rows made by :func:`checked_samples` (of one run or of many: a group commit
    writes all the runs of its batch with one call) in the caller's transaction. Such rows cannot be
    refused by the table (no key, and no NULL where it takes none), so a batch fails only as a whole
    (a full disk): it never leaves one run of the batch half written. Should the table refuse a row
    all the same, a StoreError: the caller's transaction rolls back, none of its runs written."""
    try:
        db.executemany(INSERT_SAMPLES, rows)
    except sqlite3.IntegrityError as exc:
        raise StoreError(
            f"telemetry rows refused by the store ({exc}); nothing of this transaction was written"
        ) from exc


def checked_samples(run_id: str, rows: Iterable[tuple]) -> list[tuple]:
    """Telemetry rows as stored (``(run_id, t, metric, value, instance)``: tuples, ready for
    :func:`insert_samples`); StoreError naming the first that is not (number, non-empty text,
    number[, text or None]) or whose time or value is NaN (the table keeps no NULL there)."""
    checked = []
    for i, row in enumerate(rows):
        if type(row) is tuple and len(row) == 3:  # the common case (a host's row), checked quickly
            t, metric, value = row
            if (
                type(metric) is str
                and metric
                and type(t) is float
                and type(value) is float
                and t == t
                and value == value
            ):
                checked.append((run_id, t, metric, value, None))
                continue
        try:
            t, metric, value, *rest = row
            instance = rest[0] if rest else None
            t, value = float(t), float(value)
            ok = (
                isinstance(metric, str)
                and metric != ""
                and len(rest) <= 1
                and t == t
                and value == value
                and (instance is None or isinstance(instance, str) and instance != "")
            )
            checked.append((run_id, t, metric, value, instance))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise StoreError(
                f"run {run_id}: sample row {i} must be (t seconds, metric name, value[, instance "
                f"id]) with t and value numbers (not NaN), got {row!r}"
            )
    return checked
