"""Seeded, vectorised simulations of labkit's statistical rules (docs/statistics/decision-rules.md).

* :func:`adaptive_stop` -- the stopping rule of adaptive replication
  (:mod:`labkit.run.adaptive`, one configuration, ``balanced: false``) applied to many simulated
  configurations at once: after ``min`` runs, while the t interval of the mean is wider than
  ``target_ci`` (relative to the mean), add ``min(batch, needed - n)`` runs (``needed`` from
  :func:`labkit.stats.samplesize.n_for_halfwidth`), never beyond ``max``.
* :func:`adaptive_coverage` -- how often the final t interval (fixed-n formula) covers the true
  mean under that optional stopping, and of Stein's form (:func:`labkit.stats.stein_ci`).
* :func:`false_alarm_rate` -- the share of stationary series in which
  :func:`labkit.stats.change_points` reports any change.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from .drift import change_points
from .samplesize import n_for_halfwidth

__all__ = ["adaptive_coverage", "adaptive_stop", "false_alarm_rate"]


def adaptive_stop(
    values: np.ndarray,
    *,
    target_ci: float,
    min_runs: int,
    max_runs: int,
    batch: int = 1,
    confidence: float = 0.95,
    relative: bool = True,
) -> np.ndarray:
    """The number of runs at which adaptive replication stops, for each row of ``values``
    (``reps x max_runs``: the runs of one configuration in their order)."""
    values = np.asarray(values, dtype=float)
    reps = values.shape[0]
    n = np.full(reps, min_runs)
    active = np.ones(reps, bool)
    cols = np.arange(values.shape[1])
    while active.any():
        mask = cols[None, :] < n[:, None]
        cnt = n.astype(float)
        mean = np.where(mask, values, 0).sum(1) / cnt
        sd = np.sqrt(np.where(mask, (values - mean[:, None]) ** 2, 0).sum(1) / (cnt - 1))
        goal = target_ci * np.abs(mean) if relative else np.full(reps, target_ci)
        needed = n_for_halfwidth(sd, goal, confidence=confidence)
        more = active & (n < max_runs) & np.isfinite(needed) & (needed > n)
        extra = np.minimum(np.minimum(batch, np.where(more, needed - n, 0)), max_runs - n)
        n = np.where(more, n + extra.astype(int), n)
        active = more
    return n


def adaptive_coverage(
    cv: float,
    *,
    target_ci: float,
    min_runs: int,
    max_runs: int,
    batch: int = 1,
    confidence: float = 0.95,
    reps: int = 20000,
    seed: int = 0,
) -> dict:
    """Coverage of the final ``confidence`` t interval of the mean after adaptive stopping, for
    normal runs of mean 1 and coefficient of variation ``cv``. Returns ``coverage``, its Monte
    Carlo standard error ``mc_se``, ``stein_coverage`` (:func:`labkit.stats.stein_ci`), ``mean_runs`` and ``at_cap`` (share stopped by ``max``)."""
    rng = np.random.default_rng(seed)
    x = 1.0 + cv * rng.standard_normal((reps, max_runs))
    n = adaptive_stop(
        x, target_ci=target_ci, min_runs=min_runs, max_runs=max_runs, batch=batch, confidence=confidence
    )
    mask = np.arange(max_runs)[None, :] < n[:, None]
    mean = np.where(mask, x, 0).sum(1) / n
    sd = np.sqrt(np.where(mask, (x - mean[:, None]) ** 2, 0).sum(1) / (n - 1))
    half = sps.t.ppf(0.5 + confidence / 2, n - 1) * sd / np.sqrt(n)
    cov = float(np.mean(np.abs(mean - 1.0) <= half))
    # Stein's form (labkit.stats.stein_ci): the pilot's sd and t(min - 1)
    stein = sps.t.ppf(0.5 + confidence / 2, min_runs - 1) * x[:, :min_runs].std(1, ddof=1) / np.sqrt(n)
    return {
        "coverage": cov,
        "stein_coverage": float(np.mean(np.abs(mean - 1.0) <= stein)),
        "mc_se": float(np.sqrt(cov * (1 - cov) / reps)),
        "mean_runs": float(n.mean()),
        "at_cap": float(np.mean(n == max_runs)),
    }


def false_alarm_rate(
    n: int, *, dist: str = "normal", reps: int = 4000, seed: int = 0, alpha: float = 0.05
) -> float:
    """Share of ``reps`` stationary series of length ``n`` (``"normal"`` or ``"t3"``, Student's t
    with 3 df) in which :func:`labkit.stats.change_points` finds any change."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((reps, n)) if dist == "normal" else rng.standard_t(3, (reps, n))
    return float(np.mean([bool(change_points(row, alpha=alpha)) for row in x]))


def table(rows: list[dict]) -> pd.DataFrame:
    """The rows as a DataFrame (for printing)."""
    return pd.DataFrame(rows)
