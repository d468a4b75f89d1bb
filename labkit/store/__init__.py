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

Versions: a store records its schema (``PRAGMA user_version``, :data:`SCHEMA_VERSION`) and the
labkit that last wrote it (table ``store_info``). A store of an earlier schema is migrated when
opened for writing; one written by a newer labkit (a higher schema) is refused, read-only too,
with "written by labkit X (schema N); this is labkit Y (schema M): upgrade", never misread.
A stored row that does not hold what this labkit wrote (JSON that is not JSON, a number that is
text: a tampered or damaged store) is reported with the campaign, the run id and the column
(:attr:`Store.problems`, and a warning on the ``labkit.store`` logger) and left out, so every
other run still reads; a damaged ``meta`` row (the campaign's settings) is a StoreError.
``labkit check ID`` (:mod:`labkit.store.check`) lists every such problem of a store.
"""
from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

from .. import __version__
from ..core.clock import now_iso
from ..core.files import atomic_write, make_dirs, open_dir
from ..core.redact import redact
from ..core.waiting import retry
from ..errors import StoreError, shorten
from .levels import boot_key, rekey, run_levels

if TYPE_CHECKING:
    import pandas as pd

    from ..design import Design, Run
    from ..workloads.base import Measurement

log = logging.getLogger(__name__)
#: (store, problem) pairs already logged by this process (:meth:`Store._malformed`)
_WARNED: set[str] = set()

#: the schema this labkit writes (``PRAGMA user_version``). 1: the first numbered one (a store
#: written before numbering reads 0 and is migrated by its columns: :meth:`Store._migrate`). A
#: change to the tables raises it, with a migration from the one before.
SCHEMA_VERSION = 1

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
CREATE TABLE IF NOT EXISTS store_info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
#: the prefix of the meta keys that keep a checkout's uncommitted diff, one per digest
#: (:meth:`Store.set_code_diff`): megabytes that :meth:`Store.meta` does not read
CODE_DIFF_KEY = "code_diff:"
#: the columns of ``runs``, in the order this labkit reads them (named, never ``SELECT *``)
RUN_COLUMNS = ("run_id", "run_order", "config", "replicate", "levels", "status", "error", "started",
               "duration_s", "metadata", "fingerprint_id")
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
#: rows per chunk of :meth:`Store.export` (and of :meth:`Store.tidy_chunks` when it exports)
EXPORT_CHUNK = 50_000
#: the metadata fields the levels of a run are read from (:mod:`labkit.store.levels`)
_LEVEL_FIELDS = ("host", "run_seq", "suspect", "boot_group", "instances")
#: a ``runs`` row SQLite can read as labkit writes it (:func:`parse_run` checks the others in Python)
_RUN_VALID = ("typeof(run_id) = 'text' AND typeof(run_order) = 'integer' AND typeof(config) = 'integer' "
              "AND typeof(replicate) = 'integer' AND typeof(duration_s) IN ('integer', 'real') "
              f"AND status IN ({', '.join(repr(s) for s in STATUSES)}) "
              "AND (error IS NULL OR typeof(error) = 'text') AND typeof(started) = 'text' "
              "AND (fingerprint_id IS NULL OR typeof(fingerprint_id) = 'text') "
              "AND typeof(levels) = 'text' AND (CASE WHEN json_valid(levels) THEN json_type(levels) END) = 'object' "
              "AND typeof(metadata) = 'text' "
              "AND (CASE WHEN json_valid(metadata) THEN json_type(metadata) END) = 'object'")
#: parquet types of the tidy and samples columns (a chunk whose column is all empty has no type of its own)
_PARQUET_TYPES = {"campaign": "string", "run_id": "string", "run_order": "int64", "replicate": "int64",
                  "config": "int64", "instance": "string", "metric": "string", "value": "double", "unit": "string",
                  "status": "string", "error": "string", "started": "string", "duration_s": "double",
                  "fingerprint_id": "string", "host": "string", "instance_index": "int64", "boot": "int64",
                  "run_seq": "int64", "iteration": "int64", "suspect": "bool", "suspect_reason": "string"}


def _measurement_valid(has_iteration: bool) -> str:
    """SQL: a ``measurements`` row (alias ``m``) as labkit writes it (:func:`check_measurement`)."""
    return ("typeof(m.instance) = 'integer' AND typeof(m.metric) = 'text' AND m.metric != '' "
            "AND (m.value IS NULL OR typeof(m.value) IN ('integer', 'real')) "
            "AND (m.unit IS NULL OR typeof(m.unit) = 'text')"
            + (" AND typeof(m.iteration) = 'integer' AND m.iteration >= 0" if has_iteration else ""))


def _json_value(kind: str, value: Any) -> Any:
    """What ``json.loads`` gives for a value SQLite's ``json_extract`` returned, of JSON type ``kind``."""
    if kind == "true":
        return True
    if kind == "false":
        return False
    if kind in ("array", "object"):
        return json.loads(value)
    return value


def _write_frames(fh: BinaryIO, fmt: str, frames: Iterable[pd.DataFrame], types: dict | None = None) -> None:
    """Write ``frames`` (one table in chunks, same columns) to ``fh`` as CSV (header once) or
    Parquet (a ``ParquetWriter``, the schema of the first chunk with the known column types of
    :data:`_PARQUET_TYPES` and ``types``; a column with no type yet is text)."""
    if fmt == "csv":
        first = True
        for frame in frames:
            frame.to_csv(fh, index=False, header=first)
            first = False
        return
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]
    known = {**_PARQUET_TYPES, **(types or {})}
    writer = None
    schema = None
    try:
        for frame in frames:
            if schema is None:
                first = pa.Schema.from_pandas(frame, preserve_index=False)
                fields = []
                for f in first:
                    kind = known.get(f.name)
                    fields.append(f.with_type(pa.type_for_alias(kind)) if kind
                                  else f.with_type(pa.string()) if pa.types.is_null(f.type) else f)
                schema = pa.schema(fields, metadata=first.metadata)
                writer = pq.ParquetWriter(fh, schema)
            if writer is None:   # (for the type checker: made with the schema above)
                raise StoreError("parquet writer not opened")
            writer.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False))
    finally:
        if writer is not None:
            writer.close()


#: candidates a claim looks up in one query (:meth:`Store.claim_group`), below SQLite's 999 variables
CLAIM_CHUNK = 256
#: how long a write waits for another writer to finish (SQLite's busy timeout), in seconds
BUSY_TIMEOUT_S = 30.0
#: a read-only open is tried this many times in all (pauses 0.05 s growing to 0.25 s: about 7 s);
#: before try READONLY_RECOVER_AT a dead writer's WAL is replayed (:meth:`Store._recover_wal`)
READONLY_ATTEMPTS, READONLY_RECOVER_AT = 30, 4


def sqlite_uri(path: str | Path, *, readonly: bool = False) -> str:
    """``path`` as an SQLite URI (``file:`` + the absolute path percent-encoded), to open with
    ``sqlite3.connect(..., uri=True)``: a path holding ``?``, ``#`` or ``%`` names that file, not
    a query or a fragment. ``readonly`` adds ``?mode=ro``."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path), safe="/")
    return uri + "?mode=ro" if readonly else uri


class Malformed(Exception):
    """A stored value that is not what labkit wrote: ``column`` and ``why`` (one line)."""

    def __init__(self, column: str, why: str):
        super().__init__(f"column {column}: {why}")
        self.column, self.why = column, why


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _whole(value: object, column: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(column, f"{_shown(value)} is not a whole number")
    return value


def _text(value: object, column: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise Malformed(column, f"{_shown(value)} is not text")
    return value


def json_object(value: object, column: str) -> dict:
    """``value`` (a stored JSON text) read as a JSON object; :class:`Malformed` otherwise."""
    if not isinstance(value, str):
        raise Malformed(column, f"{_shown(value)} is not JSON text")
    try:
        out = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise Malformed(column, f"not JSON ({str(exc).splitlines()[0][:80]}): {_shown(value)}") from None
    if not isinstance(out, dict):
        raise Malformed(column, f"a JSON {type(out).__name__} where an object is expected: {_shown(value)}")
    return out


def parse_run(row: Sequence) -> dict:
    """A ``runs`` row (:data:`RUN_COLUMNS`) as a dict with ``levels`` and ``metadata`` read;
    :class:`Malformed` naming the first column that does not hold what labkit writes."""
    rid, order, cfg, rep, levels, status, error, started, dur, md, fp = row
    _text(rid, "run_id")
    if isinstance(dur, bool) or not isinstance(dur, (int, float)):
        raise Malformed("duration_s", f"{_shown(dur)} is not a number")
    if status not in STATUSES:
        raise Malformed("status", f"{_shown(status)} is not one of {', '.join(STATUSES)}")
    return {"run_id": rid, "run_order": _whole(order, "run_order"), "config": _whole(cfg, "config"),
            "replicate": _whole(rep, "replicate"), "levels": json_object(levels, "levels"),
            "status": status, "error": _text(error, "error", optional=True), "started": _text(started, "started"),
            "duration_s": dur, "metadata": json_object(md, "metadata"),
            "fingerprint_id": _text(fp, "fingerprint_id", optional=True)}


def check_measurement(instance: object, metric: object, value: object, unit: object, iteration: object) -> None:
    """:class:`Malformed` (column ``measurements.<name>``) unless a measurement row holds what
    labkit writes."""
    _whole(instance, "measurements.instance")
    if not isinstance(metric, str) or not metric:
        raise Malformed("measurements.metric", f"{_shown(metric)} is not a metric name")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise Malformed("measurements.value", f"{_shown(value)} is not a number")
    _text(unit, "measurements.unit", optional=True)
    if iteration is not None and _whole(iteration, "measurements.iteration") < 0:
        raise Malformed("measurements.iteration", f"{iteration} is below 0")


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
    Opening is O(1) in the store's size: a read-only open checks the file's header against its
    size (a truncated file is refused) and nothing more; opening for writing also checks the
    integrity of every page (``PRAGMA quick_check``, seconds at 100,000 runs), and ``labkit
    check ID`` (:mod:`labkit.store.check`) does so on demand. Damage a read-only open did not
    see surfaces as a :class:`StoreError` when the damaged rows are read.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False, group_readable: bool = False,
                 allow_new: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self.file_mode = 0o640 if group_readable else 0o600
        self.dir_mode = 0o750 if group_readable else 0o700
        #: what this store holds that labkit did not write (one line each: campaign, run, column),
        #: found while reading; those rows were left out (:meth:`runs`, :meth:`tidy`)
        self.problems: list[str] = []
        self._campaign: str | None = None
        self._db = self._open_readonly() if readonly else self._open_write(allow_new)
        try:
            self._sanity()
            if not readonly:      # integrity is checked where the store is written, not where it is read
                self._integrity()
        except BaseException:
            self._db.close()
            raise
        try:
            self._check_version()
            if readonly:
                self._check_tables()
        except BaseException:
            self._db.close()
            raise
        if not readonly:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(SCHEMA)
                self._migrate()
                self._record_version()
            except sqlite3.DatabaseError as exc:
                self._db.close()
                raise storage_error(self.path, exc, "open the store for writing") from None

    def _sanity(self) -> None:
        """StoreError when the file's header (its first 100 bytes) says it holds more pages than
        the file has: a truncated store. O(1): the header and the file's size, nothing else."""
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(100)
                size = os.fstat(fh.fileno()).st_size
        except OSError as exc:
            raise storage_error(self.path, exc, "read the store") from None
        if size == 0 and not self.readonly:
            return    # a new store, not written yet
        if len(head) < 100 or not head.startswith(b"SQLite format 3\0"):
            raise StoreError(f"{self.path}: not a labkit store: not an SQLite file, or corrupt (its header is not SQLite's); "
                             "restore it from a copy")
        page = int.from_bytes(head[16:18], "big")
        page = 65536 if page == 1 else page
        counter, pages, valid_for = (int.from_bytes(head[i:i + 4], "big") for i in (24, 28, 92))
        if counter == valid_for and pages and size < pages * page:
            raise StoreError(f"{self.path}: the store is corrupt: its header counts {pages} pages of {page} bytes "
                             f"but the file has {size} bytes (truncated); restore it from a copy")

    def _integrity(self) -> None:
        """StoreError unless ``PRAGMA quick_check`` finds every page sound (reads the whole file)."""
        try:
            bad = [r for (r,) in self._db.execute("PRAGMA quick_check(20)")]
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, "read the store") from None
        if bad != ["ok"]:
            raise StoreError(f"{self.path}: the store is corrupt (integrity check: {'; '.join(bad)[:500]}); "
                             "restore it from a copy, or export what is readable with the sqlite3 .recover command")

    def _read(self, sql: str, args: Sequence = ()) -> sqlite3.Cursor:
        """A read query's cursor; damage SQLite meets while reading is a StoreError naming the store
        and ``labkit check`` (a read-only open does not read every page: :meth:`_integrity`)."""
        try:
            return self._db.execute(sql, args)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None

    def _damaged(self, exc: sqlite3.DatabaseError) -> StoreError:
        return StoreError(f"{self.path}: the store is corrupt ({exc}); `labkit check {self.campaign}` lists "
                          "what is damaged; restore it from a copy")

    def schema_version(self) -> int:
        """The store's schema (``PRAGMA user_version``: 0 for one written before schemas were numbered)."""
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def writer_version(self) -> str | None:
        """The labkit version that last wrote the store (None: not recorded, a store of before)."""
        return writer_version(self._db)

    def _check_version(self) -> None:
        """StoreError when a newer labkit (a higher schema) wrote the store: this one would misread it."""
        try:
            found = self.schema_version()
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, "read the store") from None
        if found > SCHEMA_VERSION:
            raise StoreError(newer_store_message(self.path, self.writer_version(), found))

    #: the tables every labkit store has had, from the first schema on
    CORE_TABLES = ("meta", "runs", "measurements")

    def _check_tables(self) -> None:
        """StoreError when a store opened read-only lacks one of :attr:`CORE_TABLES`: a store whose
        writer is still creating it (or a file labkit did not write), never an sqlite error later."""
        try:
            have = {n for (n,) in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, "read the store") from None
        missing = [t for t in self.CORE_TABLES if t not in have]
        if missing:
            raise StoreError(f"{self.path}: not a complete labkit store: no {', '.join(missing)} table "
                             f"({'its writer is still creating it; try again in a moment' if have else 'an empty database'}, "
                             "or a file labkit did not write)")

    def _record_version(self) -> None:
        """Write this labkit's schema and version into the store (once per labkit that writes it)."""
        if self.schema_version() == SCHEMA_VERSION and self.writer_version() == __version__:
            return
        with self._tx():
            self._db.execute("INSERT OR REPLACE INTO store_info VALUES ('labkit_version', ?)", (__version__,))
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @property
    def campaign(self) -> str:
        """The campaign id the store records (its folder's name when that cannot be read)."""
        if self._campaign is None:
            try:
                row = self._db.execute("SELECT value FROM meta WHERE key = 'campaign_id'").fetchone()
                cid = json.loads(row[0]) if row else None
            except (sqlite3.DatabaseError, TypeError, ValueError, RecursionError):
                cid = None
            self._campaign = cid if isinstance(cid, str) and cid else self.path.parent.name
        return self._campaign

    def _malformed(self, what: str, exc: Malformed) -> None:
        """Report a row left out: once per store, on :attr:`problems` and as a warning."""
        text = f"campaign {self.campaign}: {what}: {exc}"
        if text in self.problems:
            return
        self.problems.append(text)
        said = text   # the campaign and the row: a command opens a store (or its bundled copy) more than once
        if said in _WARNED:      # one warning per process
            return
        if len(_WARNED) < 10_000:
            _WARNED.add(said)
        log.warning("%s; left out of what is read (labkit check %s lists every problem of the store)",
                    text, self.campaign)

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
            make_dirs(self.path.parent, self.dir_mode)   # its mode whatever the umask
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, self.file_mode)
            try:
                if os.fstat(fd).st_uid == os.geteuid():
                    os.fchmod(fd, self.file_mode)
            finally:
                os.close(fd)
            return sqlite3.connect(sqlite_uri(self.path), uri=True, timeout=BUSY_TIMEOUT_S,
                                   check_same_thread=False, isolation_level=None)
        except (OSError, sqlite3.DatabaseError) as exc:
            raise storage_error(self.path, exc, "create the store") from None

    def _open_readonly(self):
        if not self.path.exists():
            raise StoreError(f"no result store at {self.path}")
        if self.path.stat().st_size == 0:
            raise StoreError(f"{self.path}: the store is empty (0 bytes): it was truncated; restore it")
        uri = sqlite_uri(self.path, readonly=True)
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
            db = sqlite3.connect(sqlite_uri(self.path), uri=True, timeout=5)
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
        """The campaign's settings; StoreError naming the campaign and key of a value that is not JSON
        (a damaged store: nothing of the campaign can be read safely without its design)."""
        out = {}
        for k, v in self._db.execute("SELECT key, value FROM meta WHERE substr(key, 1, ?) != ?",
                                     (len(CODE_DIFF_KEY), CODE_DIFF_KEY)):
            try:
                out[k] = json.loads(v)
            except (TypeError, ValueError, RecursionError) as exc:
                raise StoreError(f"{self.path}: campaign {self.campaign}: meta key {str(k)[:60]!r}: column value: "
                                 f"not JSON ({str(exc).splitlines()[0][:80]}): the campaign's settings cannot be "
                                 f"read; restore the store from a copy (labkit check {self.campaign} lists every "
                                 "problem)") from None
        return out

    def set_meta(self, **items: Any) -> None:
        """Store campaign settings (secrets redacted)."""
        items = redact(items)
        with self._tx():
            for k, v in items.items():
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (k, json.dumps(v, default=str)))

    def set_code_diff(self, record: dict) -> None:
        """Keep a checkout's uncommitted diff (:meth:`labkit.core.fingerprint.CodeDiff.record`) in the
        meta table under ``code_diff:<sha256>`` (:mod:`labkit.store.codestate`); a diff kept already
        stays as it was."""
        sha = record.get("sha256") if isinstance(record, dict) else None
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise StoreError(f"{self.path}: a code diff record needs its sha256 (64 hex digits), got {str(sha)[:80]!r}")
        with self._tx():
            self._db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)",
                             (CODE_DIFF_KEY + sha, json.dumps(redact(record), default=str)))

    def code_diffs(self) -> dict[str, dict]:
        """The uncommitted diffs kept (:meth:`set_code_diff`): sha256 -> record; a record that is not
        a JSON object is reported (:attr:`problems`) and left out. Kept out of :meth:`meta`."""
        out = {}
        for k, v in self._read("SELECT key, value FROM meta WHERE substr(key, 1, ?) = ?",
                               (len(CODE_DIFF_KEY), CODE_DIFF_KEY)):
            try:
                out[str(k)[len(CODE_DIFF_KEY):]] = json_object(v, "value")
            except Malformed as exc:
                self._malformed(f"meta key {str(k)[:80]!r}", exc)
        return out

    def add_fingerprint(self, fp_id: str, data: dict) -> None:
        with self._tx():
            self._db.execute("INSERT OR IGNORE INTO fingerprints VALUES (?, ?, ?)",
                             (fp_id, json.dumps(redact(data), default=str), now_iso()))

    def fingerprints(self) -> dict[str, dict]:
        """Host fingerprints by id (one whose data is not a JSON object is reported and left out)."""
        out = {}
        for i, d in self._db.execute("SELECT id, data FROM fingerprints"):
            try:
                out[i] = json_object(d, "data")
            except Malformed as exc:
                self._malformed(f"fingerprint {str(i)[:60]}", exc)
        return out

    def _run_rows(self) -> list[dict]:
        """Every ``runs`` row that reads (:func:`parse_run`), in run order; the others reported."""
        out = []
        for row in self._db.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY run_order"):
            try:
                out.append(parse_run(row))
            except Malformed as exc:
                self._malformed(f"run {str(row[0])[:80]}", exc)
        return out

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
        tail around a marker saying how many were omitted): a failed run's output can be huge.
        One transaction per run; :class:`labkit.store.group.GroupCommit` writes runs that end close
        together in one (:meth:`prepare_run`, :meth:`record_prepared`)."""
        rec = self.prepare_run(run, status=status, started=started, duration_s=duration_s,
                               measurements=measurements, error=error, metadata=metadata,
                               fingerprint_id=fingerprint_id, samples=samples)
        try:
            with self._tx():
                self._insert_run(rec)
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"{self.path}: run {run.run_id} could not be stored ({exc}); "
                             "a run is stored once") from exc

    def prepare_run(self, run: Run, *, status: str, started: str, duration_s: float,
                    measurements: Iterable[Measurement] = (),
                    error: str | None = None, metadata: dict | None = None,
                    fingerprint_id: str | None = None, samples: Iterable[tuple] = ()) -> PreparedRun:
        """The rows :meth:`record_run` would write for this run, checked (StoreError for a status,
        a measurement's iteration or a telemetry row that is not valid) and not written:
        :meth:`record_prepared` writes them."""
        if status not in STATUSES:
            raise StoreError(f"run status must be one of {', '.join(STATUSES)}, got {status!r}")
        error = None if error is None else shorten(error)
        row = (run.run_id, run.order, run.config, run.replicate, json.dumps(run.levels, default=str), status,
               error, started, duration_s, json.dumps(redact(metadata or {}), default=str), fingerprint_id)
        values = [(run.run_id, m.instance, m.metric, float(m.value), m.unit, _iteration(run.run_id, m))
                  for m in measurements]
        return PreparedRun(run.run_id, row, values, _checked_samples(run.run_id, samples))

    def record_prepared(self, runs: Sequence[PreparedRun], *, owner: str | None = None) -> RecordedBatch:
        """Write ``runs`` (:meth:`prepare_run`) in one transaction, each as :meth:`record_run` would
        (its claim dropped with it). With ``owner``, a run whose claim is not ``owner``'s (released,
        or taken over by another controller) is not written: it is in ``skipped``. A run that cannot
        be stored (stored already) is rolled back alone (a savepoint) and named in ``failed`` with
        its StoreError; every other run commits. A StoreError for the transaction as a whole (a
        full disk, a locked store) means none was written."""
        stored: list[str] = []
        skipped: list[str] = []
        failed: dict[str, StoreError] = {}
        if not runs:
            return RecordedBatch(stored, skipped, failed)
        with self._tx():
            for rec in runs:
                if owner is not None:
                    row = self._db.execute("SELECT owner FROM claims WHERE run_id = ?", (rec.run_id,)).fetchone()
                    if row is None or row[0] != owner:
                        skipped.append(rec.run_id)
                        continue
                self._db.execute("SAVEPOINT labkit_run")
                try:
                    self._insert_run(rec)
                except sqlite3.IntegrityError as exc:
                    self._db.execute("ROLLBACK TO labkit_run")
                    failed[rec.run_id] = StoreError(f"{self.path}: run {rec.run_id} could not be stored ({exc}); "
                                                    "a run is stored once")
                else:
                    stored.append(rec.run_id)
                self._db.execute("RELEASE labkit_run")   # (another error: the whole transaction rolls back)
        return RecordedBatch(stored, skipped, failed)

    def _insert_run(self, rec: PreparedRun) -> None:
        self._db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?)", rec.row)
        self._db.executemany("INSERT INTO measurements (run_id, instance, metric, value, unit, iteration) "
                             "VALUES (?,?,?,?,?,?)", rec.measurements)
        self._db.executemany("INSERT INTO samples (run_id, t, metric, value, instance) VALUES (?,?,?,?,?)",
                             rec.samples)
        self._db.execute("DELETE FROM claims WHERE run_id = ?", (rec.run_id,))

    def record_samples(self, run_id: str, rows: Iterable[tuple]) -> None:
        """Add telemetry rows ``(t, metric, value)`` (host) or ``(t, metric, value, instance)`` (one
        instance's, by its id) of run ``run_id`` (``t``: seconds since its telemetry started;
        :mod:`labkit.run.telemetry`) in one transaction; StoreError for a row that is not
        (number, non-empty text, number[, text or None])."""
        with self._tx():
            self._insert_samples(run_id, rows)

    def _insert_samples(self, run_id: str, rows: Iterable[tuple]) -> None:
        self._db.executemany("INSERT INTO samples (run_id, t, metric, value, instance) VALUES (?,?,?,?,?)",
                             _checked_samples(run_id, rows))

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

    def sample_bins(self, run_ids: Sequence[str], *, bins: int, metrics: Sequence[str] | None = None,
                    min_width_s: float = 1.0) -> pd.DataFrame:
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
        if not ids or "samples" not in {n for (n,) in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}:
            return pd.DataFrame(columns=cols)
        inst = "instance IS NULL" if "instance" in self._columns("samples") else "1"
        want = list(dict.fromkeys(metrics)) if metrics is not None else None
        where = f"run_id IN ({','.join('?' * len(ids))}) AND {inst}"
        args: list = list(ids)
        if want is not None:
            where += f" AND metric IN ({','.join('?' * len(want))})"
            args += want
        if len(args) > 900:   # below SQLite's 999 variables: the caller asks for a bounded few runs
            raise StoreError(f"sample_bins: {len(ids)} runs and {len(want or [])} metrics asked at once; "
                             "ask for fewer (the display needs a bounded sample of runs)")
        lo, hi, total = self._read(f"SELECT min(t), max(t), count(*) FROM samples WHERE {where}", args).fetchone()
        if not total:
            return pd.DataFrame(columns=cols)
        width = max(float(min_width_s), (float(hi) - float(lo)) / bins if hi > lo else 0.0, 1e-9)
        rows = self._read(
            f"SELECT run_id, metric, min(CAST((t - ?) / ? AS INTEGER), ?) AS b, avg(value), count(*) FROM samples "
            f"WHERE {where} GROUP BY run_id, metric, b ORDER BY metric, b, run_id", [lo, width, bins - 1, *args]
        ).fetchall()
        out = pd.DataFrame([(r, m, b, lo + b * width, v, n) for r, m, b, v, n in rows], columns=cols)
        out.attrs.update(width_s=width, samples=int(total))
        return out

    def sample_count(self, run_id: str) -> int:
        """How many telemetry samples run ``run_id`` has (0 for a store written before telemetry)."""
        try:
            return int(self._read("SELECT count(*) FROM samples WHERE run_id = ?", (run_id,)).fetchone()[0])
        except sqlite3.OperationalError:   # no samples table (a store of before, read-only)
            return 0

    def config_runs(self, config: int) -> list[str]:
        """The run ids stored for configuration ``config``, in run order."""
        return [r for (r,) in self._read("SELECT run_id FROM runs WHERE config = ? ORDER BY run_order", (config,))]

    def run_config(self, run_id: str) -> int | None:
        """The configuration of the stored run ``run_id`` (None when it is not stored)."""
        row = self._read("SELECT config FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else int(row[0])

    def write_run_output(self, run_id: str, text: str, status: str | None = None) -> Path:
        """Keep ``text`` (a run's command output, e.g. :func:`labkit.backends.base.exec_log_text`)
        as ``output/<run_id>.log`` beside the store: a first line stating the run (and its
        ``status``) and the size of ``text`` in bytes, then its first :data:`OUTPUT_HEAD` and last
        :data:`OUTPUT_TAIL` bytes around a marker saying how many were left out; private (0600,
        the directory 0700), written atomically; returns its path. A run that runs again
        overwrites its file.

        Written without ``fsync`` (:func:`~labkit.core.files.atomic_write` ``sync=False``): the
        run's row is committed in WAL mode with ``synchronous=NORMAL`` (durable against a crash of
        any process, not against a power loss until the next checkpoint), and its output has the
        same durability, for a tenth of the time two fsyncs took (15.7 -> 1-2 ms per run,
        issue 45)."""
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
            return atomic_write(path, first + kept.text(), mode=0o600, dir_mode=0o700, sync=False)
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
        for r in self._run_rows():
            rows.append({"run_id": r["run_id"], "run_order": r["run_order"], "config": r["config"],
                         "replicate": r["replicate"], **r["levels"], "status": r["status"], "error": r["error"],
                         "started": r["started"], "duration_s": r["duration_s"], "metadata": r["metadata"],
                         "fingerprint_id": r["fingerprint_id"]})
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
        rows = []
        for (rid, st, err, start, dur, md, fp) in self._db.execute(
                f"SELECT {', '.join(cols)} FROM attempts ORDER BY rowid"):
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
        by = {str(s): int(n) for s, n in self._read("SELECT status, count(*) FROM runs GROUP BY status ORDER BY status")}
        first, last = self._read("SELECT min(started), max(started) FROM runs").fetchone()
        self._name_unreadable_metadata()
        return {"runs": sum(by.values()), "by_status": by, "first_run": first, "last_run": last}

    def _name_unreadable_metadata(self, limit: int = 20) -> None:
        """Name (:meth:`_malformed`) the first ``limit`` runs whose metadata is not JSON at all, by
        one SQL scan: what reads no run's JSON in Python (``list``, ``show``, the streaming export)
        still says which runs every other reader leaves out."""
        for (rid,) in self._read(f"SELECT run_id FROM runs WHERE NOT json_valid(metadata) LIMIT {int(limit)}"):
            self._malformed(f"run {rid}", Malformed("metadata", "not JSON"))

    def measurement_metadata(self) -> pd.DataFrame:
        """One row per run, column ``metadata`` holding only what
        :func:`labkit.run.telemetry.measurement_notes` reads (``telemetry.host`` and whether any
        ``limits_enforced`` is false), read by SQL aggregates: ``labkit show`` parses no run's JSON.
        A run whose metadata SQLite cannot read counts as measured."""
        import pandas as pd
        rows: list[dict] = []
        for host, unconfined, n in self._read(
                "SELECT json_extract(metadata, '$.telemetry.host'), "
                "EXISTS (SELECT 1 FROM json_tree(metadata) WHERE key = 'limits_enforced' AND type = 'false'), "
                "count(*) FROM runs WHERE json_valid(metadata) GROUP BY 1, 2"):
            md: dict = {"telemetry": {"host": host}}
            if unconfined:
                md["limits_enforced"] = False
            rows += [md] * int(n)
        n_other = self._read("SELECT count(*) FROM runs WHERE NOT json_valid(metadata)").fetchone()[0]
        rows += [{}] * int(n_other)
        return pd.DataFrame({"metadata": rows})

    def _run_table(self) -> tuple[pd.DataFrame, dict[tuple[str, int], tuple[str, int]], dict[str, str]]:
        """``(runs, instances, stored_md)``: one row per run that reads, in run order (columns
        run_id, run_order, config, replicate, levels (its JSON text), status, error, started,
        duration_s, fingerprint_id, host, run_seq, suspect, suspect_reason), ``(run_id, index) ->
        (instance id, boot)`` (:func:`~labkit.store.levels.key_instances`) and the stored metadata
        text of each run.

        A row SQLite's JSON functions accept is read there, only the fields the levels need leaving
        SQLite (its host, run_seq, suspect flag, boot group and instances); a row they do not
        (e.g. a NaN Python wrote) is parsed whole in Python (:func:`parse_run`) and reported and
        left out when it is not what labkit writes."""
        import pandas as pd
        cols = ", ".join(RUN_COLUMNS[:-2] + ("fingerprint_id",))
        md_fields = ", ".join(f"json_type(metadata, '$.{k}'), json_extract(metadata, '$.{k}')"
                              for k in _LEVEL_FIELDS)
        base, light, texts = [], {}, {}
        for row in self._read(f"SELECT {cols}, {md_fields}, metadata FROM runs WHERE {_RUN_VALID} "
                              "ORDER BY run_order"):
            rid = row[0]
            md: dict = {}
            for i, k in enumerate(_LEVEL_FIELDS):
                kind = row[11 + 2 * i - 1]
                if kind is not None:
                    md[k] = _json_value(kind, row[11 + 2 * i])
            light[rid] = md
            texts[rid] = row[-1]
            base.append(row[:10])
        slow = [row for row in self._read(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE NOT ({_RUN_VALID}) "
                                          "ORDER BY run_order")]
        for row in slow:
            try:
                r = parse_run(row)
            except Malformed as exc:
                self._malformed(f"run {str(row[0])[:80]}", exc)
                continue
            light[r["run_id"]] = r["metadata"]
            texts[r["run_id"]] = row[9]
            base.append((r["run_id"], r["run_order"], r["config"], r["replicate"], row[4], r["status"], r["error"],
                         r["started"], r["duration_s"], r["fingerprint_id"]))
        if slow:
            base.sort(key=lambda b: b[1])
        runs = pd.DataFrame(base, columns=["run_id", "run_order", "config", "replicate", "levels", "status", "error",
                                           "started", "duration_s", "fingerprint_id"])
        levels = rekey(run_levels((b[0], b[1], b[7], light[b[0]]) for b in base),
                       {rid: boot_key(rid, md) for rid, md in light.items()})
        lv = [levels[rid] for rid in runs["run_id"]]
        runs["host"] = [x.host for x in lv]
        runs["run_seq"] = pd.array([x.run_seq for x in lv], dtype="Int64")
        runs["suspect"] = [x.suspect_reason is not None for x in lv]
        runs["suspect_reason"] = pd.Series([x.suspect_reason for x in lv], dtype=object)
        instances = {(x.run_id, i): (name, x.boots.get(i, 1)) for x in lv for i, name in x.names.items()}
        return runs, instances, texts

    def _bad_measurements(self, has_it: bool) -> set[str]:
        """The runs with a measurement row that is not what labkit writes (found by SQL, each
        reported as :func:`check_measurement` words it)."""
        bad: set[str] = set()
        it = "iteration" if has_it else "NULL"
        for rid, inst, metric, value, unit, iteration in self._read(
                f"SELECT run_id, instance, metric, value, unit, {it} FROM measurements m "
                f"WHERE NOT ({_measurement_valid(has_it)})"):
            try:
                check_measurement(inst, metric, value, unit, iteration)
            except Malformed as exc:
                if rid not in bad:
                    self._malformed(f"run {rid}", exc)
                bad.add(rid)
        return bad

    def tidy(self) -> pd.DataFrame:
        """One row per measurement, with every factor's level as a column (docs/design.md "Store").

        Columns: campaign, run_id, run_order, replicate, config, <factor columns>,
        instance (the id of the instance that measured it: its name, unique per started instance;
        ``<name>@<boot>`` should two boots have drawn one name, :func:`~labkit.store.levels.key_instances`),
        metric, value, unit, status, error, started, duration_s, fingerprint_id,
        host (the host that ran it: a testbed host's name, ``local`` on this machine), then
        the levels of the measurement: instance_index (the instance's index in its run),
        boot (the instance's start count within the campaign, 1-based), run_seq (order of the run
        on its host, 1-based, in execution order), iteration (1-based iteration inside the run for
        a workload that reports repeated iterations, NA otherwise), and the quiet-host guard's
        suspect (bool) and suspect_reason. ``instance_index``, ``boot``, ``run_seq`` and
        ``iteration`` are nullable integers. A failed or timed-out run has one row with
        metric/value (and instance) empty. A store written before levels were recorded is read
        as described in :mod:`labkit.store.levels`.

        Read column-wise: one SQL query for the measurements, the runs' JSON read by SQLite (only
        the fields the levels need) and each distinct ``levels`` text parsed once
        (:meth:`tidy_chunks`, which :meth:`export` writes from chunk by chunk).
        """
        import pandas as pd
        parts = list(self.tidy_chunks())
        return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True).infer_objects()

    def tidy_chunks(self, rows: int = 200_000) -> Iterator[pd.DataFrame]:
        """:meth:`tidy`'s rows, at most ``rows`` at a time, in its order and with its columns and
        types (at least one frame, empty for a store without runs). Memory: the chunk, plus a few
        fields per run and per instance."""
        import pandas as pd
        meta = self.meta()
        factors = list(meta.get("design", {}).get("factors", {}))
        cols = TIDY_COLUMNS[:5] + factors + TIDY_COLUMNS[5:]
        has_it = "iteration" in self._columns("measurements")   # not in a store of before (read-only)
        runs, instances, _ = self._run_table()
        bad = self._bad_measurements(has_it)
        if bad:
            runs = runs[~runs["run_id"].isin(bad)]
        parsed = {t: json.loads(t) for t in runs["levels"].unique()}   # distinct levels texts: one per configuration
        for f in factors:
            runs[f] = runs["levels"].map(lambda t, f=f: parsed[t].get(f))
        runs = runs.drop(columns=["levels"]).assign(campaign=meta.get("campaign_id")).set_index("run_id")
        inst = pd.DataFrame([(rid, i, name, boot) for (rid, i), (name, boot) in instances.items()],
                            columns=["run_id", "instance_index", "instance", "boot"])
        q = ("SELECT r.run_id, m.instance, m.metric, m.value, m.unit, "
             f"{'m.iteration' if has_it else 'NULL'} "
             "FROM runs r LEFT JOIN measurements m ON m.run_id = r.run_id "
             f"ORDER BY r.run_order, m.instance, m.metric{', m.iteration' if has_it else ''}")
        for got in self._chunks(self._read(q), rows):
            m = pd.DataFrame(got, columns=["run_id", "instance_index", "metric", "value", "unit", "iteration"])
            m = m[m["run_id"].isin(runs.index)]
            out = m.join(runs, on="run_id")
            out["instance_index"] = out["instance_index"].astype("Int64")
            out = out.merge(inst.astype({"instance_index": "Int64"}), on=["run_id", "instance_index"], how="left",
                            sort=False)
            miss = out["instance"].isna() & out["instance_index"].notna()
            if miss.any():   # an instance the run's metadata does not name: <run_id>:<index>, boot 1
                out.loc[miss, "instance"] = (out.loc[miss, "run_id"] + ":"
                                             + out.loc[miss, "instance_index"].astype(str))
                out.loc[miss, "boot"] = 1
            out["iteration"] = out["iteration"].where(out["iteration"].fillna(0) != 0)
            out = out.reindex(columns=cols)
            for col in ("instance_index", "boot", "run_seq", "iteration"):
                out[col] = out[col].astype("Int64")
            out["suspect"] = out["suspect"].astype(bool)
            for col in ("instance", "metric", "unit", "error", "fingerprint_id", "host", "suspect_reason"):
                out[col] = out[col].astype(object).where(out[col].notna(), None)
            out = out.infer_objects()    # the column types the DataFrame constructor would give
            yield out.reset_index(drop=True)

    def export(self, directory: str | Path | None = None,
               formats: Sequence[str] = ("csv", "parquet")) -> list[Path]:
        """Write ``results.<fmt>`` (tidy rows) for each of ``formats``, ``runs.csv``, the telemetry
        (:meth:`samples`) as ``samples.csv`` and/or ``samples.parquet`` (the formats asked for)
        and ``fingerprints.json`` beside the store (or in ``directory``); returns the paths written
        but fingerprints.json.

        Streaming: rows go from SQLite to the files in chunks (:data:`EXPORT_CHUNK` rows, a CSV
        writer, a ``pyarrow.parquet.ParquetWriter``), so memory stays bounded by the chunk and a
        few fields per run, whatever the number of measurements and telemetry samples. Each file
        is written with :func:`labkit.core.files.atomic_write`: atomically, with the store's file
        mode, refusing a symbolic link in place of an output file or of ``directory`` itself
        (opened with ``O_NOFOLLOW``, then written into by descriptor:
        :class:`~labkit.errors.ConfigError`)."""
        bad = [f for f in formats if f not in ("csv", "parquet")]
        if bad:
            raise StoreError(f"export format {bad[0]!r} not supported; use csv or parquet")
        formats = list(dict.fromkeys(formats))
        directory = Path(directory or self.path.parent)
        self._name_unreadable_metadata()
        writers: list[tuple[str, Callable[[BinaryIO], object]]] = [
            (f"results.{fmt}", partial(self._write_results, fmt=fmt)) for fmt in formats]
        writers.append(("runs.csv", self._write_runs))
        writers += [(f"samples.{fmt}", partial(self._write_samples, fmt=fmt)) for fmt in formats]
        writers.append(("fingerprints.json", lambda fh: fh.write(
            json.dumps(self.fingerprints(), indent=2, default=str).encode())))
        written = []
        try:
            # the directory opened without following a link (one planted by another user is refused,
            # ConfigError), created with the store's directory mode whatever the umask
            dfd = open_dir(directory, dir_mode=self.dir_mode)
            try:
                for name, write in writers:
                    out = atomic_write(directory / name, write, mode=self.file_mode, dir_fd=dfd)
                    if name != "fingerprints.json":
                        written.append(out)
            finally:
                os.close(dfd)
        except OSError as exc:
            raise storage_error(directory, exc, "write the exported results") from None
        return written

    def _write_results(self, fh: BinaryIO, fmt: str) -> None:
        _write_frames(fh, fmt, self.tidy_chunks(EXPORT_CHUNK))

    def _write_runs(self, fh: BinaryIO) -> None:
        """runs.csv: :meth:`runs`'s columns, ``metadata`` as its stored JSON text, in chunks."""
        runs, _, texts = self._run_table()
        parsed = {t: json.loads(t) for t in runs["levels"].unique()}
        keys = list(dict.fromkeys(k for t in runs["levels"].unique() for k in parsed[t]))
        head = ["run_id", "run_order", "config", "replicate"]
        tail = ["status", "error", "started", "duration_s", "metadata", "fingerprint_id", "host", "run_seq",
                "suspect", "suspect_reason"]
        keys = [k for k in keys if k not in head + tail]

        def frames() -> Iterator[pd.DataFrame]:
            for start in range(0, max(len(runs), 1), EXPORT_CHUNK):
                part = runs.iloc[start:start + EXPORT_CHUNK].copy()
                for k in keys:
                    part[k] = part["levels"].map(lambda t, k=k: parsed[t].get(k))
                part["metadata"] = part["run_id"].map(texts)
                yield part.reindex(columns=head + keys + tail)
        _write_frames(fh, "csv", frames())

    def _write_samples(self, fh: BinaryIO, fmt: str) -> None:
        """samples.<fmt>: every telemetry row (:data:`SAMPLE_COLUMNS`), as :meth:`samples` orders them."""
        import pandas as pd

        def frames() -> Iterator[pd.DataFrame]:
            if not self._read("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'samples'").fetchone():
                yield pd.DataFrame(columns=SAMPLE_COLUMNS)
                return
            inst = "instance" if "instance" in self._columns("samples") else "NULL"
            cur = self._read(f"SELECT run_id, t, metric, value, {inst} FROM samples "
                             f"ORDER BY run_id, t, {'instance, ' if inst != 'NULL' else ''}metric")
            for got in self._chunks(cur, EXPORT_CHUNK):
                frame = pd.DataFrame(got, columns=SAMPLE_COLUMNS)
                frame["instance"] = frame["instance"].astype(object)
                yield frame
        _write_frames(fh, fmt, frames(), types={"run_id": "string", "t": "double", "metric": "string",
                                                "value": "double", "instance": "string"})

    # -- internals -------------------------------------------------------------
    def _chunks(self, cur: sqlite3.Cursor, size: int) -> Iterator[list]:
        """The rows of ``cur``, ``size`` at a time: one empty chunk when there are none (a file
        still gets its header), none after the last; a page SQLite cannot read is a StoreError."""
        first = True
        while True:
            try:
                got = cur.fetchmany(size)
            except sqlite3.OperationalError:
                raise
            except sqlite3.DatabaseError as exc:
                raise self._damaged(exc) from None
            if not got and not first:
                return
            first = False
            yield got
            if not got:
                return

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


class PreparedRun(NamedTuple):
    """A run's rows, checked and ready to write (:meth:`Store.prepare_run`)."""
    run_id: str
    row: tuple
    measurements: list[tuple]
    samples: list[tuple]


class RecordedBatch(NamedTuple):
    """What :meth:`Store.record_prepared` did with each run of a batch."""
    stored: list[str]
    skipped: list[str]              # not written: its claim is not the writer's
    failed: dict[str, StoreError]   # not written: could not be stored (stored already)


def _checked_samples(run_id: str, rows: Iterable[tuple]) -> list[tuple]:
    """Telemetry rows as stored (``(run_id, t, metric, value, instance)``); StoreError naming the
    first that is not (number, non-empty text, number[, text or None])."""
    checked = []
    for i, row in enumerate(rows):
        if type(row) is tuple and len(row) == 3:   # the common case (a host's row), checked quickly
            t, metric, value = row
            if type(metric) is str and metric and type(t) is float and type(value) is float:
                checked.append((run_id, t, metric, value, None))
                continue
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
    return checked


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


def writer_version(db: sqlite3.Connection) -> str | None:
    """The labkit version recorded in ``store_info`` (None when it is not: a store of before)."""
    try:
        row = db.execute("SELECT value FROM store_info WHERE key = 'labkit_version'").fetchone()
    except sqlite3.DatabaseError:
        return None
    return str(row[0])[:40] if row and row[0] is not None else None


def newer_store_message(path: str | Path, writer: str | None, schema: int) -> str:
    """Why a store of schema ``schema`` (> :data:`SCHEMA_VERSION`) is refused, in one line."""
    who = f"labkit {writer}" if writer else "a newer labkit (version not recorded)"
    return (f"{path}: written by {who} (schema {schema}); this is labkit {__version__} (schema "
            f"{SCHEMA_VERSION}): upgrade labkit to read it (pip install -U -r requirements.txt, or update "
            "the checkout); nothing was changed")


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
