"""Exporting a store: ``results.csv``/``.parquet`` (the tidy rows), ``runs.csv``, the telemetry
and the fingerprints beside it, streamed from SQLite in chunks and written atomically with the
store's file mode (:meth:`Exports.export`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..core.files import atomic_write, open_dir
from ..errors import StoreError
from .bulk import gc_paused
from .export_files import first_frame, write_frames, write_tables
from .samples import Samples
from .sqlite import storage_error
from .tidy import RUNS_HEAD, RUNS_TAIL, RunTable, TidyTables

if TYPE_CHECKING:
    import pandas as pd

#: rows per chunk of :meth:`Store.export` (and of :meth:`Store.tidy_chunks` when it exports)
EXPORT_CHUNK = 50_000


class Exports(TidyTables, Samples):
    """The exports of :class:`labkit.store.Store`."""

    #: an :meth:`export` is in progress: the runs are read once for all its files (:meth:`_read_runs`)
    _exporting = False
    _export_runs: RunTable | None = None

    def export(
        self, directory: str | Path | None = None, formats: Sequence[str] = ("csv", "parquet")
    ) -> list[Path]:
        """Write ``results.<fmt>`` (tidy rows) for each of ``formats``, ``runs.csv``, the telemetry
        (:meth:`samples`) as ``samples.csv`` and/or ``samples.parquet`` (the formats asked for)
        and ``fingerprints.json`` beside the store (or in ``directory``); returns the paths written
        but fingerprints.json.

        Streaming: rows go from SQLite to the files in chunks (:data:`EXPORT_CHUNK` rows, a CSV
        writer, a ``pyarrow.parquet.ParquetWriter``), so memory stays bounded by the chunk and a
        few fields per run, whatever the number of measurements and telemetry samples. The
        telemetry, millions of rows, goes through Arrow, never pandas (:meth:`sample_tables`,
        :func:`~labkit.store.export_files.write_tables`: the same columns, values, order and
        Parquet schema as a pandas frame of the rows would give), part of it read by a second
        process on a machine of more than one core (:mod:`labkit.store.sample_worker`), and is
        written first; the runs are then read once for results.* and runs.csv. Each file
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
            (f"results.{fmt}", partial(self._write_results, fmt=fmt)) for fmt in formats
        ]
        writers.append(("runs.csv", self._write_runs))
        writers += [(f"samples.{fmt}", partial(self._write_samples, fmt=fmt)) for fmt in formats]
        writers.append(
            (
                "fingerprints.json",
                lambda fh: fh.write(json.dumps(self.fingerprints(), indent=2, default=str).encode()),
            )
        )
        written: dict[str, Path] = {}
        try:
            # the directory opened without following a link (one planted by another user is refused,
            # ConfigError), created with the store's directory mode whatever the umask
            dfd = open_dir(directory, dir_mode=self.dir_mode)
            self._exporting = True
            try:
                # the telemetry first: its second process has ended before the runs are read
                for name, write in sorted(writers, key=lambda w: not w[0].startswith("samples.")):
                    out = atomic_write(directory / name, write, mode=self.file_mode, dir_fd=dfd)
                    if name != "fingerprints.json":
                        written[name] = out
            finally:
                self._exporting, self._export_runs = False, None
                os.close(dfd)
        except OSError as exc:
            raise storage_error(directory, exc, "write the exported results") from None
        return [written[name] for name, _ in writers if name in written]  # in the order of ``writers``

    def _write_results(self, fh: BinaryIO, fmt: str) -> None:
        write_frames(fh, fmt, self.tidy_chunks(EXPORT_CHUNK))

    def _read_runs(self, *, texts: bool = False, fields: bool = False) -> RunTable:
        """During :meth:`export`, the runs it read once for all its files (results.* through
        :meth:`tidy_chunks`, and runs.csv, which reads the metadata texts a chunk at a time);
        else (or when asked for more) :meth:`TidyTables._read_runs <labkit.store.tidy.TidyTables>`'s."""
        if not self._exporting or texts or fields:
            return super()._read_runs(texts=texts, fields=fields)
        if self._export_runs is None:
            with gc_paused():
                self._export_runs = super()._read_runs()
        return self._export_runs

    def _write_runs(self, fh: BinaryIO) -> None:
        """runs.csv: :meth:`runs`'s columns, ``metadata`` as its stored JSON text, in chunks (the
        texts of a chunk's runs read for that chunk: never all of them at once)."""
        runs = self._read_runs().runs
        parsed = {t: json.loads(t) for t in runs["levels"].unique()}
        keys = list(dict.fromkeys(k for t in runs["levels"].unique() for k in parsed[t]))
        head, tail = list(RUNS_HEAD), list(RUNS_TAIL)
        keys = [k for k in keys if k not in head + tail]

        def frames() -> Iterator[pd.DataFrame]:
            for start in range(0, max(len(runs), 1), EXPORT_CHUNK):
                part = runs.iloc[start : start + EXPORT_CHUNK].copy()
                for k in keys:
                    part[k] = part["levels"].map(lambda t, k=k: parsed[t].get(k))
                part["metadata"] = part["run_id"].map(self._metadata_texts(list(part["run_id"])))
                yield part.reindex(columns=head + keys + tail)

        write_frames(fh, "csv", frames())

    def _metadata_texts(self, run_ids: list[str]) -> dict[str, str]:
        """run_id -> the stored metadata text, of ``run_ids`` (by the primary key, a few hundred at a time)."""
        texts: dict[str, str] = {}
        for start in range(0, len(run_ids), 500):
            ids = run_ids[start : start + 500]
            texts.update(
                self._read(
                    f"SELECT run_id, metadata FROM runs WHERE run_id IN ({','.join('?' * len(ids))})", ids
                ).fetchall()
            )
        return texts

    def _write_samples(self, fh: BinaryIO, fmt: str) -> None:
        """samples.<fmt>: every telemetry row (:data:`~labkit.store.schema.SAMPLE_COLUMNS`), as
        :meth:`samples` orders them, :data:`EXPORT_CHUNK` rows at a time as Arrow tables
        (:meth:`sample_tables`), the file's content what pandas would write from the same rows
        (:func:`~labkit.store.export_files.write_tables`)."""
        # a second process reads half the ranges; more for CSV, which this one spends longer writing
        workers = 2 if (os.cpu_count() or 1) > 1 and sys.executable else 1
        frame, tables = first_frame(
            self.sample_tables(EXPORT_CHUNK, workers=workers, share=0.6 if fmt == "csv" else 0.5)
        )
        frame["instance"] = frame["instance"].astype(object)  # (as a frame of the rows has it)
        write_tables(fh, fmt, tables, frame)
