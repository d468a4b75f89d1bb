"""The analysis picks the right error term by itself, checks drift and warm-up, and shows the levels
(labkit.report.analyze_results, labkit.report.level_analysis, labkit.report.measurement).

The tidy frames are built here in the long format Store.tidy() gives with the levels of issue 32
(host, instance as a unique id, instance_index, boot, run_seq, iteration, suspect). The expected
statistics are those of tests/unit/test_stats_levels.py, whose references come from R
(tests/vectors/levels_results.csv: aov with Error(instance), lmer, lm).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from labkit.errors import ConfigError
from labkit.report import analyze_results, html_report
from labkit.report.level_analysis import level_design, observations, with_levels
from labkit.report.measurement import sections

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
META = {"design": {"factors": {"A": [-1, 1], "B": [-1, 1]}}, "workload": {"response": "y"}}


def tidy(rows: list[dict]) -> pd.DataFrame:
    """Tidy rows (one per measurement) with the store's columns and the levels."""
    base = {
        "campaign": "c",
        "replicate": 1,
        "config": 0,
        "metric": "y",
        "unit": "s",
        "status": "ok",
        "error": None,
        "duration_s": 1.0,
        "fingerprint_id": None,
        "host": "h1",
        "boot": 1,
        "instance_index": 0,
        "iteration": pd.NA,
        "suspect": False,
        "suspect_reason": "",
    }
    out = pd.DataFrame([base | r for r in rows])
    out["started"] = [f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00" for i in range(len(out))]
    return out


def split_campaign(*, shared: bool = True) -> pd.DataFrame:
    """levels_split.csv as a campaign: runs_per_instance = 3 (shared) in a random order, or the same
    numbers with every run on its own instance (shared=False: what an analysis that ignores the
    instances assumes)."""
    data = pd.read_csv(VECTORS / "levels_split.csv")
    order = np.random.default_rng(3).permutation(len(data))
    rows = []
    for seq, i in enumerate(order, start=1):
        r = data.iloc[i]
        run_id = f"{r['instance']}-r{r['run']}"
        rows.append(
            {
                "run_id": run_id,
                "run_order": seq - 1,
                "run_seq": seq,
                "A": int(r["A"]),
                "B": int(r["B"]),
                "instance": r["instance"] if shared else run_id + "/0",
                "value": float(r["y"]),
            }
        )
    return tidy(rows)


def test_done_when_runs_share_capped_instances():
    """runs_per_instance = 3, instances capped differently on purpose, no effect: the analysis
    reports a large instance component and does not call A significant; the same numbers analysed
    as independent runs (ordinary least squares) do."""
    a = analyze_results(split_campaign(), meta=META)
    assert a.kind == "levels" and a.levels.method == "ems" and a.levels.error_term == "instance"
    assert a.level_design.runs_per_instance == 3 and a.level_design.random == ["instance"]
    share = a.levels.variance.set_index("component")["pct"]
    assert share["instance"] > 90
    assert "A" not in a.conclusions.significant
    text = str(a.conclusions)
    assert (
        "Error term: the variation between instances (runs share instances (up to 3 runs per instance))"
        in text
    )
    assert "tested against the 12 instance means (exact expected-mean-squares F-test, df = 8)" in text
    assert f"instance {share['instance']:.1f} %" in text and "residual (run to run)" in text
    # each term tested alone (family: none), as before the decision rules: OLS calls A significant
    ols = analyze_results(split_campaign(shared=False), meta=META, family="none")
    assert ols.kind == "factorial" and "A" in ols.conclusions.significant
    # under Holm over the 3 terms it is only "significant before the correction"
    holm = analyze_results(split_campaign(shared=False), meta=META)
    assert "A" not in holm.conclusions.significant
    assert "Significant before the correction only (not after Holm over 3 terms): A (p = " in str(
        holm.conclusions
    )
    assert "Error term: the run-to-run variation between runs of the same configuration" in str(
        ols.conclusions
    )


def test_old_stores_are_read_with_their_levels_filled():
    old = tidy(
        [{"run_id": f"r{i}", "run_order": i, "A": i % 2, "B": 0, "value": 1.0 + i} for i in range(6)]
    ).drop(columns=["instance_index", "boot", "iteration", "suspect", "suspect_reason"])
    old["instance"] = 0
    old["host"] = [None, None, "h2", "h2", None, "h2"]
    old["started"] = [
        "2026-01-01T00:00:05",
        "2026-01-01T00:00:01",
        "2026-01-01T00:00:02",
        "2026-01-01T00:00:09",
        "2026-01-01T00:00:03",
        "2026-01-01T00:00:04",
    ]
    t = with_levels(old).set_index("run_id")
    assert t.loc["r0", "instance"] == "r0:0" and (t["instance_index"] == 0).all() and (t["boot"] == 1).all()
    assert t.loc[["r0", "r1", "r4"], "host"].tolist() == ["local"] * 3
    # run_seq: start order on each host
    assert t.loc[["r1", "r4", "r0"], "run_seq"].tolist() == [1, 2, 3]
    assert t.loc[["r2", "r5", "r3"], "run_seq"].tolist() == [1, 2, 3]
    assert t["iteration"].isna().all() and not t["suspect"].any()


def test_iterations_are_cut_at_their_warm_up():
    """100 iterations per run with an exponential transient (10 exp(-i/4), noise sd 0.2): MSER-5 cuts
    the transient, the steady means are analysed and the conclusions say how much was cut."""
    rng = np.random.default_rng(5)
    rows = []
    for run in range(8):
        for it in range(100):
            rows.append(
                {
                    "run_id": f"r{run}",
                    "run_order": run,
                    "run_seq": run + 1,
                    "A": run % 2,
                    "B": run // 2 % 2,
                    "instance": f"r{run}/0",
                    "iteration": it,
                    "value": 50 + 10 * np.exp(-it / 4) + rng.normal(scale=0.2),
                }
            )
    t = tidy(rows)
    obs, cut = observations(t, "y", ["A", "B"])
    assert len(obs) == 8 and len(cut) == 8
    assert (cut["cut"] >= 10).all() and (cut["cut"] <= 40).all() and (cut["note"] == "").all()
    r0 = t[t.run_id == "r0"].sort_values("iteration")["value"].to_numpy()
    c0 = int(cut.set_index("run_id").loc["r0", "cut"])
    assert obs.set_index("run_id").loc["r0", "y"] == pytest.approx(r0[c0:].mean())
    a = analyze_results(t, meta=META)
    assert any(
        s.startswith("Warm-up: MSER-5 cut a median of") and "of 100 iterations per run" in s
        for s in a.conclusions.assumptions
    )
    short = tidy([r | {"value": 1.0} for r in rows if r["iteration"] < 12])
    _, cut = observations(short, "y", ["A", "B"])
    assert (cut["cut"] == 0).all() and cut["note"].str.contains("too few").all()


def test_drift_is_reported_with_its_run_ranges():
    """One host, 40 runs of a 2^2 design in random order; the level drops by 3 sigma from run 25."""
    rng = np.random.default_rng(9)
    configs = rng.permutation(np.repeat(np.arange(4), 10))
    rows = [
        {
            "run_id": f"r{i}",
            "run_order": i,
            "run_seq": i + 1,
            "A": int(c % 2),
            "B": int(c // 2),
            "instance": f"r{i}/0",
            "value": 100 + 5 * (c % 2) + rng.normal() - (3 if i >= 24 else 0),
        }
        for i, c in enumerate(configs)
    ]
    a = analyze_results(tidy(rows), meta=META)
    seg = a.drift
    assert seg.attrs["changes"] == 1 and len(seg) == 2
    assert abs(seg.iloc[1]["start"] - 25) <= 3
    drift = next(s for s in a.conclusions.assumptions if s.startswith("Drift"))
    assert (
        f"on host h1 the level of y changes 1 time: runs 1-{seg.iloc[0]['end']:g}, then runs "
        f"{seg.iloc[1]['start']:g}-40 ({seg.iloc[1]['shift_pct']:+.1f} % of the mean)"
    ) in drift
    quiet = analyze_results(tidy([r | {"value": 100 + 5 * r["A"] + rng.normal()} for r in rows]), meta=META)
    assert any(s.startswith("No drift") for s in quiet.conclusions.assumptions)


def fleet() -> pd.DataFrame:
    data = pd.read_csv(VECTORS / "levels_fleet.csv")
    return tidy(
        [
            {
                "run_id": f"{r['instance']}-r{r['run']}",
                "run_order": i,
                "run_seq": i + 1,
                "host": r["host"],
                "A": int(r["A"]),
                "B": int(r["B"]),
                "instance": r["instance"],
                "value": float(r["y"]),
            }
            for i, (_, r) in enumerate(data.iterrows())
        ]
    )


def test_hosts_of_a_fleet_are_blocks_or_a_random_level():
    t = fleet()
    random = analyze_results(t, meta=META, hosts="random")
    assert random.level_design.random == ["host", "host_config", "instance"]
    assert random.levels.method == "reml"
    text = str(random.conclusions)
    assert "the 3 hosts are a random level (conclusions about hosts like these)" in text
    assert "host x configuration" in text
    block = analyze_results(t, meta=META)
    assert block.level_design.blocks == ["host"] and block.level_design.random == ["instance"]
    assert "hosts as fixed blocks" in str(block.conclusions)
    # conclusions about hosts like these are less sure than about these hosts
    se = {k: a.effects.set_index("term").loc["A", "se"] for k, a in (("random", random), ("block", block))}
    assert se["random"] > se["block"]
    with pytest.raises(ConfigError, match="hosts must be one of"):
        level_design(observations(t, "y", ["A", "B"])[0], ["A", "B"], hosts="fixed")


def test_multi_level_factors_are_tested_on_the_unit_means():
    rows = []
    rng = np.random.default_rng(2)
    for level in ("x", "y", "z"):
        for i in range(3):
            cap = rng.normal(scale=2)
            rows += [
                {
                    "run_id": f"{level}{i}r{k}",
                    "run_order": len(rows),
                    "run_seq": len(rows) + 1,
                    "A": level,
                    "B": 0,
                    "instance": f"{level}{i}",
                    "value": 10 + cap + rng.normal(scale=0.1),
                }
                for k in range(3)
            ]
    a = analyze_results(tidy(rows), meta={"design": {"factors": {"A": ["x", "y", "z"], "B": [0]}}})
    assert a.kind == "anova" and a.effects.attrs["method"] == "unit means"
    assert a.effects.set_index("term").loc["error", "df"] == 6  # 9 instances - 3 levels
    assert "Error term: the variation between instance means" in str(a.conclusions)


def test_the_report_shows_levels_quantiles_drift_and_telemetry():
    t = split_campaign()
    t.loc[t.run_seq.isin([3, 7]), ["suspect", "suspect_reason"]] = [
        True,
        "other processes used 40 % of a CPU",
    ]
    runs = pd.DataFrame(
        {
            "run_id": t.run_id,
            "metadata": [
                {
                    "telemetry": {
                        "collected": True,
                        "campaign_cpu_mean_pct": 95.0 - s % 5,
                        "cpu_other_mean_pct": 1.0 + 10 * sus,
                        "steal_max_pct": 0.0,
                        "freq_min_mhz": 2000.0,
                        "freq_max_mhz": 3000.0,
                    }
                }
                for s, sus in zip(t.run_seq, t.suspect)
            ],
        }
    )
    a = analyze_results(t, meta=META, runs=runs)
    assert a.telemetry is not None and a.telemetry["suspect"].sum() == 2
    got = dict(sections(a))
    assert list(got) == [
        "Error term and variance by level",
        "Quantiles per configuration",
        "Drift in run order",
        "Telemetry per run",
    ]
    shown = got["Telemetry per run"][-1]
    assert shown["suspect"].tolist()[:2] == [True, True]  # suspect runs first
    assert "2 of 36 runs flagged suspect" in got["Telemetry per run"][1]
    levels = got["Error term and variance by level"]
    assert "Error term: the variation between instances" in levels[0]
    assert levels[1]["component"].tolist() == ["instance", "residual"]
    page = html_report("r", list(got.items()))
    assert page.count('src="data:image/png;base64,') == 3  # shares, drift, telemetry
    assert "other processes used 40 % of a CPU" in page


def test_large_unbalanced_designs_use_the_unit_means(monkeypatch):
    """Above MAX_MIXED_ROWS observations the REML model (dense n x n matrices) is not fitted: a
    balanced design still gets the exact EMS test, an unbalanced one the ANOVA of the unit means."""
    import labkit.report.level_analysis as levels

    monkeypatch.setattr(levels, "MAX_MIXED_ROWS", 20)
    balanced = analyze_results(split_campaign(), meta=META)
    assert balanced.kind == "levels" and balanced.levels.method == "ems"
    unbalanced = analyze_results(split_campaign().iloc[1:], meta=META)
    assert unbalanced.kind == "anova" and unbalanced.effects.attrs["method"] == "unit means"
    assert "more than the mixed model takes here (20)" in str(unbalanced.conclusions)
