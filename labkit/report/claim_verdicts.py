"""The verdict of a claim set beside a paper's (:func:`verdict`, decided by intervals, never by sign
alone; the verdicts are :data:`VERDICTS`), the interval of a mean (:func:`mean_interval`) and the
verdict of a ranking on Tukey-Kramer simultaneous intervals (:func:`tukey_pairs`,
:func:`rank_verdict`). :mod:`labkit.report.claims` says what each verdict means."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError

__all__ = [
    "DIFFERENT_SIZE",
    "INCONCLUSIVE",
    "NOT_COMPARABLE",
    "NOT_MEASURED",
    "NOT_RANDOMIZED",
    "NOT_REPRODUCED",
    "OPPOSITE",
    "REPRODUCED",
    "UNSCORED",
    "VERDICTS",
    "as_number",
    "mean_interval",
    "rank_verdict",
    "tukey_pairs",
    "verdict",
]

NOT_COMPARABLE = "not comparable"
NOT_MEASURED = "not measured"
INCONCLUSIVE = "inconclusive"
REPRODUCED = "reproduced"
DIFFERENT_SIZE = "same direction, different size"
OPPOSITE = "opposite"
NOT_REPRODUCED = "not reproduced"
NOT_RANDOMIZED = "not randomized together"
VERDICTS = (
    REPRODUCED,
    DIFFERENT_SIZE,
    OPPOSITE,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    NOT_COMPARABLE,
    NOT_MEASURED,
    NOT_RANDOMIZED,
)
#: the verdicts of claims that are stated, never scored (not in the family)
UNSCORED = (NOT_COMPARABLE, NOT_MEASURED, NOT_RANDOMIZED)


def as_number(x: Any) -> float:
    """``x`` as a float; None and NaN stay NaN."""
    if x is None:
        return math.nan
    try:
        return float(x)
    except (TypeError, ValueError):
        raise ConfigError(f"claims: {x!r} is not a number") from None


def verdict(
    low: float | None,
    high: float | None,
    paper: float | None = None,
    *,
    direction: int | None = None,
    paper_low: float | None = None,
    paper_high: float | None = None,
    comparable: bool = True,
    measured: bool = True,
    randomized: bool = True,
    paper_precision: float | None = None,
    margin: float | None = None,
    tost_low: float | None = None,
    tost_high: float | None = None,
) -> str:
    """Ours beside the paper's, decided by intervals (see the module's table).

    ``low``/``high``: our interval of the relative change (or of any quantity where 0 means
    "no effect"); NaN or infinite bounds are unbounded. ``paper``: the paper's value on the same
    scale, or None for a claim in words, whose ``direction`` (+1, -1, or 0 for "no
    difference") is then used. ``paper_low``/``paper_high``: the paper's own interval, when it
    gives one. ``measured=False`` (no value of ours) gives ``not measured`` whatever else;
    ``comparable=False`` (another platform, a stand-in workload) ``not comparable``;
    ``randomized=False`` (platforms from separate campaigns) ``not randomized together``.
    ``paper_precision``: half the last printed digit of the paper's value (0.5 for "28"): a gap
    within it is no gap. ``margin`` with a "no difference" claim (``paper`` 0 or ``direction``
    0): decided by equivalence on ``tost_low``/``tost_high`` (our 1 - 2 alpha interval; without
    them ``low``/``high``), see the module docstring.
    """
    if not measured:
        return NOT_MEASURED
    if not comparable:
        return NOT_COMPARABLE
    if not randomized:
        return NOT_RANDOMIZED
    lo, hi = as_number(low), as_number(high)
    lo = -math.inf if math.isnan(lo) else lo
    hi = math.inf if math.isnan(hi) else hi
    if lo > hi:
        raise ConfigError(f"verdict: interval [{lo}, {hi}] has its low bound above its high bound")
    p = as_number(paper)
    if math.isnan(p):
        if direction not in (-1, 0, 1):
            raise ConfigError(
                f"verdict: give the paper's value or a direction -1, 0 or +1, got {direction!r}"
            )
        p_sign = direction
        has_value = False
    else:
        p_sign = int(np.sign(p))
        has_value = True
    contains0 = lo <= 0 <= hi
    m = as_number(margin)
    if p_sign == 0 and not math.isnan(m):  # "no difference": equivalence against the margin
        if m <= 0:
            raise ConfigError(f"verdict: margin must be > 0, got {m}")
        tlo, thi = as_number(tost_low), as_number(tost_high)
        tlo = lo if math.isnan(tlo) else tlo
        thi = hi if math.isnan(thi) else thi
        if -m <= tlo and thi <= m:
            return REPRODUCED
        return INCONCLUSIVE if contains0 else NOT_REPRODUCED
    if not has_value:  # a claim in words: the direction only
        if p_sign == 0:
            return INCONCLUSIVE if contains0 else NOT_REPRODUCED
        if contains0:
            return INCONCLUSIVE
        return REPRODUCED if (lo > 0) == (p_sign > 0) else OPPOSITE
    prec = abs(as_number(paper_precision)) if paper_precision is not None else 0.0
    prec = 0.0 if math.isnan(prec) else prec
    contains_p = lo <= p + prec and p - prec <= hi
    if contains0 and contains_p:
        return INCONCLUSIVE
    if contains_p:
        return REPRODUCED
    if contains0:
        return NOT_REPRODUCED
    ours_sign = 1 if lo > 0 else -1
    if p_sign == 0:
        return NOT_REPRODUCED
    if ours_sign != p_sign:
        return OPPOSITE
    plo, phi = as_number(paper_low), as_number(paper_high)
    if not (math.isnan(plo) or math.isnan(phi)):
        paper_significant = plo > 0 or phi < 0
        if paper_significant and plo <= hi and lo <= phi:
            return REPRODUCED
    return DIFFERENT_SIZE


def mean_interval(values: Iterable[float], *, alpha: float = 0.05, positive: bool | None = None) -> dict:
    """Mean of ``values`` with its ``1 - alpha`` interval.

    For a positive quantity (``positive``; None: when every value is > 0) the interval is
    computed on the log scale (delta method: log(mean) +- t * s / (mean * sqrt(n)), then
    exponentiated), so it is never negative and is asymmetric; otherwise the t interval.
    Returns ``mean``, ``low``, ``high``, ``n``, ``sd``, ``half_width_pct`` (the larger side of
    the interval in % of the mean; NaN with fewer than 2 values) and ``scale`` ("log", "linear").
    """
    x = np.asarray(list(values), dtype=float).ravel()
    x = x[np.isfinite(x)]
    n = len(x)
    out = {
        "mean": math.nan,
        "low": math.nan,
        "high": math.nan,
        "n": n,
        "sd": math.nan,
        "half_width_pct": math.nan,
        "scale": "linear",
    }
    if n == 0:
        return out
    m = float(x.mean())
    out["mean"] = m
    if positive is None:
        positive = bool((x > 0).all())
    if n < 2:
        return out
    sd = float(x.std(ddof=1))
    t = float(sps.t.ppf(1 - alpha / 2, n - 1))
    se = sd / math.sqrt(n)
    if positive and m > 0:
        f = math.exp(t * se / m)
        lo, hi = m / f, m * f
        out["scale"] = "log"
    else:
        lo, hi = m - t * se, m + t * se
    out.update(low=lo, high=hi, sd=sd, half_width_pct=100 * max(hi - m, m - lo) / abs(m) if m else math.nan)
    return out


def tukey_pairs(groups: Mapping[str, Sequence[float]], level_x: str, *, level: float = 0.95) -> pd.DataFrame:
    """Tukey-Kramer simultaneous intervals (confidence ``level``) of mean(``level_x``) minus the
    mean of every other group of ``groups`` (name -> values), pooled variance over all groups
    (Tukey 1953; Kramer 1956): ``other``, ``diff``, ``low``, ``high``. Equal to statsmodels'
    ``pairwise_tukeyhsd`` at ``alpha = 1 - level``."""
    names = [str(k) for k in groups]
    if level_x not in names or len(names) < 2:
        raise ConfigError(f"tukey_pairs: {level_x!r} must be one of at least 2 groups, got {names}")
    vals = {str(k): np.asarray(v, float) for k, v in groups.items()}
    small = [k for k, x in vals.items() if len(x) < 2]
    if small:
        raise ConfigError(f"tukey_pairs: groups {small} have fewer than 2 values")
    n_tot, k = sum(len(x) for x in vals.values()), len(vals)
    df = n_tot - k
    mse = sum(((x - x.mean()) ** 2).sum() for x in vals.values()) / df
    q = float(sps.studentized_range.ppf(level, k, df))
    x = vals[level_x]
    rows = []
    for other in names:
        if other == level_x:
            continue
        y = vals[other]
        d = float(x.mean() - y.mean())
        half = q / math.sqrt(2) * math.sqrt(mse * (1 / len(x) + 1 / len(y)))
        rows.append({"other": other, "diff": d, "low": d - half, "high": d + half})
    return pd.DataFrame(rows, columns=["other", "diff", "low", "high"])


def rank_verdict(spread: Mapping[str, Any], direction: int, *, level: float = 0.95) -> str:
    """The verdict of a ranking claim: ``direction`` -1 "the level is the worst of all", +1
    "the best of all", against ``spread`` (``groups``: level -> values, ``level``: the one
    ranked, ``higher_is_better``), with :func:`tukey_pairs` at ``level`` (module docstring)."""
    if direction not in (-1, 1):
        raise ConfigError(f"rank_verdict: direction must be -1 (worst) or +1 (best), got {direction!r}")
    groups, x = spread.get("groups") or {}, str(spread.get("level"))
    if len(groups) < 2 or x not in groups or any(len(v) < 2 for v in groups.values()):
        return INCONCLUSIVE
    g = 1 if spread.get("higher_is_better", True) else -1
    pairs = tukey_pairs(groups, x, level=level)
    better = (g * pairs.low > 0) if g > 0 else (pairs.high < 0)  # x significantly better than other
    worse = (pairs.high < 0) if g > 0 else (pairs.low > 0)
    means = {k: g * float(np.mean(v)) for k, v in groups.items()}
    at_best = means[x] == max(means.values())
    at_worst = means[x] == min(means.values())
    claimed, contrary = (worse, better) if direction < 0 else (better, worse)
    other_end = at_best if direction < 0 else at_worst
    if claimed.all():
        return REPRODUCED
    if contrary.any():
        return OPPOSITE if other_end else NOT_REPRODUCED
    return INCONCLUSIVE
