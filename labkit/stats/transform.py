"""Box-Cox transformation of a response, by profile likelihood of a factorial model.

Box & Cox (1964), "An analysis of transformations", JRSS B 26: the power λ
maximising the likelihood of the (cell-means or additive) ANOVA model of
y^(λ) = (y^λ - 1)/λ (log y at λ = 0), as R's ``MASS::boxcox(lm(...))``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import optimize
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["boxcox", "boxcox_transform"]

NAMED = {-1.0: "reciprocal", -0.5: "reciprocal square root", 0.0: "log", 0.5: "square root", 1.0: "none"}


def boxcox_transform(y: v.Sample, *, lam: float) -> np.ndarray:
    """(y^λ - 1)/λ, or log y when λ = 0; y must be positive."""
    y = v.sample(y, "y")
    if np.any(y <= 0):
        raise ConfigError("Box-Cox needs a positive response (every value > 0)")
    return np.log(y) if lam == 0 else (y**lam - 1) / lam


def _design(data: pd.DataFrame, factors: list[str], interactions: bool) -> np.ndarray:
    if not factors:
        return np.ones((len(data), 1))
    if interactions:
        cell = data.groupby(factors, observed=True, sort=False).ngroup().to_numpy()
        return np.eye(cell.max() + 1)[cell]
    parts = [np.ones((len(data), 1))]
    for f in factors:
        parts.append(pd.get_dummies(data[f], drop_first=True).to_numpy(float))
    return np.hstack(parts)


def boxcox(
    data: pd.DataFrame,
    *,
    response: str,
    factors: Sequence[str] | None = None,
    interactions: bool = True,
    alpha: float = 0.05,
    bounds: tuple[float, float] = (-3.0, 3.0),
) -> pd.DataFrame:
    """The maximum-likelihood Box-Cox λ for ``response`` under an ANOVA model of ``factors``.

    ``interactions=True``: the full cell-means model; ``False``: main effects
    only (Box & Cox's additive model). Returns one row: ``lambda``,
    ``ci_low``, ``ci_high`` (the 1 - alpha profile-likelihood interval:
    loglik >= max - χ²(1 - alpha, 1)/2), ``loglik``, ``suggested`` (the
    simplest named power inside the interval, preferring none, log,
    reciprocal, square root, reciprocal square root; else ``"lambda"``).
    """
    alpha = v.alpha(alpha)
    data = v.frame(data)
    factors = v.names(factors, "factors", allow_empty=True)
    v.columns(data, factors, "factors")
    y = v.response(data, response)
    if np.any(y <= 0):
        raise ConfigError(
            f"Box-Cox needs a positive response: column {response!r} has {int(np.sum(y <= 0))} value(s) <= 0"
        )
    if np.ptp(y) == 0:
        raise ConfigError(f"column {response!r} is constant: no transformation to estimate")
    x = _design(data, factors, interactions)
    n = len(y)
    if np.linalg.matrix_rank(x) >= n:
        raise ConfigError("the model leaves no residual degrees of freedom")
    logy = np.log(y)
    gm = np.exp(logy.mean())
    proj = np.linalg.pinv(x)

    def loglik(lam: float) -> float:
        z = gm * logy if abs(lam) < 1e-12 else (y**lam - 1) / (lam * gm ** (lam - 1))
        r = z - x @ (proj @ z)
        return -n / 2 * np.log(float(np.dot(r, r)) / n)

    grid = np.linspace(bounds[0], bounds[1], 121)
    values = np.array([loglik(g) for g in grid])
    i = int(np.argmax(values))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    best = optimize.minimize_scalar(
        lambda g: -loglik(g), bounds=(lo, hi), method="bounded", options={"xatol": 1e-8}
    )
    lam, top = float(best.x), -float(best.fun)
    cut = top - sps.chi2.ppf(1 - alpha, 1) / 2
    f = lambda g: loglik(g) - cut  # noqa: E731
    ci_low = optimize.brentq(f, bounds[0], lam) if f(bounds[0]) < 0 else np.nan
    ci_high = optimize.brentq(f, lam, bounds[1]) if f(bounds[1]) < 0 else np.nan
    inside = [
        p
        for p in (1.0, 0.0, -1.0, 0.5, -0.5)
        if (np.isnan(ci_low) or ci_low <= p) and (np.isnan(ci_high) or p <= ci_high)
    ]
    return pd.DataFrame(
        [
            {
                "lambda": lam,
                "ci_low": ci_low,
                "ci_high": ci_high,
                "loglik": top,
                "suggested": NAMED[inside[0]] if inside else "lambda",
            }
        ]
    )
