"""Multiple-comparison correction for any family of tests (statsmodels ``multipletests``).

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
from . import _validate as v

__all__ = ["adjust_p", "correct"]

METHODS = {"holm": "holm", "bonferroni": "bonferroni", "bh": "fdr_bh"}


def _method(method: str) -> str:
    if method not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    return METHODS[method]


def adjust_p(p, method: str = "holm") -> np.ndarray:
    """Adjusted p-values (R's ``p.adjust``) of the p-values ``p``, same order and length.

    ``method``: ``"holm"`` (default), ``"bonferroni"`` or ``"bh"``.
    """
    from statsmodels.stats.multitest import multipletests

    sm = _method(method)
    try:
        p = np.asarray(p, dtype=float).ravel()
    except (TypeError, ValueError) as e:
        raise ConfigError("p must be a sequence of numbers (p-values)") from e
    finite = np.isfinite(p)
    if np.any((p[finite] < 0) | (p[finite] > 1)):
        raise ConfigError("p-values must lie between 0 and 1")
    out = np.full(len(p), np.nan)
    if finite.any():
        out[finite] = multipletests(p[finite], method=sm)[1]
    return out


def correct(table: pd.DataFrame, *, p: str = "p", method: str = "holm",
            alpha: float = 0.05) -> pd.DataFrame:
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
    out["p_adj"] = adjust_p(out[p].to_numpy(dtype=float, na_value=np.nan), method)
    out["reject"] = out["p_adj"] < alpha
    out.attrs["correction"] = {"method": method, "family": int(np.isfinite(out["p_adj"]).sum()),
                               "alpha": alpha}
    return out
