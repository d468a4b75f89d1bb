"""Telemetry for display at scale (issue 45): one run's series capped, a configuration's runs summarised
from a bounded number of rows whatever the campaign's size, and the downsampling said on the figure."""

from __future__ import annotations

import numpy as np
import pytest

from labkit.design import Design
from labkit.report.downsample import config_summary, pick_runs, run_series, summary_figure
from labkit.store import Store, now_iso
from labkit.store.group import GroupCommit
from labkit.workloads.base import Measurement

CID = "tel"


def build(data, configs_reps: int, samples) -> Store:
    """A campaign of ``2 * configs_reps`` runs written through the store API, each with the
    telemetry ``samples(run)`` gives (rows (t, metric, value))."""
    design = Design.from_dict(
        {"name": "tel", "factors": {"vcpus": [1, 2]}, "replications": configs_reps, "seed": 1}
    )
    st = Store.for_campaign(data, CID)
    st.set_meta(
        campaign_id=CID,
        design=design.to_dict(),
        backend="sim",
        created=now_iso(),
        workload={"name": "sim", "response": "wall_time_s"},
    )
    with GroupCommit(st, max_wait_s=60) as gc:
        for r in design.plan():
            gc.add(
                r,
                status="ok",
                started=now_iso(),
                duration_s=1.0,
                measurements=[Measurement("wall_time_s", 1.0 + r.levels["vcpus"] + 0.01 * r.order, "s")],
                metadata={"host": "h1"},
                samples=samples(r),
            )
    return st


def seconds(n: int):
    """Rows for ``n`` seconds at 1 Hz: metric a = the run's order + t, metric b = (order mod 7) * t."""
    return lambda r: [
        (float(t), m, float(r.order + t if m == "a" else (r.order % 7) * t))
        for t in range(n)
        for m in ("a", "b")
    ]


def test_the_summary_is_the_median_and_p95_across_runs_per_second(tmp_path):
    st = build(tmp_path, 9, seconds(12))
    config = st.run_config(st.config_runs(0)[0])
    assert config == 0
    summary = config_summary(st, 0)
    raw = st.samples()
    raw = raw[raw.run_id.isin(st.config_runs(0))]
    assert summary.attrs["runs_used"] == summary.attrs["runs_total"] == 9
    assert summary.attrs["width_s"] == 1.0 and len(summary) == 2 * 12
    for row in summary.itertuples():
        vals = raw[(raw.metric == row.metric) & (raw.t == row.bin)].value.to_numpy()
        assert row.runs == len(vals) == 9
        # the reference: numpy's percentiles (linear interpolation) of the raw samples of that second
        assert row.median == pytest.approx(np.percentile(vals, 50))
        assert row.p95 == pytest.approx(np.percentile(vals, 95))
    fig = summary_figure(summary, title="configuration 0")
    assert "median and p95 across all 9 runs, per second of run time" in fig.get_suptitle()


def test_rows_read_for_a_summary_do_not_grow_with_the_campaign(tmp_path):
    small = build(tmp_path / "small", 75, seconds(40))  # 150 runs, 75 of configuration 0
    big = build(tmp_path / "big", 1000, seconds(40))  # 2,000 runs, 1,000 of it
    got = {}
    for name, st in (("small", small), ("big", big)):
        s = config_summary(st, 0, runs=50, bins=10)
        got[name] = s.attrs
        assert s.attrs["runs_used"] == 50 and s.attrs["rows_loaded"] <= 50 * 2 * 10
        assert s.attrs["width_s"] == pytest.approx(3.9)  # 40 s (0..39) in 10 spans
        assert set(s.runs) == {50}
    assert got["big"]["runs_total"] == 1000 and got["small"]["runs_total"] == 75
    assert got["big"]["rows_loaded"] == got["small"]["rows_loaded"]
    assert got["big"]["samples"] == got["small"]["samples"] == 50 * 40 * 2
    fig = summary_figure(config_summary(big, 0, runs=50, bins=10), title="c0")
    assert "50 of 1,000 runs, spread evenly in run order, per 3.9 s of run time" in fig.get_suptitle()


def test_a_long_run_is_downsampled_and_says_so(tmp_path):
    st = build(tmp_path, 1, seconds(4000))  # 8,000 samples a run: above the cap
    rid = st.config_runs(0)[0]
    series = run_series(st, rid, cap=5000, points=300)
    assert series.attrs["samples"] == 8000 and len(series) <= 2 * 300
    assert series.groupby("metric").size().max() <= 300
    assert series.attrs["note"].startswith("downsampled: 600 of 8,000 samples shown")
    # each point is the mean of its span: metric a is order + t, so a span's mean is order + its mid time
    a = series[series.metric == "a"].sort_values("t")
    order = st.runs().set_index("run_id").run_order[rid]
    width = 3999 / 300
    assert a.value.iloc[0] == pytest.approx(order + np.mean([t for t in range(4000) if t < width]))
    whole = run_series(st, rid, cap=10_000)
    assert len(whole) == 8000 and whole.attrs["note"] == ""


def test_pick_runs_spreads_evenly():
    ids = [f"r{i}" for i in range(10)]
    assert pick_runs(ids, 4) == ["r0", "r3", "r6", "r9"] and pick_runs(ids, 20) == ids
    assert pick_runs(ids, 1) == ["r0"]


def test_the_explorer_shows_the_capped_run_and_its_configuration(tmp_path):
    from labkit.report.explore import Explorer

    build(tmp_path, 4, seconds(3000)).close()  # 6,000 samples a run
    views = Explorer(tmp_path).telemetry_view(CID)
    texts = [getattr(v, "data", "") or "" for v in views]
    figs = [v for v in views if hasattr(v, "get_suptitle")]
    assert any("downsampled: 600 of 6,000 samples" in t for t in texts)
    assert any("downsampled" in f.get_suptitle() for f in figs)
    assert any("median and p95 across all 4 runs" in f.get_suptitle() for f in figs)
