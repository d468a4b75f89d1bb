"""Distribution-free confidence intervals for quantiles (medians, p95, p99) from order statistics.

When performance data are not normal (long right tails, several modes), a mean with a t
interval says little; Hoefler & Belli ("Scientific benchmarking of parallel computing systems",
SC15) and Le Boudec (*Performance Evaluation of Computer and Communication Systems*, EPFL Press
2010, section 2.2) recommend the median (or another quantile) with the interval between two
order statistics, which holds for any continuous distribution.

The theory (e.g. Conover, *Practical Nonparametric Statistics*, 3rd ed., 1999, section 3.2):
for the population ``q``-quantile ``xi`` of a continuous distribution, the number ``B`` of
the ``n`` independent values at or below ``xi`` is Binomial(n, q), and for 1-based ranks
``l < u`` of the sorted sample ``x_(1) <= ... <= x_(n)``::

    P(x_(l) <= xi < x_(u)) = P(l <= B <= u - 1) = F(u - 1) - F(l - 1)

(``F`` the Binomial(n, q) cdf), since ``x_(l) <= xi`` exactly when ``B >= l``. That probability
is the interval's exact ``coverage``; for a distribution with atoms (ties) the closed interval
``[x_(l), x_(u)]`` covers at least as often.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["quantile_ci", "quantile_ranks", "min_values"]

# a tail probability that equals the limit up to rounding counts as within it
_REL_TOL = 1e-12


def _fraction(value: object, arg: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) \
            or not 0 < float(value) < 1:
        raise ConfigError(f"{arg} must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


def min_values(*, q: float = 0.5, confidence: float = 0.95) -> int:
    """The fewest values for which the equal-tailed interval of the ``q``-quantile exists:
    the smallest ``n`` with ``(1 - q)^n <= (1 - confidence)/2`` (then ``rank_low >= 1``) and
    ``q^n <= (1 - confidence)/2`` (then ``rank_high <= n``): 6 for the median at 95 %,
    72 for p95 and 368 for p99 at 95 %."""
    q, c = _fraction(q, "q"), _fraction(confidence, "confidence")
    tail = (1 - c) / 2
    n = max(1, math.ceil(math.log(tail) / math.log(max(q, 1 - q))) - 1)
    while max(q, 1 - q) ** n > tail * (1 + _REL_TOL):    # the log may round either way
        n += 1
    return n


def quantile_ranks(n: int, *, q: float = 0.5, confidence: float = 0.95) -> tuple[int, int, float]:
    """``(rank_low, rank_high, coverage)`` of the exact equal-tailed interval for ``n`` values.

    With ``B ~ Binomial(n, q)`` and ``a = (1 - confidence)/2``: ``rank_low`` is the largest
    ``l`` with ``P(B <= l - 1) <= a``, ``rank_high`` the smallest ``u`` with ``P(B >= u) <= a``
    (1-based ranks in the sorted sample) and ``coverage = P(l <= B <= u - 1) >= confidence``.
    ConfigError when ``n`` is below :func:`min_values`, saying how many are needed.
    """
    q, c = _fraction(q, "q"), _fraction(confidence, "confidence")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ConfigError(f"n must be a whole number of values >= 0, got {n!r}")
    need = min_values(q=q, confidence=c)
    if n < need:
        raise ConfigError(
            f"a {100 * c:g} % interval for the {q:g} quantile needs at least {need} values "
            f"(below that even the sample's extremes cover the quantile with probability "
            f"< {100 * c:g} %), got {n}")
    limit = (1 - c) / 2 * (1 + _REL_TOL)
    k = np.arange(n + 1)
    cdf = sps.binom.cdf(k, n, q)          # cdf[k] = P(B <= k)
    sf = sps.binom.sf(k - 1, n, q)        # sf[k] = P(B >= k)
    low = int(np.flatnonzero(cdf <= limit)[-1]) + 1
    high = int(np.flatnonzero(sf <= limit)[0])
    coverage = float(cdf[high - 1] - cdf[low - 1])
    return low, high, coverage


def quantile_ci(values: v.Sample, *, q: float = 0.5, confidence: float = 0.95) -> pd.DataFrame:
    """The ``q``-quantile of ``values`` with its exact distribution-free confidence interval.

    Returns a one-row DataFrame: ``n``; ``q``; ``estimate``, the sample quantile by numpy's
    default definition (linear interpolation between order statistics, Hyndman & Fan's type
    7, R's default: the usual median for ``q = 0.5``); ``low`` and ``high``, the order
    statistics ``x_(rank_low)`` and ``x_(rank_high)``; ``rank_low`` and ``rank_high`` (see
    :func:`quantile_ranks`; 1-based); ``coverage``, the interval's exact probability of
    covering the population quantile for a continuous distribution (at least ``confidence``;
    more, because ranks are whole numbers: 0.979 for the median of 10 values at 95 %).

    ConfigError for ``q`` or ``confidence`` outside (0, 1), missing or infinite values, and
    fewer values than the interval needs (the message says how many: 6 for the median at
    95 %, 72 for p95, 368 for p99).
    """
    q, c = _fraction(q, "q"), _fraction(confidence, "confidence")
    x = np.sort(v.sample(values, "values"))
    low, high, coverage = quantile_ranks(len(x), q=q, confidence=c)
    out = pd.DataFrame([{"n": len(x), "q": q, "estimate": float(np.quantile(x, q)),
                         "low": float(x[low - 1]), "high": float(x[high - 1]),
                         "rank_low": low, "rank_high": high, "coverage": coverage}])
    out.attrs.update({"confidence": c, "estimate": "numpy linear (Hyndman-Fan type 7)"})
    return out
