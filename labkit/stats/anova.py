"""ANOVA for designs the 2^k sign table cannot handle: multi-level factors, unbalanced data.

n-way tables of balanced complete designs come from their cell means
(:mod:`labkit.stats._cells`, no model fit), others from statsmodels (``ols`` +
``anova_lm``) fitted to the centered response; one-way ANOVA is computed here
by compensated summation (NIST StRD exact to what float64 inputs allow);
Tukey's HSD from statsmodels.
Columns are renamed to labkit's tidy names. Degenerate data (a constant
response, no residual variation) give NaN F and p and say why in
``table.attrs["note"]``, never numbers made of rounding noise.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import special

from ..errors import ConfigError
from . import _cells
from . import _numeric as num
from . import validate as v

__all__ = ["anova", "oneway_anova", "tukey_hsd"]

ANOVA_COLUMNS = ["term", "df", "ss", "ms", "F", "p", "eta_sq", "partial_eta_sq"]


def _model_frame(data, response, factors):
    """A copy with safe column names (patsy-proof) and the mapping back."""
    safe = {f: f"f{i}" for i, f in enumerate(factors)}
    frame = pd.DataFrame({safe[f]: data[f].to_numpy() for f in factors})
    # centered: the SS are invariant to a shift, and a large constant part
    # (1e12 + 0.x) would otherwise swamp the fit's arithmetic
    frame["y"] = num.centered(v.response(data, response))
    return frame, {s: f for f, s in safe.items()}


def anova(
    data: pd.DataFrame, *, response: str, factors: Sequence[str], typ: int = 2, interactions: bool = True
) -> pd.DataFrame:
    """n-way ANOVA table of ``response`` on categorical ``factors`` (as statsmodels OLS + anova_lm).

    Every factor is treated as categorical, with any number of levels; the
    data may be unbalanced. ``interactions=True`` fits the full factorial
    model (``A*B*C``; computed from the cell means when every cell holds the same
    number of observations), ``False`` main effects only. ``typ`` is the sum of
    squares type (1 sequential, 2, 3 with sum-to-zero contrasts); for balanced
    data all three agree.

    Returns one row per term (factor names joined with ``":"``) and an
    ``error`` row, with columns ``term, df, ss, ms, F, p``, ``eta_sq``
    (ss/SST, SST = Σ(y - ȳ)²) and ``partial_eta_sq`` (ss/(ss + SSE)).
    ``table.attrs``: ``response, factors, typ, sst, n, df_error`` and
    ``note`` ("" or why F and p are NaN: a constant response, or residuals
    that are zero to rounding, i.e. SSE < 1e-12·SST).
    """
    from statsmodels.formula.api import ols
    from statsmodels.stats.anova import anova_lm

    data = v.frame(data)
    factors = v.names(factors, "factors")
    v.columns(data, factors, "factors")
    if response in factors:
        raise ConfigError(f"response {response!r} is also listed in factors")
    if typ not in (1, 2, 3):
        raise ConfigError(f"typ must be 1, 2 or 3 (sum of squares type), got {typ!r}")
    v.no_missing(data, factors, "factors")
    frame, back = _model_frame(data, response, factors)
    for s, f in back.items():
        n = frame[s].nunique()
        if n < 2:
            raise ConfigError(f"factor {f!r} has {n} level in the data; ANOVA needs at least 2")
    cs = _cells.cells(frame, list(back))
    if interactions and cs.replicates:
        return _balanced(frame, cs, factors, response, typ)
    coding = ", Sum" if typ == 3 else ""
    joiner = "*" if interactions else "+"
    formula = "y ~ " + joiner.join(f"C({s}{coding})" for s in back)
    model = ols(formula, data=frame).fit()
    _need_residual_df(model.df_resid, int(model.df_model) + 1, len(frame))
    with warnings.catch_warnings():
        if np.ptp(frame["y"].to_numpy()) == 0:  # NaN F below; statsmodels warns about it
            warnings.simplefilter("ignore")
        res = anova_lm(model, typ=typ)
    res = res.drop(index=[i for i in res.index if i == "Intercept"])

    def term(name: str) -> str:
        if name == "Residual":
            return "error"
        return ":".join(
            back[part.split("(")[1].split(",")[0].rstrip(")").strip()] for part in name.split(":")
        )

    out = pd.DataFrame(
        {
            "term": [term(i) for i in res.index],
            "df": res["df"].to_numpy(float),
            "ss": res["sum_sq"].to_numpy(float),
        }
    )
    out["ms"] = out["ss"] / out["df"]
    out["F"] = res["F"].to_numpy(float)
    out["p"] = res["PR(>F)"].to_numpy(float)
    return _table(out, frame["y"].to_numpy(), response, factors, typ, float(model.df_resid))


def _need_residual_df(df_resid: float, params: int, n: int) -> None:
    if df_resid < 1:
        raise ConfigError(
            f"no residual degrees of freedom: the model has {params} parameters "
            f"for {n} observations; replicate the design, or use "
            f"interactions=False, or for an unreplicated 2^k design factorial_effects() + lenth()"
        )


def _balanced(frame, cs, factors, response, typ) -> pd.DataFrame:
    """The full factorial table of a balanced complete design from its cell means (no OLS)."""
    _need_residual_df(len(frame) - len(cs.counts), len(cs.counts), len(frame))
    t = _cells.balanced_table(frame["y"].to_numpy(), cs)
    out = pd.DataFrame(
        {
            "term": [":".join(factors[j] for j in term) for term in _cells.terms(len(factors))] + ["error"],
            "df": np.append(t.df, t.df_error),
            "ss": np.append(t.ss, t.sse),
        }
    )
    out["ms"] = out["ss"] / out["df"]
    with np.errstate(divide="ignore", invalid="ignore"):
        f = out["ms"].to_numpy() / (t.sse / t.df_error)
    f[-1] = np.nan
    out["F"] = f
    out["p"] = np.append(special.fdtrc(t.df, t.df_error, f[:-1]), np.nan)
    return _table(out, frame["y"].to_numpy(), response, factors, typ, t.df_error)


def _table(out, y, response, factors, typ, df_error) -> pd.DataFrame:
    """Add the effect sizes and attrs to a table of term, df, ss, ms, F, p; NaN if degenerate."""
    sst = num.ss(y)
    err = out["term"] == "error"
    sse = float(out.loc[err, "ss"].iloc[0])
    note = _degenerate(y, sst, sse)
    if note:
        if sst == 0:
            out["ss"] = 0.0
        out.loc[err, "ss"] = 0.0
        out["ms"] = out["ss"] / out["df"]
        sse = 0.0
    _finish(out, sst, sse, note)
    out.attrs.update(
        {
            "response": response,
            "factors": factors,
            "typ": typ,
            "sst": sst,
            "n": len(y),
            "df_error": df_error,
            "note": note,
        }
    )
    return out[ANOVA_COLUMNS]


def _degenerate(y: np.ndarray, sst: float, sse: float) -> str:
    """Why F is undefined for this response (constant, or no residual variation), or ""."""
    if sst == 0 or np.ptp(y) == 0:
        return "the response is constant (zero variance): F, p and eta squared are undefined"
    if sse <= num.NOISE * sst:
        return (
            "the residuals are zero (to rounding): the model fits every observation "
            "exactly, so F and p are undefined"
        )
    return ""


def _finish(out: pd.DataFrame, sst: float, sse: float, note: str) -> None:
    """eta_sq and partial_eta_sq columns; NaN F, p (and eta when SST = 0) when degenerate."""
    err = out["term"] == "error"
    with np.errstate(divide="ignore", invalid="ignore"):
        out["eta_sq"] = out["ss"] / sst if sst > 0 else np.nan
        out["partial_eta_sq"] = out["ss"] / (out["ss"] + sse) if sst > 0 else np.nan
    out.loc[err, "partial_eta_sq"] = np.nan
    if note:
        out["F"] = np.nan
        out["p"] = np.nan


def oneway_anova(data: pd.DataFrame, *, response: str, factor: str) -> pd.DataFrame:
    """One-way ANOVA of ``response`` across the levels of ``factor`` (R's ``aov(y ~ g)``).

    Returns two rows, ``factor`` (between groups) and ``error`` (within), with
    the columns and attrs of :func:`anova`. Computed directly: the response is
    shifted by one of its values and every sum is compensated (``math.fsum``),
    so the NIST StRD ANOVA certified values are reproduced as closely as the
    float64 inputs allow. A constant response, or groups each constant
    (SSE = 0), give NaN ``F`` and ``p`` and a note in ``attrs["note"]``.
    """
    data = v.frame(data)
    if not isinstance(factor, str):
        raise ConfigError(f"factor must be one column name, got {factor!r}")
    v.columns(data, [factor], "factor")
    if response == factor:
        raise ConfigError(f"response {response!r} is also the factor")
    y, _ = num.shift(v.response(data, response))
    codes, uniques = v.factorize(data, factor)
    g = len(uniques)
    if g < 2:
        raise ConfigError(f"factor {factor!r} has {g} level in the data; ANOVA needs at least 2")
    n = len(y)
    if n - g < 1:
        raise ConfigError(
            f"no residual degrees of freedom: {n} observations in {g} groups; replicate the groups"
        )
    counts, means, within = num.group_ss(y, codes, g)
    # grand mean from the (refined) group means, SST = SSB + SSW exactly: no pass over n
    grand = math.fsum(counts * means) / n
    ssb = math.fsum(counts * (means - grand) ** 2)
    sse = math.fsum(within)
    sst = ssb + sse if np.ptp(y) > 0 else 0.0
    note = _degenerate(y, sst, sse) if (sst == 0 or sse == 0) else ""
    if sst == 0:
        ssb = 0.0
    df_b, df_e = float(g - 1), float(n - g)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = (ssb / df_b) / (sse / df_e) if not note else np.nan
        eta = np.array([ssb, sse]) / sst if sst > 0 else np.full(2, np.nan)
        peta = ssb / (ssb + sse) if sst > 0 else np.nan
    p = float(special.fdtrc(df_b, df_e, f)) if not note else np.nan
    out = pd.DataFrame(
        {
            "term": [factor, "error"],
            "df": [df_b, df_e],
            "ss": [ssb, sse],
            "ms": [ssb / df_b, sse / df_e],
            "F": [f, np.nan],
            "p": [p, np.nan],
            "eta_sq": eta,
            "partial_eta_sq": [peta, np.nan],
        },
        columns=ANOVA_COLUMNS,
    )
    out.attrs.update(
        {
            "response": response,
            "factors": [factor],
            "typ": 1,
            "sst": sst,
            "n": n,
            "df_error": df_e,
            "note": note,
        }
    )
    return out


def tukey_hsd(data: pd.DataFrame, *, response: str, factor: str, alpha: float = 0.05) -> pd.DataFrame:
    """Tukey's honestly significant differences between every pair of levels of ``factor``.

    (statsmodels ``pairwise_tukeyhsd``; R's ``TukeyHSD(aov(y ~ g))``.)
    Returns one row per pair: ``group_a``, ``group_b``, ``diff``
    (mean_b - mean_a, as in R), ``ci_low``, ``ci_high`` (simultaneous, at
    1 - alpha), ``p_adj`` and ``reject`` (p_adj < alpha).
    """
    from statsmodels.stats.multicomp import pairwise_tukeyhsd

    alpha = v.alpha(alpha)
    data = v.frame(data)
    if not isinstance(factor, str):
        raise ConfigError(f"factor must be one column name, got {factor!r}")
    v.columns(data, [factor], "factor")
    v.no_missing(data, [factor], "factor")
    y = v.response(data, response)
    groups = data[factor].to_numpy()
    order = v.level_order(data[factor])
    if len(order) < 2:
        raise ConfigError(f"factor {factor!r} needs at least 2 levels for Tukey's HSD")
    res = pairwise_tukeyhsd(y, groups, alpha=alpha)
    g = res.groupsunique
    i, j = np.triu_indices(len(g), 1)
    out = pd.DataFrame(
        {
            "group_a": [v.scalar(x) for x in g[i]],
            "group_b": [v.scalar(x) for x in g[j]],
            "diff": np.asarray(res.meandiffs, float),
            "ci_low": np.asarray(res.confint, float)[:, 0],
            "ci_high": np.asarray(res.confint, float)[:, 1],
            "p_adj": np.asarray(res.pvalues, float),
            "reject": np.asarray(res.reject, bool),
        }
    )
    return out
