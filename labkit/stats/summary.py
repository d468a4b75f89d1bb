"""Per-configuration descriptive statistics: means with t-based confidence intervals
(:func:`summarize`), quantiles with distribution-free ones (:func:`quantile_summary`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["cv_ci", "quantile_summary", "summarize"]

SUMMARY_COLUMNS = ["n", "mean", "std", "sem", "ci_low", "ci_high"]


def summarize(data: pd.DataFrame, *, by: v.Columns, response: str, alpha: float = 0.05) -> pd.DataFrame:
    """Mean of ``response`` per configuration of ``by``, with its confidence interval.

    ``by`` is a column name or a list (``None`` or ``[]``: one overall row).
    Returns one row per configuration, sorted by ``by``: the ``by`` columns,
    then ``n``, ``mean``, ``std`` (sample, ddof=1), ``sem`` (std/sqrt(n)),
    ``ci_low`` and ``ci_high`` (mean ± t(1 - alpha/2, n - 1)·sem; NaN when n < 2).
    """
    alpha = v.alpha(alpha)
    data = v.frame(data)
    by = v.names(by, "by", allow_empty=True)
    v.columns(data, by, "by")
    v.response(data, response)
    if by:
        g = data.groupby(by, sort=True, observed=True, dropna=False)[response]
        out = g.agg(n="count", mean="mean", std="std").reset_index()
    else:
        y = data[response]
        out = pd.DataFrame({"n": [int(y.count())], "mean": [y.mean()], "std": [y.std()]})
    n = out["n"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["sem"] = out["std"] / np.sqrt(n)
        half = sps.t.ppf(1 - alpha / 2, n - 1) * out["sem"]
    half = np.where(n >= 2, half, np.nan)
    out["ci_low"] = out["mean"] - half
    out["ci_high"] = out["mean"] + half
    out["n"] = out["n"].astype(int)
    out.attrs.update({"response": response, "by": by, "alpha": alpha})
    return out[by + SUMMARY_COLUMNS]


def _qname(q: float) -> str:
    """0.5 -> "p50", 0.95 -> "p95", 0.999 -> "p99.9"."""
    return "p" + f"{100 * q:.10g}"


def quantile_summary(
    data: pd.DataFrame,
    *,
    by: v.Columns,
    response: str,
    quantiles: v.Sample = (0.5, 0.95, 0.99),
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Quantiles of ``response`` per configuration, each with its distribution-free interval,
    beside the mean and its t interval (Hoefler & Belli, SC15: medians and nonparametric intervals
    when performance data are not normal).

    Returns one row per configuration of ``by`` (sorted): the ``by`` columns, ``n``, ``mean``,
    ``ci_low``, ``ci_high`` (:func:`summarize` at ``1 - confidence``), then for each quantile
    ``q`` three columns named after it (``p50``, ``p95``, ``p99``): the sample quantile
    (:func:`labkit.stats.quantile_ci`'s estimate, Hyndman-Fan type 7) and ``<name>_low``,
    ``<name>_high``, its exact order-statistic interval, NaN when the configuration has fewer
    values than the interval needs (6 for the median at 95 %, 72 for p95, 368 for p99:
    ``attrs["needs"]`` maps each name to that count), and ``<name>_upper``, the one-sided upper
    bound at ``confidence`` (the tail KPI of a latency: "p95 is at most this"; the order statistic
    of :func:`labkit.stats.quantile_ci` with ``side="upper"``), NaN below the runs it needs
    (:func:`labkit.stats.runs_for_quantile`: 5 for the median, 59 for p95, 299 for p99 at 95 %;
    ``attrs["needs_upper"]``).
    """
    from .quantile import min_values, quantile_ci, runs_for_quantile

    qs = [float(q) for q in np.atleast_1d(np.asarray(quantiles, dtype=float))]
    if not qs or any(not 0 < q < 1 for q in qs):
        raise ConfigError(f"quantiles must be numbers strictly between 0 and 1, got {quantiles!r}")
    by = v.names(by, "by", allow_empty=True)
    out = summarize(data, by=by, response=response, alpha=1 - confidence)
    out = out.drop(columns=["std", "sem"])
    needs = {_qname(q): min_values(q=q, confidence=confidence) for q in qs}
    needs_upper = {_qname(q): runs_for_quantile(q, confidence=confidence, side="upper") for q in qs}
    groups = (
        data.groupby(by, sort=True, observed=True, dropna=False)[response] if by else [((), data[response])]
    )
    cols: dict[str, list] = {f"{_qname(q)}{s}": [] for q in qs for s in ("", "_low", "_high", "_upper")}
    for _, values in groups:
        x = values.dropna().to_numpy(float)
        for q in qs:
            name = _qname(q)
            cols[name].append(float(np.quantile(x, q)) if len(x) else np.nan)
            if len(x) >= needs[name]:
                ci = quantile_ci(x, q=q, confidence=confidence).iloc[0]
                cols[f"{name}_low"].append(float(ci["low"]))
                cols[f"{name}_high"].append(float(ci["high"]))
            else:
                cols[f"{name}_low"].append(np.nan)
                cols[f"{name}_high"].append(np.nan)
            cols[f"{name}_upper"].append(
                float(quantile_ci(x, q=q, confidence=confidence, side="upper").iloc[0]["high"])
                if len(x) >= needs_upper[name]
                else np.nan
            )
    for name, values in cols.items():
        out[name] = values
    out.attrs.update(
        {"response": response, "by": by, "confidence": confidence, "needs": needs, "needs_upper": needs_upper}
    )
    return out


def cv_ci(values: v.Sample, *, confidence: float = 0.95) -> pd.DataFrame:
    """The coefficient of variation ``s / mean`` of ``values`` with Vangel's modified McKay
    interval (Vangel, "Confidence intervals for a normal coefficient of variation", The American
    Statistician 50(1), 1996, eq. 16; NIST Dataplot's default): with ``nu = n - 1``, ``K`` the
    sample CV and ``u`` the chi-square quantiles of ``nu`` df at ``1 - a/2`` (lower limit) and
    ``a/2`` (upper), ``K / sqrt(((u + 2)/(nu + 1) - 1) K^2 + u/nu)``. For positive data with a CV
    below about 1/3 (benchmark times), near exact for normal data.

    Returns a one-row DataFrame: ``n``, ``mean``, ``sd``, ``cv``, ``cv_low``, ``cv_high`` (as
    fractions; the upper limit is inf when the formula's root is not positive). ConfigError for
    fewer than 2 values, non-finite values or a mean <= 0.
    """
    x = v.sample(values, "values")
    if len(x) < 2:
        raise ConfigError(f"a coefficient of variation needs at least 2 values, got {len(x)}")
    c = float(confidence)
    if not 0 < c < 1:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence!r}")
    mean, sd = float(np.mean(x)), float(np.std(x, ddof=1))
    if mean <= 0:
        raise ConfigError(f"a coefficient of variation needs a positive mean, got {mean:g}")
    k, nu = sd / mean, len(x) - 1

    def limit(u: float) -> float:
        root = ((u + 2) / (nu + 1) - 1) * k * k + u / nu
        return k / np.sqrt(root) if root > 0 else np.inf

    a = 1 - c
    out = pd.DataFrame(
        [
            {
                "n": len(x),
                "mean": mean,
                "sd": sd,
                "cv": k,
                "cv_low": limit(float(sps.chi2.ppf(1 - a / 2, nu))),
                "cv_high": limit(float(sps.chi2.ppf(a / 2, nu))),
            }
        ]
    )
    out.attrs["confidence"] = c
    return out
