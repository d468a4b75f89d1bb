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

One-sided bounds (tail KPIs: "p95 is at most X with 95 % confidence"): the upper bound is
``x_(u)`` with ``u`` the smallest rank such that ``P(B <= u - 1) >= confidence`` (then
``P(xi < x_(u)) = P(B <= u - 1)``), the lower bound ``x_(l)`` with ``l`` the largest rank such that
``P(B >= l) >= confidence``; the open side is ``-inf``/``+inf`` (rank 0 / rank n + 1). Such a
bound exists only from a number of runs on (:func:`runs_for_quantile`): TriScale's rule (Jacob
et al., "TriScale: A Framework Supporting Replicable Performance Evaluations in Networking",
2021), which is also Wilks' (1941) rule for one-sided tolerance limits (59 runs for a 95 %
bound on p95).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["SIDES", "min_values", "quantile_ci", "quantile_ranks", "runs_for_quantile"]

SIDES = ("two-sided", "upper", "lower")

# a tail probability that equals the limit up to rounding counts as within it
_REL_TOL = 1e-12


def _fraction(value: object, arg: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.floating))
        or not 0 < float(value) < 1
    ):
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
    while max(q, 1 - q) ** n > tail * (1 + _REL_TOL):  # the log may round either way
        n += 1
    return n


def _side(side: object) -> str:
    if side not in SIDES:
        raise ConfigError(f"side must be one of {', '.join(map(repr, SIDES))}, got {side!r}")
    return str(side)


def _count(value: object, arg: str, *, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ConfigError(f"{arg} must be a whole number >= {least}, got {value!r}")
    return int(value)


def runs_for_quantile(
    q: float, *, confidence: float = 0.95, side: str = "two-sided", exclude_worst: int = 0
) -> int:
    """The fewest runs for which the ``confidence`` bound (``side="upper"`` or ``"lower"``) or
    interval (``"two-sided"``, equal-tailed) of the ``q``-quantile exists without using the
    ``exclude_worst`` most extreme runs on the bounded side (on each side when two-sided).

    With ``B ~ Binomial(n, q)`` and ``k = exclude_worst``: an upper bound needs its rank
    ``u <= n - k``, i.e. ``P(B <= n - k - 1) >= confidence``; a lower bound needs ``l >= k + 1``,
    i.e. ``P(B >= k + 1) >= confidence``; a two-sided interval needs both with ``(1 +
    confidence)/2`` in place of ``confidence``. Both probabilities grow with ``n``, so the answer
    is the smallest ``n`` meeting them. TriScale (Jacob et al. 2021): a lower bound on the 10th
    percentile at 99 % needs 44 runs, 97 when the 3 worst may be dropped; a median interval at
    95 % needs 6. ``k = 0`` and an upper bound: ``n = ceil(log(1 - confidence)/log(q))``
    (Wilks 1941: 59 runs for a 95 % bound on p95). ConfigError for ``q``/``confidence`` outside
    (0, 1), an unknown ``side``, a negative ``exclude_worst``, or more than 10^9 runs.
    """
    q, c = _fraction(q, "q"), _fraction(confidence, "confidence")
    side = _side(side)
    k = _count(exclude_worst, "exclude_worst", least=0)
    tail = (1 - c) / 2 if side == "two-sided" else 1 - c
    limit = tail * (1 + _REL_TOL)

    def ok(n: int) -> bool:
        # lower: P(B <= k) <= tail; upper: P(B >= n - k) = P(Binomial(n, 1 - q) <= k) <= tail
        low = side == "upper" or sps.binom.cdf(k, n, q) <= limit
        high = side == "lower" or sps.binom.cdf(k, n, 1 - q) <= limit
        return bool(low and high)

    lo = k + 1 if side != "two-sided" else 2 * k + 2  # too few for a rank inside [k+1, n-k]
    hi = lo
    while not ok(hi):
        lo, hi = hi + 1, 2 * hi
        if hi > 10**9:
            raise ConfigError(
                f"the {100 * c:g} % {side} bound of the {q:g} quantile needs more than 10^9 runs"
            )
    while lo < hi:  # ok(hi); everything below lo is not
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def quantile_ranks(
    n: int, *, q: float = 0.5, confidence: float = 0.95, side: str = "two-sided"
) -> tuple[int, int, float]:
    """``(rank_low, rank_high, coverage)`` of the exact interval or one-sided bound for ``n`` values.

    With ``B ~ Binomial(n, q)`` and ``a = (1 - confidence)/2`` (two-sided) or ``1 - confidence``
    (one-sided): ``rank_low`` is the largest ``l`` with ``P(B <= l - 1) <= a``, ``rank_high`` the
    smallest ``u`` with ``P(B >= u) <= a`` (1-based ranks in the sorted sample), the open side of
    a one-sided bound rank 0 (``side="upper"``) or ``n + 1`` (``"lower"``: x_(0) = -inf,
    x_(n+1) = +inf), and ``coverage = P(l <= B <= u - 1) >= confidence``.
    ConfigError when ``n`` is below :func:`runs_for_quantile`, saying how many are needed.
    """
    q, c = _fraction(q, "q"), _fraction(confidence, "confidence")
    side = _side(side)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ConfigError(f"n must be a whole number of values >= 0, got {n!r}")
    need = (
        min_values(q=q, confidence=c)
        if side == "two-sided"
        else runs_for_quantile(q, confidence=c, side=side)
    )
    if n < need:
        what = "interval" if side == "two-sided" else f"{side} bound"
        raise ConfigError(
            f"a {100 * c:g} % {what} for the {q:g} quantile needs at least {need} values "
            f"(below that even the sample's extremes cover the quantile with probability "
            f"< {100 * c:g} %), got {n}"
        )
    limit = (1 - c) / (2 if side == "two-sided" else 1) * (1 + _REL_TOL)
    k = np.arange(n + 1)
    cdf = sps.binom.cdf(k, n, q)  # cdf[k] = P(B <= k)
    sf = sps.binom.sf(k - 1, n, q)  # sf[k] = P(B >= k)
    low = 0 if side == "upper" else int(np.flatnonzero(cdf <= limit)[-1]) + 1
    high = n + 1 if side == "lower" else int(np.flatnonzero(sf <= limit)[0])
    coverage = float((cdf[high - 1] if high <= n else 1.0) - (cdf[low - 1] if low >= 1 else 0.0))
    return low, high, coverage


def quantile_ci(
    values: v.Sample, *, q: float = 0.5, confidence: float = 0.95, side: str = "two-sided"
) -> pd.DataFrame:
    """The ``q``-quantile of ``values`` with its exact distribution-free confidence interval
    (``side="two-sided"``, equal-tailed) or one-sided bound (``"upper"``: "the quantile is at
    most ``high``"; ``"lower"``: "at least ``low``").

    Returns a one-row DataFrame: ``n``; ``q``; ``estimate``, the sample quantile by numpy's
    default definition (linear interpolation between order statistics, Hyndman & Fan's type
    7, R's default: the usual median for ``q = 0.5``); ``low`` and ``high``, the order
    statistics ``x_(rank_low)`` and ``x_(rank_high)`` (``-inf`` as ``low`` of an upper bound,
    ``+inf`` as ``high`` of a lower bound); ``rank_low`` and ``rank_high`` (see
    :func:`quantile_ranks`; 1-based, 0 and n + 1 on the open side); ``coverage``, the exact
    probability that the interval (or bound) covers the population quantile for a continuous
    distribution (at least ``confidence``; more, because ranks are whole numbers: 0.979 for the
    median of 10 values at 95 %). ``attrs``: ``confidence``, ``side``, ``estimate``.

    ConfigError for ``q`` or ``confidence`` outside (0, 1), an unknown ``side``, missing or
    infinite values, and fewer values than the interval needs (the message says how many: 6
    for the median at 95 %, 72 for p95, 368 for p99; one-sided at 95 %: 59 for an upper bound of
    p95, :func:`runs_for_quantile`).
    """
    q, c = _fraction(q, "q"), _fraction(confidence, "confidence")
    side = _side(side)
    x = np.sort(v.sample(values, "values"))
    low, high, coverage = quantile_ranks(len(x), q=q, confidence=c, side=side)
    out = pd.DataFrame(
        [
            {
                "n": len(x),
                "q": q,
                "estimate": float(np.quantile(x, q)),
                "low": float(x[low - 1]) if low >= 1 else -np.inf,
                "high": float(x[high - 1]) if high <= len(x) else np.inf,
                "rank_low": low,
                "rank_high": high,
                "coverage": coverage,
            }
        ]
    )
    out.attrs.update({"confidence": c, "side": side, "estimate": "numpy linear (Hyndman-Fan type 7)"})
    return out
