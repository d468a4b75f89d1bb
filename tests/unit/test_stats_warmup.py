"""MSER-5 warm-up truncation (labkit.stats.warmup), White (1997).

Oracles:
* the statistic equals White's formula computed here by a plain loop over truncation points;
* a known exponential transient ``y_t = 10·exp(-t/10) + e_t`` (e_t ~ N(0, 1), n = 1000).
  Where MSER-5 should cut: dropping batch j (mean bias b_j) lowers the sum of squares by
  about the batch's own share, sigma²/5 + b_j², while the (k - d)² denominator costs about
  that same noise share, so a batch is worth cutting while b_j² > sigma²/5, i.e.
  10·exp(-t/10) > 1/sqrt(5) = 0.447, t < 31: the expected cut is ~30. Before t = 20 the bias
  exceeds 1.35 sigma, so the cut is never below 20; the noise of the statistic spreads it
  upwards, so at least 90 % of the 40 seeded series must fall in [20, 60] and the median in
  [25, 40].
* a stationary series: the median cut over 40 seeds is 0 and at least 80 % cut <= 25 values.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from labkit.errors import ConfigError
from labkit.stats import WarmupWarning, warmup
from labkit.stats.warmup import mser


def white_mser(x, batch):
    k = len(x) // batch
    z = [float(np.mean(x[j * batch : (j + 1) * batch])) for j in range(k)]
    out = []
    for d in range(k // 2 + 1):
        rest = z[d:]
        mean = sum(rest) / len(rest)
        out.append(sum((r - mean) ** 2 for r in rest) / len(rest) ** 2)
    return np.array(out)


@pytest.mark.filterwarnings("ignore::labkit.stats.warmup.WarmupWarning")
@pytest.mark.parametrize("n, batch", [(20, 5), (103, 5), (64, 1), (90, 3)])
def test_the_statistic_is_whites_formula(n, batch):
    x = np.random.default_rng(n).gamma(2.0, size=n) + 5 * np.exp(-np.arange(n) / 8)
    np.testing.assert_allclose(mser(x, batch=batch), white_mser(x, batch), rtol=1e-9, atol=1e-12)
    assert warmup(x, batch=batch) == batch * int(np.argmin(white_mser(x, batch)))


def run_seeds(transient):
    cuts = []
    t = np.arange(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", WarmupWarning)  # never at the end of the range
        for seed in range(40):
            y = np.random.default_rng(seed).normal(size=1000) + (10 * np.exp(-t / 10) if transient else 0)
            cuts.append(warmup(y))
    return np.array(cuts)


def test_finds_a_known_exponential_transient():
    cuts = run_seeds(transient=True)
    assert (cuts % 5 == 0).all() and (cuts >= 20).all(), cuts
    assert np.mean((cuts >= 20) & (cuts <= 60)) >= 0.9, cuts
    assert 25 <= np.median(cuts) <= 40, cuts


def test_a_stationary_series_has_no_warmup():
    cuts = run_seeds(transient=False)
    assert np.median(cuts) == 0, cuts
    assert np.mean(cuts <= 25) >= 0.8, cuts


def test_a_series_that_never_settles_warns():
    x = -np.arange(200.0) + np.random.default_rng(1).normal(size=200) * 0.1  # a steady downward trend
    with pytest.warns(WarmupWarning, match="may last longer than the series"):
        assert warmup(x) == 100  # the end of the first half


@pytest.mark.parametrize(
    "values, kwargs, match",
    [
        (np.arange(19.0), {}, "at least 20 values"),
        (np.arange(30.0), {"batch": 0}, "batch"),
        (np.arange(30.0), {"batch": 10}, "at least 40 values"),
        ([1.0] * 20 + [np.nan], {}, "missing"),
    ],
)
def test_bad_input(values, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        warmup(values, **kwargs)
