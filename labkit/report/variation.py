"""Bootstrap CIs of each term's share of variation in a balanced 2^k·r design (:func:`variation_ci`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..stats import validate as v
from ..stats.factorial import sign_table, yates_terms

__all__ = ["BOOT_CELLS", "variation_ci"]

#: resampled values held at once (each of three arrays of this many): about 32 MB each
BOOT_CELLS = 4_000_000


def variation_ci(
    data: pd.DataFrame,
    factors: Sequence[str],
    response: str,
    *,
    levels: v.Levels = None,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> pd.DataFrame:
    """Bootstrap percentile CIs of each term's share of variation in a balanced 2^k·r design.

    Runs are resampled with replacement within each configuration (so every
    bootstrap design stays a balanced 2^k·r), and Jain's allocation of variation
    (SS_term = 2^k·r·q², share = SS_term/SST) is recomputed each time, with the
    resampled error sum of squares corrected by r/(r-1) for the duplicates a
    resample holds. Returns one
    row per term (Yates order, "I" left out) and "error": ``term``, ``pct_low``,
    ``pct_high`` (percentiles alpha/2 and 1 - alpha/2 of ``n_boot`` resamples).
    Needs r >= 2.
    """
    alpha = v.alpha(alpha)
    factors = v.names(factors, "factors")
    v.columns(data, factors, "factors")
    y = v.response(data, response)
    if not isinstance(n_boot, int) or not 100 <= n_boot <= 100_000:
        raise ConfigError(f"n_boot must be an integer in [100, 100000], got {n_boot!r}")
    lmap = v.level_map(levels)
    k = len(factors)
    cell = np.zeros(len(data), dtype=np.int64)
    for j, f in enumerate(factors):
        low, high = v.two_levels(data[f], lmap.get(f), arg="levels")
        col = data[f].to_numpy()
        cell |= (col == high).astype(np.int64) << j
    counts = np.bincount(cell, minlength=2**k)
    r = int(counts[0])
    if r < 2 or not np.all(counts == r):
        raise ConfigError(
            f"variation_ci needs a balanced 2^k·r design with r >= 2; "
            f"runs per configuration: {sorted(set(counts.tolist()))}"
        )
    cube = y[np.argsort(cell, kind="stable")].reshape(2**k, r)  # (cells, r)
    rng = np.random.default_rng(seed)
    signs = sign_table(k).T.astype(float)
    ss_parts, sse_parts = [], []
    # resamples in chunks of at most BOOT_CELLS values: memory bounded whatever the number of runs
    # (all at once held three n_boot x runs arrays: 2.4 GB at 100,000 runs); the generator draws
    # the same indices in the same order either way
    step = max(1, BOOT_CELLS // len(y))
    for start in range(0, n_boot, step):
        b = min(step, n_boot - start)
        idx = rng.integers(0, r, size=(b, 2**k, r))
        boot = np.take_along_axis(np.broadcast_to(cube, (b, 2**k, r)), idx, axis=2)
        means = boot.mean(axis=2)  # (b, cells)
        q = means @ signs / 2**k  # (b, terms)
        ss_parts.append(2**k * r * q[:, 1:] ** 2)
        # a resample of r values keeps on average (r-1)/r of their sum of squares about the cell mean
        # (duplicates): undo that bias, or the error share's interval misses its own estimate (r = 2)
        sse_parts.append(((boot - means[:, :, None]) ** 2).sum(axis=2).sum(axis=1) * r / (r - 1))
    ss, sse = np.concatenate(ss_parts), np.concatenate(sse_parts)
    sst = ss.sum(axis=1) + sse  # balanced 2^k·r: SST = sum of SS_terms + SSE
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = 100 * np.column_stack([ss, sse]) / sst[:, None]
    lo, hi = np.nanpercentile(pct, [100 * alpha / 2, 100 * (1 - alpha / 2)], axis=0)
    terms = yates_terms(factors)[1:] + ["error"]
    out = pd.DataFrame({"term": terms, "pct_low": lo, "pct_high": hi})
    out.attrs.update({"n_boot": n_boot, "alpha": alpha, "seed": seed})
    return out
