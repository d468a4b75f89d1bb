"""The store's SQLite file: opening it (read-only, or for writing with its checks, migration
and version), reading it with damage reported as a :class:`~labkit.errors.StoreError`, and
writing it in transactions. :class:`StoreFile` is what every part of
:class:`labkit.store.Store` stands on."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path

from .. import __version__
from ..core.files import make_dirs
from ..core.waiting import retry
from ..errors import StoreError
from .rows import Malformed
from .schema import EXPORTS, MIGRATE_MEASUREMENTS, SCHEMA, SCHEMA_VERSION, newer_store_message, writer_version

log = logging.getLogger("labkit.store")
#: (store, problem) pairs already logged by this process (:meth:`StoreFile._malformed`)
_WARNED: set[str] = set()

#: how long a write waits for another writer to finish (SQLite's busy timeout), in seconds
BUSY_TIMEOUT_S = 30.0
#: a read-only open is tried this many times in all (pauses 0.05 s growing to 0.25 s: about 7 s);
#: before try READONLY_RECOVER_AT a dead writer's WAL is replayed (:meth:`StoreFile._recover_wal`)
READONLY_ATTEMPTS, READONLY_RECOVER_AT = 30, 4


def sqlite_uri(path: str | Path, *, readonly: bool = False) -> str:
    """``path`` as an SQLite URI (``file:`` + the absolute path percent-encoded), to open with
    ``sqlite3.connect(..., uri=True)``: a path holding ``?``, ``#`` or ``%`` names that file, not
    a query or a fragment. ``readonly`` adds ``?mode=ro``."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path), safe="/")
    return uri + "?mode=ro" if readonly else uri


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


class StoreFile:
    """A store's open SQLite file (:class:`labkit.store.Store` documents the arguments): the
    connection, the checks made when it is opened, and the helpers every part of the store reads
    and writes with."""

    def __init__(
        self,
        path: str | Path,
        *,
        readonly: bool = False,
        group_readable: bool = False,
        allow_new: bool = False,
    ):
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
            if not readonly:  # integrity is checked where the store is written, not where it is read
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
            return  # a new store, not written yet
        if len(head) < 100 or not head.startswith(b"SQLite format 3\0"):
            raise StoreError(
                f"{self.path}: not a labkit store: not an SQLite file, or corrupt (its header is not SQLite's); "
                "restore it from a copy"
            )
        page = int.from_bytes(head[16:18], "big")
        page = 65536 if page == 1 else page
        counter, pages, valid_for = (int.from_bytes(head[i : i + 4], "big") for i in (24, 28, 92))
        if counter == valid_for and pages and size < pages * page:
            raise StoreError(
                f"{self.path}: the store is corrupt: its header counts {pages} pages of {page} bytes "
                f"but the file has {size} bytes (truncated); restore it from a copy"
            )

    def _integrity(self) -> None:
        """StoreError unless ``PRAGMA quick_check`` finds every page sound (reads the whole file)."""
        try:
            bad = [r for (r,) in self._db.execute("PRAGMA quick_check(20)")]
        except sqlite3.DatabaseError as exc:
            raise storage_error(self.path, exc, "read the store") from None
        if bad != ["ok"]:
            raise StoreError(
                f"{self.path}: the store is corrupt (integrity check: {'; '.join(bad)[:500]}); "
                "restore it from a copy, or export what is readable with the sqlite3 .recover command"
            )

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
        return StoreError(
            f"{self.path}: the store is corrupt ({exc}); `labkit check {self.campaign}` lists "
            "what is damaged; restore it from a copy"
        )

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
            raise StoreError(
                f"{self.path}: not a complete labkit store: no {', '.join(missing)} table "
                f"({'its writer is still creating it; try again in a moment' if have else 'an empty database'}, "
                "or a file labkit did not write)"
            )

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
        said = text  # the campaign and the row: a command opens a store (or its bundled copy) more than once
        if said in _WARNED:  # one warning per process
            return
        if len(_WARNED) < 10_000:
            _WARNED.add(said)
        log.warning(
            "%s; left out of what is read (labkit check %s lists every problem of the store)",
            text,
            self.campaign,
        )

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
                    "away, or start over on purpose (allow_new=True, labkit run --new-store)"
                )
        try:
            make_dirs(self.path.parent, self.dir_mode)  # its mode whatever the umask
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, self.file_mode)
            try:
                if os.fstat(fd).st_uid == os.geteuid():
                    os.fchmod(fd, self.file_mode)
            finally:
                os.close(fd)
            return sqlite3.connect(
                sqlite_uri(self.path),
                uri=True,
                timeout=BUSY_TIMEOUT_S,
                check_same_thread=False,
                isolation_level=None,
            )
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
            return retry(
                connect,
                transient=sqlite3.OperationalError,
                what=f"opening {self.path} read-only",
                attempts=READONLY_ATTEMPTS,
                interval=0.05,
                max_interval=0.25,
            )
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
                raise StoreError(
                    f"{_db_path(self.db)}: the store is locked by another writer (waited "
                    f"{BUSY_TIMEOUT_S:g} s): {exc}"
                ) from exc
            raise storage_error(_db_path(self.db), exc, "write to the store") from None

    def __exit__(self, exc_type, exc, _tb):
        if exc_type is not None:
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.DatabaseError:
                pass  # SQLite already rolled back (e.g. disk full)
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
