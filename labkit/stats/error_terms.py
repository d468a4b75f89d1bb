"""Factorial effects tested against the right error term when observations share units.

When several runs share an instance (a VM booted once and measured k times) or a host, the runs
are not independent draws: a factor that is constant within an instance (its vCPUs, its platform)
can only be compared across instances, and the run-to-run scatter inside an instance says nothing
about how much instances differ. An ordinary least-squares fit over the runs uses that scatter as
its error term and calls a difference between a few instances significant whenever instances
differ more than runs do (a split-plot design analysed as completely randomised: Montgomery,
*Design and Analysis of Experiments*, 8th ed., 2013, sections 14.1 and 14.5; Kalibera & Jones,
ISMM 2013, on the levels of a benchmark experiment).

:func:`level_effects` tests each term against the variance of the level it varies across:

* ``"ems"`` (balanced designs: every configuration has the same number of units, every unit the
  same number of observations, one random level within which every factor is constant): the exact
  expected-mean-squares F-test, which for such a design is the 2^k analysis of the unit means
  (Jain's sign table on the instance means: error df ``2^k (r - 1)`` for ``r`` units per
  configuration); the unit variance component is ``s^2(unit means) - MS_within / m`` for ``m``
  observations per unit (Searle, Casella & McCulloch, *Variance Components*, 1992, ch. 3).
* ``"reml"`` (anything else: unbalanced data, several random levels, crossed hosts): the REML
  linear mixed model of :func:`labkit.stats.mixed_effects` with Satterthwaite's df. On balanced
  data with a positive unit component both give the same estimates, t and p (the tests check it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import _numeric as num
from . import validate as v

__all__ = ["LevelEffects", "constant_within", "level_effects", "unit_means"]

METHODS = ("auto", "ems", "reml")


@dataclass(frozen=True, eq=False)
class LevelEffects:
    """What :func:`level_effects` found.

    * ``effects`` -- one row per term in Yates order (``I``, ``A``, ``B``, ``A:B``, ...), then
      ``error``: ``term``, ``q`` (Jain's coefficient; the mean for ``I``), ``effect`` (``2q``),
      ``se``, ``ci_low``/``ci_high`` (``q +- t(1 - alpha/2, df) se``), ``df`` (of the test),
      ``t``, ``F`` (``t^2``), ``p`` and ``pct_variation``: Jain's allocation of the variation
      between the units of the error term (their means; the observations when the error term is
      the residual), ``100 N q^2 / SST``, exact for balanced units; for unbalanced ones the
      terms' sums of squares are scaled to add up to the fitted model's; ``error`` holds the rest.
    * ``variance`` -- one row per random level, then ``residual``: ``component``, ``variance``,
      ``pct`` (share of the variance the design's terms leave).
    * ``method`` -- ``"ems"`` or ``"reml"``; ``error_term`` -- the random levels whose variance
      the factors are tested against (those within whose units every factor is constant, joined
      with " and "), or ``"residual"`` when a factor varies within every random level's units.
    * ``units`` -- the number of units of the innermost of them (the most units), ``unit`` --
      its column (None for the residual); ``note`` -- "" or what to know (a singular fit, a
      component estimated at 0).
    """

    effects: pd.DataFrame
    variance: pd.DataFrame
    method: str
    error_term: str
    units: int
    note: str = ""
    unit: str | None = None


def constant_within(data: pd.DataFrame, *, factors: v.Columns, unit: str) -> bool:
    """True when every column of ``factors`` has one value within each unit of ``unit``."""
    data = v.frame(data)
    factors = v.names(factors, "factors", allow_empty=True)
    v.columns(data, factors + [unit], "factors")
    if not factors:
        return True
    # as many distinct (unit, factor levels) combinations as units
    return len(data[[unit] + factors].drop_duplicates()) == data[unit].nunique(dropna=False)


def unit_means(data: pd.DataFrame, *, response: str, unit: str, keep: v.Columns = None) -> pd.DataFrame:
    """One row per unit of ``unit``: the ``keep`` columns (constant within a unit, e.g. the
    factors), ``unit``, ``n`` (observations) and the mean ``response``. ConfigError when a
    ``keep`` column varies within a unit."""
    data = v.frame(data)
    keep = v.names(keep, "keep", allow_empty=True)
    v.columns(data, keep + [unit], "keep")
    v.response(data, response)
    if keep and not constant_within(data, factors=keep, unit=unit):
        varying = [c for c in keep if not constant_within(data, factors=[c], unit=unit)]
        raise ConfigError(
            f"{', '.join(map(repr, varying))} vary within units of {unit!r}: "
            f"their levels have no single value per unit"
        )
    g = data.groupby(unit, observed=True, sort=False)
    out = g[keep].first().reset_index() if keep else g.size().reset_index()[[unit]]
    out["n"] = g[response].count().to_numpy()
    out[response] = g[response].mean().to_numpy()
    return out[keep + [unit, "n", response]]


def level_effects(
    data: pd.DataFrame,
    *,
    response: str,
    factors: v.Columns,
    random: v.Columns,
    levels: v.Levels = None,
    alpha: float = 0.05,
    method: str = "auto",
    blocks: v.Columns = None,
) -> LevelEffects:
    """Two-level factorial effects tested against the variance of the level they vary across.

    Parameters
    ----------
    data : long-format DataFrame, one row per observation (one run on one instance).
    response : the numeric response column.
    factors : the two-level factor columns (full factorial, Yates order).
    random : the columns whose labels identify the units of each random level (``instance``;
        ``host`` too for conclusions beyond the hosts measured); nested units carry unique labels.
    levels : low/high level per factor, as :func:`labkit.stats.factorial_effects` takes it.
    alpha : for the confidence intervals.
    method : ``"ems"``, ``"reml"`` or ``"auto"`` (EMS when the design allows it, see the module
        docstring).
    blocks : fixed nuisance columns (hosts whose conclusions stay with those hosts), fitted with
        sum-to-zero contrasts by :func:`labkit.stats.mixed_effects` (REML).

    Returns
    -------
    :class:`LevelEffects`. ConfigError for bad columns, factors without two levels, a random
    column with fewer than 2 units, ``method="ems"`` on a design it does not fit (saying why), and
    what :func:`labkit.stats.mixed_effects` refuses.
    """
    data = v.frame(data)
    factors = v.names(factors, "factors")
    random = v.names(random, "random")
    v.columns(data, factors, "factors")
    v.columns(data, random, "random")
    blocks = v.names(blocks, "blocks", allow_empty=True)
    v.columns(data, blocks, "blocks")
    v.response(data, response)
    alpha = v.alpha(alpha)
    if method not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    inner = [c for c in random if constant_within(data, factors=factors, unit=c)]
    error_term = " and ".join(inner) if inner else "residual"
    why = (
        f"blocks {', '.join(blocks)} need the mixed model"
        if blocks
        else _ems_refusal(data, response, factors, random, levels)
    )
    if method == "ems" and why:
        raise ConfigError(f"method='ems' does not fit this design: {why}; use method='reml'")
    if method == "ems" or (method == "auto" and not why):
        return _ems(data, response, factors, random[0], levels, alpha)
    return _reml(data, response, factors, random, levels, alpha, error_term, blocks)


def _ems_refusal(data, response, factors, random, levels) -> str:
    """ "" when the EMS test fits, else why not."""
    if len(random) != 1:
        return f"{len(random)} random levels ({', '.join(random)}); EMS here takes one"
    unit = random[0]
    if not constant_within(data, factors=factors, unit=unit):
        return f"a factor varies within units of {unit!r}"
    level_map = v.level_map(levels)
    for f in factors:
        v.two_levels(data[f], level_map.get(f))
    per_unit = data.groupby(unit, observed=True).size()
    if per_unit.nunique() != 1 or per_unit.iloc[0] < 2:
        return (
            f"units of {unit!r} hold between {per_unit.min()} and {per_unit.max()} observations; "
            f"EMS needs the same number, at least 2, in each"
        )
    cells = data.groupby(factors, observed=True)[unit].nunique()
    if len(cells) != 2 ** len(factors) or cells.nunique() != 1 or cells.iloc[0] < 2:
        return (
            f"configurations hold between {cells.min()} and {cells.max()} units of {unit!r} "
            f"({len(cells)} of {2 ** len(factors)} configurations present); EMS needs the "
            f"same number, at least 2, in each"
        )
    return ""


def _allocation(
    data: pd.DataFrame,
    response: str,
    factors: list[str],
    unit: str | None,
    q: np.ndarray,
    coding: dict,
    means: pd.DataFrame | None = None,
) -> tuple[np.ndarray, float]:
    """Each term's share of the variation between the units (``unit`` means, or the rows) and the
    rest: Jain's ``100 N q^2 / SST``; when the units are unbalanced (the sign columns not
    orthogonal) the terms' sums of squares are scaled to add up to the model's, ``sum (fitted -
    mean)^2``, so that the shares stay additive. The mean's entry is NaN."""
    units = (
        means
        if means is not None
        else (unit_means(data, response=response, unit=unit, keep=factors) if unit else data)
    )
    y = units[response].to_numpy(float)
    X = np.ones((len(units), len(q)))
    signs = [np.where((units[f] == coding[f][1]).to_numpy(dtype=bool), 1.0, -1.0) for f in factors]
    for i in range(1, len(q)):
        for j, sgn in enumerate(signs):
            if i >> j & 1:
                X[:, i] *= sgn
    sst = num.ss(num.centered(y))
    ss = len(y) * q**2
    ss[0] = 0.0
    fitted = X @ q
    ss_model = min(num.ss(fitted - num.fmean(fitted)), sst)
    total = ss.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = ss_model / total if total > 0 else 1.0
        pct = 100 * ss * scale / sst if sst > 0 else np.full(len(q), np.nan)
    pct[0] = np.nan
    rest = 100 - np.nansum(pct[1:]) if sst > 0 else np.nan
    return pct, float(max(rest, 0.0)) if sst > 0 else np.nan


def _table(terms, q, se, df, alpha, share) -> pd.DataFrame:
    """The effects table (see LevelEffects) with an ``error`` row; ``share`` = (pct, rest)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = q / se
        tcrit = sps.t.ppf(1 - alpha / 2, df)
    pct, rest = share
    effect = 2 * q
    effect[0] = np.nan
    f = t**2
    f[0] = np.nan
    table = pd.DataFrame(
        {
            "term": terms,
            "q": q,
            "effect": effect,
            "se": se,
            "ci_low": q - tcrit * se,
            "ci_high": q + tcrit * se,
            "df": df,
            "t": t,
            "F": f,
            "p": 2 * sps.t.sf(np.abs(t), df),
            "pct_variation": pct,
        }
    )
    error = {c: np.nan for c in table.columns} | {"term": "error", "pct_variation": rest}
    return pd.concat([table, pd.DataFrame([error])], ignore_index=True)


def _ems(data, response, factors, unit, levels, alpha) -> LevelEffects:
    from .factorial import factorial_effects

    means = unit_means(data, response=response, unit=unit, keep=factors)
    fe = factorial_effects(means, factors=factors, response=response, alpha=alpha, levels=levels)
    terms = fe.loc[fe.term != "error", "term"].tolist()
    body = fe.set_index("term").loc[terms]
    y = v.response(data, response)
    df_e = float(fe.attrs["df_error"])
    q = body["q"].to_numpy(float)
    table = _table(
        terms,
        q,
        body["se"].to_numpy(float).copy(),
        np.full(len(terms), df_e),
        alpha,
        _allocation(data, response, factors, unit, q, fe.attrs["levels"], means),
    )
    table.loc[table.term == "error", "df"] = df_e
    m = int(means["n"].iloc[0])
    codes = pd.factorize(data[unit])[0]
    within = y - (np.bincount(codes, weights=y) / np.bincount(codes))[codes]
    ms_within = num.ss(within) / (len(y) - len(means))
    s2_means = float(fe.attrs["s_e"]) ** 2  # estimates var_unit + var_within / m
    var_unit = max(s2_means - ms_within / m, 0.0)
    note = (
        f"the {unit} variance is estimated as 0 (the unit means vary no more than the "
        f"observations within units predict)"
        if var_unit == 0
        else ""
    )
    table.attrs.update(
        factors=factors,
        response=response,
        levels=fe.attrs["levels"],
        alpha=alpha,
        n=len(y),
        df_error=df_e,
        method="ems",
        error_term=unit,
    )
    return LevelEffects(table, _variance([unit], [var_unit], ms_within), "ems", unit, len(means), note, unit)


def _reml(data, response, factors, random, levels, alpha, error_term, blocks) -> LevelEffects:
    from .mixed import mixed_effects

    fit = mixed_effects(data, response=response, fixed=factors, random=random, levels=levels, blocks=blocks)
    fx = fit.fixed
    y = v.response(data, response)
    inner = [c for c in random if constant_within(data, factors=factors, unit=c)]
    unit = max(inner, key=lambda c: data[c].nunique()) if inner else None
    q = fx["estimate"].to_numpy(float)
    table = _table(
        fx["term"].tolist(),
        q,
        fx["se"].to_numpy(float),
        fx["df"].to_numpy(float),
        alpha,
        _allocation(data, response, factors, unit, q, dict(fit.levels)),
    )
    var = fit.variance
    df_terms = fx["df"].to_numpy(float)[1:]
    table.loc[table.term == "error", "df"] = float(np.median(df_terms)) if len(df_terms) else np.nan
    table.attrs.update(
        factors=factors,
        response=response,
        levels=dict(fit.levels),
        alpha=alpha,
        n=len(y),
        method="reml",
        error_term=error_term,
        blocks=blocks,
        df_error=table["df"].iloc[-1],
    )
    units = int(data[unit].nunique()) if unit else len(data)
    return LevelEffects(
        table,
        _variance(random, var["variance"].to_numpy(float)[:-1], float(var["variance"].iloc[-1])),
        "reml",
        error_term,
        units,
        fit.note,
        unit,
    )


def _variance(names: Sequence[str], comps: Sequence[float], residual: float) -> pd.DataFrame:
    var = np.append(np.asarray(comps, dtype=float), residual)
    total = var.sum()
    return pd.DataFrame(
        {
            "component": list(names) + ["residual"],
            "variance": var,
            "pct": 100 * var / total if total > 0 else np.full(len(var), np.nan),
        }
    )
