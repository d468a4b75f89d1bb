"""Effect sizes with confidence intervals: Hedges' g, omega squared, partial eta squared.

Intervals invert the noncentral t (g) and noncentral F (partial eta squared)
distributions (Steiger & Fouladi 1997; Steiger 2004), as R's ``effectsize``
package does with ``alternative = "two.sided"``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import optimize, special
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["effect_sizes", "hedges_g"]


def _ncp_bounds(cdf, stat: float, alpha: float, scale: float) -> tuple[float, float]:
    """Noncentrality parameters at which ``cdf(stat, ncp)`` equals 1 - alpha/2 and alpha/2.

    ``cdf`` falls as ncp grows. A bound that would lie below the smallest ncp
    allowed (0 for F, -inf for t) is returned as that limit.
    """

    def solve(target: float, lo: float) -> float:
        f = lambda ncp: cdf(stat, ncp) - target  # noqa: E731
        if f(lo) < 0:
            return lo
        hi = max(abs(stat), 1.0) * 2 + scale
        while f(hi) > 0:
            hi = hi * 2 + scale
        return optimize.brentq(f, lo, hi, xtol=1e-10)

    return solve(1 - alpha / 2, -1e6 if scale < 0 else 0.0), solve(alpha / 2, -1e6 if scale < 0 else 0.0)


def hedges_g(a: v.Sample, b: v.Sample, *, alpha: float = 0.05) -> pd.DataFrame:
    """Hedges' g of ``a`` minus ``b`` (pooled SD) with its ``1 - alpha`` confidence interval.

    d = (mean_a - mean_b)/s_pooled; g = J·d with the exact small-sample
    correction J = Γ(df/2)/(sqrt(df/2)·Γ((df-1)/2)), df = n_a + n_b - 2
    (Hedges 1981). The interval inverts the noncentral t distribution of
    t = d·sqrt(n_a·n_b/(n_a + n_b)) and is scaled by J (R ``effectsize::hedges_g``).

    Returns one row: ``n_a``, ``n_b``, ``d`` (Cohen's d), ``g``, ``ci_low``,
    ``ci_high`` (of g) and ``note`` (why g is NaN, e.g. zero variance).
    """
    alpha = v.alpha(alpha)
    x, y = v.sample(a, "a"), v.sample(b, "b")
    n1, n2 = len(x), len(y)
    if n1 < 2 or n2 < 2:
        raise ConfigError(f"hedges_g needs at least 2 observations in each sample, got {n1} and {n2}")
    df = n1 + n2 - 2
    sp = math.sqrt((math.fsum((x - x.mean()) ** 2) + math.fsum((y - y.mean()) ** 2)) / df)
    row = {"n_a": n1, "n_b": n2}
    if sp == 0:
        return pd.DataFrame(
            [
                row
                | {
                    "d": np.nan,
                    "g": np.nan,
                    "ci_low": np.nan,
                    "ci_high": np.nan,
                    "note": "zero variance in both samples",
                }
            ]
        )
    d = (x.mean() - y.mean()) / sp
    j = math.exp(special.gammaln(df / 2) - special.gammaln((df - 1) / 2)) / math.sqrt(df / 2)
    root = math.sqrt(n1 * n2 / (n1 + n2))
    t = d * root
    lo, hi = _ncp_bounds(lambda s, ncp: sps.nct.cdf(s, df, ncp), t, alpha, -1.0)
    return pd.DataFrame(
        [row | {"d": d, "g": j * d, "ci_low": j * lo / root, "ci_high": j * hi / root, "note": ""}]
    )


def effect_sizes(table: pd.DataFrame, *, alpha: float = 0.05) -> pd.DataFrame:
    """Omega squared and partial eta/omega squared, with CIs, for an ANOVA table.

    ``table`` is what :func:`anova` or :func:`oneway_anova` returned (a
    ``term, df, ss, ms, F`` table with an ``error`` row and ``attrs["n"]``).
    Returns one row per term (not error): ``term``, ``eta_sq``,
    ``omega_sq`` = (SS - df·MSE)/(SST + MSE), ``partial_eta_sq`` =
    SS/(SS + SSE) with ``pes_ci_low``, ``pes_ci_high`` (1 - alpha, from the
    noncentral F: λ/(λ + df_error) at the λ bounds), and ``partial_omega_sq``
    = (SS - df·MSE)/(SS + (N - df)·MSE) (Olejnik & Algina 2003). Negative
    omega estimates are reported as they are (not truncated at 0).
    """
    alpha = v.alpha(alpha)
    table = v.frame(table, "table")
    v.columns(table, ["term", "df", "ss", "F"], "table")
    err = table[table["term"] == "error"]
    if err.empty or "n" not in table.attrs:
        raise ConfigError("table must be an anova()/oneway_anova() result (an 'error' row and attrs['n'])")
    df_e = float(err["df"].iloc[0])
    sse = float(err["ss"].iloc[0])
    mse = sse / df_e
    n = float(table.attrs["n"])
    sst = float(table.attrs.get("sst", table["ss"].sum()))
    rows = []
    for _, r in table[table["term"] != "error"].iterrows():
        ss, df, f = float(r["ss"]), float(r["df"]), float(r["F"])
        row = {"term": r["term"], "eta_sq": ss / sst if sst > 0 else np.nan}
        with np.errstate(divide="ignore", invalid="ignore"):
            row["omega_sq"] = (ss - df * mse) / (sst + mse) if sst > 0 else np.nan
            row["partial_eta_sq"] = ss / (ss + sse) if ss + sse > 0 else np.nan
            row["partial_omega_sq"] = (ss - df * mse) / (ss + (n - df) * mse) if mse > 0 else np.nan
        if np.isfinite(f):
            lam_lo, lam_hi = _ncp_bounds(lambda s, ncp, df=df: sps.ncf.cdf(s, df, df_e, ncp), f, alpha, 1.0)
            row["pes_ci_low"] = lam_lo / (lam_lo + df_e)
            row["pes_ci_high"] = lam_hi / (lam_hi + df_e)
        else:
            row["pes_ci_low"] = row["pes_ci_high"] = np.nan
        rows.append(row)
    return pd.DataFrame(
        rows,
        columns=[
            "term",
            "eta_sq",
            "omega_sq",
            "partial_eta_sq",
            "pes_ci_low",
            "pes_ci_high",
            "partial_omega_sq",
        ],
    )
