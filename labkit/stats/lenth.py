"""Lenth's (1989) method: significance of effects in unreplicated 2^k designs.

R. V. Lenth, "Quick and easy analysis of unreplicated factorials",
Technometrics 31(4), 1989. Same formulas as R's ``BsMD::LenthPlot``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["LenthResult", "lenth"]


@dataclass(frozen=True, eq=False)
class LenthResult:
    """Lenth's pseudo standard error and margins of error for m contrasts.

    Attributes: ``alpha``, ``m`` (number of contrasts), ``s0`` (1.5·median|c|),
    ``pse``, ``d`` (= m/3 degrees of freedom), ``me`` (margin of error),
    ``gamma`` and ``sme`` (simultaneous margin of error), and ``table``: one
    row per contrast with columns ``term, effect, abs_effect, active``
    (|c| > ME) and ``sme_active`` (|c| > SME), in the input order; ``note``:
    "" or why PSE, ME and SME are NaN (and no effect is active).
    """

    alpha: float
    m: int
    s0: float
    pse: float
    d: float
    me: float
    gamma: float
    sme: float
    table: pd.DataFrame = field(repr=False)
    note: str = ""

    @property
    def active(self) -> list[str]:
        """Terms whose |effect| exceeds the margin of error ME."""
        return self.table.loc[self.table["active"], "term"].tolist()

    @property
    def sme_active(self) -> list[str]:
        """Terms whose |effect| exceeds the simultaneous margin of error SME."""
        return self.table.loc[self.table["sme_active"], "term"].tolist()


def _contrasts(effects) -> tuple[list[str], np.ndarray]:
    if isinstance(effects, pd.DataFrame):
        v.columns(effects, ["term", "effect"], "effects")
        rows = effects[~effects["term"].isin(["I", "error"])]
        return rows["term"].astype(str).tolist(), rows["effect"].to_numpy(dtype=float)
    if isinstance(effects, pd.Series):
        return [str(i) for i in effects.index], effects.to_numpy(dtype=float)
    if isinstance(effects, Mapping):
        return [str(t) for t in effects], np.asarray(list(effects.values()), dtype=float)
    try:
        c = np.asarray(effects, dtype=float).ravel()
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"effects must be numbers, a Series/Mapping term -> effect or a "
            f"factorial_effects() table; got {type(effects).__name__}"
        ) from e
    return [f"c{i + 1}" for i in range(len(c))], c


def lenth(
    effects: pd.DataFrame | pd.Series | Mapping[str, float] | v.Sample, *, alpha: float = 0.05
) -> LenthResult:
    """Lenth's PSE, ME and SME for the contrasts (effects) of an unreplicated design.

    ``effects`` is a ``factorial_effects()`` table (its ``effect`` column,
    without the ``I`` row), a Series or mapping ``term -> effect``, or a plain
    sequence (terms are then named ``c1, c2, ...``). The margins are on the
    scale of what is given (effects, or q if q is given).

    * s0 = 1.5·median|c|
    * PSE = 1.5·median{|c| : |c| < 2.5·s0}
    * d = m/3, ME = t(1 - alpha/2, d)·PSE
    * gamma = (1 + (1 - alpha)^(1/m))/2, SME = t(gamma, d)·PSE

    When more than half of the effects are exactly zero, s0 = 0 leaves no
    contrast to estimate PSE from: PSE, ME and SME are NaN, no effect is
    active and ``note`` says why (R's ``BsMD::LenthPlot`` gives NA there).
    Likewise when the trimmed median is 0 (PSE = 0 would call any non-zero
    effect active).
    """
    alpha = v.alpha(alpha)
    terms, c = _contrasts(effects)
    if len(c) < 2:
        raise ConfigError(
            f"lenth() needs at least 2 effects (an unreplicated 2^k design with k >= 2), got {len(c)}"
        )
    if not np.all(np.isfinite(c)):
        raise ConfigError("effects contain missing or infinite values")
    a = np.abs(c)
    m = len(c)
    s0 = 1.5 * float(np.median(a))
    trimmed = a[a < 2.5 * s0]
    pse = 1.5 * float(np.median(trimmed)) if len(trimmed) else np.nan
    note = ""
    if not pse > 0:
        pse = np.nan
        note = (
            f"{int(np.sum(a == 0))} of the {m} effects are exactly zero: Lenth's pseudo "
            f"standard error is undefined (no scale to judge the others against)"
        )
    d = m / 3
    me = float(sps.t.ppf(1 - alpha / 2, d)) * pse
    gamma = (1 + (1 - alpha) ** (1 / m)) / 2
    sme = float(sps.t.ppf(gamma, d)) * pse
    table = pd.DataFrame(
        {"term": terms, "effect": c, "abs_effect": a, "active": a > me, "sme_active": a > sme}
    )
    return LenthResult(alpha, m, s0, pse, d, me, gamma, sme, table, note)
