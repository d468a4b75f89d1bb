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
from numpy.typing import ArrayLike

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


def fmean(x: ArrayLike) -> float:
    """Mean by compensated summation."""
    x = np.asarray(x, dtype=float)
    return math.fsum(x) / len(x)


def centered(y: np.ndarray) -> np.ndarray:
    """``y`` minus its mean, computed as accurately as float64 inputs allow."""
    s, _ = shift(y)
    return s - fmean(s)


def ss(x: ArrayLike) -> float:
    """Σx², compensated."""
    x = np.asarray(x, dtype=float)
    return math.fsum(x * x)


def group_ss(y: np.ndarray, codes: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    # a group is constant when every value equals one of its values (any one: O(n), no sort)
    some = np.zeros(n_groups)
    some[codes] = y
    const = (counts > 0) & (np.bincount(codes, weights=y != some[codes], minlength=n_groups) == 0)
    means[const] = some[const]
    within[const] = 0.0
    full = counts > 0
    means[~full] = np.nan
    within[~full] = 0.0
    return counts, means, within


def group_order(codes: np.ndarray, n_groups: int) -> np.ndarray:
    """The stable order that sorts ``codes`` (0..n_groups-1): a radix sort for few groups."""
    small = np.uint8 if n_groups <= 2**8 else np.uint16 if n_groups <= 2**16 else np.int64
    return np.argsort(codes.astype(small, copy=False), kind="stable")


def ranks(a: np.ndarray, tol: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``(ranks, tie sizes)``: average ranks 1..n of ``a`` (as ``scipy.stats.rankdata``) and
    the size of every group of tied values, values within ``tol`` of their neighbour tied."""
    a = np.asarray(a, dtype=float)
    order = np.argsort(a, kind="stable")
    start = np.concatenate([[True], np.diff(a[order]) > tol])
    first = np.flatnonzero(start)
    size = np.diff(np.append(first, len(a)))
    out = np.empty(len(a))
    out[order] = (first + (size + 1) / 2)[np.cumsum(start) - 1]
    return out, size
