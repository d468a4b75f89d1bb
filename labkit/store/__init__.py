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

This package only gathers the public names; each lives in the module named for what it owns:
:mod:`~labkit.store.store` (the :class:`Store` class), :mod:`~labkit.store.sqlite` (the file:
opening, checks, transactions), :mod:`~labkit.store.schema` (tables and versions),
:mod:`~labkit.store.rows` (reading a stored row), :mod:`~labkit.store.campaign_meta` (settings
and fingerprints), :mod:`~labkit.store.runs` (recording and reading runs),
:mod:`~labkit.store.samples` (telemetry), :mod:`~labkit.store.tidy` (the tidy table),
:mod:`~labkit.store.export` (the exported files), :mod:`~labkit.store.leases` (the fleet's claims
on runs) and :mod:`~labkit.store.run_output` (each run's command output).
"""

from __future__ import annotations

from ..core.clock import now_iso
from .export import EXPORT_CHUNK
from .leases import CLAIM_CHUNK
from .rows import Malformed, check_measurement, json_object, parse_run
from .run_output import (
    OUTPUT_CAP,
    OUTPUT_HEAD,
    OUTPUT_TAIL,
    RUN_OUTPUT_CHOICES,
    RUN_OUTPUT_ENV,
    run_output_policy,
)
from .runs import PreparedRun, RecordedBatch
from .schema import (
    CODE_DIFF_KEY,
    EXPORTS,
    MIGRATE_MEASUREMENTS,
    RUN_COLUMNS,
    SAMPLE_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    STATUSES,
    TIDY_COLUMNS,
    newer_store_message,
    writer_version,
)
from .sqlite import (
    BUSY_TIMEOUT_S,
    READONLY_ATTEMPTS,
    READONLY_RECOVER_AT,
    busy,
    sqlite_uri,
    storage_error,
)
from .store import Store, load_design, load_results

__all__ = [
    "BUSY_TIMEOUT_S",
    "CLAIM_CHUNK",
    "CODE_DIFF_KEY",
    "EXPORTS",
    "EXPORT_CHUNK",
    "MIGRATE_MEASUREMENTS",
    "OUTPUT_CAP",
    "OUTPUT_HEAD",
    "OUTPUT_TAIL",
    "READONLY_ATTEMPTS",
    "READONLY_RECOVER_AT",
    "RUN_COLUMNS",
    "RUN_OUTPUT_CHOICES",
    "RUN_OUTPUT_ENV",
    "SAMPLE_COLUMNS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "STATUSES",
    "TIDY_COLUMNS",
    "Malformed",
    "PreparedRun",
    "RecordedBatch",
    "Store",
    "busy",
    "check_measurement",
    "json_object",
    "load_design",
    "load_results",
    "newer_store_message",
    "now_iso",
    "parse_run",
    "run_output_policy",
    "sqlite_uri",
    "storage_error",
    "writer_version",
]
