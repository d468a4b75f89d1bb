"""The file writers of :meth:`Store.export <labkit.store.Store.export>`: one table written in chunks
as CSV (the header once) or Parquet (a ``pyarrow.parquet.ParquetWriter``), from pandas frames
(:func:`write_frames`) or from Arrow tables (:func:`write_tables`: the telemetry, millions of rows,
never through pandas). Memory: one chunk at a time."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, BinaryIO

from ..errors import StoreError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa  # type: ignore[import-untyped]

#: parquet types of the tidy and samples columns (a chunk whose column is all empty has no type of its own)
PARQUET_TYPES = {
    "campaign": "string",
    "run_id": "string",
    "run_order": "int64",
    "replicate": "int64",
    "config": "int64",
    "instance": "string",
    "metric": "string",
    "value": "double",
    "unit": "string",
    "status": "string",
    "error": "string",
    "started": "string",
    "duration_s": "double",
    "fingerprint_id": "string",
    "host": "string",
    "instance_index": "int64",
    "boot": "int64",
    "run_seq": "int64",
    "iteration": "int64",
    "suspect": "bool",
    "suspect_reason": "string",
    "t": "double",
}


def parquet_schema(frame: pd.DataFrame, types: dict[str, str] | None = None) -> pa.Schema:
    """The Parquet schema of a table whose first chunk is ``frame``: its pandas schema (with the
    pandas metadata, so that ``pd.read_parquet`` gives back its dtypes) with the known column
    types of :data:`PARQUET_TYPES` and ``types``; a column with no type yet (all empty) is text."""
    import pyarrow as pa

    known = {**PARQUET_TYPES, **(types or {})}
    first = pa.Schema.from_pandas(frame, preserve_index=False)
    fields = []
    for f in first:
        kind = known.get(f.name)
        fields.append(
            f.with_type(pa.type_for_alias(kind))
            if kind
            else f.with_type(pa.string())
            if pa.types.is_null(f.type)
            else f
        )
    return pa.schema(fields, metadata=first.metadata)


def write_frames(
    fh: BinaryIO, fmt: str, frames: Iterable[pd.DataFrame], types: dict[str, str] | None = None
) -> None:
    """Write ``frames`` (one table in chunks, same columns) to ``fh`` as CSV (header once) or
    Parquet (the schema of the first chunk: :func:`parquet_schema`)."""
    if fmt == "csv":
        first = True
        for frame in frames:
            frame.to_csv(fh, index=False, header=first)
            first = False
        return
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    writer = None
    schema = None
    try:
        for frame in frames:
            if schema is None:
                schema = parquet_schema(frame, types)
                writer = pq.ParquetWriter(fh, schema)
            if writer is None:  # (for the type checker: made with the schema above)
                raise StoreError("parquet writer not opened")
            writer.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False))
    finally:
        if writer is not None:
            writer.close()


def write_tables(fh: BinaryIO, fmt: str, tables: Iterable[pa.Table], first_frame: pd.DataFrame) -> None:
    """Write Arrow ``tables`` (one table in chunks, same columns: text and float columns) to ``fh``
    as CSV or Parquet, with the content :func:`write_frames` writes from the same rows as pandas
    frames: the Parquet schema (and its pandas metadata) of ``first_frame`` (the first chunk as
    a frame, :func:`parquet_schema`), the CSV of ``DataFrame.to_csv`` (each float as Python writes
    it, e.g. ``1.0``; text quoted only where it must be, a chunk that needs quotes written by pandas)."""
    if fmt == "csv":
        fh.write((",".join(first_frame.columns) + "\n").encode())
        for table in tables:
            fh.write(csv_text(table))
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema(first_frame)
    with pq.ParquetWriter(fh, schema) as writer:
        for table in tables:
            writer.write_table(pa.Table.from_arrays(table.columns, schema=schema))


def csv_text(table: pa.Table) -> bytes:
    """The rows of ``table`` (text and float columns) as ``DataFrame.to_csv`` writes them without
    header and index: the same values, a float with its decimal point (``1.0``, as Python reads
    it back as a float), an empty field for a missing text. Written by Arrow's CSV writer; a chunk
    with a text that needs quoting (a comma, a quote, a line break) by pandas itself."""
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    import pyarrow.csv as pacsv  # type: ignore[import-untyped]

    cols = []
    for col in table.columns:
        if pa.types.is_floating(col.type):
            text = pc.cast(col, pa.string())
            # Arrow writes a whole number without its point ("3", "-0"): Python's "3.0", "-0.0"
            whole = pc.match_substring_regex(text, r"^-?[0-9]+$")
            col = pc.if_else(whole, pc.binary_join_element_wise(text, ".0", ""), text)
        cols.append(col)
    buf = io.BytesIO()
    try:
        pacsv.write_csv(
            pa.table(cols, names=table.column_names),
            buf,
            pacsv.WriteOptions(include_header=False, quoting_style="none"),
        )
    except pa.ArrowInvalid:  # a text with a comma, quote or line break: quoted as pandas quotes it
        import pandas as pd

        return pd.DataFrame(table.to_pydict()).to_csv(index=False, header=False).encode()
    return buf.getvalue()


def first_frame(tables: Iterator[pa.Table]) -> tuple[pd.DataFrame, Iterator[pa.Table]]:
    """``(frame, tables)``: the first of ``tables`` as the pandas frame the rows would make
    (text columns of Python objects, as ``pd.DataFrame(rows)`` gives them) and all the tables again."""
    import itertools

    import pandas as pd

    first = next(tables)
    frame = pd.DataFrame(first.to_pydict(), columns=first.column_names)
    return frame, itertools.chain([first], tables)
