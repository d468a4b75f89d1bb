"""Exporting a store: ``results.csv``/``.parquet`` (the tidy rows), ``runs.csv``, the telemetry
and the fingerprints beside it, streamed from SQLite in chunks and written atomically with the
store's file mode (:meth:`Exports.export`)."""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..core.files import atomic_write, open_dir
from ..errors import StoreError
from .schema import SAMPLE_COLUMNS
from .sqlite import storage_error
from .tidy import TidyTables

if TYPE_CHECKING:
    import pandas as pd

#: rows per chunk of :meth:`Store.export` (and of :meth:`Store.tidy_chunks` when it exports)
EXPORT_CHUNK = 50_000
#: parquet types of the tidy and samples columns (a chunk whose column is all empty has no type of its own)
_PARQUET_TYPES = {"campaign": "string", "run_id": "string", "run_order": "int64", "replicate": "int64",
                  "config": "int64", "instance": "string", "metric": "string", "value": "double", "unit": "string",
                  "status": "string", "error": "string", "started": "string", "duration_s": "double",
                  "fingerprint_id": "string", "host": "string", "instance_index": "int64", "boot": "int64",
                  "run_seq": "int64", "iteration": "int64", "suspect": "bool", "suspect_reason": "string"}



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


class Exports(TidyTables):
    """The exports of :class:`labkit.store.Store`."""

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

