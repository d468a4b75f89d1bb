"""The store's tables and versions: the SQL schema this labkit writes (:data:`SCHEMA`,
:data:`SCHEMA_VERSION`), the migration from a store of before, the columns labkit reads, and the
words for a store written by a newer labkit (:func:`newer_store_message`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .. import __version__

#: the schema this labkit writes (``PRAGMA user_version``). 1: the first numbered one (a store
#: written before numbering reads 0 and is migrated by its columns: :meth:`Store._migrate`). A
#: change to the tables raises it, with a migration from the one before.
SCHEMA_VERSION = 1

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
RUN_COLUMNS = (
    "run_id",
    "run_order",
    "config",
    "replicate",
    "levels",
    "status",
    "error",
    "started",
    "duration_s",
    "metadata",
    "fingerprint_id",
)
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

TIDY_COLUMNS = [
    "campaign",
    "run_id",
    "run_order",
    "replicate",
    "config",
    "instance",
    "metric",
    "value",
    "unit",
    "status",
    "error",
    "started",
    "duration_s",
    "fingerprint_id",
    "host",
    "instance_index",
    "boot",
    "run_seq",
    "iteration",
    "suspect",
    "suspect_reason",
]
#: columns of :meth:`Store.samples`
SAMPLE_COLUMNS = ["run_id", "t", "metric", "value", "instance"]

#: the files :meth:`Store.export <labkit.store.Store.export>` writes beside the store (a store is
#: never silently started over while they remain: :class:`labkit.store.sqlite.StoreFile`)
EXPORTS = ("results.csv", "results.parquet", "runs.csv")


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
    return (
        f"{path}: written by {who} (schema {schema}); this is labkit {__version__} (schema "
        f"{SCHEMA_VERSION}): upgrade labkit to read it (pip install -U -r requirements.txt, or update "
        "the checkout); nothing was changed"
    )
