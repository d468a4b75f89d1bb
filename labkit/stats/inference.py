"""Hypothesis tests: Shapiro-Wilk and t-tests, alone or per configuration.

Thin, validated wrappers over scipy.stats that return tidy DataFrames
(pingouin style). Group-wise variants (``*_by``) never raise for a cell that
is too small: they return NaN and say why in a ``note`` column.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["shapiro", "shapiro_by", "ttest", "ttest_by"]

SHAPIRO_COLUMNS = ["n", "W", "p", "normal", "note"]


def shapiro_row(a: np.ndarray, alpha: float) -> dict:
    """Shapiro-Wilk of ``a`` as one row: ``n``, ``W``, ``p``, ``normal`` (p > ``alpha``; NA below
    3 values), the row :func:`shapiro` returns and the residual check reuses."""
    n = len(a)
    if n < 3:
        return {
            "n": n,
            "W": np.nan,
            "p": np.nan,
            "normal": pd.NA,
            "note": f"Shapiro-Wilk needs at least 3 observations, got {n}",
        }
    if np.ptp(a) == 0:
        return {"n": n, "W": np.nan, "p": np.nan, "normal": pd.NA, "note": "all values are equal"}
    res = sps.shapiro(a)
    p = float(res.pvalue)
    return {"n": n, "W": float(res.statistic), "p": p, "normal": bool(p > alpha), "note": ""}


def shapiro(x: v.Sample, *, alpha: float = 0.05) -> pd.DataFrame:
    """Shapiro-Wilk normality test of one sample (``scipy.stats.shapiro``, as R's ``shapiro.test``).

    Returns a one-row DataFrame: ``n``, ``W``, ``p``, ``normal`` (p > alpha,
    i.e. normality not rejected) and ``note`` (why W is NaN, e.g. constant data).
    Raises ConfigError for fewer than 3 values.
    """
    alpha = v.alpha(alpha)
    a = v.sample(x, "x")
    if len(a) < 3:
        raise ConfigError(f"shapiro() needs at least 3 observations, got {len(a)}")
    return pd.DataFrame([shapiro_row(a, alpha)], columns=SHAPIRO_COLUMNS)


def shapiro_by(data: pd.DataFrame, *, by: v.Columns, response: str, alpha: float = 0.05) -> pd.DataFrame:
    """Shapiro-Wilk per configuration (cell) of the ``by`` columns.

    Returns one row per cell: the ``by`` columns, then ``n, W, p, normal, note``.
    Cells with fewer than 3 observations (or constant values) get NaN and a note.
    """
    alpha = v.alpha(alpha)
    data = v.frame(data)
    by = v.names(by, "by")
    v.columns(data, by, "by")
    v.response(data, response)
    rows = []
    for key, grp in data.groupby(by, sort=True, observed=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        rows.append(dict(zip(by, key)) | shapiro_row(grp[response].to_numpy(float), alpha))
    return pd.DataFrame(rows, columns=by + SHAPIRO_COLUMNS)


TTEST_COLUMNS = ["test", "n_a", "n_b", "mean_a", "mean_b", "diff", "t", "df", "p", "ci_low", "ci_high"]


def ttest(
    a: v.Sample, b: v.Sample, *, paired: bool = False, equal_var: bool = False, alpha: float = 0.05
) -> pd.DataFrame:
    """Two-sample t-test of ``a`` against ``b`` (R's ``t.test(a, b, ...)``).

    Welch by default; ``equal_var=True`` is Student's pooled test;
    ``paired=True`` tests the mean of ``a - b`` (same length, same order).

    Returns a one-row DataFrame with columns:
    ``test`` ("welch", "student" or "paired"), ``n_a``, ``n_b``, ``mean_a``,
    ``mean_b``, ``diff`` (mean_a - mean_b; for paired the mean difference),
    ``t``, ``df``, ``p`` (two-sided) and ``ci_low``, ``ci_high`` (the
    ``1 - alpha`` confidence interval of the difference).
    """
    alpha = v.alpha(alpha)
    x, y = v.sample(a, "a"), v.sample(b, "b")
    if paired:
        if len(x) != len(y):
            raise ConfigError(f"paired t-test needs a and b of the same length, got {len(x)} and {len(y)}")
        if len(x) < 2:
            raise ConfigError(f"paired t-test needs at least 2 pairs, got {len(x)}")
        res = sps.ttest_rel(x, y)
        test, diff = "paired", float(np.mean(x - y))
    else:
        need = 1 if equal_var else 2
        if len(x) < need or len(y) < need or len(x) + len(y) < 3:
            raise ConfigError(
                f"{'Student' if equal_var else 'Welch'} t-test needs at least "
                f"{need} observation(s) in each sample and 3 in all, "
                f"got {len(x)} and {len(y)}"
            )
        res = sps.ttest_ind(x, y, equal_var=equal_var)
        test, diff = ("student" if equal_var else "welch"), float(np.mean(x) - np.mean(y))
    ci = res.confidence_interval(confidence_level=1 - alpha)
    row = {
        "test": test,
        "n_a": len(x),
        "n_b": len(y),
        "mean_a": float(np.mean(x)),
        "mean_b": float(np.mean(y)),
        "diff": diff,
        "t": float(res.statistic),
        "df": float(res.df),
        "p": float(res.pvalue),
        "ci_low": float(ci.low),
        "ci_high": float(ci.high),
    }
    return pd.DataFrame([row], columns=TTEST_COLUMNS)


def ttest_by(
    data: pd.DataFrame,
    *,
    factor: str,
    response: str,
    by: v.Columns = None,
    levels: v.Levels = None,
    equal_var: bool = False,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """For each configuration of ``by``, t-test ``response`` between the two levels of ``factor``.

    E.g. ``ttest_by(df, factor="affinity", response="rps", by=["vcpus", "memory_mb", "count"])``
    compares floating and pinned in every vcpus/memory/count configuration.
    ``levels=(a, b)`` (or a labkit ``Design``) fixes which level is ``a``;
    otherwise a Categorical's category order, else sorted (numbers ascending,
    strings alphabetically). Observations are independent runs: Welch (or Student with
    ``equal_var=True``), never paired.

    Returns one row per configuration: the ``by`` columns, then ``level_a``,
    ``level_b``, ``n_a``, ``n_b``, ``mean_a``, ``mean_b``, ``diff`` (mean_a -
    mean_b), ``diff_pct`` (100·diff/mean_b: how far a is from b, relative to
    b), ``t``, ``df``, ``p``, ``ci_low``, ``ci_high`` (of diff, at 1 - alpha),
    ``significant`` (p < alpha) and ``note`` (why a row is NaN, e.g. a level
    with fewer than 2 observations in that configuration).
    """
    alpha = v.alpha(alpha)
    data = v.frame(data)
    if not isinstance(factor, str):
        raise ConfigError(f"factor must be one column name, got {factor!r}")
    by = v.names(by, "by", allow_empty=True)
    v.columns(data, [factor] + by, "factor/by")
    if factor in by:
        raise ConfigError(f"factor {factor!r} cannot also be in by")
    v.response(data, response)
    v.no_missing(data, [factor], "factor")
    if levels is not None and not isinstance(levels, (list, tuple)):
        levels = v.level_map(levels).get(factor)
    a_level, b_level = v.two_levels(
        data[factor], levels, arg="levels", hint="; use labkit.stats.anova()/tukey_hsd() for more"
    )
    groups = data.groupby(by, sort=True, observed=True, dropna=False) if by else [((), data)]
    rows = []
    for key, grp in groups:
        key = key if isinstance(key, tuple) else (key,)
        x = grp.loc[grp[factor] == a_level, response].to_numpy(float)
        y = grp.loc[grp[factor] == b_level, response].to_numpy(float)
        row = dict(zip(by, key)) | {"level_a": a_level, "level_b": b_level, "n_a": len(x), "n_b": len(y)}
        if len(x) < 2 or len(y) < 2:
            row |= {
                "mean_a": np.mean(x) if len(x) else np.nan,
                "mean_b": np.mean(y) if len(y) else np.nan,
                "note": f"needs at least 2 observations of each level, "
                f"got {len(x)} {a_level!r} and {len(y)} {b_level!r}",
            }
        else:
            res = ttest(x, y, equal_var=equal_var, alpha=alpha).iloc[0]
            row |= {c: res[c] for c in ("mean_a", "mean_b", "diff", "t", "df", "p", "ci_low", "ci_high")}
            row["note"] = ""
        rows.append(row)
    out = pd.DataFrame(
        rows,
        columns=by
        + [
            "level_a",
            "level_b",
            "n_a",
            "n_b",
            "mean_a",
            "mean_b",
            "diff",
            "diff_pct",
            "t",
            "df",
            "p",
            "ci_low",
            "ci_high",
            "significant",
            "note",
        ],
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        out["diff_pct"] = 100 * out["diff"] / out["mean_b"]
    out["significant"] = out["p"] < alpha
    return out
