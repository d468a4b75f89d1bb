"""Blocked 2^k·r designs: effects with the block term taken out of the error.

Montgomery, *Design and Analysis of Experiments*, ch. 7: blocks that hold whole
replicates are orthogonal to every effect, so their sum of squares only leaves the
error; blocks that split a replicate confound the interactions whose sign is
constant within every block, whose estimates then measure the block difference
as much as the effect (they are reported, marked ``confounded``, without a test).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import _numeric as num
from . import validate as v
from .factorial import code, factorial_effects, sign_table

__all__ = ["blocked_effects"]


def blocked_effects(
    data: pd.DataFrame,
    *,
    factors: Sequence[str],
    response: str,
    block: str,
    alpha: float = 0.05,
    levels: v.Levels = None,
) -> pd.DataFrame:
    """:func:`factorial_effects` of a blocked 2^k·r design, with a ``block`` row.

    ``block`` names the column holding each observation's block (any labels). Returns the
    factorial_effects table (same columns) plus a boolean ``confounded`` column (the
    term's sign is constant within every block: its estimate includes the block
    difference, its t, F and p are NaN) and a ``block`` row before ``error`` (``df`` =
    blocks - 1, ``ss`` between blocks, ``pct_variation``). The error row and every
    se, CI, t, F and p use the error left once the block sum of squares beyond the
    confounded terms is taken out (df reduced likewise). ``attrs`` adds ``blocks``
    (their number) and ``confounded`` (the terms).
    """
    v.columns(v.frame(data), [block], "block")
    v.no_missing(data, [block], "block")
    table = factorial_effects(data, factors=factors, response=response, alpha=alpha, levels=levels)
    c = code(data, factors, response, levels=levels)
    codes, uniques = pd.factorize(data[block], sort=True)
    nb = len(uniques)
    if nb < 2:
        raise ConfigError(f"block column {block!r} has a single block; use factorial_effects")
    signs = sign_table(c.k)[:, c.cell].T  # observation x term (I first)
    conf = np.zeros(signs.shape[1], dtype=bool)
    for j in range(1, signs.shape[1]):
        lo = np.full(nb, 2)
        hi = np.full(nb, -2)
        np.minimum.at(lo, codes, signs[:, j])
        np.maximum.at(hi, codes, signs[:, j])
        conf[j] = bool((lo == hi).all())
    yc = c.y - num.fmean(c.y)
    counts = np.bincount(codes, minlength=nb)
    sums = np.array([np.sum(yc[codes == b]) for b in range(nb)])  # small nb: plain loop
    ss_block = num.ss(sums / np.sqrt(counts))
    n_terms = len(conf)
    ss_terms = table["ss"].to_numpy()[:n_terms]
    ss_conf = float(np.nansum(ss_terms[conf]))
    df_rest = nb - 1 - int(conf.sum())
    ss_rest = max(ss_block - ss_conf, 0.0)
    out = table.iloc[:n_terms].copy()
    out["confounded"] = conf
    sst = table.attrs["sst"]
    block_row = {
        "term": "block",
        "df": float(nb - 1),
        "ss": ss_block,
        "ms": ss_block / (nb - 1),
        "pct_variation": 100 * ss_block / sst if sst > 0 else np.nan,
        "confounded": False,
    }
    rows = [out, pd.DataFrame([block_row])]
    attrs = dict(table.attrs) | {"blocks": nb, "confounded": out.loc[out["confounded"], "term"].tolist()}
    if table.attrs["replicated"]:
        if df_rest < 0:
            raise ConfigError(
                "more terms are confounded with blocks than blocks can hold: check the block column"
            )
        df_e = table.attrs["df_error"] - df_rest
        sse = float(table["ss"].iloc[-1]) - ss_rest
        if df_e < 1:
            raise ConfigError(f"no degrees of freedom left for error after {nb} blocks")
        n = 2**c.k
        s_e = np.sqrt(max(sse, 0.0) / df_e)
        s_q = s_e / np.sqrt(n * c.r)
        t_crit = float(sps.t.ppf(1 - attrs["alpha"] / 2, df_e))
        q = out["q"].to_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(conf, np.nan, q / s_q) if s_q > 0 else np.full(n, np.nan)
        out["se"] = np.where(conf, np.nan, s_q)
        out["ci_low"] = np.where(conf, np.nan, q - t_crit * s_q)
        out["ci_high"] = np.where(conf, np.nan, q + t_crit * s_q)
        out["t"] = t
        out["F"] = np.where(np.arange(n) == 0, np.nan, t**2)
        out["p"] = 2 * sps.t.sf(np.abs(t), df_e)
        err = table.iloc[[-1]].copy()
        err["df"], err["ss"], err["ms"] = df_e, sse, sse / df_e
        err["pct_variation"] = 100 * sse / sst if sst > 0 else np.nan
        err["confounded"] = False
        rows.append(err)
        attrs.update({"df_error": df_e, "s_e": float(s_e), "s_q": float(s_q), "t_crit": t_crit})
    result = pd.concat(rows, ignore_index=True)
    result.attrs.update(attrs)
    return result
