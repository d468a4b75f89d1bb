"""Aligned rank transform (ART) ANOVA for factorial designs with non-normal residuals.

Wobbrock, Findlater, Gergle & Higgins (2011), "The aligned rank transform for
nonparametric factorial analyses using only ANOVA procedures", CHI '11; the
procedure of R's ``ARTool::art`` for between-subjects designs. For each
effect: align the response (residual of the full cell-means model plus the
estimated effect), rank the aligned values, run the full factorial ANOVA on
the ranks and keep only that effect's row.
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import _validate as v
from .anova import anova

__all__ = ["art_anova", "art_aligned"]


def _effects(factors):
    return [c for r in range(1, len(factors) + 1) for c in combinations(factors, r)]


def art_aligned(data: pd.DataFrame, response: str, factors: Sequence[str]) -> pd.DataFrame:
    """The aligned responses of every effect (ARTool's ``m$aligned``).

    Returns a DataFrame on ``data``'s index with one column per effect
    (``"A"``, ``"A:B"``, ...): residual of the full factorial cell means + the effect's estimate
    by inclusion-exclusion of marginal means (Wobbrock et al. 2011, step 2).
    Each column sums to 0.
    """
    data = v.frame(data)
    factors = v.names(factors, "factors")
    v.columns(data, factors, "factors")
    v.no_missing(data, factors, "factors")
    y = v.response(data, response)
    frame = data[factors].copy()
    frame["_y"] = y
    cell = frame.groupby(factors, observed=True)["_y"].transform("mean").to_numpy()
    grand = y.mean()
    residual = y - cell
    out = pd.DataFrame(index=data.index)
    for eff in _effects(factors):
        est = np.zeros(len(y))
        for r in range(len(eff) + 1):
            for sub in combinations(eff, r):
                sign = (-1) ** (len(eff) - r)
                marg = (frame.groupby(list(sub), observed=True)["_y"].transform("mean")
                        .to_numpy() if sub else np.full(len(y), grand))
                est += sign * marg
        out[":".join(eff)] = residual + est
    return out


def art_anova(data: pd.DataFrame, response: str, factors: Sequence[str]) -> pd.DataFrame:
    """ART ANOVA: one row per effect, each from the ANOVA of its own aligned ranks.

    Returns columns ``term``, ``df``, ``df_error``, ``F``, ``p`` and
    ``partial_eta_sq`` (on the ranks); ``attrs["aligned_check"]``: the largest
    |F| of the other effects in the ANOVA of each aligned (unranked)
    response, which must be ~0 for ART to be appropriate (Wobbrock et al.
    2011, section "Verifying correctness"; ARTool's ``summary(m)``).
    """
    factors = v.names(factors, "factors")
    aligned = art_aligned(data, response, factors)
    design = data[factors].rename(columns={f: f"f{i}" for i, f in enumerate(factors)})
    safe = list(design.columns)
    counts = design.groupby(safe, observed=True).size()
    n_cells = int(np.prod([design[f].nunique() for f in safe]))
    if len(counts) < n_cells:
        raise ConfigError(f"ART needs every combination of {factors!r} observed: "
                          f"{len(counts)} of {n_cells} cells have data")
    rows, check = [], 0.0
    for eff in _effects(factors):
        term = ":".join(eff)
        name = ":".join(safe[factors.index(f)] for f in eff)
        t = anova(design.assign(_r=sps.rankdata(aligned[term])), "_r", safe,
                  typ=3).set_index("term")
        df_e = float(t.loc["error", "df"])
        rows.append({"term": term, "df": float(t.loc[name, "df"]), "df_error": df_e,
                     "F": float(t.loc[name, "F"]), "p": float(t.loc[name, "p"]),
                     "partial_eta_sq": float(t.loc[name, "partial_eta_sq"])})
        raw = anova(design.assign(_a=aligned[term].to_numpy()), "_a", safe, typ=3)
        others = raw[(raw["term"] != name) & (raw["term"] != "error")]["F"].abs()
        check = max(check, float(others.max()) if len(others) else 0.0)
    out = pd.DataFrame(rows, columns=["term", "df", "df_error", "F", "p", "partial_eta_sq"])
    out.attrs.update({"response": response, "factors": factors, "aligned_check": check})
    return out
