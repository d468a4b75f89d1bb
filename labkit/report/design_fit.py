"""The test a campaign's design allows (:func:`fit_design`): Jain's allocation of variation for
a balanced two-level full factorial (blocked by host on a fleet), the level analysis when runs are
not independent units (:mod:`labkit.report.level_analysis`), else an n-way ANOVA; or no test, and
why."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..stats import validate as v
from ..stats.diagnostics import Diagnostics
from .level_analysis import LevelDesign
from .variation import variation_ci

__all__ = ["fit_design", "is_full_two_level"]


def is_full_two_level(runs: pd.DataFrame, factors: list) -> int:
    """r when ``runs`` is a balanced 2^k·r design over ``factors``, else 0."""
    if any(runs[f].nunique() != 2 for f in factors):
        return 0
    sizes = runs.groupby(factors, observed=True).size()
    return int(sizes.iloc[0]) if len(sizes) == 2 ** len(factors) and sizes.nunique() == 1 else 0


def fit_design(
    obs: pd.DataFrame,
    runs_table: pd.DataFrame,
    response: str,
    factors: list,
    plan: LevelDesign,
    *,
    levels: v.Levels,
    alpha: float,
    n_boot: int,
    extras: bool = True,
) -> tuple:
    """The analysis the data allow (:func:`analyze`): ``(kind, effects, fit, note, diagnostics,
    variation, why)``; ``why`` says why no test is possible (or None). Without ``extras`` the
    residual diagnostics and the bootstrap shares are skipped (the analysis without the suspect
    runs needs the verdicts only)."""
    from ..stats import anova, blocked_effects, factorial_diagnostics, factorial_effects
    from .level_analysis import level_analysis

    diag: Diagnostics | None = None
    variation: pd.DataFrame | None = None
    fit = None
    why: str | None = None
    note = ""
    r = is_full_two_level(runs_table, factors)
    if plan.random:
        kind, effects, fit, note = level_analysis(obs, response, factors, plan, levels=levels, alpha=alpha)
        if fit is not None and fit.unit is not None:
            # the error term's units: their means are a 2^k·r design when balanced, whose residuals
            # and bootstrap shares are those of the model's whole-unit stratum
            from ..stats import unit_means

            means = unit_means(obs, response=response, unit=fit.unit, keep=factors)
            if extras and is_full_two_level(means, factors) >= 2:
                diag = factorial_diagnostics(
                    means, factors=factors, response=response, alpha=alpha, levels=levels
                )
                variation = variation_ci(means, factors, response, levels=levels, alpha=alpha, n_boot=n_boot)
    elif r:
        kind = "factorial"
        if plan.blocks and r >= 2:
            table = blocked_effects(
                runs_table, factors=factors, response=response, block="host", alpha=alpha, levels=levels
            )
            block = table.loc[table.term == "block", "pct_variation"]
            effects = table[table.term != "block"].drop(columns="confounded").reset_index(drop=True)
            effects.attrs.update(table.attrs, block_pct=float(block.iloc[0]) if len(block) else None)
        else:
            effects = factorial_effects(
                runs_table, factors=factors, response=response, alpha=alpha, levels=levels
            )
        if r >= 2 and extras:
            diag = factorial_diagnostics(
                runs_table, factors=factors, response=response, alpha=alpha, levels=levels
            )
            variation = variation_ci(runs_table, factors, response, levels=levels, alpha=alpha, n_boot=n_boot)
        elif r < 2 and len(factors) < 2:
            why = (
                "one two-level factor without replications: no error estimate, and Lenth's "
                "method needs at least 2 effects"
            )
    else:
        kind = "anova"
        cells = runs_table.groupby(factors, observed=True).size()
        full = bool((cells >= 2).all())
        if not extras:  # the analysis without the suspect runs: no interaction over a cell they emptied
            full = full and len(cells) == int(np.prod([runs_table[f].nunique() for f in factors]))
        try:
            table = anova(
                runs_table, response=response, factors=factors, interactions=full and len(factors) > 1
            )
        except ConfigError as exc:  # no residual degrees of freedom: say so, report the rest
            kind, why = "none", str(exc)
            effects = pd.DataFrame(columns=["term", "effect", "pct_variation"])
        else:
            effects = table.assign(pct_variation=100 * table["eta_sq"], effect=np.nan)
        effects.attrs.update({} if why else table.attrs, response=response, alpha=alpha)
    effects.attrs.setdefault("response", response)
    return kind, effects, fit, note, diag, variation, why
