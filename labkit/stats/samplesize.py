"""How many runs: to reach a target confidence-interval half-width, or to detect an effect.

* :func:`n_for_halfwidth` -- the smallest n with ``t(1 - a/2, n - 1)·s/sqrt(n) <= h``
  (the t interval of a mean; s from a pilot, taken as the true standard deviation).
* :func:`sample_size` -- per configuration of a pilot (or the first r replicates):
  the current half-width and the runs needed for a target half-width, absolute or
  relative to the mean.
* :func:`n_for_power` -- runs per group for a two-sample t test to detect a difference
  ``delta`` with power ``power`` (statsmodels ``TTestIndPower.solve_power``).
* :func:`detectable_effect` -- the other way round: the smallest difference ``n`` runs per group
  detect with that power (the minimum detectable effect of a design, before it runs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["detectable_effect", "n_for_halfwidth", "n_for_power", "sample_size", "stein_ci"]

MAX_N = 1_000_000


def _confidence(confidence) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise ConfigError(f"confidence must be a number in (0, 1), got {confidence!r}")
    return float(confidence)


def n_for_halfwidth(sd: v.Sample, halfwidth: v.Sample, *, confidence: float = 0.95) -> np.ndarray:
    """Smallest n >= 2 with ``t(1 - a/2, n-1)·sd/sqrt(n) <= halfwidth`` (elementwise).

    ``sd`` and ``halfwidth`` broadcast; sd = 0 needs 2 runs; a non-finite sd or a
    half-width <= 0 gives NaN. Capped at 1,000,000 (returned as such).
    """
    c = _confidence(confidence)
    sd, h = np.broadcast_arrays(np.asarray(sd, dtype=float), np.asarray(halfwidth, dtype=float))
    out = np.full(sd.shape, np.nan)
    ok = np.isfinite(sd) & np.isfinite(h) & (h > 0) & (sd >= 0)
    q = 0.5 + c / 2
    z = sps.norm.ppf(q)
    sd_, h_ = np.where(ok, sd, 1.0), np.where(ok, h, 1.0)

    def reached(n):
        return sps.t.ppf(q, n - 1) * sd_ / np.sqrt(n) <= h_

    # f(n) = t(n-1)·sd/sqrt(n) decreases in n: lo (the z bound, never enough... or just enough)
    # and hi (the t bound at lo, always enough) bracket the answer; bisect all at once
    lo = np.clip(np.ceil((z * sd_ / h_) ** 2), 2, MAX_N)
    hi = np.clip(np.ceil((sps.t.ppf(q, lo - 1) * sd_ / h_) ** 2), lo, MAX_N)
    done = reached(lo)
    hi = np.where(done, lo, hi)
    lo = np.where(done, lo, lo + 1)  # lo is short: the answer is in (lo, hi]
    for _ in range(64):
        if (lo >= hi).all():
            break
        mid = np.floor((lo + hi) / 2)
        ok_mid = reached(mid)
        hi = np.where(ok_mid & (lo < hi), mid, hi)
        lo = np.where(~ok_mid & (lo < hi), mid + 1, lo)
    n = hi
    out[ok] = n[ok]
    return out


def sample_size(
    data: pd.DataFrame,
    *,
    response: str,
    by: Sequence[str] | str,
    target: float,
    relative: bool = True,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Runs per configuration needed for a CI half-width of ``target``.

    ``data``: one row per run (long format); ``by``: the configuration columns.
    ``relative=True``: ``target`` is a fraction of the configuration's mean (0.02 = 2 %).
    Returns one row per configuration: the ``by`` columns, ``n`` (runs so far),
    ``mean``, ``sd``, ``half_width`` (t interval now), ``rel_half_width``
    (half_width/|mean|), ``n_needed`` (smallest total n reaching the target with this
    sd; NaN when the sd is undefined, i.e. n < 2) and ``met`` (target reached now).
    """
    data = v.frame(data)
    by = v.names(by, "by")
    v.columns(data, by, "by")
    v.response(data, response)
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not target > 0:
        raise ConfigError(f"target must be a positive number, got {target!r}")
    c = _confidence(confidence)
    g = data.groupby(by, sort=True, observed=True)[response]
    out = g.agg(n="count", mean="mean", sd="std").reset_index()
    n = out["n"].to_numpy(dtype=float)
    sd = out["sd"].to_numpy(dtype=float)
    mean = out["mean"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(n >= 2, sps.t.ppf(0.5 + c / 2, np.maximum(n - 1, 1)), np.nan)
        hw = t * sd / np.sqrt(n)
        rel = hw / np.abs(mean)
    goal = target * np.abs(mean) if relative else np.full(len(out), float(target))
    out["half_width"] = hw
    out["rel_half_width"] = rel
    out["n_needed"] = n_for_halfwidth(sd, goal, confidence=c)
    out["met"] = (rel <= target) if relative else (hw <= target)
    out.attrs.update({"target": float(target), "relative": relative, "confidence": c})
    return out


def n_for_power(
    delta: float, sd: float, *, alpha: float = 0.05, power: float = 0.8, alternative: str = "two-sided"
) -> int:
    """Runs per group for a two-sample t test to detect a mean difference ``delta`` with
    standard deviation ``sd`` (equal groups), at level ``alpha`` with ``power``.

    statsmodels ``TTestIndPower().solve_power(effect_size=delta/sd, ...)``, rounded up.
    """
    from statsmodels.stats.power import TTestIndPower

    alpha = v.alpha(alpha)
    for name, x in (("delta", delta), ("sd", sd)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not np.isfinite(x) or x <= 0:
            raise ConfigError(f"{name} must be a positive number, got {x!r}")
    if isinstance(power, bool) or not isinstance(power, (int, float)) or not alpha < power < 1:
        raise ConfigError(f"power must be in (alpha, 1), got {power!r}")
    if alternative not in ("two-sided", "larger", "smaller"):
        raise ConfigError(f"alternative must be two-sided, larger or smaller, got {alternative!r}")
    n = TTestIndPower().solve_power(effect_size=delta / sd, alpha=alpha, power=power, alternative=alternative)
    return int(np.ceil(float(np.squeeze(n)) - 1e-9))


def detectable_effect(
    sd: float,
    *,
    n: float,
    df: float | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: str = "two-sided",
) -> float:
    """The smallest difference between two group means of ``n`` values each that a t test at
    ``alpha`` detects with probability ``power`` (the minimum detectable effect), in the unit of
    ``sd``.

    ``df`` is the error degrees of freedom of the test (default ``2n - 2``, the two-sample test;
    a 2^k·r factorial's main effect compares two halves of ``N = 2^k r`` runs with
    ``df = 2^k (r - 1)``: ``n = N/2``). Solves statsmodels'
    ``TTestIndPower().power(d, nobs1=n, alpha=alpha, df=df) = power`` for the standardized
    difference ``d`` (noncentral t, noncentrality ``d sqrt(n/2)``) and returns ``d * sd``.
    ConfigError for a non-positive ``sd``, ``n`` < 2, ``df`` < 1 or ``power`` outside (alpha, 1).
    """
    from scipy.optimize import brentq
    from statsmodels.stats.power import TTestIndPower

    alpha = v.alpha(alpha)
    if isinstance(sd, bool) or not isinstance(sd, (int, float)) or not np.isfinite(sd) or sd <= 0:
        raise ConfigError(f"sd must be a positive number, got {sd!r}")
    if isinstance(n, bool) or not isinstance(n, (int, float, np.integer)) or not n >= 2:
        raise ConfigError(f"n (values per group) must be at least 2, got {n!r}")
    df = 2 * float(n) - 2 if df is None else df
    if isinstance(df, bool) or not isinstance(df, (int, float, np.integer)) or not df >= 1:
        raise ConfigError(f"df must be at least 1, got {df!r}")
    if isinstance(power, bool) or not isinstance(power, (int, float)) or not alpha < power < 1:
        raise ConfigError(f"power must be in (alpha, 1), got {power!r}")
    if alternative not in ("two-sided", "larger"):
        raise ConfigError(f"alternative must be two-sided or larger, got {alternative!r}")
    test = TTestIndPower()

    def gap(d: float) -> float:
        return (
            float(test.power(d, nobs1=float(n), alpha=alpha, df=float(df), alternative=alternative)) - power
        )

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2
        if hi > 1e6:
            raise ConfigError(f"no effect up to 1e6 sd is detected with power {power} from {n} values")
    return float(brentq(gap, 0.0, hi, xtol=1e-10)) * float(sd)


def stein_ci(values: v.Sample, *, pilot: int, confidence: float = 0.95) -> pd.DataFrame:
    """The interval of the mean after adaptive (sequential) replication, Stein's (1945,
    "A two-sample test for a linear hypothesis whose power is independent of the variance",
    Ann. Math. Stat. 16:243) two-stage form: the mean of all ``n`` values ± ``t(1 - a/2,
    pilot - 1)·s_pilot/sqrt(n)``, ``s_pilot`` the standard deviation of the first ``pilot``
    values (the design's ``min``), which the decision to stop did not pick.

    The fixed-n interval (``t(n - 1)·s/sqrt(n)``) after stopping "when the interval is narrow"
    covers less than nominal, because stopping favours runs whose ``s`` came out small:
    simulated with ``{target_ci: 0.02, min: 3, max: 20}`` it covers 90.4 % at a run CV of 3-4 %
    (docs/statistics/decision-rules.md); this one covers 95.1-95.5 % at every CV simulated there.

    Returns one row: ``n``, ``mean``, ``sd_pilot``, ``df`` (pilot - 1), ``half_width``,
    ``ci_low``, ``ci_high``. ConfigError for ``pilot`` < 2 or above the number of values, and
    the errors of a sample (missing or infinite values).
    """
    c = _confidence(confidence)
    x = v.sample(values, "values")
    if isinstance(pilot, bool) or not isinstance(pilot, (int, np.integer)) or not 2 <= pilot <= len(x):
        raise ConfigError(
            f"pilot must be a whole number from 2 to the number of values ({len(x)}): "
            f"the runs made before the first stopping decision, got {pilot!r}"
        )
    sd0 = float(np.std(x[:pilot], ddof=1))
    half = float(sps.t.ppf(0.5 + c / 2, pilot - 1)) * sd0 / np.sqrt(len(x))
    m = float(np.mean(x))
    return pd.DataFrame(
        [
            {
                "n": len(x),
                "mean": m,
                "sd_pilot": sd0,
                "df": int(pilot) - 1,
                "half_width": half,
                "ci_low": m - half,
                "ci_high": m + half,
            }
        ]
    )
