"""ANOVA for designs the 2^k sign table cannot handle: multi-level factors, unbalanced data.

n-way tables come from statsmodels (``ols`` + ``anova_lm``); one-way ANOVA and
Tukey's HSD from statsmodels too. Columns are renamed to labkit's tidy names.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError
from . import _validate as v

__all__ = ["anova", "oneway_anova", "tukey_hsd"]

ANOVA_COLUMNS = ["term", "df", "ss", "ms", "F", "p", "eta_sq", "partial_eta_sq"]


def _model_frame(data, response, factors):
    """A copy with safe column names (patsy-proof) and the mapping back."""
    safe = {f: f"f{i}" for i, f in enumerate(factors)}
    frame = pd.DataFrame({safe[f]: data[f].to_numpy() for f in factors})
    frame["y"] = v.response(data, response)
    return frame, {s: f for f, s in safe.items()}


def anova(data: pd.DataFrame, response: str, factors: Sequence[str], typ: int = 2, *,
          interactions: bool = True) -> pd.DataFrame:
    """n-way ANOVA table of ``response`` on categorical ``factors`` (statsmodels OLS + anova_lm).

    Every factor is treated as categorical, with any number of levels; the
    data may be unbalanced. ``interactions=True`` fits the full factorial
    model (``A*B*C``), ``False`` main effects only. ``typ`` is the sum of
    squares type (1 sequential, 2, 3 with sum-to-zero contrasts); for balanced
    data all three agree.

    Returns one row per term (factor names joined with ``":"``) and an
    ``error`` row, with columns ``term, df, ss, ms, F, p``, ``eta_sq``
    (ss/SST, SST = Σ(y - ȳ)²) and ``partial_eta_sq`` (ss/(ss + SSE)).
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
    coding = ", Sum" if typ == 3 else ""
    joiner = "*" if interactions else "+"
    formula = "y ~ " + joiner.join(f"C({s}{coding})" for s in back)
    model = ols(formula, data=frame).fit()
    if model.df_resid < 1:
        raise ConfigError(
            f"no residual degrees of freedom: the model has {int(model.df_model) + 1} parameters "
            f"for {len(frame)} observations; replicate the design, or use "
            f"interactions=False, or for an unreplicated 2^k design factorial_effects() + lenth()")
    res = anova_lm(model, typ=typ)
    res = res.drop(index=[i for i in res.index if i == "Intercept"])

    def term(name: str) -> str:
        if name == "Residual":
            return "error"
        return ":".join(back[part.split("(")[1].split(",")[0].rstrip(")").strip()]
                        for part in name.split(":"))

    out = pd.DataFrame({"term": [term(i) for i in res.index],
                        "df": res["df"].to_numpy(float),
                        "ss": res["sum_sq"].to_numpy(float)})
    out["ms"] = out["ss"] / out["df"]
    out["F"] = res["F"].to_numpy(float)
    out["p"] = res["PR(>F)"].to_numpy(float)
    y = frame["y"].to_numpy()
    sst = float(np.sum((y - y.mean()) ** 2))
    sse = float(out.loc[out["term"] == "error", "ss"].iloc[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        out["eta_sq"] = out["ss"] / sst
        out["partial_eta_sq"] = out["ss"] / (out["ss"] + sse)
    out.loc[out["term"] == "error", "partial_eta_sq"] = np.nan
    out.attrs.update({"response": response, "factors": factors, "typ": typ, "sst": sst,
                      "n": len(frame), "df_error": float(model.df_resid)})
    return out[ANOVA_COLUMNS]


def oneway_anova(data: pd.DataFrame, response: str, factor: str) -> pd.DataFrame:
    """One-way ANOVA of ``response`` across the levels of ``factor`` (R's ``aov(y ~ g)``).

    Returns two rows, ``factor`` (between groups) and ``error`` (within), with
    the columns of :func:`anova`.
    """
    if not isinstance(factor, str):
        raise ConfigError(f"factor must be one column name, got {factor!r}")
    return anova(data, response, [factor], typ=1)


def tukey_hsd(data: pd.DataFrame, response: str, factor: str, *,
              alpha: float = 0.05) -> pd.DataFrame:
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
    out = pd.DataFrame({"group_a": [v.scalar(x) for x in g[i]],
                        "group_b": [v.scalar(x) for x in g[j]],
                        "diff": np.asarray(res.meandiffs, float),
                        "ci_low": np.asarray(res.confint, float)[:, 0],
                        "ci_high": np.asarray(res.confint, float)[:, 1],
                        "p_adj": np.asarray(res.pvalues, float),
                        "reject": np.asarray(res.reject, bool)})
    return out
