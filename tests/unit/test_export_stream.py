"""Streaming export of the telemetry (issue 45): ``samples.csv`` and ``samples.parquet`` written from
Arrow tables in chunks hold what the export wrote before through pandas (same columns, values,
order, Parquet schema), and memory stays bounded by the chunk. Counts rows and bytes, never time."""

from __future__ import annotations

import csv
import io
import math
import random
import tracemalloc

import pandas as pd
import pyarrow.parquet as pq
import pytest

import labkit.store.export as export_mod
import labkit.store.export_files as files_mod
from labkit.design import Design
from labkit.errors import StoreError
from labkit.store import Store, now_iso
from labkit.store.export_files import csv_text, write_frames
from labkit.store.sample_worker import worker_reads
from labkit.store.schema import SAMPLE_COLUMNS
from labkit.workloads.base import Measurement

PLAN = Design.from_dict({"name": "s", "factors": {"vcpus": [1, 2]}, "replications": 6, "seed": 2}).plan()


def _tricky_rows(rng: random.Random, n: int) -> list[tuple]:
    """Telemetry rows with values of every kind a float takes and texts that need quoting."""
    special = [
        0.0,
        -0.0,
        1.0,
        3.0,
        -7.0,
        1e16,
        1e15,
        123456789012345678.0,
        1e-4,
        1e-5,
        0.1,
        1 / 3,
        5e-324,
        1.7976931348623157e308,
        math.inf,
        -math.inf,
        4221904115763.5356,
        2.5e-9,
    ]
    rows: list[tuple] = []
    for k in range(n):
        t = rng.choice([float(k % 7), rng.random() * 10 ** rng.randint(-12, 18), rng.choice(special)])
        value = rng.choice([rng.gauss(0, 1) * 10 ** rng.randint(-30, 30), rng.choice(special)])
        metric = rng.choice(["cpu_pct", "load1", "m,comma", 'q"uote', "uni\u00e9"])
        inst = rng.choice([None, None, "labkit-c--0001", "labkit-c--0002"])
        rows.append((t, metric, value) if inst is None else (t, metric, value, inst))
    return rows


def _store(path, rng: random.Random, per_run: int, *, quoting: bool = True) -> Store:
    st = Store(path)
    st.set_meta(campaign_id="c", design={"factors": {"vcpus": [1, 2]}})
    for r in PLAN:
        rows = _tricky_rows(rng, per_run)
        if not quoting:
            rows = [(row[0], row[1].replace(",", "_").replace('"', "_"), *row[2:]) for row in rows]
        st.record_run(
            r,
            status="ok",
            started=now_iso(),
            duration_s=1.0,
            measurements=[Measurement("wall_time_s", 1.0 + r.order, "s")],
            metadata={
                "host": "h1",
                "run_seq": r.order + 1,
                "boot_group": r.boot_group,
                "instances": [{"name": f"labkit-c--{r.order:04d}", "index": 0, "boot": 1}],
            },
            samples=rows,
        )
    return st


def _before(st: Store, fmt: str, chunk: int) -> bytes:
    """samples.<fmt> as the export wrote it before streaming through Arrow: every row a pandas
    frame of Python objects (``pd.DataFrame(rows)``, the instance column of objects), in chunks of
    ``chunk`` rows, written by pandas (CSV) or from pandas (Parquet)."""
    rows = list(st.samples().itertuples(index=False, name=None))
    frames = []
    for start in range(0, max(len(rows), 1), chunk):
        frame = pd.DataFrame(rows[start : start + chunk], columns=SAMPLE_COLUMNS)
        frame["instance"] = frame["instance"].astype(object)
        frames.append(frame)
    out = io.BytesIO()
    write_frames(
        out,
        fmt,
        frames,
        types={
            "run_id": "string",
            "t": "double",
            "metric": "string",
            "value": "double",
            "instance": "string",
        },
    )
    return out.getvalue()


def _fields(text: bytes) -> list[list]:
    """The CSV's rows, each float field read back as the float it names (exactly)."""
    out = []
    for i, row in enumerate(csv.reader(io.StringIO(text.decode()))):
        out.append(row if i == 0 else [row[0], float(row[1]), row[2], float(row[3]), row[4]])
    return out


@pytest.mark.parametrize("chunk", [7, 50_000])
def test_samples_export_holds_what_the_pandas_export_held(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(export_mod, "EXPORT_CHUNK", chunk)
    with _store(tmp_path / "c" / "store.sqlite", random.Random(5), 40):
        pass
    with Store(tmp_path / "c" / "store.sqlite", readonly=True) as st:
        st.export(tmp_path / "out", formats=("csv", "parquet"))
        old_csv, old_pq = _before(st, "csv", chunk), _before(st, "parquet", chunk)
        n = len(st.samples())
    new_csv = (tmp_path / "out" / "samples.csv").read_bytes()
    assert n == 40 * len(PLAN)
    # the same rows in the same order, every text equal and every float the same number
    # (a float's notation may differ: Arrow writes 4.2219041157635356e+12 where Python wrote 4221904115763.5356)
    got, want = _fields(new_csv), _fields(old_csv)
    assert len(got) == n + 1 and got == want
    assert any(",comma" in line for line in new_csv.decode().splitlines())  # quoted, as pandas quotes
    pd.testing.assert_frame_equal(pd.read_csv(io.BytesIO(new_csv)), pd.read_csv(io.BytesIO(old_csv)))
    new = pq.read_table(tmp_path / "out" / "samples.parquet")
    old = pq.read_table(io.BytesIO(old_pq))
    assert new.schema.equals(old.schema, check_metadata=True) and new.equals(old)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "out" / "samples.parquet"), pd.read_parquet(io.BytesIO(old_pq))
    )


def test_samples_csv_is_byte_for_byte_the_pandas_one_for_whole_numbers_and_plain_texts(tmp_path):
    rng = random.Random(1)
    with _store(tmp_path / "c" / "store.sqlite", rng, 30, quoting=False) as st:
        # whole numbers of up to 5 digits (1 Hz telemetry's times, counters): Arrow and Python write them alike
        st._db.execute("UPDATE samples SET t = (rowid % 50) * 1.0, value = ((rowid * 37) % 100000) - 500.0")
        st._db.commit()
        st.export(tmp_path / "out", formats=("csv",))
        assert (tmp_path / "out" / "samples.csv").read_bytes() == _before(st, "csv", export_mod.EXPORT_CHUNK)


def test_csv_text_keeps_the_point_of_whole_floats_and_quotes_like_pandas():
    import pyarrow as pa

    table = pa.table({"a": ["x", "y,z", None], "t": [0.0, -0.0, 2.5], "v": [1e16, 3.0, math.inf]})
    assert csv_text(table) == pd.DataFrame(table.to_pydict()).to_csv(index=False, header=False).encode()
    plain = pa.table({"a": ["x", None], "t": [0.0, -2.0]})
    assert csv_text(plain) == b"x,0.0\n,-2.0\n"


def _export_peak(tmp_path, name: str, runs: int, per_run: int, monkeypatch) -> tuple[int, list[int]]:
    """(tracemalloc peak of exporting, the row count of every table written) for a store of
    ``runs`` runs of ``per_run`` telemetry rows each."""
    plan = Design.from_dict(
        {"name": "b", "factors": {"vcpus": [1, 2]}, "replications": runs // 2, "seed": 1}
    ).plan()
    rows = [(float(t), f"m{t % 20}", float(t) * 0.5) for t in range(per_run)]
    with Store(tmp_path / name / "store.sqlite") as st:
        st.set_meta(campaign_id=name, design={"factors": {"vcpus": [1, 2]}})
        for r in plan:
            st.record_run(
                r,
                status="ok",
                started=now_iso(),
                duration_s=1.0,
                measurements=[Measurement("wall_time_s", 1.0, "s")],
                metadata={
                    "host": "h1",
                    "run_seq": r.order + 1,
                    "boot_group": r.boot_group,
                    "instances": [{"name": f"i{r.order}", "index": 0, "boot": 1}],
                },
                samples=rows,
            )
    sizes: list[int] = []
    real_csv = csv_text  # the writer itself (not the counting one of an earlier call)

    def counting_csv(table):
        sizes.append(table.num_rows)
        return real_csv(table)

    monkeypatch.setattr(files_mod, "csv_text", counting_csv)
    with Store(tmp_path / name / "store.sqlite", readonly=True) as st:
        tracemalloc.start()
        try:
            st.export(tmp_path / f"out-{name}", formats=("csv", "parquet"))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    n = len(pd.read_parquet(tmp_path / f"out-{name}" / "samples.parquet"))
    assert n == runs * per_run and sum(sizes) == n
    return peak, sizes


def test_export_memory_is_bounded_by_the_chunk_not_the_campaign(tmp_path, monkeypatch):
    monkeypatch.setattr(export_mod, "EXPORT_CHUNK", 2_000)
    small, small_sizes = _export_peak(tmp_path, "small", 20, 1_000, monkeypatch)  # 20,000 samples
    big, big_sizes = _export_peak(tmp_path, "big", 160, 1_000, monkeypatch)  # 160,000 samples
    # every table the writers got holds at most a chunk, and 8x the samples made 8x the tables
    assert max(small_sizes + big_sizes) <= 2_000 and len(big_sizes) >= 8 * len(small_sizes) - 1
    # the Python memory of the export does not grow with the campaign's telemetry: 8x the rows
    # (all of them as Python objects: > 25 MB) within a few MB (the per-run fields of the runs table)
    assert big < small + 6 * 2**20, (small / 2**20, big / 2**20)


def test_a_sample_value_that_is_text_is_a_store_error_naming_the_run(tmp_path):
    with _store(tmp_path / "c" / "store.sqlite", random.Random(2), 3, quoting=False) as st:
        rid = PLAN[0].run_id
        st._db.execute("UPDATE samples SET value = 'fast' WHERE run_id = ?", (rid,))
        st._db.commit()
        with pytest.raises(StoreError, match=f"telemetry of run {rid}"):
            list(st.sample_tables(100))
        with pytest.raises(StoreError, match="rows must be a whole number"):
            list(st.sample_tables(0))


def test_ranges_cover_every_sample_once_and_two_processes_read_what_one_reads(tmp_path):
    import pyarrow as pa

    with _store(tmp_path / "c" / "store.sqlite", random.Random(3), 25):
        pass
    with Store(tmp_path / "c" / "store.sqlite", readonly=True) as st:
        ranges = st.sample_ranges(60)
        ids = sorted(r.run_id for r in PLAN)
        # consecutive, from the first run id to the end, each of at most 60 rows (25 per run: 2 runs)
        assert ranges[0][0] == ids[0] and ranges[-1][1] is None
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])) and len(ranges) == math.ceil(
            len(ids) / 2
        )
        one = list(st.sample_tables(60))
        two = list(st.sample_tables(60, workers=2))
        more = list(st.sample_tables(60, workers=2, share=0.6))
        assert len(two) == len(more) == len(one) == len(ranges) >= 4
        assert pa.concat_tables(two).equals(pa.concat_tables(one)) and pa.concat_tables(more).equals(
            pa.concat_tables(one)
        )
        with pytest.raises(StoreError, match="share must be between 0 and 1"):
            list(st.sample_tables(60, workers=2, share=1.0))
        whole = pa.concat_tables(one).to_pandas()
        pd.testing.assert_frame_equal(whole[["t", "value"]], st.samples()[["t", "value"]])
        assert list(whole["run_id"]) == list(st.samples()["run_id"])
        # a run of more rows than a chunk: a range alone, read in tables of at most the chunk
        assert all(hi is None or lo < hi for lo, hi in st.sample_ranges(10))
        assert max(t.num_rows for t in st.sample_tables(10, workers=2)) == 10
        assert sum(t.num_rows for t in st.sample_tables(10, workers=2)) == 25 * len(PLAN)


def test_the_second_process_failing_is_a_store_error_naming_the_run(tmp_path):
    with _store(tmp_path / "c" / "store.sqlite", random.Random(4), 25, quoting=False) as st:
        ranges = st.sample_ranges(60)
        theirs, mine = (
            next(k for k in range(len(ranges)) if worker_reads(k, 0.5) == w) for w in (True, False)
        )
        st._db.execute("UPDATE samples SET t = 'soon' WHERE run_id = ?", (ranges[theirs][0],))
        st._db.commit()
    with Store(tmp_path / "c" / "store.sqlite", readonly=True) as st:
        with pytest.raises(StoreError, match=f"second process failed.*telemetry of run {ranges[theirs][0]}"):
            list(st.sample_tables(60, workers=2))
    with Store(tmp_path / "c" / "store.sqlite") as st:  # and one this process reads
        st._db.execute("UPDATE samples SET t = 1.0 WHERE run_id = ?", (ranges[theirs][0],))
        st._db.execute("UPDATE samples SET value = 'soon' WHERE run_id = ?", (ranges[mine][0],))
        st._db.commit()
    with Store(tmp_path / "c" / "store.sqlite", readonly=True) as st:
        with pytest.raises(StoreError, match=f"^(?!.*second process).*telemetry of run {ranges[mine][0]}"):
            list(st.sample_tables(60, workers=2))
        with pytest.raises(StoreError, match="workers must be 1 or 2"):
            list(st.sample_tables(60, workers=3))


def test_the_export_at_the_end_of_a_campaign_reads_the_open_store_in_two_processes(tmp_path, monkeypatch):
    # labkit run exports from the store it wrote (open for writing, WAL): the second process reads
    # it beside that connection, the rows committed so far
    monkeypatch.setattr(export_mod, "EXPORT_CHUNK", 30)
    with _store(tmp_path / "c" / "store.sqlite", random.Random(6), 25, quoting=False) as st:
        assert len(st.sample_ranges(30)) >= 4
        st.export(tmp_path / "open", formats=("csv",))
    with Store(tmp_path / "c" / "store.sqlite", readonly=True) as st:
        want = _before(st, "csv", 30)
    assert _fields((tmp_path / "open" / "samples.csv").read_bytes()) == _fields(want)
