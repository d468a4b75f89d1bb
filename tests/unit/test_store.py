"""The store: atomic runs, no duplicates, tidy rows, export."""

import sqlite3

import pandas as pd
import pytest

from labkit.design import Design
from labkit.errors import StoreError
from labkit.store import Store, load_results
from labkit.workloads import Measurement

DESIGN = Design.from_dict(
    {"factors": {"vcpus": [1, 2], "affinity": ["floating", "pinned"]}, "replications": 2, "seed": 4}
)


def fill(store, runs, status="ok"):
    store.set_meta(campaign_id="c1", design=DESIGN.to_dict())
    for run in runs:
        store.record_run(
            run,
            status=status,
            started="2026-01-01T00:00:00",
            duration_s=1.5,
            measurements=[
                Measurement("wall_time_s", 1.0 + run.config, "s", 0),
                Measurement("wall_time_s", 2.0 + run.config, "s", 1),
            ],
            metadata={"x": 1},
            fingerprint_id="fp",
        )


def test_record_and_tidy(tmp_path):
    plan = DESIGN.plan()
    with Store(tmp_path / "s.sqlite") as st:
        fill(st, plan[:3])
        st.record_run(plan[3], status="failed", started="t", duration_s=0.1, error="boom")
        df = st.tidy()
        assert st.completed() == {r.run_id for r in plan[:4]}
    assert list(df.columns[:5]) == ["campaign", "run_id", "run_order", "replicate", "config"]
    assert {
        "vcpus",
        "affinity",
        "instance",
        "metric",
        "value",
        "unit",
        "status",
        "error",
        "started",
        "duration_s",
        "fingerprint_id",
    } <= set(df.columns)
    assert len(df) == 3 * 2 + 1
    failed = df[df.status == "failed"]
    assert failed.error.tolist() == ["boom"] and failed.metric.isna().all()
    first = df[df.run_id == plan[0].run_id]
    assert first.vcpus.unique().tolist() == [plan[0].levels["vcpus"]]


def test_a_run_is_stored_once(tmp_path):
    plan = DESIGN.plan()
    with Store(tmp_path / "s.sqlite") as st:
        fill(st, plan[:1])
        with pytest.raises(StoreError, match="stored once"):
            fill(st, plan[:1])
        assert len(st.runs()) == 1
        assert len(st.tidy()) == 2  # the failed second insert left no measurement behind


def test_bad_status_rejected(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        with pytest.raises(StoreError, match="ok, failed, timeout"):
            st.record_run(DESIGN.plan()[0], status="weird", started="t", duration_s=0)


def test_export_csv_parquet_and_view_mode(tmp_path):
    with Store.for_campaign(tmp_path, "c1") as st:
        fill(st, DESIGN.plan())
        paths = st.export()
    names = {p.name for p in paths}
    assert {"results.csv", "results.parquet", "runs.csv"} <= names
    csv = pd.read_csv(tmp_path / "c1" / "results.csv")
    pq = pd.read_parquet(tmp_path / "c1" / "results.parquet")
    assert len(csv) == len(pq) == 16
    # view mode reads the store, or the exports when only those were committed
    assert len(load_results(tmp_path, "c1")) == 16
    (tmp_path / "c1" / "store.sqlite").unlink()
    assert len(load_results(tmp_path, "c1")) == 16
    with pytest.raises(StoreError, match="no results for campaign 'nope'"):
        load_results(tmp_path, "nope")


def test_closed_store_is_a_single_file(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        fill(st, DESIGN.plan()[:2])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sqlite"]
    mode = sqlite3.connect(tmp_path / "s.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "delete"


def test_not_a_store(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="not a labkit store"):
        Store(bad)


def test_a_busy_store_waits_once_then_says_it_is_locked(tmp_path, monkeypatch):
    """A write waits for another writer through SQLite's busy timeout only: when the store is
    still locked after it, StoreError at once, not after 50 more busy-timeout waits (the old
    loop called BEGIN IMMEDIATE 50 times, each waiting the 30 s timeout)."""
    import labkit.store.sqlite as store_mod

    monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_S", 0.2)
    st = Store(tmp_path / "s.sqlite")
    begins = []
    st._db.set_trace_callback(lambda sql: begins.append(sql) if sql.startswith("BEGIN") else None)
    other = sqlite3.connect(tmp_path / "s.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match=r"locked by another writer \(waited 0.2 s\)"):
            st.set_meta(campaign_id="c1")
        assert begins == ["BEGIN IMMEDIATE"]
    finally:
        other.execute("ROLLBACK")
        other.close()
    st.set_meta(campaign_id="c1")  # free again: the store writes
    assert st.meta()["campaign_id"] == "c1"
    st.close()


def test_a_write_waits_for_a_short_writer(tmp_path):
    """Another writer that finishes within the busy timeout is waited for, not an error."""
    import threading

    st = Store(tmp_path / "s.sqlite")
    other = sqlite3.connect(tmp_path / "s.sqlite", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    timer = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    timer.start()
    try:
        st.set_meta(campaign_id="c1")
    finally:
        timer.join()
        other.close()
    assert st.meta()["campaign_id"] == "c1"
    st.close()
