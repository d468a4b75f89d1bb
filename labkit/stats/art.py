"""Aligned rank transform (ART) ANOVA for factorial designs with non-normal residuals.

Wobbrock, Findlater, Gergle & Higgins (2011), "The aligned rank transform for
nonparametric factorial analyses using only ANOVA procedures", CHI '11; the
procedure of R's ``ARTool::art`` for between-subjects designs. For each
effect: align the response (residual of the full cell-means model plus the
estimated effect), rank the aligned values, run the full factorial ANOVA on
the ranks and keep only that effect's row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd

from ..errors import ConfigError
from . import _cells
from . import _numeric as num
from . import validate as v
from .anova import anova

__all__ = ["art_anova", "art_aligned"]

# aligned values closer than this fraction of the (shifted) response's magnitude are ties
TIES = 1e-9


def _align(data, response, factors):
    """``(cells, {effect: aligned response}, tie tolerance)``, effects in
    :func:`_cells.terms` order."""
    data = v.frame(data)
    factors = v.names(factors, "factors")
    v.columns(data, factors, "factors")
    v.no_missing(data, factors, "factors")
    y, _ = num.shift(v.response(data, response))  # alignment is shift-invariant
    codes, shape = _cells.factor_codes(data, factors)
    cs = _cells.cells(data, factors, (codes, shape))
    n = len(y)
    # the mean of y over each combination of levels of every subset of factors, per observation
    marginal: dict[tuple[int, ...], np.ndarray] = {(): np.full(n, math.fsum(y) / n)}
    for t in _cells.terms(len(factors)):
        code = np.zeros(n, dtype=np.int64)
        for j in t:
            code = code * shape[j] + codes[j]
        m = np.bincount(code, weights=y) / np.maximum(np.bincount(code), 1)
        marginal[t] = m[code]
    residual = y - marginal[tuple(range(len(factors)))]
    aligned = {}
    for t in _cells.terms(len(factors)):
        est = np.zeros(n)
        for r in range(len(t) + 1):
            for sub in combinations(t, r):
                est += (-1) ** (len(t) - r) * marginal[sub]
        aligned[":".join(factors[j] for j in t)] = residual + est
    # aligned values equal in exact arithmetic (e.g. two observations of one cell with the
    # same response) differ by rounding after the subtractions of means: rank them as ties
    return cs, aligned, TIES * float(np.max(np.abs(y)))


def art_aligned(data: pd.DataFrame, *, response: str, factors: Sequence[str]) -> pd.DataFrame:
    """The aligned responses of every effect (ARTool's ``m$aligned``).

    Returns a DataFrame on ``data``'s index with one column per effect
    (``"A"``, ``"B"``, ``"A:B"``, ...: by degree, as :func:`art_anova`): residual of the full
    factorial cell means + the effect's estimate by inclusion-exclusion of marginal means
    (Wobbrock et al. 2011, step 2). Each column sums to 0.
    """
    _, aligned, _ = _align(data, response, factors)
    return pd.DataFrame(aligned, index=data.index)


def art_anova(data: pd.DataFrame, *, response: str, factors: Sequence[str]) -> pd.DataFrame:
    """ART ANOVA: one row per effect, each from the ANOVA of its own aligned ranks.

    Returns columns ``term``, ``df``, ``df_error``, ``F``, ``p`` and
    ``partial_eta_sq`` (on the ranks); ``attrs["aligned_check"]``: the largest
    |F| of the other effects in the ANOVA of each aligned (unranked)
    response, which must be ~0 for ART to be appropriate (Wobbrock et al.
    2011, section "Verifying correctness"; ARTool's ``summary(m)``).
    A balanced design is analysed from cell means (:mod:`labkit.stats._cells`, where the
    sums of squares of types I-III agree); an unbalanced one by OLS with type III sums of
    squares, as ARTool.
    """
    factors = v.names(factors, "factors")
    cs, aligned, tol = _align(data, response, factors)
    n_cells = len(cs.counts)
    filled = int(np.count_nonzero(cs.counts))
    if filled < n_cells:
        raise ConfigError(
            f"ART needs every combination of {factors!r} observed: {filled} of {n_cells} cells have data"
        )
    rows, check = [], 0.0
    fit = _balanced if cs.replicates else _ols
    design = data[factors].rename(columns={f: f"f{i}" for i, f in enumerate(factors)})
    for i, (term, a) in enumerate(aligned.items()):
        row, others = fit(i, a, num.ranks(a, tol)[0], cs, design)
        rows.append({"term": term} | row)
        others = np.abs(others[np.isfinite(others)])
        check = max(check, float(others.max()) if len(others) else 0.0)
    out = pd.DataFrame(rows, columns=["term", "df", "df_error", "F", "p", "partial_eta_sq"])
    out.attrs.update({"response": response, "factors": factors, "aligned_check": check})
    return out


def _balanced(i, aligned, ranks, cs, _design):
    """(row of effect i from the ANOVA of ``ranks``, F of the other effects on ``aligned``)."""
    t = _cells.balanced_table(ranks, cs)
    f, p, peta = _cells.f_tests(t)
    row = {
        "df": float(t.df[i]),
        "df_error": t.df_error,
        "F": float(f[i]),
        "p": float(p[i]),
        "partial_eta_sq": float(peta[i]),
    }
    raw, _, _ = _cells.f_tests(_cells.balanced_table(aligned, cs))
    return row, np.delete(raw, i)


def _ols(i, aligned, ranks, _cs, design):
    """As :func:`_balanced`, by statsmodels OLS with type III sums of squares (unbalanced)."""
    safe = list(design.columns)
    name = ":".join(safe[j] for j in _cells.terms(len(safe))[i])
    t = anova(design.assign(_r=ranks), response="_r", factors=safe, typ=3).set_index("term")
    row = {
        "df": float(t.loc[name, "df"]),
        "df_error": float(t.loc["error", "df"]),
        "F": float(t.loc[name, "F"]),
        "p": float(t.loc[name, "p"]),
        "partial_eta_sq": float(t.loc[name, "partial_eta_sq"]),
    }
    raw = anova(design.assign(_a=aligned), response="_a", factors=safe, typ=3)
    return row, raw[(raw["term"] != name) & (raw["term"] != "error")]["F"].to_numpy(float)
