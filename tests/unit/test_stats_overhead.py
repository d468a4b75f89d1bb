"""labkit.stats.overhead: Fieller's interval for a ratio of means and the slowdown table.

Expected values are derived, not pasted: Fieller's interval (Fieller 1954; Tamhane &
Logan 2004, unequal variances) reduces to the one-sample t interval of the numerator
divided by the denominator when the denominator has no variance (checked against
scipy.stats.ttest_1samp(...).confidence_interval), is invariant under taking
reciprocals, and covers the true ratio with the nominal probability (Monte Carlo).
"""

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import fieller_ratio, overhead_ratios


def test_constant_denominator_gives_the_t_interval_of_the_numerator():
    x = np.array([10.2, 11.9, 9.4, 10.8, 12.1, 10.0])
    y = np.full(5, 4.0)
    f = fieller_ratio(x, y, alpha=0.05)
    ci = sps.ttest_1samp(x, 0).confidence_interval(0.95)
    assert f["ratio"] == pytest.approx(x.mean() / 4)
    assert (f["ci_low"], f["ci_high"]) == pytest.approx((ci.low / 4, ci.high / 4), rel=1e-9)
    assert f["df"] == pytest.approx(len(x) - 1)


def test_reciprocal_invariance():
    rng = np.random.default_rng(3)
    x, y = rng.normal(50, 4, 7), rng.normal(100, 9, 5)
    a, b = fieller_ratio(x, y), fieller_ratio(y, x)
    assert a["ratio"] * b["ratio"] == pytest.approx(1)
    assert (a["ci_low"], a["ci_high"]) == pytest.approx((1 / b["ci_high"], 1 / b["ci_low"]))
    assert a["df"] == pytest.approx(b["df"])


def test_coverage_is_nominal():
    rng = np.random.default_rng(20240601)
    hits, n_sim = 0, 2000
    for _ in range(n_sim):
        f = fieller_ratio(rng.normal(200, 30, 8), rng.normal(100, 10, 6), alpha=0.05)
        hits += f["ci_low"] <= 2.0 <= f["ci_high"]
    # binomial sd at 0.95 with 2000 draws is 0.0049: +-3 sd
    assert 0.935 <= hits / n_sim <= 0.965


def test_denominator_not_different_from_zero_is_unbounded():
    f = fieller_ratio([5, 6, 7], [-3, 0.5, 4])
    assert np.isnan(f["ci_low"]) and np.isnan(f["ci_high"])
    assert "unbounded" in f["note"]
    assert np.isnan(fieller_ratio([1.0], [2.0, 3.0])["ci_low"])
    with pytest.raises(ConfigError, match="finite"):
        fieller_ratio([1, np.nan], [1, 2])


def _platform_data():
    rng = np.random.default_rng(11)
    rows = []
    for (
        metric,
        native,
        docker,
    ) in [("requests_per_s", 1000.0, 500.0), ("time_per_request_ms", 2.0, 4.0)]:
        for plat, mean in (("local", native), ("docker", docker)):
            for x in rng.normal(mean, mean * 0.02, 5):
                rows.append({"metric": metric, "platform": plat, "value": x})
    return pd.DataFrame(rows)


def test_overhead_ratios_is_a_slowdown_for_throughputs_and_times():
    out = overhead_ratios(
        _platform_data(), response="value", by="metric", lower_is_better={"time_per_request_ms"}
    )
    assert list(out.metric) == ["requests_per_s", "time_per_request_ms"]
    # docker is twice as slow by construction, on both metrics
    assert out.ratio.to_numpy() == pytest.approx([2, 2], rel=0.05)
    assert (out.ci_low < 2).all() and (out.ci_high > 2).all() and (out.ci_low > 1).all()
    assert out.significant.all() and (out.p < 0.001).all()
    assert out.attrs["baseline"] == "local"
    with pytest.raises(ConfigError, match="baseline 'native'"):
        overhead_ratios(_platform_data(), response="value", baseline="native")
