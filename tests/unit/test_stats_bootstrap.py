"""labkit.stats.bootstrap_ci (whole runs) and ratio_ci (Fieller, bootstrap).

Fieller: no published worked example was at hand; the interval is checked
against R's t.test output through an exact identity (a constant denominator
makes Fieller's interval the t interval of the numerator divided by that
constant), and for its defining property (coverage 1 - alpha for normal data)
by seeded simulation. The bootstrap is checked by coverage and by what it
must do with clustered rows, never against a pasted number.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from labkit.errors import ConfigError
from labkit.stats import FewRunsWarning, bootstrap_ci, ratio_ci

from .test_stats_vectors import printed, sv  # noqa: F401  (sv is a fixture)


def test_fieller_with_a_constant_denominator_is_the_t_interval(sv):
    # R: t.test(extra ~ group, data = sleep, paired = TRUE): mean difference -1.58,
    # 95% CI (-2.4598858, -0.7001142). Dividing by a constant 2 halves it.
    diff = np.subtract(sv.SLEEP_G1, sv.SLEEP_G2)
    t = ratio_ci(diff, [2.0] * 10).iloc[0]
    assert t["ratio"] == pytest.approx(-0.79)
    assert (2 * t["ci_low"], 2 * t["ci_high"]) == printed(sv.PAIRED["ci95"])


def coverage(method, n, reps, seed, **kw):
    rng = np.random.default_rng(seed)
    hit = 0
    for _ in range(reps):
        a, b = rng.normal(120, 12, n), rng.normal(100, 10, n)
        t = ratio_ci(a, b, method=method, seed=rng.integers(1 << 31), **kw).iloc[0]
        hit += t["ci_low"] <= 1.2 <= t["ci_high"]
    return hit / reps


def test_fieller_covers_the_true_ratio():
    # exact for normal data: 95 % ± 3.5 % (about 3 binomial SE for 400 draws)
    assert coverage("fieller", 8, 400, 1) == pytest.approx(0.95, abs=0.035)


def test_bootstrap_ratio_covers_the_true_ratio():
    # percentile bootstrap with 20 runs per platform: close to nominal, slightly under
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cov = coverage("bootstrap", 20, 300, 2, n_boot=1000)
    assert 0.88 <= cov <= 0.99


def test_ratio_bounds_never_negative_for_positive_data():
    a = [0.01, 6.0, 0.02, 0.03, 5.0]  # mean barely distinguishable from 0
    b = [10.0, 11.0, 9.0, 10.5, 9.5]
    for method in ("fieller", "bootstrap"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FewRunsWarning)
            t = ratio_ci(a, b, method=method, seed=3).iloc[0]
        assert t["ci_low"] >= 0 and t["ci_high"] > t["ratio"] > t["ci_low"]
    assert "clipped at 0" in ratio_ci(a, b).loc[0, "note"]


def test_fieller_unbounded_when_the_denominator_is_noise():
    t = ratio_ci([10.0, 11, 12], [0.5, -0.4, 0.2]).iloc[0]
    assert np.isnan(t["ci_low"]) and "unbounded" in t["note"]
    with pytest.raises(ConfigError, match="method must be"):
        ratio_ci([1, 2], [1, 2], method="delta")


def runs_frame(rng, n_runs, rows_per_run, run_sd=5.0, row_sd=0.1, mean=100.0):
    effects = rng.normal(0, run_sd, n_runs)
    return pd.DataFrame(
        {
            "run_id": np.repeat([f"r{i}" for i in range(n_runs)], rows_per_run),
            "y": mean + np.repeat(effects, rows_per_run) + rng.normal(0, row_sd, n_runs * rows_per_run),
        }
    )


def test_bootstrap_resamples_runs_not_rows():
    # 4 runs of 200 near-identical rows: the interval must reflect the run-to-run
    # spread (sd 5), not the 800 rows (an interval as narrow as 2·0.1/sqrt(800))
    rng = np.random.default_rng(5)
    data = runs_frame(rng, 4, 200)
    with pytest.warns(FewRunsWarning, match="only 4 runs"):
        t = bootstrap_ci(data, response="y", seed=1).iloc[0]
    run_means = data.groupby("run_id")["y"].mean()
    assert t["n_runs"] == 4 and t["n_rows"] == 800
    assert t["ci_low"] >= run_means.min() - 1e-9 and t["ci_high"] <= run_means.max() + 1e-9
    assert t["ci_high"] - t["ci_low"] > 0.5 * (run_means.max() - run_means.min())
    assert "too narrow" in t["note"]


def test_bootstrap_coverage_with_enough_runs():
    rng = np.random.default_rng(11)
    hits = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 30 runs: no warning
        for i in range(200):
            data = runs_frame(rng, 30, 3)
            t = bootstrap_ci(data, response="y", seed=i, n_boot=1000).iloc[0]
            hits += t["ci_low"] <= 100 <= t["ci_high"]
    assert 0.88 <= hits / 200 <= 0.99


def test_bootstrap_by_configuration_and_errors():
    rng = np.random.default_rng(2)
    data = pd.concat(
        [
            runs_frame(rng, 12, 2).assign(platform="kvm"),
            runs_frame(rng, 12, 2, mean=50).assign(platform="lxc"),
        ]
    )
    data["run_id"] = data["platform"] + data["run_id"]
    t = bootstrap_ci(data, response="y", by="platform", seed=0)
    assert t["platform"].tolist() == ["kvm", "lxc"] and (t["note"] == "").all()
    assert (t["ci_low"] < t["mean"]).all() and (t["mean"] < t["ci_high"]).all()
    with pytest.raises(ConfigError, match="n_boot"):
        bootstrap_ci(data, response="y", n_boot=10)
    with pytest.raises(ConfigError, match="no column 'run'"):
        bootstrap_ci(data, response="y", run="run")
