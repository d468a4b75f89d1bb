"""Overhead of a platform against a baseline as a ratio of means, with Fieller's confidence interval.

A percentage difference is asymmetric (the same 16x slowdown reads 94 % on a
throughput and 1,500 % on a time) and its CI, built from the difference of means
divided by a baseline treated as fixed, can cross zero into impossible values
(a negative throughput). Here the overhead is the *slowdown factor*, always
"how many times worse than the baseline": baseline/platform for a throughput
(higher is better), platform/baseline for a time (lower is better); 1 means
no overhead, 2 means twice as slow, and 0.5 twice as fast, symmetric on a log
scale.

The interval is Fieller's (1954) for the ratio of two independent means with
unequal variances and Welch-Satterthwaite degrees of freedom (Tamhane & Logan
2004; R's ``mratios::ttestratio(var.equal = FALSE)``). It is bounded only
when the denominator mean is significantly different from zero; otherwise the
row says so and the bounds are NaN.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["fieller_ratio", "overhead_ratios"]

OVERHEAD_COLUMNS = [
    "platform",
    "n",
    "n_base",
    "mean",
    "base_mean",
    "ratio",
    "ci_low",
    "ci_high",
    "df",
    "p",
    "significant",
    "note",
]


def fieller_ratio(num: v.Sample, den: v.Sample, *, alpha: float = 0.05) -> dict:
    """Ratio of the means of two independent samples, mean(num)/mean(den), with Fieller's CI.

    Returns a dict: ``ratio``, ``ci_low``, ``ci_high`` (NaN when the interval is
    unbounded because mean(den) is not significantly different from 0, or when a
    sample has < 2 values), ``df`` (Welch-Satterthwaite at the estimate), ``note``.
    With zero variance in ``den`` the interval is the Welch t interval of mean(num)
    divided by mean(den).
    """
    alpha = v.alpha(alpha)
    x = np.asarray(num, dtype=float).ravel()
    y = np.asarray(den, dtype=float).ravel()
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ConfigError("fieller_ratio: samples must be finite numbers")
    out = {"ratio": np.nan, "ci_low": np.nan, "ci_high": np.nan, "df": np.nan, "note": ""}
    if len(x) == 0 or len(y) == 0:
        out["note"] = "empty sample"
        return out
    mx, my = float(x.mean()), float(y.mean())
    if my == 0:
        out["note"] = "baseline mean is 0: no ratio"
        return out
    r = mx / my
    out["ratio"] = r
    if len(x) < 2 or len(y) < 2:
        out["note"] = "fewer than 2 values in a sample: no interval"
        return out
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    denom_df = vx**2 / (len(x) - 1) + r**4 * vy**2 / (len(y) - 1)
    if denom_df == 0:
        out["note"] = "no variation in either sample: the ratio is exact"
        out.update(ci_low=r, ci_high=r, df=np.inf)
        return out
    df = (vx + r**2 * vy) ** 2 / denom_df
    t = float(sps.t.ppf(1 - alpha / 2, df))
    a = my**2 - t**2 * vy
    b = -2 * mx * my
    c = mx**2 - t**2 * vx
    disc = b * b - 4 * a * c
    out["df"] = df
    if a <= 0 or disc < 0:
        out["note"] = (
            f"unbounded: the baseline mean is not significantly different from 0 at alpha = {alpha:g}"
        )
        return out
    root = np.sqrt(disc)
    lo, hi = sorted(((-b - root) / (2 * a), (-b + root) / (2 * a)))
    out.update(ci_low=lo, ci_high=hi)
    return out


def overhead_ratios(
    data: pd.DataFrame,
    *,
    response: str,
    platform: str = "platform",
    baseline: str = "local",
    by: Sequence[str] | str | None = None,
    lower_is_better: bool | Iterable[str] = False,
    metric: str = "metric",
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Slowdown of every platform against ``baseline``, per group of ``by``.

    ``data`` is long format: one row per run, a ``platform`` column, the
    ``response`` column and the ``by`` columns (e.g. benchmark, metric, level).
    ``lower_is_better`` is a bool for every row, or the names of the values of
    column ``metric`` that are times (e.g. ``{"time_per_request_ms"}``).

    Returns one row per group and non-baseline platform: the ``by`` columns, then
    ``platform``, ``n`` and ``n_base`` (runs), ``mean`` and ``base_mean``,
    ``ratio`` (slowdown: > 1 worse than baseline), ``ci_low``/``ci_high``
    (Fieller, 1 - alpha), ``df``, ``p`` (Welch t-test of equal means),
    ``significant`` (the CI excludes 1) and ``note``.
    """
    alpha = v.alpha(alpha)
    v.frame(data)
    by = v.names(by, "by", allow_empty=True) if by is not None else []
    v.columns(data, [platform, *by], "columns")
    v.response(data, response)
    if isinstance(lower_is_better, bool):
        lower = lambda key: lower_is_better  # noqa: E731
    else:
        names = {str(x) for x in lower_is_better}
        if names:
            v.columns(data, [metric], "metric")
        lower = lambda key: str(key.get(metric)) in names  # noqa: E731
    if baseline not in set(data[platform].astype(str)):
        raise ConfigError(
            f"overhead_ratios: baseline {baseline!r} not among the platforms "
            f"{sorted(set(data[platform].astype(str)))}"
        )
    rows = []
    groups = data.groupby(by, sort=True, observed=True) if by else [((), data)]
    for key, grp in groups:
        key = key if isinstance(key, tuple) else (key,)
        keyd = dict(zip(by, key))
        plat = grp[platform].astype(str)
        base = grp.loc[plat == baseline, response].to_numpy(float)
        for name in dict.fromkeys(plat):
            if name == baseline:
                continue
            x = grp.loc[plat == name, response].to_numpy(float)
            # slowdown: time -> platform/base; throughput -> base/platform
            num, den = (x, base) if lower(keyd) else (base, x)
            f: dict = (
                fieller_ratio(num, den, alpha=alpha)
                if len(base)
                else {
                    "ratio": np.nan,
                    "ci_low": np.nan,
                    "ci_high": np.nan,
                    "df": np.nan,
                    "note": f"no {baseline} run in this group",
                }
            )
            p = np.nan
            if len(x) >= 2 and len(base) >= 2 and (np.ptp(x) > 0 or np.ptp(base) > 0):
                p = float(sps.ttest_ind(x, base, equal_var=False).pvalue)
            sig = bool(np.isfinite(f["ci_low"]) and (f["ci_low"] > 1 or f["ci_high"] < 1))
            rows.append(
                {
                    **keyd,
                    "platform": name,
                    "n": len(x),
                    "n_base": len(base),
                    "mean": x.mean() if len(x) else np.nan,
                    "base_mean": base.mean() if len(base) else np.nan,
                    "ratio": f["ratio"],
                    "ci_low": f["ci_low"],
                    "ci_high": f["ci_high"],
                    "df": f["df"],
                    "p": p,
                    "significant": sig,
                    "note": f["note"],
                }
            )
    out = pd.DataFrame(rows, columns=[*by, *OVERHEAD_COLUMNS])
    out.attrs.update({"alpha": alpha, "baseline": baseline, "response": response})
    return out
