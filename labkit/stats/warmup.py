"""How much of a series' start is warm-up: MSER-5 truncation.

White, "An effective truncation heuristic for bias reduction in simulation output",
Simulation 69(6), 1997; White, Cobb & Spratt, "A comparison of five steady-state truncation
heuristics for simulation", WSC 2000 (MSER-5: the rule applied to batch means of 5). The
transient of a benchmark (JIT compilation, cold caches, CPU frequency ramping: Georges et al.,
OOPSLA 2007; Jain, *The Art of Computer Systems Performance Analysis*, ch. 25) biases the mean;
MSER cuts where the remaining observations' squared standard error of the mean is smallest,
trading the bias removed against the precision lost.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import ConfigError
from . import validate as v

__all__ = ["WarmupWarning", "mser", "warmup"]


class WarmupWarning(UserWarning):
    """MSER's minimum is at the end of the range searched: the series may not reach steady state."""


def mser(values: v.Sample, *, batch: int = 5) -> np.ndarray:
    """The MSER statistic for every truncation ``d`` = 0, 1, ..., k//2 batches.

    With ``Z_1..Z_k`` the means of ``k = n // batch`` consecutive batches (a last incomplete
    batch is left out) and ``Zbar_d`` the mean of ``Z_{d+1}..Z_k``:
    ``MSER(d) = sum_{j>d} (Z_j - Zbar_d)^2 / (k - d)^2`` (White 1997, on batch means).
    The search stops at half the batches, as White et al. do: the statistic is unstable when
    few batches remain. ConfigError for fewer than 4 batches or a ``batch`` below 1.
    """
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ConfigError(f"batch must be a whole number >= 1 (values per batch mean), got {batch!r}")
    x = v.sample(values, "values")
    k = len(x) // batch
    if k < 4:
        raise ConfigError(
            f"warm-up detection needs at least {4 * batch} values (4 batches of {batch}), got {len(x)}"
        )
    z = x[: k * batch].reshape(k, batch).mean(axis=1)
    # suffix sums of Z and Z^2 give every truncation's sum of squares in one pass
    s1 = np.cumsum(z[::-1])[::-1]
    s2 = np.cumsum((z * z)[::-1])[::-1]
    d = np.arange(k // 2 + 1)
    m = k - d
    ss = np.maximum(s2[d] - s1[d] ** 2 / m, 0.0)
    return ss / m.astype(float) ** 2


def warmup(values: v.Sample, *, batch: int = 5) -> int:
    """How many leading observations of ``values`` (in order) to discard: MSER-5 (``batch=5``).

    Returns ``batch·d*``, a multiple of ``batch``, where ``d*`` is the number of batches that
    minimises :func:`mser` (the first, on ties), searched over the first half of the series.
    When the minimum is at the end of that range the transient may last longer than the
    series: a :class:`WarmupWarning` says so and the value is still returned. A stationary
    series gives 0 or a few batches. ConfigError for fewer than ``4·batch`` values
    (20 for MSER-5) or non-finite values.
    """
    stat = mser(values, batch=batch)
    d = int(np.argmin(stat))
    if d == len(stat) - 1:
        warnings.warn(
            f"MSER-{batch}'s minimum is at the end of the range searched (half the series): "
            f"the warm-up may last longer than the series; run longer",
            WarmupWarning,
            stacklevel=2,
        )
    return batch * d
