"""The result store: one SQLite file per campaign, one transaction per run.

``data/<campaign>/store.sqlite`` holds the campaign's design and settings, the
host fingerprints, one row per run (status ok / failed / timeout, error text
capped at 64 KiB, start time, duration, metadata) and one row per measurement. A run and its
measurements (and its telemetry ``samples``, :mod:`labkit.run.telemetry`) are committed together, so a campaign killed at any moment
(even SIGKILL) loses only the run in progress, and a run is never stored twice
(``run_id`` is the primary key).

``Store.tidy()`` joins everything into one row per measurement (docs/design.md,
"Store"); ``export()`` writes it as CSV and Parquet for Binder and other tools.

Every run's command output (the log of the commands its instances ran, with what they
printed) is kept beside the store as ``output/<run_id>.log`` (:meth:`Store.write_run_output`,
always 0600): its first and last MiB, with the total size stated; :meth:`Store.run_output`
reads it back (``labkit show <campaign> --output <run_id>``).

Files are private: the directory 0700, the store and its exports 0600 (0750 /
0640 with ``group_readable=True``). Secrets never reach the store: metadata and
fingerprints pass through :func:`labkit.core.redact.redact`. Every storage failure
(read-only or full disk, corrupt file, a store emptied or deleted while its
``results.csv`` remains) is a :class:`StoreError` saying what happened; a store
is never silently started over (``allow_new=True`` says "start over").
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..core.clock import now_iso
from ..core.files import atomic_write
from ..core.redact import redact
from ..core.waiting import retry
from ..errors import StoreError, shorten
from .levels import run_levels

if TYPE_CHECKING:
    import pandas as pd

    from ..design import Design, Run
    from ..workloads.base import Measurement

#: bytes of a run's output (write_run_output) kept at most: its first and its last MiB
OUTPUT_HEAD = OUTPUT_TAIL = 1 << 20
OUTPUT_CAP = OUTPUT_HEAD + OUTPUT_TAIL
#: which runs' command output a campaign keeps (:func:`run_output_policy`): ``all`` (the default),
#: ``failed`` (the runs that did not end ok) or ``off``
RUN_OUTPUT_ENV = "LABKIT_RUN_OUTPUT"
RUN_OUTPUT_CHOICES = ("all", "failed", "off")


def run_output_policy() -> str:
    """``$LABKIT_RUN_OUTPUT`` (``all`` when unset: every run's output is kept); ConfigError
    naming the choices for another value."""
    from ..errors import ConfigError
    value = os.environ.get(RUN_OUTPUT_ENV) or "all"
    if value not in RUN_OUTPUT_CHOICES:
        raise ConfigError(f"{RUN_OUTPUT_ENV}={value[:40]!r}: use one of {', '.join(RUN_OUTPUT_CHOICES)}")
    return value
_RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")

# host-lost: the run was in flight on a fleet host that died (labkit.run.engine)
STATUSES = ("ok", "failed", "timeout", "host-lost")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fingerprints (id TEXT PRIMARY KEY, data TEXT NOT NULL, captured TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, run_order INTEGER NOT NULL, config INTEGER NOT NULL,
    replicate INTEGER NOT NULL, levels TEXT NOT NULL, status TEXT NOT NULL, error TEXT,
    started TEXT NOT NULL, duration_s REAL NOT NULL, metadata TEXT NOT NULL, fingerprint_id TEXT);
CREATE TABLE IF NOT EXISTS measurements (
    run_id TEXT NOT NULL REFERENCES runs(run_id), instance INTEGER NOT NULL, metric TEXT NOT NULL,
    value REAL, unit TEXT, iteration INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, instance, metric, iteration));
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL, status TEXT NOT NULL, error TEXT, started TEXT NOT NULL,
    duration_s REAL NOT NULL, metadata TEXT NOT NULL, fingerprint_id TEXT);
CREATE TABLE IF NOT EXISTS claims (
    run_id TEXT PRIMARY KEY, host TEXT NOT NULL, owner TEXT NOT NULL, lease_until REAL NOT NULL,
    claimed TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
    run_id TEXT NOT NULL, t REAL NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL, instance TEXT);
CREATE INDEX IF NOT EXISTS samples_run ON samples (run_id);
"""
#: a store written before iterations were kept: its measurements table rebuilt with an
#: ``iteration`` column in the key (0: the measurement is not one of repeated iterations)
MIGRATE_MEASUREMENTS = """
CREATE TABLE measurements_v2 (
    run_id TEXT NOT NULL REFERENCES runs(run_id), instance INTEGER NOT NULL, metric TEXT NOT NULL,
    value REAL, unit TEXT, iteration INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, instance, metric, iteration));
INSERT INTO measurements_v2 (run_id, instance, metric, value, unit, iteration)
    SELECT run_id, instance, metric, value, unit, 0 FROM measurements;
DROP TABLE measurements;
ALTER TABLE measurements_v2 RENAME TO measurements;
"""

TIDY_COLUMNS = ["campaign", "run_id", "run_order", "replicate", "config", "instance", "metric",
                "value", "unit", "status", "error", "started", "duration_s", "fingerprint_id", "host",
                "instance_index", "boot", "run_seq", "iteration", "suspect", "suspect_reason"]
#: columns of :meth:`Store.samples`
SAMPLE_COLUMNS = ["run_id", "t", "metric", "value", "instance"]


EXPORTS = ("results.csv", "results.parquet", "runs.csv")
#: candidates a claim looks up in one query (:meth:`Store.claim_group`), below SQLite's 999 variables
CLAIM_CHUNK = 256
#: how long a write waits for another writer to finish (SQLite's busy timeout), in seconds
BUSY_TIMEOUT_S = 30.0
#: a read-only open is tried this many times in all (pauses 0.05 s growing to 0.25 s: about 7 s);
#: before try READONLY_RECOVER_AT a dead writer's WAL is replayed (:meth:`Store._recover_wal`)
READONLY_ATTEMPTS, READONLY_RECOVER_AT = 30, 4


def storage_error(path: str | Path, exc: BaseException, doing: str) -> StoreError:
    """A StoreError saying in plain words why ``doing`` failed on ``path``."""
    text = str(getattr(exc, "strerror", None) or exc)
    low = text.lower()
    if "full" in low or "no space" in low or getattr(exc, "errno", None) == 28:
        why = "the disk is full (free some space, then run the same command again)"
    elif "read-only" in low or "readonly" in low or getattr(exc, "errno", None) == 30:
        why = "the data directory is read-only (use a writable --data-dir)"
    elif "permission" in low or getattr(exc, "errno", None) == 13:
        why = "permission denied"
    elif "malformed" in low or "not a database" in low or "corrupt" in low:
        why = f"not a labkit store, or corrupt ({text})"
    else:
        why = text
    return StoreError(f"{path}: cannot {doing}: {why}")


class Store:
    """A campaign's results. Open with ``Store(path)`` or ``Store.for_campaign(data_dir, id)``.

    ``readonly`` opens without writing anything; ``group_readable`` makes new files 0640
    (directory 0750) instead of 0600/0700; ``allow_new`` lets a new, empty store be created
    beside a ``results.csv`` left by an earlier one (which the next export overwrites).
    Opening checks the file's integrity (``PRAGMA quick_check``).
    """

    def __init__(self, path: str | Path, *, readonly: bool = False, group_readable: bool = False,
                 allow_new: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self.file_mode = 0o640 if group_readable else 0o600
        self.dir_mode = 0o750 if group_readable else 0o700
        self._db = self._open_readonly() if readonly else self._open_write(allow_new)
        try:
            bad = [r for (r,) in self._db.execute("PRAGMA quick_check(20)")]
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise storage_error(self.path, exc, "read the store") from None
        if bad != ["ok"]:
            self._db.close()
            raise StoreError(f"{self.path}: the store is corrupt (integrity check: {'; '.join(bad)[:500]}); "
                             "restore it from a copy, or export what is readable with the sqlite3 .recover command")
        if not readonly:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(SCHEMA)
                self._migrate()
            except sqlite3.DatabaseError as exc:
                self._db.close()
                raise storage_error(self.path, exc, "open the store for writing") from None

    def _columns(self, table: str) -> set[str]:
        return {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}

    def _migrate(self) -> None:
        """Bring a store written by an earlier labkit up to the current schema, in one transaction:
        measurements get an ``iteration`` (0 for every row of before), samples an ``instance``
        (NULL: host rows)."""
        need_iter = "iteration" not in self._columns("measurements")
        need_inst = "instance" not in self._columns("samples")
        if not (need_iter or need_inst):
            return
        with self._tx():
            if need_iter:
                for stmt in MIGRATE_MEASUREMENTS.split(";"):
                    if stmt.strip():
                        self._db.execute(stmt)
            if need_inst:
                self._db.execute("ALTER TABLE samples ADD COLUMN instance TEXT")

    def _open_write(self, allow_new: bool):
        new = not self.path.exists() or self.path.stat().st_size == 0
        if new and not allow_new:
            left = [n for n in EXPORTS if (self.path.parent / n).exists()]
            if left:
                state = "is empty" if self.path.exists() else "is missing"
                raise StoreError(
                    f"{self.path} {state} but {', '.join(left)} from an earlier campaign remain beside it: "
                    "refusing to start over and overwrite them. Restore the store, or move those files "
                    "away, or start over on purpose (allow_new=True, labkit run --new-store)")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=self.dir_mode)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, self.file_mode)
            try:
                if os.fstat(fd).st_uid == os.geteuid():
                    os.fchmod(fd, self.file_mode)
            finally:
                os.close(fd)
            return sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False,
                                   isolation_level=None)
        except (OSError, sqlite3.DatabaseError) as exc:
            raise storage_error(self.path, exc, "create the store") from None

    def _open_readonly(self):
        if not self.path.exists():
            raise StoreError(f"no result store at {self.path}")
        if self.path.stat().st_size == 0:
            raise StoreError(f"{self.path}: the store is empty (0 bytes): it was truncated; restore it")
        uri = f"file:{self.path}?mode=ro"
        tries = 0

        def connect() -> sqlite3.Connection:
            nonlocal tries
            tries += 1
            if tries == READONLY_RECOVER_AT and os.access(self.path.parent, os.W_OK):
                self._recover_wal()
            db = sqlite3.connect(uri, uri=True, check_same_thread=False)
            try:
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except BaseException:
                db.close()
                raise
            return db

        # an OperationalError is a runtime condition, tried again: right after a writer died, the
        # WAL may need a recovery a read-only connection cannot do (SQLITE_READONLY_RECOVERY), or
        # a writer holds it briefly; any other DatabaseError (not a database, corrupt) is not
        try:
            return retry(connect, transient=sqlite3.OperationalError, what=f"opening {self.path} read-only",
                         attempts=READONLY_ATTEMPTS, interval=0.05, max_interval=0.25)
        except sqlite3.OperationalError as exc:
            raise storage_error(self.path, exc, "open the store read-only") from None
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, "read the store") from None

    def _recover_wal(self) -> None:
        """Let SQLite replay a dead writer's WAL with a short read-write connection (reads only)."""
        try:
            db = sqlite3.connect(self.path, timeout=5)
            try:
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                db.close()
        except sqlite3.DatabaseError:
            pass

    @classmethod
    def for_campaign(cls, data_dir: str | Path, campaign_id: str, **kw: Any) -> Store:
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

    def set_meta(self, **items: Any) -> None:
        """Store campaign settings (secrets redacted)."""
        items = redact(items)
        with self._tx():
            for k, v in items.items():
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (k, json.dumps(v, default=str)))

    def add_fingerprint(self, fp_id: str, data: dict) -> None:
        with self._tx():
            self._db.execute("INSERT OR IGNORE INTO fingerprints VALUES (?, ?, ?)",
                             (fp_id, json.dumps(redact(data), default=str), now_iso()))

    def fingerprints(self) -> dict[str, dict]:
        return {i: json.loads(d) for i, d in self._db.execute("SELECT id, data FROM fingerprints")}

    # -- runs ----------------------------------------------------------------
    def completed(self) -> set[str]:
        """run_ids already stored (whatever their status)."""
        return {r for (r,) in self._db.execute("SELECT run_id FROM runs")}

    def record_run(self, run: Run, *, status: str, started: str, duration_s: float,
                   measurements: Iterable[Measurement] = (),
                   error: str | None = None, metadata: dict | None = None,
                   fingerprint_id: str | None = None, samples: Iterable[tuple] = ()) -> None:
        """Store one run, its measurements and its telemetry ``samples`` (``(t, metric, value)``
        or ``(t, metric, value, instance)`` rows: :meth:`record_samples`) atomically. Storing a
        run_id twice is an error. A measurement's ``iteration`` (1-based, or None when it is not one
        of repeated iterations inside the run) is part of its key.

        ``error`` is kept up to :data:`~labkit.errors.TEXT_CAP` characters (its head and
        tail around a marker saying how many were omitted): a failed run's output can be huge."""
        if status not in STATUSES:
            raise StoreError(f"run status must be one of {', '.join(STATUSES)}, got {status!r}")
        error = None if error is None else shorten(error)
        try:
            with self._tx():
                self._db.execute(
                    "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (run.run_id, run.order, run.config, run.replicate,
                     json.dumps(run.levels, default=str), status, error, started, duration_s,
                     json.dumps(redact(metadata or {}), default=str), fingerprint_id))
                self._db.executemany(
                    "INSERT INTO measurements (run_id, instance, metric, value, unit, iteration) "
                    "VALUES (?,?,?,?,?,?)",
                    [(run.run_id, m.instance, m.metric, float(m.value), m.unit, _iteration(run.run_id, m))
                     for m in measurements])
                self._insert_samples(run.run_id, samples)
                self._db.execute("DELETE FROM claims WHERE run_id = ?", (run.run_id,))
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"{self.path}: run {run.run_id} could not be stored ({exc}); "
                             "a run is stored once") from exc

    def record_samples(self, run_id: str, rows: Iterable[tuple]) -> None:
        """Add telemetry rows ``(t, metric, value)`` (host) or ``(t, metric, value, instance)`` (one
        instance's, by its id) of run ``run_id`` (``t``: seconds since its telemetry started;
        :mod:`labkit.run.telemetry`) in one transaction; StoreError for a row that is not
        (number, non-empty text, number[, text or None])."""
        with self._tx():
            self._insert_samples(run_id, rows)

    def _insert_samples(self, run_id: str, rows: Iterable[tuple]) -> None:
        checked = []
        for i, row in enumerate(rows):
            try:
                t, metric, value, *rest = row
                instance = rest[0] if rest else None
                ok = (isinstance(metric, str) and metric != "" and len(rest) <= 1
                      and (instance is None or isinstance(instance, str) and instance != ""))
                checked.append((run_id, float(t), metric, float(value), instance))
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise StoreError(f"run {run_id}: sample row {i} must be (t seconds, metric name, value[, instance "
                                 f"id]), got {row!r}")
        self._db.executemany("INSERT INTO samples (run_id, t, metric, value, instance) VALUES (?,?,?,?,?)", checked)

    def samples(self, run_id: str | None = None) -> pd.DataFrame:
        """Telemetry samples, of one run or of all, in time order: columns run_id, t, metric, value
        and instance (the instance's id for its own counters, as in :meth:`tidy`; None for the
        host's). Empty for a store written before telemetry was kept (opened read-only); instance
        None throughout for one written before instances were sampled."""
        import pandas as pd
        if not self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'samples'").fetchone():
            return pd.DataFrame(columns=SAMPLE_COLUMNS)
        has_inst = "instance" in self._columns("samples")   # not in a store of before (read-only)
        where, args = ("WHERE run_id = ?", (run_id,)) if run_id is not None else ("", ())
        rows = self._db.execute(f"SELECT run_id, t, metric, value, {'instance' if has_inst else 'NULL'} FROM samples "
                                f"{where} ORDER BY run_id, t, {'instance, ' if has_inst else ''}metric", args).fetchall()
        return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)

    def write_run_output(self, run_id: str, text: str, status: str | None = None) -> Path:
        """Keep ``text`` (a run's command output, e.g. :func:`labkit.backends.base.exec_log_text`)
        as ``output/<run_id>.log`` beside the store: a first line stating the run (and its
        ``status``) and the size of ``text`` in bytes, then its first :data:`OUTPUT_HEAD` and last
        :data:`OUTPUT_TAIL` bytes around a marker saying how many were left out; private (0600,
        the directory 0700), written atomically; returns its path. A run that runs again
        overwrites its file."""
        if self.readonly:
            raise StoreError(f"{self.path}: the store is open read-only; the run output of {run_id!r} "
                             "was not written")
        if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
            raise StoreError(f"{self.path}: run output: {run_id!r} is not a run id ([A-Za-z0-9_.-], "
                             "not starting with a dot)")
        from ..backends.output import CappedOutput
        path = self.path.parent / "output" / f"{run_id}.log"
        kept = CappedOutput(OUTPUT_HEAD, OUTPUT_TAIL)
        kept.write(text)
        how = f" ({status})" if status else ""
        first = (f"# labkit: command output of run {run_id}{how}: {kept.total} bytes; "
                 + ("all kept" if not kept.truncated else
                    f"the first {OUTPUT_HEAD >> 20} MiB and the last {OUTPUT_TAIL >> 20} MiB kept") + "\n")
        try:
            return atomic_write(path, first + kept.text(), mode=0o600, dir_mode=0o700)
        except OSError as exc:
            raise storage_error(path, exc, "write the run's output") from None

    def run_output(self, run_id: str) -> str | None:
        """The output kept for ``run_id`` by :meth:`write_run_output`, None if there is none."""
        path = self.path.parent / "output" / f"{run_id}.log"
        if not _RUN_ID.fullmatch(str(run_id)) or not path.is_file():
            return None
        return path.read_text(errors="replace")

    def run_outputs(self) -> list[str]:
        """The run ids whose output :meth:`write_run_output` kept, sorted."""
        folder = self.path.parent / "output"
        if not folder.is_dir():
            return []
        return sorted(p.stem for p in folder.glob("*.log") if _RUN_ID.fullmatch(p.stem) and p.is_file())

    # -- claims (fleet workers: labkit.run.engine) ---------------------------------
    def claim(self, candidates: Iterable[str], host: str, owner: str, lease_s: float) -> str | None:
        """Claim the first of ``candidates`` (run_ids, in order) neither stored nor claimed under a
        live lease, for ``host`` on behalf of ``owner``, until now + ``lease_s``; returns its run_id
        or None. One transaction: two workers never claim the same run (:meth:`claim_group` of
        one-run groups)."""
        got = self.claim_group(([r] for r in candidates), host, owner, lease_s)
        return got[0] if got else None

    def claim_group(self, groups: Iterable[Sequence[str]], host: str, owner: str, lease_s: float, *,
                    limit: int | None = None) -> list[str]:
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
            return []   # nothing to claim: no transaction
        with self._tx():
            while batch:
                ids = list(dict.fromkeys(r for g in batch for r in g))
                taken: set[str] = set()
                for i in range(0, len(ids), CLAIM_CHUNK):
                    chunk = ids[i:i + CLAIM_CHUNK]
                    marks = ",".join("?" * len(chunk))
                    taken.update(r for (r,) in self._db.execute(
                        f"SELECT run_id FROM runs WHERE run_id IN ({marks})", chunk))
                    taken.update(r for (r,) in self._db.execute(
                        f"SELECT run_id FROM claims WHERE lease_until >= ? AND run_id IN ({marks})", (now, *chunk)))
                for group in batch:
                    free = [r for r in group if r not in taken][:limit]
                    if free:
                        self._db.executemany("INSERT OR REPLACE INTO claims VALUES (?,?,?,?,?)",
                                             [(r, host, owner, now + lease_s, now_iso()) for r in free])
                        return free
                batch = _group_batch(todo)
        return []

    def claim_owner(self, run_id: str) -> str | None:
        """The owner of the claim on ``run_id`` (live or not), or None when it is not claimed."""
        try:
            row = self._db.execute("SELECT owner FROM claims WHERE run_id = ?", (run_id,)).fetchone()
        except sqlite3.OperationalError:   # a store written before claims existed
            return None
        return None if row is None else row[0]

    def renew_claims(self, owner: str, lease_s: float) -> int:
        """Heartbeat: extend every claim of ``owner`` to now + ``lease_s``; returns how many."""
        with self._tx():
            cur = self._db.execute("UPDATE claims SET lease_until = ? WHERE owner = ?",
                                   (time.time() + lease_s, owner))
        return cur.rowcount

    def release_claims(self, *, run_id: str | None = None, owner: str | None = None,
                       not_owner: str | None = None) -> list[dict]:
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
            rows = self._db.execute("SELECT run_id, host, owner, lease_until, claimed FROM claims" + sql, args)
        except sqlite3.OperationalError:   # a store written before claims existed
            return []
        return [dict(zip(("run_id", "host", "owner", "lease_until", "claimed"), r)) for r in rows]

    def delete_runs(self, run_ids: Iterable[str]) -> int:
        """Forget runs (e.g. failed ones, to run them again). Returns how many were removed.

        Each forgotten run stays in :meth:`attempts` (status, error, start, duration, metadata):
        running a run again never erases what happened the first time (its telemetry samples go;
        their summary stays in the attempt's metadata)."""
        ids = list(run_ids)
        with self._tx():
            self._db.executemany(
                "INSERT INTO attempts SELECT run_id, status, error, started, duration_s, metadata, "
                "fingerprint_id FROM runs WHERE run_id = ?", [(i,) for i in ids])
            self._db.executemany("DELETE FROM measurements WHERE run_id = ?", [(i,) for i in ids])
            self._db.executemany("DELETE FROM samples WHERE run_id = ?", [(i,) for i in ids])
            cur = self._db.executemany("DELETE FROM runs WHERE run_id = ?", [(i,) for i in ids])
        return cur.rowcount if cur.rowcount >= 0 else len(ids)

    def runs(self) -> pd.DataFrame:
        """One row per run: run_id, run_order, config, replicate, factor columns, status, error,
        started, duration_s, metadata (dict), fingerprint_id, and the run's levels and flag
        (:mod:`labkit.store.levels`): host, run_seq (order on its host, 1-based), suspect (bool) and
        suspect_reason (why the quiet-host guard doubts it, :mod:`labkit.run.guard`; None if not)."""
        import pandas as pd
        rows = []
        for (rid, order, cfg, rep, levels, status, error, started, dur, md, fp) in self._db.execute(
                "SELECT * FROM runs ORDER BY run_order"):
            rows.append({"run_id": rid, "run_order": order, "config": cfg, "replicate": rep,
                         **json.loads(levels), "status": status, "error": error, "started": started,
                         "duration_s": dur, "metadata": json.loads(md), "fingerprint_id": fp})
        if not rows:
            return pd.DataFrame(rows)
        lv = run_levels((r["run_id"], r["run_order"], r["started"], r["metadata"]) for r in rows)
        for r in rows:
            x = lv[r["run_id"]]
            r.update(host=x.host, run_seq=x.run_seq, suspect=x.suspect_reason is not None,
                     suspect_reason=x.suspect_reason)
        out = pd.DataFrame(rows)
        out["run_seq"] = out["run_seq"].astype("Int64")
        # pandas turns None into NaN in a column that also holds strings: keep the documented None
        out["suspect_reason"] = out["suspect_reason"].astype(object).where(out["suspect_reason"].notna(), None)
        return out

    def attempts(self) -> pd.DataFrame:
        """The earlier attempts of runs that were run again (:meth:`delete_runs`), oldest first:
        run_id, status, error, started, duration_s, metadata (dict), fingerprint_id. Empty for a
        store written before attempts were kept."""
        import pandas as pd
        cols = ["run_id", "status", "error", "started", "duration_s", "metadata", "fingerprint_id"]
        if not self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'attempts'").fetchone():
            return pd.DataFrame(columns=cols)
        rows = [(rid, st, err, start, dur, json.loads(md), fp) for (rid, st, err, start, dur, md, fp)
                in self._db.execute("SELECT * FROM attempts ORDER BY rowid")]
        return pd.DataFrame(rows, columns=cols)

    def tidy(self) -> pd.DataFrame:
        """One row per measurement, with every factor's level as a column (docs/design.md "Store").

        Columns: campaign, run_id, run_order, replicate, config, <factor columns>,
        instance (the id of the instance that measured it: unique per started instance,
        its name), metric, value, unit, status, error, started, duration_s, fingerprint_id,
        host (the host that ran it: a testbed host's name, ``local`` on this machine), then
        the levels of the measurement: instance_index (the instance's index in its run),
        boot (the instance's start count within the campaign, 1-based), run_seq (order of the run
        on its host, 1-based, in execution order), iteration (1-based iteration inside the run for
        a workload that reports repeated iterations, NA otherwise), and the quiet-host guard's
        suspect (bool) and suspect_reason. ``instance_index``, ``boot``, ``run_seq`` and
        ``iteration`` are nullable integers. A failed or timed-out run has one row with
        metric/value (and instance) empty. A store written before levels were recorded is read
        as described in :mod:`labkit.store.levels`.
        """
        import pandas as pd
        meta = self.meta()
        factors = list(meta.get("design", {}).get("factors", {}))
        has_it = "iteration" in self._columns("measurements")   # not in a store of before (read-only)
        q = ("SELECT r.run_id, r.run_order, r.replicate, r.config, r.levels, m.instance, m.metric, "
             f"m.value, m.unit, r.status, r.error, r.started, r.duration_s, r.fingerprint_id, "
             f"{'m.iteration' if has_it else 'NULL'} "
             "FROM runs r LEFT JOIN measurements m ON m.run_id = r.run_id "
             f"ORDER BY r.run_order, m.instance, m.metric{', m.iteration' if has_it else ''}")
        levels = run_levels((rid, order, started, json.loads(md)) for rid, order, started, md in
                            self._db.execute("SELECT run_id, run_order, started, metadata FROM runs"))
        rows = []
        for rec in self._db.execute(q):
            (rid, order, rep, cfg, lvl, inst, metric, value, unit, status, error, started, dur, fp, it) = rec
            lv = json.loads(lvl)
            run = levels[rid]
            instance, boot = run.instance(inst)
            rows.append({"campaign": meta.get("campaign_id"), "run_id": rid, "run_order": order,
                         "replicate": rep, "config": cfg, **{f: lv.get(f) for f in factors},
                         "instance": instance, "metric": metric, "value": value, "unit": unit,
                         "status": status, "error": error, "started": started, "duration_s": dur,
                         "fingerprint_id": fp, "host": run.host, "instance_index": inst, "boot": boot,
                         "run_seq": run.run_seq, "iteration": it or None,
                         "suspect": run.suspect_reason is not None, "suspect_reason": run.suspect_reason})
        cols = TIDY_COLUMNS[:5] + factors + TIDY_COLUMNS[5:]
        out = pd.DataFrame(rows, columns=cols)
        for col in ("instance_index", "boot", "run_seq", "iteration"):
            out[col] = out[col].astype("Int64")
        out["suspect"] = out["suspect"].astype(bool)
        return out

    def export(self, directory: str | Path | None = None,
               formats: Sequence[str] = ("csv", "parquet")) -> list[Path]:
        """Write ``results.<fmt>`` (tidy rows), ``runs.csv`` and ``samples.csv`` (telemetry:
        :meth:`samples`) beside the store (or in ``directory``)
        with :func:`labkit.core.files.atomic_write`: atomically, with the store's file mode, refusing a
        symbolic link in place of an output file (:class:`~labkit.errors.ConfigError`)."""
        bad = [f for f in formats if f not in ("csv", "parquet")]
        if bad:
            raise StoreError(f"export format {bad[0]!r} not supported; use csv or parquet")
        directory = Path(directory or self.path.parent)
        df = self.tidy()
        runs = self.runs()
        if not runs.empty:
            runs["metadata"] = runs["metadata"].map(lambda d: json.dumps(d, default=str))
        writers: list[tuple[str, Callable[[BinaryIO], object]]] = [
            (f"results.{fmt}", partial(df.to_csv if fmt == "csv" else df.to_parquet, index=False)) for fmt in formats]
        samples = self.samples()
        writers += [("runs.csv", lambda fh: runs.to_csv(fh, index=False)),
                    ("samples.csv", lambda fh: samples.to_csv(fh, index=False)),
                    ("fingerprints.json", lambda fh: fh.write(
                        json.dumps(self.fingerprints(), indent=2, default=str).encode()))]
        written = []
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=self.dir_mode)
            for name, write in writers:
                out = atomic_write(directory / name, write, mode=self.file_mode)
                if name != "fingerprints.json":
                    written.append(out)
        except OSError as exc:
            raise storage_error(directory, exc, "write the exported results") from None
        return written

    # -- internals -------------------------------------------------------------
    def _tx(self):
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db):
        self.db = db

    def __enter__(self):
        """BEGIN IMMEDIATE: the connection's busy timeout (:data:`BUSY_TIMEOUT_S`) already waits
        for another writer, so a store still busy after it is a StoreError at once."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
            return self
        except sqlite3.OperationalError as exc:
            if busy(exc):
                raise StoreError(f"{_db_path(self.db)}: the store is locked by another writer (waited "
                                 f"{BUSY_TIMEOUT_S:g} s): {exc}") from exc
            raise storage_error(_db_path(self.db), exc, "write to the store") from None

    def __exit__(self, exc_type, exc, _tb):
        if exc_type is not None:
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.DatabaseError:
                pass   # SQLite already rolled back (e.g. disk full)
            if isinstance(exc, sqlite3.OperationalError):
                raise storage_error(_db_path(self.db), exc, "write to the store") from None
            return False
        try:
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.DatabaseError:
                pass
            raise storage_error(_db_path(self.db), exc, "commit to the store") from None
        return False


def _iteration(run_id: str, m: Measurement) -> int:
    """The stored iteration of measurement ``m``: its 1-based ``iteration``, or 0 for none."""
    it = getattr(m, "iteration", None)
    if it is None:
        return 0
    if isinstance(it, bool) or not isinstance(it, int) or it < 1:
        raise StoreError(f"run {run_id}: measurement {m.metric!r}: iteration must be a whole number >= 1 "
                         f"or None, got {it!r}")
    return it


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


def busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite's error code (its primary part) says another connection holds the
    database (SQLITE_BUSY) or a table of it (SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _db_path(db) -> str:
    try:
        return next((f for _, name, f in db.execute("PRAGMA database_list") if name == "main"), "store")
    except sqlite3.DatabaseError:
        return "store"


def load_results(data_dir: str | Path, campaign_id: str) -> pd.DataFrame:
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


def load_design(data_dir: str | Path, campaign_id: str) -> Design:
    """The :class:`~labkit.design.Design` a stored campaign ran (for view mode)."""
    from ..design import Design
    path = Path(data_dir) / campaign_id / "store.sqlite"
    with Store(path, readonly=True) as st:
        meta = st.meta()
    if "design" not in meta:
        raise StoreError(f"{path}: no design recorded in this store")
    return Design.from_dict(meta["design"], source=str(path))
