"""Balanced full-factorial ANOVA from cell means, for factors with any number of levels.

When every combination of the factors' levels holds the same number ``r`` of
observations, the sums of squares of all terms of the full factorial model
come from the cell means alone: the effect of a term is the array of cell
means centred along the term's factors and averaged over the others, and its
SS is ``r`` times the sum of its squares over the cells (Montgomery, *Design
and Analysis of Experiments*, ch. 5, the general factorial design; Scheffé 1959, ch. 4).
Types I, II and III then agree. It is the table statsmodels' OLS + ``anova_lm``
gives for such data, without building a model matrix: the ANOVA fast path
(:func:`labkit.stats.anova`) and the ART (:func:`labkit.stats.art_anova`,
which runs one such ANOVA per effect on ranks) use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import special

from . import _numeric as num
from . import validate as v


@dataclass(frozen=True, eq=False)
class Cells:
    """Each observation's cell in the full factorial of ``factors``."""

    codes: np.ndarray  # cell index of each observation (C order over ``shape``)
    shape: tuple[int, ...]  # levels per factor (levels present in the data)
    counts: np.ndarray  # observations per cell

    @property
    def replicates(self) -> int:
        """r when every cell holds r >= 1 observations (balanced and complete), else 0."""
        lo, hi = int(self.counts.min()), int(self.counts.max())
        return lo if lo == hi else 0


def factor_codes(data: pd.DataFrame, factors: Sequence[str]) -> tuple[list[np.ndarray], list[int]]:
    """Each factor's level index per observation, and its number of levels."""
    codes, shape = [], []
    for f in factors:
        c, levels = v.factorize(data, f, "factors")
        codes.append(c)
        shape.append(len(levels))
    return codes, shape


def cells(
    data: pd.DataFrame, factors: Sequence[str], codes: tuple[list[np.ndarray], list[int]] | None = None
) -> Cells:
    """The cells of ``data`` over the (validated, non-missing) ``factors`` columns
    (``codes``: their :func:`factor_codes`, if already computed)."""
    per_factor, shape = codes or factor_codes(data, factors)
    cell = np.zeros(len(data), dtype=np.int64)
    for c, n in zip(per_factor, shape):
        cell = cell * n + c
    return Cells(cell, tuple(shape), np.bincount(cell, minlength=int(np.prod(shape))))


def terms(n_factors: int) -> list[tuple[int, ...]]:
    """Every term of the full factorial, by degree then factor order (patsy's order)."""
    return [t for d in range(1, n_factors + 1) for t in combinations(range(n_factors), d)]


@dataclass(frozen=True, eq=False)
class Table:
    """Sums of squares of a balanced full factorial: one entry per :func:`terms` item."""

    ss: np.ndarray  # SS of each term
    df: np.ndarray  # degrees of freedom of each term, prod(levels - 1)
    sse: float  # residual (within-cell) SS
    df_error: float  # n - number of cells


def balanced_table(y: np.ndarray, c: Cells) -> Table:
    """The ANOVA sums of squares of ``y`` over the balanced cells ``c`` (``c.replicates`` > 0).

    ``y`` is shifted by one of its values first (exact) and the cell means
    refined once (:func:`labkit.stats._numeric.group_ss`), so a large constant part
    costs no accuracy; a cell whose values are all equal has a within SS of exactly 0.
    """
    r = c.replicates
    y, _ = num.shift(y)
    n_cells = len(c.counts)
    _, means, within = num.group_ss(y, c.codes, n_cells)
    # split the cell means into the effect of every subset of factors: along each axis a
    # part averaged over it (subset without that factor) and the deviation (with it)
    parts = {0: means.reshape(c.shape)}
    for j in range(len(c.shape)):
        nxt = {}
        for mask, a in parts.items():
            m = a.mean(axis=j, keepdims=True)
            nxt[mask] = m
            nxt[mask | 1 << j] = a - m
        parts = nxt
    ts = terms(len(c.shape))
    ss = np.empty(len(ts))
    df = np.empty(len(ts))
    levels = np.asarray(c.shape)
    for i, t in enumerate(ts):
        e = parts[sum(1 << j for j in t)]
        ss[i] = r * (n_cells // e.size) * float(np.sum(e * e))
        df[i] = float(np.prod(levels[list(t)] - 1))
    return Table(ss, df, math.fsum(within), float(len(y) - n_cells))


def f_tests(t: Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(F, p, partial_eta_sq)`` of every term of ``t``.

    As :func:`labkit.stats.anova`: F and p are NaN when the response is constant or the
    residuals are zero to rounding (SSE <= 1e-12·SST), and partial eta squared is then
    SS/SS (NaN for a constant response).
    """
    sst = float(np.sum(t.ss)) + t.sse
    nan = np.full(len(t.ss), np.nan)
    if sst == 0:
        return nan, nan.copy(), nan.copy()
    if t.sse <= num.NOISE * sst:
        with np.errstate(divide="ignore", invalid="ignore"):
            return nan, nan.copy(), t.ss / t.ss
    f = (t.ss / t.df) / (t.sse / t.df_error)
    return f, special.fdtrc(t.df, t.df_error, f), t.ss / (t.ss + t.sse)
