"""labkit.stats.summarize: per-configuration mean and t-based CI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import summarize

from .test_stats_vectors import sv  # noqa: F401  (sv is a fixture)


def test_summary_of_plant_growth(sv):
    groups = {"ctrl": sv.PG_CTRL, "trt1": sv.PG_TRT1, "trt2": sv.PG_TRT2}
    data = pd.DataFrame([{"group": g, "weight": w} for g, ws in groups.items() for w in ws])
    out = summarize(data, by="group", response="weight", alpha=0.10)
    assert list(out.columns) == ["group", "n", "mean", "std", "sem", "ci_low", "ci_high"]
    for _, row in out.iterrows():
        x = np.array(groups[row["group"]])
        # R: t.test(x, conf.level = 0.90)$conf.int == scipy.stats.t.interval
        lo, hi = sps.t.interval(0.90, len(x) - 1, loc=x.mean(), scale=sps.sem(x))
        assert (row["n"], row["mean"], row["std"]) == (
            10,
            pytest.approx(x.mean()),
            pytest.approx(x.std(ddof=1)),
        )
        assert (row["ci_low"], row["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))


def test_several_by_columns_single_observations_and_overall():
    data = pd.DataFrame(
        {"vcpus": [2, 1, 1, 2, 2], "affinity": ["p", "f", "f", "p", "f"], "y": [4.0, 1.0, 3.0, 6.0, 7.0]}
    )
    out = summarize(data, by=["vcpus", "affinity"], response="y")
    assert out[["vcpus", "affinity", "n"]].values.tolist() == [[1, "f", 2], [2, "f", 1], [2, "p", 2]]
    single = out.iloc[1]
    assert single["mean"] == 7 and np.isnan(single["std"]) and np.isnan(single["ci_low"])
    overall = summarize(data, by=None, response="y")
    assert overall.loc[0, "n"] == 5 and overall.loc[0, "mean"] == pytest.approx(4.2)


def test_summary_errors():
    data = pd.DataFrame({"a": [1, 2], "y": ["x", "y"]})
    with pytest.raises(ConfigError, match="response column 'y' must be numeric"):
        summarize(data, by="a", response="y")
    with pytest.raises(ConfigError, match="by: no column 'b'"):
        summarize(data, by=["b"], response="y")


def test_quantile_summary_gives_each_configuration_its_order_statistic_intervals():
    """Medians and p95 with the exact intervals of labkit.stats.quantile_ci (checked against the
    binomial definition in test_stats_quantile.py) beside the mean's t interval; p95 needs 72
    values at 95 % (1 - 0.95^n <= ... : quantile.min_values), so the 10-value group has none."""
    from labkit.stats import quantile_ci, quantile_summary

    rng = np.random.default_rng(8)
    data = pd.DataFrame(
        {"g": ["big"] * 400 + ["small"] * 10, "y": np.r_[rng.lognormal(size=400), rng.lognormal(size=10)]}
    )
    out = quantile_summary(data, by="g", response="y", quantiles=[0.5, 0.95])
    assert list(out.columns) == [
        "g",
        "n",
        "mean",
        "ci_low",
        "ci_high",
        "p50",
        "p50_low",
        "p50_high",
        "p50_upper",
        "p95",
        "p95_low",
        "p95_high",
        "p95_upper",
    ]
    assert out.attrs["needs"] == {"p50": 6, "p95": 72}
    means = summarize(data, by="g", response="y")
    assert out[["mean", "ci_low", "ci_high"]].to_numpy() == pytest.approx(
        means[["mean", "ci_low", "ci_high"]].to_numpy()
    )
    for _, row in out.iterrows():
        x = data.loc[data.g == row["g"], "y"].to_numpy()
        med = quantile_ci(x, q=0.5).iloc[0]
        assert (row["p50"], row["p50_low"], row["p50_high"]) == (med["estimate"], med["low"], med["high"])
        if row["g"] == "big":
            p95 = quantile_ci(x, q=0.95).iloc[0]
            assert (row["p95_low"], row["p95_high"]) == (p95["low"], p95["high"])
        else:
            assert row["p95"] == np.quantile(x, 0.95) and np.isnan(row["p95_low"])
    overall = quantile_summary(data, by=None, response="y")
    assert overall.columns[-1] == "p99_upper" and overall.loc[0, "n"] == 410
    with pytest.raises(ConfigError, match="strictly between 0 and 1"):
        quantile_summary(data, by="g", response="y", quantiles=[50])


def test_quantile_summary_gives_tail_quantiles_their_one_sided_upper_bound():
    """Issue 41: a latency KPI is "p95 is at most X with 95 % confidence". Each quantile gets its
    one-sided upper bound (the order statistic of quantile_ci(side="upper")), present from the
    runs runs_for_quantile says it needs: Wilks (1941) 59 for p95 at 95 %, 299 for p99; 5 for the
    median (0.5^5 = 0.031 <= 0.05). 60 runs give p95's bound, not p99's; 59 is the least."""
    from labkit.stats import quantile_ci, quantile_summary

    rng = np.random.default_rng(41)
    data = pd.DataFrame({"g": ["sixty"] * 60 + ["four"] * 4, "y": rng.lognormal(size=64)})
    out = quantile_summary(data, by="g", response="y").set_index("g")
    assert out.attrs["needs_upper"] == {"p50": 5, "p95": 59, "p99": 299}
    sixty = data.loc[data.g == "sixty", "y"].to_numpy()
    assert out.loc["sixty", "p95_upper"] == quantile_ci(sixty, q=0.95, side="upper").iloc[0]["high"]
    assert out.loc["sixty", "p95_upper"] == np.sort(sixty)[59]  # the 60th of 60: rank u = 60
    assert np.isnan(out.loc["sixty", "p99_upper"]) and np.isnan(out.loc["four", "p50_upper"])
    assert out.loc["sixty", "p50_upper"] >= out.loc["sixty", "p50"]
