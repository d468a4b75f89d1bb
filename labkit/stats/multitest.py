"""Multiple-comparison correction for any family of tests (R's ``p.adjust``).

Holm (1979) by default: controls the family-wise error rate like Bonferroni
and is never less powerful. ``"bonferroni"`` and ``"bh"`` (Benjamini &
Hochberg 1995, false discovery rate) by choice. NaN p-values (tests that
could not run, e.g. a configuration with too few runs) stay NaN and are not
counted in the family.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import ConfigError
from . import validate as v

__all__ = ["adjust_p", "correct"]

METHODS = ("holm", "bonferroni", "bh")


def _method(method: str) -> str:
    if method not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    return method


def _adjust(p: np.ndarray, method: str) -> np.ndarray:
    """R's ``p.adjust`` formulas (R 4.x, src/library/stats/R/p.adjust.R) on finite ``p``."""
    n = len(p)
    if method == "bonferroni":
        return np.minimum(1.0, n * p)
    if method == "holm":  # pmin(1, cummax((n - i + 1) * p[o]))[ro], o = order(p)
        o = np.argsort(p, kind="stable")
        adj = np.minimum(1.0, np.maximum.accumulate((n - np.arange(n)) * p[o]))
    else:  # bh: pmin(1, cummin(n / i * p[o]))[ro], o decreasing
        o = np.argsort(-p, kind="stable")
        adj = np.minimum(1.0, np.minimum.accumulate(n / np.arange(n, 0, -1) * p[o]))
    out = np.empty(n)
    out[o] = adj
    return out


def adjust_p(p: v.Sample, *, method: str = "holm") -> np.ndarray:
    """Adjusted p-values (R's ``p.adjust``) of the p-values ``p``, same order and length.

    ``method``: ``"holm"`` (default), ``"bonferroni"`` or ``"bh"``.
    """
    method = _method(method)
    try:
        p = np.asarray(p, dtype=float).ravel()
    except (TypeError, ValueError) as e:
        raise ConfigError("p must be a sequence of numbers (p-values)") from e
    finite = np.isfinite(p)
    if np.any((p[finite] < 0) | (p[finite] > 1)):
        raise ConfigError("p-values must lie between 0 and 1")
    out = np.full(len(p), np.nan)
    if finite.any():
        out[finite] = _adjust(p[finite], method)
    return out


def correct(table: pd.DataFrame, *, p: str = "p", method: str = "holm", alpha: float = 0.05) -> pd.DataFrame:
    """A copy of ``table`` (one row per test of the family) with the p-values corrected.

    Adds ``p_adj`` (the adjusted p-value of column ``p``) and ``reject``
    (p_adj < alpha; False where p is NaN); ``attrs["correction"]`` names the
    method and the family size. E.g. ``correct(ttest_by(...))`` for the
    per-configuration t-tests of a notebook.
    """
    alpha = v.alpha(alpha)
    table = v.frame(table, "table")
    v.columns(table, [p], "p")
    out = table.copy()
    out["p_adj"] = adjust_p(out[p].to_numpy(dtype=float, na_value=np.nan), method=method)
    out["reject"] = out["p_adj"] < alpha
    out.attrs["correction"] = {
        "method": method,
        "family": int(np.isfinite(out["p_adj"]).sum()),
        "alpha": alpha,
    }
    return out
