"""Residual diagnostics of a 2^k·r factorial model: check assumptions before inference.

docs/design.md asks that the output say when the assumptions fail: the residuals
are tested with Shapiro-Wilk, and when normality is rejected the same
analysis on log(response) is computed and offered (multiplicative effects and
variance growing with the mean, common for throughput and latency, often
become additive and homoscedastic on the log scale).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import validate as v
from .factorial import factorial_effects, factorial_residuals
from .inference import shapiro_row

__all__ = ["Diagnostics", "factorial_diagnostics"]


@dataclass(frozen=True, eq=False)
class Diagnostics:
    """What :func:`factorial_diagnostics` found.

    * ``table`` -- one row per model tried: ``model`` ("response" or
      "log(response)"), ``n``, ``W``, ``p``, ``normal``, ``note``.
    * ``residuals`` -- the data's factor and response columns plus ``fitted``
      and ``residual`` (feed it to ``labkit.report.plots.qq``).
    * ``normal`` -- True/False, or None when the residuals cannot be tested.
    * ``message`` -- one paragraph to print in a notebook.
    * ``log_effects`` / ``log_residuals`` -- the factorial analysis of
      log(response), computed when normality is rejected and y > 0; else None.
    """

    table: pd.DataFrame
    residuals: pd.DataFrame = field(repr=False)
    normal: bool | None
    message: str
    log_effects: pd.DataFrame | None = field(default=None, repr=False)
    log_residuals: pd.DataFrame | None = field(default=None, repr=False)

    def __str__(self) -> str:
        return self.message


def _test(res: pd.DataFrame, alpha: float, saturated: bool) -> dict:
    if saturated:
        return {
            "n": len(res),
            "W": np.nan,
            "p": np.nan,
            "normal": pd.NA,
            "note": "saturated model (unreplicated design): residuals are all zero; pass "
            "terms=lenth(effects).active for a reduced model",
        }
    return shapiro_row(res["residual"].to_numpy(float), alpha)


def factorial_diagnostics(
    data: pd.DataFrame,
    *,
    factors: Sequence[str],
    response: str,
    alpha: float = 0.05,
    terms: Sequence[str] | None = None,
    levels: v.Levels = None,
) -> Diagnostics:
    """Shapiro-Wilk on the residuals of the factorial model; the log model when it fails.

    ``terms`` as in :func:`factorial_residuals` (None: full model, which is
    saturated for unreplicated designs). Normality is rejected when
    p <= alpha. Returns a :class:`Diagnostics`.
    """
    alpha = v.alpha(alpha)
    res = factorial_residuals(data, factors=factors, response=response, terms=terms, levels=levels)
    r = int(res.groupby(list(factors), observed=True).size().iloc[0])
    saturated = terms is None and r == 1
    first = {"model": "response"} | _test(res, alpha, saturated)
    rows = [first]
    normal = None if first["normal"] is pd.NA else bool(first["normal"])
    log_effects = log_res = None
    if normal is None:
        message = f"Residuals of {response!r} cannot be tested: {first['note']}."
    elif normal:
        message = (
            f"Residuals of {response!r} look normal (Shapiro-Wilk W = {first['W']:.4f}, "
            f"p = {first['p']:.4g} > {alpha}): t-based inference is reasonable."
        )
    else:
        message = (
            f"WARNING: residuals of {response!r} are not normal (Shapiro-Wilk "
            f"W = {first['W']:.4f}, p = {first['p']:.4g} <= {alpha}); confidence "
            f"intervals and p-values of the effects are unreliable."
        )
        y = data[response].to_numpy(float)
        if np.all(y > 0):
            logged = data.assign(**{response: np.log(y)})
            log_effects = factorial_effects(
                logged, factors=factors, response=response, alpha=alpha, levels=levels
            )
            log_res = factorial_residuals(
                logged, factors=factors, response=response, terms=terms, levels=levels
            )
            second = {"model": f"log({response})"} | _test(log_res, alpha, saturated)
            rows.append(second)
            if second["normal"] is True:
                message += (
                    f" On log({response}) they look normal (W = {second['W']:.4f}, "
                    f"p = {second['p']:.4g}): consider the log model "
                    f"(Diagnostics.log_effects)."
                )
            else:
                message += (
                    f" log({response}) does not help (W = {second['W']:.4f}, "
                    f"p = {second['p']:.4g}); inspect the Q-Q plot, look for outliers, "
                    f"or use more replicates."
                )
        else:
            message += f" log({response}) is not possible: the response has values <= 0."
    table = pd.DataFrame(rows, columns=["model", "n", "W", "p", "normal", "note"])
    return Diagnostics(table, res, normal, message, log_effects, log_res)
