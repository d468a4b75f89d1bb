"""Distribution-free quantile intervals (labkit.stats.quantile).

Oracles:
* the ranks equal the binomial definition, computed here independently by summing
  ``scipy.stats.binom.pmf`` term by term (not the cdf/sf arrays the module uses);
* published values: the textbook table "Confidence Intervals for the Population Median"
  (Table A.7, seen at https://www.coursehero.com/file/5646626/A7/) lists for the 95 %
  equal-tailed intervals n=6 [x(1), x(6)] 96.9 %, n=10 [x(2), x(9)] 97.9 %, n=15
  [x(4), x(12)] 96.5 %, n=17 [x(5), x(13)] 95.1 %, n=20 [x(6), x(15)] 95.9 %; the n=10 interval
  is also the one of Le Boudec (2010), Table A.1;
* coverage over 4,000 simulated samples (normal, lognormal) is at least nominal, allowing for
  Monte Carlo error by a one-sided binomial bound, and agrees with the reported exact coverage.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import quantile_ci
from labkit.stats.quantile import min_values, quantile_ranks


def binomial_ranks(n, q, c):
    """The definition, term by term: largest l with P(B <= l-1) <= (1-c)/2, smallest u with
    P(B >= u) <= (1-c)/2."""
    pmf = [sps.binom.pmf(k, n, q) for k in range(n + 1)]
    tail = (1 - c) / 2 + 1e-12
    low = max(r for r in range(1, n + 1) if sum(pmf[:r]) <= tail)
    high = min(u for u in range(1, n + 1) if sum(pmf[u:]) <= tail)
    return low, high, sum(pmf[low:high])


@pytest.mark.parametrize("q", [0.5, 0.1, 0.9, 0.95])
@pytest.mark.parametrize("c", [0.9, 0.95, 0.99])
def test_ranks_are_the_binomial_definition(q, c):
    for n in range(min_values(q=q, confidence=c), 160, 7):
        low, high, cov = quantile_ranks(n, q=q, confidence=c)
        want = binomial_ranks(n, q, c)
        assert (low, high) == want[:2], n
        assert cov == pytest.approx(want[2], abs=1e-12)
        assert cov >= c


@pytest.mark.parametrize(
    "n, low, high, coverage",
    [(6, 1, 6, 0.969), (10, 2, 9, 0.979), (15, 4, 12, 0.965), (17, 5, 13, 0.951), (20, 6, 15, 0.959)],
)
def test_the_published_median_table(n, low, high, coverage):
    row = quantile_ci(np.arange(n, 0, -1) * 1.5, confidence=0.95).iloc[0]
    assert (row.rank_low, row.rank_high) == (low, high)
    assert row.coverage == pytest.approx(coverage, abs=5e-4)
    assert (row.low, row.high) == (1.5 * low, 1.5 * high)  # order statistics of the sorted values


def test_the_row_and_the_estimate_definition():
    x = np.random.default_rng(3).lognormal(size=101)
    out = quantile_ci(x, q=0.9, confidence=0.9)
    assert list(out.columns) == ["n", "q", "estimate", "low", "high", "rank_low", "rank_high", "coverage"]
    row = out.iloc[0]
    assert row.estimate == np.quantile(x, 0.9)  # numpy's default (type 7)
    assert row.n == 101 and row.q == 0.9
    assert row.low <= row.estimate <= row.high
    assert quantile_ci(x).iloc[0].estimate == np.median(x)


@pytest.mark.parametrize("dist", ["normal", "lognormal"])
@pytest.mark.parametrize("n, q", [(10, 0.5), (37, 0.5), (100, 0.95), (80, 0.25)])
def test_coverage_over_simulated_samples_is_at_least_nominal(dist, n, q):
    reps, c = 4000, 0.95
    rng = np.random.default_rng([n, int(100 * q), len(dist)])
    if dist == "normal":
        x, truth = rng.normal(size=(reps, n)), sps.norm.ppf(q)
    else:
        x, truth = rng.lognormal(size=(reps, n)), np.exp(sps.norm.ppf(q))
    low, high, cov = quantile_ranks(n, q=q, confidence=c)
    xs = np.sort(x, axis=1)
    hits = int(np.count_nonzero((xs[:, low - 1] <= truth) & (truth < xs[:, high - 1])))
    # one-sided: so few hits would happen with probability < 0.1 % if the coverage were nominal
    assert sps.binom.cdf(hits, reps, c) > 1e-3, (hits, reps)
    # and the reported exact coverage is what the simulation sees (two-sided 0.1 %)
    assert sps.binom.cdf(hits, reps, cov) > 5e-4 and sps.binom.sf(hits - 1, reps, cov) > 5e-4
    row = quantile_ci(x[0], q=q, confidence=c).iloc[0]
    assert (row.rank_low, row.rank_high, row.coverage) == (low, high, cov)


@pytest.mark.parametrize(
    "q, c, need", [(0.5, 0.95, 6), (0.5, 0.99, 8), (0.95, 0.95, 72), (0.99, 0.95, 368), (0.05, 0.95, 72)]
)
def test_too_few_values_says_how_many_are_needed(q, c, need):
    assert min_values(q=q, confidence=c) == need
    quantile_ci(np.arange(need, dtype=float), q=q, confidence=c)
    with pytest.raises(ConfigError, match=f"needs at least {need} values.*got {need - 1}"):
        quantile_ci(np.arange(need - 1, dtype=float), q=q, confidence=c)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"q": 0}, "q must be"),
        ({"q": 1.5}, "q must be"),
        ({"confidence": 95}, "confidence must be"),
        ({"q": True}, "q must be"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        quantile_ci(np.arange(50.0), **kwargs)
    with pytest.raises(ConfigError, match="missing or infinite"):
        quantile_ci([1.0, 2.0, np.nan, 3, 4, 5, 6])
    with pytest.raises(TypeError):
        quantile_ci(np.arange(50.0), 0.5)  # q is keyword-only


# --- one-sided bounds and the runs they need (labkit.stats.quantile.runs_for_quantile) ---------
# Published: TriScale (Jacob, Zimmerling, Boano, Vanbever, Thiele, "TriScale: A Framework Supporting
# Replicable Performance Evaluations in Networking", 2021, minimal number of runs): a lower bound on
# the 10th percentile at 99 % confidence needs 44 runs, 97 when the 3 worst are excluded; a two-sided
# 95 % interval of the median needs 6. Wilks (1941, "Determination of sample sizes for setting
# tolerance limits", Ann. Math. Stat. 12:91), the "95/95" sample sizes of nuclear safety analysis
# (GRS method): a one-sided 95 % upper bound on the 95th percentile from the largest value needs 59
# runs, from the 2nd, 3rd, 4th, 5th largest 93, 124, 153, 181.
# Closed form (k = 0): n = ceil(log(1 - c)/log(q)) for an upper bound, log(1 - c)/log(1 - q) for a
# lower bound, e.g. R: ceiling(log(0.01)/log(0.9)) = 44.
from labkit.stats import runs_for_quantile  # noqa: E402


@pytest.mark.parametrize(
    "q, c, side, k, need",
    [
        (0.1, 0.99, "lower", 0, 44),
        (0.1, 0.99, "lower", 3, 97),
        (0.5, 0.95, "two-sided", 0, 6),
        (0.9, 0.99, "upper", 0, 44),
        (0.9, 0.99, "upper", 3, 97),  # the mirror image
        (0.95, 0.95, "upper", 0, 59),
        (0.95, 0.95, "upper", 1, 93),
        (0.95, 0.95, "upper", 2, 124),
        (0.95, 0.95, "upper", 3, 153),
        (0.95, 0.95, "upper", 4, 181),
        (0.05, 0.95, "lower", 0, 59),
    ],
)
def test_runs_for_quantile_are_the_published_counts(q, c, side, k, need):
    assert runs_for_quantile(q, confidence=c, side=side, exclude_worst=k) == need


@pytest.mark.parametrize("q", [0.05, 0.1, 0.5, 0.9, 0.95, 0.99])
@pytest.mark.parametrize("c", [0.9, 0.95, 0.99])
@pytest.mark.parametrize("k", [0, 1, 3])
def test_runs_for_quantile_is_the_binomial_definition(q, c, k):
    """Summing the binomial pmf term by term: n runs suffice and n - 1 do not."""

    def tail_ok(n, side):
        pmf = [sps.binom.pmf(j, n, q) for j in range(n + 1)]
        a = 1 - c if side != "two-sided" else (1 - c) / 2
        low = side == "upper" or sum(pmf[: k + 1]) <= a + 1e-12  # P(B <= k)
        high = side == "lower" or sum(pmf[n - k :]) <= a + 1e-12  # P(B >= n - k)
        return low and high

    assert runs_for_quantile(q, confidence=c, side="two-sided") == min_values(q=q, confidence=c)
    for side in ("upper", "lower", "two-sided"):
        n = runs_for_quantile(q, confidence=c, side=side, exclude_worst=k)
        if n > 400:
            continue
        assert tail_ok(n, side) and not tail_ok(n - 1, side), (side, n)
        low, high, _ = quantile_ranks(n, q=q, confidence=c, side=side)
        assert (side == "upper" or low >= k + 1) and (side == "lower" or high <= n - k)


@pytest.mark.parametrize("q, c", [(0.95, 0.95), (0.1, 0.99), (0.5, 0.9)])
def test_one_sided_ranks_are_the_binomial_definition(q, c):
    for n in range(runs_for_quantile(q, confidence=c, side="upper"), 200, 11):
        pmf = [sps.binom.pmf(j, n, q) for j in range(n + 1)]
        u = min(r for r in range(1, n + 1) if sum(pmf[:r]) >= c - 1e-12)  # P(B <= u-1) >= c
        low, high, cov = quantile_ranks(n, q=q, confidence=c, side="upper")
        assert (low, high) == (0, u) and cov == pytest.approx(sum(pmf[:u]), abs=1e-12) and cov >= c
    for n in range(runs_for_quantile(q, confidence=c, side="lower"), 200, 11):
        pmf = [sps.binom.pmf(j, n, q) for j in range(n + 1)]
        lo = max(r for r in range(1, n + 1) if sum(pmf[r:]) >= c - 1e-12)  # P(B >= l) >= c
        low, high, cov = quantile_ranks(n, q=q, confidence=c, side="lower")
        assert (low, high) == (lo, n + 1) and cov == pytest.approx(sum(pmf[lo:]), abs=1e-12)


def test_one_sided_bounds_in_the_row():
    x = np.arange(59, 0, -1) * 2.0  # 59 values: the p95 upper bound is the max
    up = quantile_ci(x, q=0.95, side="upper")
    row = up.iloc[0]
    assert (row.low, row.high, row.rank_low, row.rank_high) == (-np.inf, 118.0, 0, 59)
    assert row.coverage == pytest.approx(1 - 0.95**59) and up.attrs["side"] == "upper"
    low = quantile_ci(np.arange(44.0), q=0.1, confidence=0.99, side="lower").iloc[0]
    assert (low.low, low.high, low.rank_low, low.rank_high) == (0.0, np.inf, 1, 45)
    with pytest.raises(
        ConfigError, match="upper bound for the 0.95 quantile needs at least 59 values.*got 58"
    ):
        quantile_ci(np.arange(58.0), q=0.95, side="upper")
    with pytest.raises(ConfigError, match="side must be one of"):
        quantile_ci(x, side="both")
    with pytest.raises(ConfigError, match="exclude_worst"):
        runs_for_quantile(0.5, exclude_worst=-1)


@pytest.mark.parametrize("side", ["upper", "lower"])
def test_one_sided_coverage_over_simulated_samples_is_at_least_nominal(side):
    reps, n, q, c = 4000, 60, 0.9, 0.95
    rng = np.random.default_rng([n, len(side)])
    xs = np.sort(rng.lognormal(size=(reps, n)), axis=1)
    truth = np.exp(sps.norm.ppf(q))
    low, high, cov = quantile_ranks(n, q=q, confidence=c, side=side)
    hits = int(
        np.count_nonzero(truth < xs[:, high - 1])
        if side == "upper"
        else np.count_nonzero(xs[:, low - 1] <= truth)
    )
    assert sps.binom.cdf(hits, reps, c) > 1e-3, hits
    assert sps.binom.cdf(hits, reps, cov) > 5e-4 and sps.binom.sf(hits - 1, reps, cov) > 5e-4
