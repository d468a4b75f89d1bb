"""Accurate sums of squares: shift by a data value, then compensated (fsum) sums.

A response with a large constant part (1e12 + 0.x, NIST StRD SmLs07-09)
loses every digit when squared or summed naively. Subtracting one of the
data values first is exact for values within a factor of two of it
(Sterbenz), so the differences keep all the information the float64 inputs
hold; ``math.fsum`` then sums without accumulating rounding error.
"""
from __future__ import annotations

import math

import numpy as np

# A residual sum of squares below this fraction of SST is rounding noise of a
# fit (OLS), not variation in the data.
NOISE = 1e-12


def shift(y: np.ndarray) -> tuple[np.ndarray, float]:
    """``(y - c, c)`` with ``c`` the median element of ``y`` (a data value, so mostly exact)."""
    y = np.asarray(y, dtype=float)
    if not len(y):
        return y, 0.0
    c = float(np.partition(y, len(y) // 2)[len(y) // 2])
    return y - c, c


def fmean(x) -> float:
    """Mean by compensated summation."""
    x = np.asarray(x, dtype=float)
    return math.fsum(x) / len(x)


def centered(y: np.ndarray) -> np.ndarray:
    """``y`` minus its mean, computed as accurately as float64 inputs allow."""
    s, _ = shift(y)
    return s - fmean(s)


def ss(x) -> float:
    """Σx², compensated."""
    x = np.asarray(x, dtype=float)
    return math.fsum(x * x)


def group_ss(y: np.ndarray, codes: np.ndarray, n_groups: int):
    """Per-group counts, means and within-group sums of squares of (shifted) ``y``.

    ``codes[i]`` in ``0..n_groups-1`` is the group of ``y[i]``. Returns
    ``(counts, means, ss_within)``; a group whose values are all equal has
    a within SS of exactly 0 (never rounding noise). Vectorized two-pass
    algorithm: the means are refined once by the mean of the residuals (which
    removes the rounding of the first sums), then the squared residuals are
    summed; on shifted data this is as accurate as compensated summation
    (the NIST StRD tests check it).
    """
    counts = np.bincount(codes, minlength=n_groups)
    with np.errstate(divide="ignore", invalid="ignore"):
        means = np.bincount(codes, weights=y, minlength=n_groups) / counts
        means += np.bincount(codes, weights=y - means[codes], minlength=n_groups) / counts
    r = y - means[codes]
    within = np.bincount(codes, weights=r * r, minlength=n_groups)
    order = np.argsort(codes, kind="stable")
    ys = y[order]
    full = counts > 0
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])[full]
    lo = np.minimum.reduceat(ys, starts)
    hi = np.maximum.reduceat(ys, starts)
    const = np.zeros(n_groups, dtype=bool)
    const[full] = lo == hi
    means[const] = lo[const[full]]
    within[const] = 0.0
    means[~full] = np.nan
    within[~full] = 0.0
    return counts, means, within
