"""The result store: one SQLite file per campaign, one transaction per run.

``data/<campaign>/store.sqlite`` holds the campaign's design and settings, the
host fingerprints, one row per run (status ok / failed / timeout, error text,
start time, duration, metadata) and one row per measurement. A run and its
measurements are committed together, so a campaign killed at any moment
(even SIGKILL) loses only the run in progress, and a run is never stored twice
(``run_id`` is the primary key).

``Store.tidy()`` joins everything into one row per measurement (DESIGN.md,
"Store"); ``export()`` writes it as CSV and Parquet for Binder and other tools.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path

from .errors import StoreError

STATUSES = ("ok", "failed", "timeout")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fingerprints (id TEXT PRIMARY KEY, data TEXT NOT NULL, captured TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, run_order INTEGER NOT NULL, config INTEGER NOT NULL,
    replicate INTEGER NOT NULL, levels TEXT NOT NULL, status TEXT NOT NULL, error TEXT,
    started TEXT NOT NULL, duration_s REAL NOT NULL, metadata TEXT NOT NULL, fingerprint_id TEXT);
CREATE TABLE IF NOT EXISTS measurements (
    run_id TEXT NOT NULL REFERENCES runs(run_id), instance INTEGER NOT NULL, metric TEXT NOT NULL,
    value REAL, unit TEXT, PRIMARY KEY (run_id, instance, metric));
"""

TIDY_COLUMNS = ["campaign", "run_id", "run_order", "replicate", "config", "instance", "metric",
                "value", "unit", "status", "error", "started", "duration_s", "fingerprint_id"]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Store:
    """A campaign's results. Open with ``Store(path)`` or ``Store.for_campaign(data_dir, id)``."""

    def __init__(self, path: str | Path, *, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        if readonly:
            if not self.path.exists():
                raise StoreError(f"no result store at {self.path}")
            uri = f"file:{self.path}?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False,
                                       isolation_level=None)
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(SCHEMA)
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: not a labkit store or corrupt: {exc}") from exc

    @classmethod
    def for_campaign(cls, data_dir: str | Path, campaign_id: str, **kw) -> "Store":
        return cls(Path(data_dir) / campaign_id / "store.sqlite", **kw)

    def close(self) -> None:
        if not self.readonly:
            try:
                # back to a single self-contained file, so data/ can be committed and read anywhere
                self._db.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.DatabaseError:
                pass
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- campaign metadata ---------------------------------------------------
    def meta(self) -> dict:
        return {k: json.loads(v) for k, v in self._db.execute("SELECT key, value FROM meta")}

    def set_meta(self, **items) -> None:
        with self._tx():
            for k, v in items.items():
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (k, json.dumps(v, default=str)))

    def add_fingerprint(self, fp_id: str, data: dict) -> None:
        with self._tx():
            self._db.execute("INSERT OR IGNORE INTO fingerprints VALUES (?, ?, ?)",
                             (fp_id, json.dumps(data, default=str), now_iso()))

    def fingerprints(self) -> dict[str, dict]:
        return {i: json.loads(d) for i, d in self._db.execute("SELECT id, data FROM fingerprints")}

    # -- runs ----------------------------------------------------------------
    def completed(self) -> set[str]:
        """run_ids already stored (whatever their status)."""
        return {r for (r,) in self._db.execute("SELECT run_id FROM runs")}

    def record_run(self, run, *, status: str, started: str, duration_s: float, measurements=(),
                   error: str | None = None, metadata: dict | None = None,
                   fingerprint_id: str | None = None) -> None:
        """Store one run and its measurements atomically. Storing a run_id twice is an error."""
        if status not in STATUSES:
            raise StoreError(f"run status must be one of {', '.join(STATUSES)}, got {status!r}")
        try:
            with self._tx():
                self._db.execute(
                    "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (run.run_id, run.order, run.config, run.replicate,
                     json.dumps(run.levels, default=str), status, error, started, duration_s,
                     json.dumps(metadata or {}, default=str), fingerprint_id))
                self._db.executemany(
                    "INSERT INTO measurements VALUES (?,?,?,?,?)",
                    [(run.run_id, m.instance, m.metric, float(m.value), m.unit) for m in measurements])
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"{self.path}: run {run.run_id} could not be stored ({exc}); "
                             "a run is stored once") from exc

    def delete_runs(self, run_ids) -> int:
        """Forget runs (e.g. failed ones, to run them again). Returns how many were removed."""
        ids = list(run_ids)
        with self._tx():
            self._db.executemany("DELETE FROM measurements WHERE run_id = ?", [(i,) for i in ids])
            cur = self._db.executemany("DELETE FROM runs WHERE run_id = ?", [(i,) for i in ids])
        return cur.rowcount if cur.rowcount >= 0 else len(ids)

    def runs(self):
        """One row per run: run_id, run_order, config, replicate, factor columns, status, error,
        started, duration_s, metadata (dict), fingerprint_id."""
        import pandas as pd
        rows = []
        for (rid, order, cfg, rep, levels, status, error, started, dur, md, fp) in self._db.execute(
                "SELECT * FROM runs ORDER BY run_order"):
            rows.append({"run_id": rid, "run_order": order, "config": cfg, "replicate": rep,
                         **json.loads(levels), "status": status, "error": error, "started": started,
                         "duration_s": dur, "metadata": json.loads(md), "fingerprint_id": fp})
        return pd.DataFrame(rows)

    def tidy(self):
        """One row per measurement, with every factor's level as a column (DESIGN.md "Store").

        Columns: campaign, run_id, run_order, replicate, config, <factor columns>,
        instance, metric, value, unit, status, error, started, duration_s,
        fingerprint_id. A failed or timed-out run has one row with metric/value empty.
        """
        import pandas as pd
        meta = self.meta()
        factors = list(meta.get("design", {}).get("factors", {}))
        q = ("SELECT r.run_id, r.run_order, r.replicate, r.config, r.levels, m.instance, m.metric, "
             "m.value, m.unit, r.status, r.error, r.started, r.duration_s, r.fingerprint_id "
             "FROM runs r LEFT JOIN measurements m ON m.run_id = r.run_id "
             "ORDER BY r.run_order, m.instance, m.metric")
        rows = []
        for rec in self._db.execute(q):
            (rid, order, rep, cfg, levels, inst, metric, value, unit, status, error, started, dur, fp) = rec
            lv = json.loads(levels)
            rows.append({"campaign": meta.get("campaign_id"), "run_id": rid, "run_order": order,
                         "replicate": rep, "config": cfg, **{f: lv.get(f) for f in factors},
                         "instance": inst, "metric": metric, "value": value, "unit": unit,
                         "status": status, "error": error, "started": started, "duration_s": dur,
                         "fingerprint_id": fp})
        cols = TIDY_COLUMNS[:5] + factors + TIDY_COLUMNS[5:]
        return pd.DataFrame(rows, columns=cols)

    def export(self, directory: str | Path | None = None, formats=("csv", "parquet")) -> list[Path]:
        """Write ``results.<fmt>`` (tidy rows) and ``runs.csv`` beside the store, atomically."""
        directory = Path(directory or self.path.parent)
        directory.mkdir(parents=True, exist_ok=True)
        df = self.tidy()
        written = []
        for fmt in formats:
            if fmt not in ("csv", "parquet"):
                raise StoreError(f"export format {fmt!r} not supported; use csv or parquet")
            out = directory / f"results.{fmt}"
            tmp = out.with_suffix(f".{fmt}.tmp")
            if fmt == "csv":
                df.to_csv(tmp, index=False)
            else:
                df.to_parquet(tmp, index=False)
            os.replace(tmp, out)
            written.append(out)
        runs = self.runs()
        if not runs.empty:
            runs["metadata"] = runs["metadata"].map(lambda d: json.dumps(d, default=str))
        tmp = directory / "runs.csv.tmp"
        runs.to_csv(tmp, index=False)
        os.replace(tmp, directory / "runs.csv")
        written.append(directory / "runs.csv")
        (directory / "fingerprints.json").write_text(json.dumps(self.fingerprints(), indent=2, default=str))
        return written

    # -- internals -------------------------------------------------------------
    def _tx(self):
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db):
        self.db = db

    def __enter__(self):
        for attempt in range(50):
            try:
                self.db.execute("BEGIN IMMEDIATE")
                return self
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 49:
                    raise StoreError(f"store is locked by another writer: {exc}") from exc
                time.sleep(0.1)

    def __exit__(self, exc_type, *_):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


def load_results(data_dir: str | Path, campaign_id: str):
    """Tidy results of a campaign for view mode: the store if present, else results.parquet/csv."""
    import pandas as pd
    base = Path(data_dir) / campaign_id
    if (base / "store.sqlite").exists():
        with Store(base / "store.sqlite", readonly=True) as st:
            return st.tidy()
    for name, reader in (("results.parquet", pd.read_parquet), ("results.csv", pd.read_csv)):
        if (base / name).exists():
            return reader(base / name)
    raise StoreError(f"no results for campaign {campaign_id!r} under {base} "
                     "(expected store.sqlite, results.parquet or results.csv)")


def load_design(data_dir: str | Path, campaign_id: str):
    """The :class:`~labkit.design.Design` a stored campaign ran (for view mode)."""
    from .design import Design
    path = Path(data_dir) / campaign_id / "store.sqlite"
    with Store(path, readonly=True) as st:
        meta = st.meta()
    if "design" not in meta:
        raise StoreError(f"{path}: no design recorded in this store")
    return Design.from_dict(meta["design"], source=str(path))
