"""The analysis reads a store's runs once, each run's metadata by SQL (issue 45): what
:meth:`Store.analysis_tables <labkit.store.Store.analysis_tables>` gives is what the old path read
(:meth:`Store.tidy` and :meth:`Store.runs`, every run's metadata parsed whole in Python), row for row,
and every reader of the runs (measurement notes, telemetry covariates, treatment checks, measured
work, the analysis itself) says the same from either. A small store holds every kind of run the
read must handle: two hosts, two instances, suspect and unmeasured runs, runs the guard could not
judge, unconfined runs, treatments that did not take, a run whose metadata SQLite cannot read (a
NaN), one whose metadata is not JSON and one with a measurement that is not what labkit writes."""

from __future__ import annotations

import gc
import json
import sqlite3

import pandas as pd
import pytest

from labkit.design import Design
from labkit.report import analyze, analyze_results
from labkit.report.treatments import untaken
from labkit.run.runlength import measured_work
from labkit.run.telemetry import covariates, measurement_notes
from labkit.store import Store
from labkit.store.bulk import JsonBatch, gc_paused
from labkit.workloads.base import Measurement

CID = "read"


def metadata(r, i: int) -> dict:
    host = "h1" if i % 2 else "h2"
    tele = {
        "collected": True,
        "host": "sampled",
        "samples": 4,
        "cpu_other_max_pct": 1.2345678901234567 + i,
        "cpu_other_mean_pct": 0.1 * i,
        "steal_max_pct": i / 7,
        "instance_cpu": "cgroups",
    }
    md = {
        "host": host,
        "run_seq": i // 2 + 1,
        "boot_group": r.boot_group,
        "spec": {"vcpus": r.levels["vcpus"]},
        "instances": [
            {"name": f"labkit-{CID}-{i:04d}-{k}", "index": k, "cpus": [k], "boot": 1}
            for k in range(1 + (i % 3 == 0))
        ],
        "telemetry": tele,
        "workload_s": [1.5 + i / 100, 1.7],
        "treatments": {"noise": {"level": r.levels["noise"], "verified": i % 4 != 0, "how": "ps"}},
    }
    if i % 5 == 0:
        md["suspect"] = f"other processes used {30 + i}.5 % of a CPU"
    if i % 6 == 1:  # not sampled on this host
        tele["host"] = "not sampled: instances on another machine"
    if i % 7 == 2:  # the guard could judge it neither before nor during
        md["quiet_check"] = {"measured": False}
        del tele["cpu_other_mean_pct"]
    if i % 8 == 3:
        md["spec"]["limits_enforced"] = False
    if i == 9:
        tele["steal_mean_pct"] = float("nan")  # SQLite's JSON functions cannot read it: parsed whole
    return md


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    design = Design.from_dict(
        {
            "name": "read",
            "factors": {"vcpus": [1, 2], "noise": ["none", "busy"]},
            "replications": 6,
            "seed": 3,
        }
    )
    with Store.for_campaign(data, CID) as st:
        st.set_meta(
            campaign_id=CID,
            design=design.to_dict(),
            backend="local",
            created="2026-01-01T00:00:00",
            workload={"name": "nqueens", "response": "wall_time_s"},
        )
        for i, r in enumerate(design.plan()):
            ms = [
                Measurement("wall_time_s", 10.0 + r.levels["vcpus"] + 0.37 * (i % 5), "s", instance=k)
                for k in range(1 + (i % 3 == 0))
            ]
            st.record_run(
                r,
                status="ok" if i != 11 else "failed",
                started=f"2026-01-01T00:{i:02d}:00",
                duration_s=12.0 + i,
                measurements=ms if i != 11 else [],
                metadata=metadata(r, i),
                error="boom" if i == 11 else None,
            )
    db = sqlite3.connect(data / CID / "store.sqlite")
    with db:
        first, second = [
            x for (x,) in db.execute("SELECT run_id FROM runs ORDER BY run_order LIMIT 2 OFFSET 4")
        ]
        db.execute("UPDATE runs SET metadata = 'not json' WHERE run_id = ?", (first,))
        db.execute("UPDATE measurements SET value = 'x' WHERE run_id = ?", (second,))
    db.close()
    return data


def old_and_new(data):
    with Store.for_campaign(data, CID, readonly=True) as st:
        old = st.tidy(), st.runs()
        new = st.analysis_tables()
    return old, new


def test_the_rows_are_those_of_the_old_read(store):
    (tidy_old, runs_old), (tidy_new, runs_new) = old_and_new(store)
    assert len(runs_old) == 23 and tidy_old["run_id"].nunique() == 22  # one unreadable, one bad measurement
    pd.testing.assert_frame_equal(tidy_new, tidy_old)
    pd.testing.assert_frame_equal(runs_new.drop(columns="metadata"), runs_old.drop(columns="metadata"))
    assert list(runs_new.columns) == list(runs_old.columns)
    # the instances the old read parsed from each run's metadata, by index
    names = {
        (rid, inst["index"]): inst["name"]
        for rid, md in zip(runs_old.run_id, runs_old.metadata)
        for inst in md["instances"]
    }
    rows = tidy_new.dropna(subset=["instance_index"])
    assert list(rows["instance"]) == [names[(r, int(i))] for r, i in zip(rows.run_id, rows.instance_index)]
    assert rows["instance_index"].max() == 1 and runs_new["suspect"].sum() == 5


def test_every_reader_of_the_runs_says_the_same(store):
    (tidy_old, runs_old), (_, runs_new) = old_and_new(store)
    notes = measurement_notes(runs_new)
    assert notes == measurement_notes(runs_old)
    assert [n.split(":")[0] for n in notes] == ["telemetry off", "guard blind", "unconfined"]
    pd.testing.assert_frame_equal(covariates(runs_new), covariates(runs_old))
    assert "steal_mean_pct" in covariates(runs_new)  # only the run SQLite cannot read has it (a NaN)
    pd.testing.assert_frame_equal(untaken(runs_new), untaken(runs_old))
    assert untaken(runs_new)["failed"].sum() > 0
    for got, want in zip(measured_work(tidy_old, runs_new), measured_work(tidy_old, runs_old), strict=True):
        pd.testing.assert_series_equal(got, want)


def test_the_analysis_is_that_of_the_old_read(store):
    with Store.for_campaign(store, CID, readonly=True) as st:
        meta, fps, tidy, runs = st.meta(), st.fingerprints(), st.tidy(), st.runs()
    old = analyze_results(tidy, meta=meta, campaign=CID, fingerprints=fps, runs=runs, n_boot=50)
    new = analyze(store, CID, n_boot=50)
    assert str(new.conclusions) == str(old.conclusions)
    assert "Not measured: unconfined" in str(new.conclusions)
    pd.testing.assert_frame_equal(new.telemetry, old.telemetry)
    pd.testing.assert_frame_equal(new.effects, old.effects)


def test_json_values_parsed_in_batches_land_where_they_were_put():
    batch = JsonBatch(size=3)
    targets = [{} for _ in range(7)]
    values = [[i, {"a": [i, None, True]}] for i in range(7)]
    for t, v in zip(targets, values):
        batch.put(t, "x", json.dumps(v))
    assert sum(1 for t in targets if "x" in t) == 6  # two full batches parsed, one value waiting
    batch.flush()
    assert [t["x"] for t in targets] == values


def test_the_collector_is_paused_only_inside_and_as_it_was():
    assert gc.isenabled()
    with pytest.raises(KeyError), gc_paused():
        assert not gc.isenabled()
        raise KeyError("x")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()
