"""Per-configuration descriptive statistics with t-based confidence intervals of the mean."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from . import validate as v

__all__ = ["summarize"]

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
