"""Reading a store's telemetry in two processes (:func:`parallel_tables`), for the export of
millions of samples: turning SQLite's rows into Python objects takes one core, so a second
process (``python -m labkit.store.sample_worker STORE ROWS``, the ranges on its standard input)
reads a share of the ranges of runs (:func:`worker_reads`) and sends their rows as an Arrow IPC
stream (a thread sending while it reads on), while this one reads the others and writes the
files. The tables come out in the order of the ranges, one range at a time, so memory stays a few
chunks in each process (the worker is at most two tables ahead of the reader)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StoreError

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

    from .samples import Samples


def parallel_tables(
    store: Samples, ranges: Sequence[tuple[str, str | None]], rows: int, share: float = 0.5
) -> Iterator[pa.Table]:
    """:meth:`Samples.range_tables <labkit.store.samples.Samples.range_tables>` of each of
    ``ranges`` in turn, the ``share`` of them that :func:`worker_reads` says read by a worker
    process (started here, ended when the iteration ends, however it ends; this process also
    writes the files, so a larger share when writing costs more, e.g. CSV). StoreError naming the
    worker's error if it fails."""
    if not 0 < share < 1:
        raise StoreError(f"parallel_tables: share must be between 0 and 1, got {share!r}")
    import pyarrow as pa

    theirs = [list(r) for k, r in enumerate(ranges) if worker_reads(k, share)]
    package = str(Path(__file__).resolve().parents[2])  # the labkit this process runs
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (package, os.environ.get("PYTHONPATH")) if p),
    }
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "labkit.store.sample_worker", str(store.path), str(rows)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
        assert proc.stdin is not None and proc.stdout is not None
        failed: BaseException | None = None
        try:
            proc.stdin.write(json.dumps(theirs).encode())
            proc.stdin.close()
            reader = None
            for k, (lo, hi) in enumerate(ranges):
                if not worker_reads(k, share):
                    yield from store.range_tables(lo, hi, rows)
                    continue
                if reader is None:
                    reader = pa.ipc.open_stream(proc.stdout)
                while True:
                    batch = reader.read_next_batch()
                    if batch.num_rows == 0:  # the end of this range
                        break
                    yield pa.Table.from_batches([batch])
            if proc.wait() != 0:
                failed = ChildProcessError("it failed after its last range")
        except (
            StopIteration,
            pa.ArrowInvalid,
            OSError,
        ) as exc:  # it ended (or wrote garbage) before its last range
            failed = exc
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
        if failed is not None:
            err.seek(0)
            said = err.read().decode(errors="replace").strip().splitlines()
            raise StoreError(
                f"{store.path}: reading the telemetry in a second process failed "
                f"(exit {proc.returncode}): {said[-1] if said else failed}"
            )


def worker_reads(k: int, share: float) -> bool:
    """Whether the worker reads the range at position ``k`` when it reads ``share`` of them, spread
    evenly (0.5: the odd positions; 0.6: 1, 3 and 4 of every 5); never the first."""
    return int((k + 1) * share) > int(k * share)


def main(argv: Sequence[str] | None = None) -> int:
    """The worker: ``STORE ROWS``, the ranges (JSON ``[[lo, hi], ...]``) on standard input; writes
    each range's tables and then an empty batch, as one Arrow IPC stream on standard output."""
    import pyarrow as pa

    from .samples import sample_schema
    from .store import Store

    path, rows = argv if argv is not None else sys.argv[1:]
    ranges = json.loads(sys.stdin.buffer.read())
    schema = sample_schema()
    end = pa.RecordBatch.from_pylist([], schema=schema)
    # a thread sends while this one reads on: up to two tables ahead of the reader (bounded memory)
    ready: queue.Queue = queue.Queue(maxsize=2)
    broken: list[BaseException] = []

    def send(out: pa.ipc.RecordBatchStreamWriter) -> None:
        try:
            while (item := ready.get()) is not None:
                out.write_table(item) if isinstance(item, pa.Table) else out.write_batch(item)
        except OSError as exc:  # the reader stopped (it failed, or it was interrupted)
            broken.append(exc)
            while ready.get() is not None:  # what is still put is dropped: the reader never blocks
                pass

    try:
        with Store(path, readonly=True) as st:
            out = pa.ipc.new_stream(sys.stdout.buffer, schema)
            sender = threading.Thread(target=send, args=(out,), daemon=True)
            sender.start()
            try:
                for lo, hi in ranges:
                    for table in st.range_tables(lo, hi, int(rows)):
                        ready.put(table)
                    ready.put(end)
            finally:
                ready.put(None)
                sender.join()
            if broken:
                return 1
            out.close()
    except StoreError as exc:
        print(exc, file=sys.stderr)
        return 1
    except OSError:  # the reader stopped
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
