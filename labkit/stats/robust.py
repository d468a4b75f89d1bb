"""Tests for when ANOVA's assumptions fail: unequal variances, non-normal data.

* equal variances: :func:`levene` (Brown-Forsythe, median-centred, by default);
* unequal variances: :func:`welch_anova` and the :func:`games_howell` pairs;
* non-normal data: :func:`mann_whitney`, :func:`brunner_munzel` (two groups),
  :func:`kruskal` and the :func:`dunn` pairs (Holm-corrected) for more.

Long-format DataFrame in (``response`` column, one ``factor`` column), tidy
DataFrame out. scipy does the distributions; the Welch and Games-Howell
formulas follow Welch (1951) and Games & Howell (1976).
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import special
from scipy import stats as sps

from ..errors import ConfigError
from . import _numeric as num
from . import validate as v
from .multitest import adjust_p

__all__ = ["brunner_munzel", "dunn", "games_howell", "kruskal", "levene", "mann_whitney", "welch_anova"]


def levene(
    data: pd.DataFrame, *, response: str, factor: str, center: str = "median", alpha: float = 0.05
) -> pd.DataFrame:
    """Test of equal variances across the levels of ``factor`` (R ``car::leveneTest``).

    ``center="median"`` is the Brown-Forsythe test (robust, the default of
    car::leveneTest), ``"mean"`` Levene's original. Returns one row:
    ``test`` ("brown-forsythe" or "levene"), ``W`` (the F statistic), ``df1``,
    ``df2``, ``p``, ``equal_var`` (p > alpha) and ``note``.
    """
    alpha = v.alpha(alpha)
    if center not in ("median", "mean"):
        raise ConfigError(f"center must be 'median' or 'mean', got {center!r}")
    levels, y, g = v.coded_groups(data, response, factor)
    y, _ = num.shift(y)
    k, n = len(levels), len(y)
    counts = np.bincount(g, minlength=k)
    row = {
        "test": "brown-forsythe" if center == "median" else "levene",
        "df1": float(k - 1),
        "df2": float(n - k),
        "note": "",
    }
    if center == "median":
        by_value = np.argsort(y)
        ys = y[by_value[num.group_order(g[by_value], k)]]  # sorted within each group
        start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        centre = (ys[start + (counts - 1) // 2] + ys[start + counts // 2]) / 2
    else:
        _, centre, _ = num.group_ss(y, g, k)
    d = np.abs(y - centre[g])
    _, dm, within = num.group_ss(d, g, k)
    sse = math.fsum(within)
    if n - k < 1 or sse == 0:
        return pd.DataFrame(
            [
                row
                | {
                    "W": np.nan,
                    "p": np.nan,
                    "equal_var": pd.NA,
                    "note": "no spread in the absolute deviations: the test is undefined",
                }
            ]
        )
    grand = math.fsum(counts * dm) / n
    ssb = math.fsum(counts * (dm - grand) ** 2)
    w = (ssb / (k - 1)) / (sse / (n - k))
    p = float(special.fdtrc(k - 1, n - k, w))
    return pd.DataFrame(
        [row | {"W": w, "p": p, "equal_var": p > alpha}],
        columns=["test", "W", "df1", "df2", "p", "equal_var", "note"],
    )


def _moments(data, response, factor):
    """(levels, n, mean, variance) per level; means are of the response shifted by one of its
    values (differences of means are unaffected), variances NaN below 2 observations."""
    levels, y, g = v.coded_groups(data, response, factor)
    y, _ = num.shift(y)
    n, m, within = num.group_ss(y, g, len(levels))
    n = n.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.where(n > 1, within / (n - 1), np.nan)
    return levels, n, m, var


def welch_anova(data: pd.DataFrame, *, response: str, factor: str) -> pd.DataFrame:
    """Welch's (1951) one-way ANOVA without equal variances (R's ``oneway.test``).

    Returns one row: ``test`` ("welch"), ``F``, ``df1``, ``df2`` (Welch's
    approximate denominator degrees of freedom), ``p`` and ``note``. A group
    with fewer than 2 observations or zero variance makes F undefined: NaN
    with a note.
    """
    levels, n, m, var = _moments(data, response, factor)
    k = len(levels)
    cols = ["test", "F", "df1", "df2", "p", "note"]
    bad = [lv for lv, ni, vi in zip(levels, n, var) if ni < 2 or not vi > 0]
    if bad:
        return pd.DataFrame(
            [
                {
                    "test": "welch",
                    "F": np.nan,
                    "df1": float(k - 1),
                    "df2": np.nan,
                    "p": np.nan,
                    "note": f"level(s) {bad!r} have fewer than 2 observations or zero variance",
                }
            ],
            columns=cols,
        )
    w = n / var
    sw = w.sum()
    mw = math.fsum(w * m) / sw
    a = math.fsum(w * (m - mw) ** 2) / (k - 1)
    tmp = math.fsum((1 - w / sw) ** 2 / (n - 1))
    f = a / (1 + 2 * (k - 2) * tmp / (k * k - 1))
    df2 = (k * k - 1) / (3 * tmp)
    return pd.DataFrame(
        [
            {
                "test": "welch",
                "F": f,
                "df1": float(k - 1),
                "df2": df2,
                "p": float(special.fdtrc(k - 1, df2, f)),
                "note": "",
            }
        ],
        columns=cols,
    )


PAIR_COLUMNS = [
    "group_a",
    "group_b",
    "n_a",
    "n_b",
    "diff",
    "se",
    "t",
    "df",
    "ci_low",
    "ci_high",
    "p_adj",
    "reject",
]


def games_howell(data: pd.DataFrame, *, response: str, factor: str, alpha: float = 0.05) -> pd.DataFrame:
    """Games-Howell (1976) pairwise comparisons: Tukey's HSD without equal variances.

    Each pair uses Welch's standard error and degrees of freedom and the
    studentized range distribution for k groups (``scipy.stats.studentized_range``);
    the p-values and intervals are already simultaneous (no further correction).
    With two groups it is exactly Welch's t-test.

    Returns one row per pair (levels in analysis order): ``group_a``,
    ``group_b``, ``n_a``, ``n_b``, ``diff`` (mean_b - mean_a, as
    :func:`tukey_hsd` and R), ``se``, ``t`` (diff/se), ``df`` (Welch),
    ``ci_low``, ``ci_high`` (simultaneous, 1 - alpha), ``p_adj`` and
    ``reject`` (p_adj < alpha).
    """
    from . import _ptukey

    alpha = v.alpha(alpha)
    levels, n, m, var = _moments(data, response, factor)
    k = len(levels)
    i, j = np.triu_indices(k, 1)
    a, b = var[i] / n[i], var[j] / n[j]
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(a + b)
        diff = m[j] - m[i]
        df = (a + b) ** 2 / (a * a / (n[i] - 1) + b * b / (n[j] - 1))
        t = diff / se
    ok = np.isfinite(se) & (se > 0)
    nan = np.full(len(i), np.nan)
    p_adj, q = nan.copy(), nan.copy()
    if ok.any():
        # one vectorized integral for all pairs (each at its own Welch df): the same values
        # as scipy.stats.studentized_range.sf/ppf (checked to 1e-7 in the unit tests)
        p_adj[ok] = _ptukey.sf(np.abs(t[ok]) * math.sqrt(2), k, df[ok])
        q[ok] = _ptukey.ppf(1 - alpha, k, df[ok]) / math.sqrt(2)
    out = pd.DataFrame(
        {
            "group_a": [levels[x] for x in i],
            "group_b": [levels[x] for x in j],
            "n_a": n[i].astype(int),
            "n_b": n[j].astype(int),
            "diff": diff,
            "se": se,
            "t": np.where(ok, t, np.nan),
            "df": np.where(ok, df, np.nan),
            "ci_low": diff - q * se,
            "ci_high": diff + q * se,
            "p_adj": p_adj,
        },
        columns=PAIR_COLUMNS[:-1],
    )
    out["reject"] = out["p_adj"] < alpha
    return out


def _two(data, response, factor):
    levels, samples = v.groups(data, response, factor)
    if len(levels) != 2:
        raise ConfigError(
            f"factor {factor!r} has {len(levels)} levels; this test compares "
            f"exactly 2 (use kruskal() and dunn() for more)"
        )
    return levels, samples


def mann_whitney(
    data: pd.DataFrame, *, response: str, factor: str, alternative: str = "two-sided"
) -> pd.DataFrame:
    """Wilcoxon-Mann-Whitney rank-sum test between the two levels of ``factor``.

    ``scipy.stats.mannwhitneyu`` (exact p for small samples without ties, else
    the normal approximation with continuity correction, as R's
    ``wilcox.test(a, b)``). ``alternative`` is about level a relative to b.
    Returns one row: ``level_a``, ``level_b``, ``n_a``, ``n_b``, ``U`` (R's W:
    pairs with a > b, ties counting 1/2), ``p``, ``prob_superiority``
    (U/(n_a·n_b), the probability that a random a exceeds a random b).
    """
    if alternative not in ("two-sided", "less", "greater"):
        raise ConfigError(f"alternative must be 'two-sided', 'less' or 'greater', got {alternative!r}")
    levels, (x, y) = _two(data, response, factor)
    res = sps.mannwhitneyu(x, y, alternative=alternative)
    u = float(res.statistic)
    return pd.DataFrame(
        [
            {
                "level_a": levels[0],
                "level_b": levels[1],
                "n_a": len(x),
                "n_b": len(y),
                "U": u,
                "p": float(res.pvalue),
                "prob_superiority": u / (len(x) * len(y)),
            }
        ]
    )


def brunner_munzel(data: pd.DataFrame, *, response: str, factor: str) -> pd.DataFrame:
    """Brunner-Munzel (2000) test: Mann-Whitney without equal variances (shapes).

    ``scipy.stats.brunnermunzel`` (t approximation, as R's
    ``lawstat::brunner.munzel.test``). Returns one row: ``level_a``,
    ``level_b``, ``n_a``, ``n_b``, ``W`` (the statistic), ``p`` (two-sided)
    and ``estimate`` = P(a < b) + P(a = b)/2.
    """
    levels, (x, y) = _two(data, response, factor)
    res = sps.brunnermunzel(x, y)
    ranks = sps.rankdata(np.concatenate([x, y]))
    est = (ranks[len(x) :].mean() - (len(y) + 1) / 2) / len(x)
    return pd.DataFrame(
        [
            {
                "level_a": levels[0],
                "level_b": levels[1],
                "n_a": len(x),
                "n_b": len(y),
                "W": float(res.statistic),
                "p": float(res.pvalue),
                "estimate": float(est),
            }
        ]
    )


def kruskal(data: pd.DataFrame, *, response: str, factor: str) -> pd.DataFrame:
    """Kruskal-Wallis rank-sum test across the levels of ``factor`` (R's ``kruskal.test``).

    Returns one row: ``H`` (chi-squared, tie-corrected), ``df``, ``p``,
    ``epsilon_sq`` (H/(n - 1), the rank analogue of eta squared) and ``note``.
    """
    levels, y, g = v.coded_groups(data, response, factor)
    n, k = len(y), len(levels)
    cols = ["H", "df", "p", "epsilon_sq", "note"]
    if np.ptp(y) == 0:
        return pd.DataFrame(
            [
                {
                    "H": np.nan,
                    "df": float(k - 1),
                    "p": np.nan,
                    "epsilon_sq": np.nan,
                    "note": "all values are equal",
                }
            ],
            columns=cols,
        )
    # as scipy.stats.kruskal: average ranks, H with the tie correction
    ranks, ties = num.ranks(y)
    r = np.bincount(g, weights=ranks, minlength=k)
    cnt = np.bincount(g, minlength=k)
    h = 12.0 / (n * (n + 1)) * math.fsum(r * r / cnt) - 3 * (n + 1)
    h = float(h / (1 - float(np.sum(ties**3.0 - ties)) / (float(n) ** 3 - n)))
    return pd.DataFrame(
        [
            {
                "H": h,
                "df": float(k - 1),
                "p": float(special.chdtrc(k - 1, h)),
                "epsilon_sq": h / (n - 1),
                "note": "",
            }
        ],
        columns=cols,
    )


def dunn(
    data: pd.DataFrame, *, response: str, factor: str, method: str = "holm", alpha: float = 0.05
) -> pd.DataFrame:
    """Dunn's (1964) pairwise rank tests after Kruskal-Wallis, corrected (Holm by default).

    z = (mean rank b - mean rank a) / sqrt((N(N+1)/12 - T/(12(N-1)))·(1/n_a + 1/n_b)),
    T = Σ(t³ - t) over tied groups; two-sided normal p, then corrected with
    :func:`adjust_p` (``method``: "holm", "bonferroni", "bh"). Returns one row
    per pair: ``group_a``, ``group_b``, ``n_a``, ``n_b``, ``rank_diff``, ``z``,
    ``p``, ``p_adj``, ``reject`` (p_adj < alpha).
    """
    alpha = v.alpha(alpha)
    levels, samples = v.groups(data, response, factor)
    y = np.concatenate(samples)
    big = len(y)
    ranks = sps.rankdata(y)
    _, ties = np.unique(y, return_counts=True)
    scale = big * (big + 1) / 12 - float(np.sum(ties**3 - ties)) / (12 * (big - 1))
    bounds = np.cumsum([0] + [len(s) for s in samples])
    mean_rank = [ranks[bounds[g] : bounds[g + 1]].mean() for g in range(len(samples))]
    rows = []
    for i, j in combinations(range(len(samples)), 2):
        ni, nj = len(samples[i]), len(samples[j])
        diff = mean_rank[j] - mean_rank[i]
        se = math.sqrt(scale * (1 / ni + 1 / nj)) if scale > 0 else np.nan
        z = diff / se if se > 0 else np.nan
        rows.append(
            {
                "group_a": levels[i],
                "group_b": levels[j],
                "n_a": ni,
                "n_b": nj,
                "rank_diff": diff,
                "z": z,
                "p": float(2 * sps.norm.sf(abs(z))) if np.isfinite(z) else np.nan,
            }
        )
    out = pd.DataFrame(rows)
    out["p_adj"] = adjust_p(out["p"].to_numpy(float), method=method)
    out["reject"] = out["p_adj"] < alpha
    out.attrs["correction"] = method
    return out
