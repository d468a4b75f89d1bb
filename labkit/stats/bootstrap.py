"""Confidence intervals that respect the unit of replication: whole runs, and ratios.

* :func:`bootstrap_ci` resamples whole runs (all the rows of a ``run_id``
  together: instances, repeated samples within a run), never the rows
  within a run, which are not independent replicates.
* :func:`ratio_ci` gives the interval of a ratio of means (the overhead of
  platform A over B) by Fieller's theorem or by bootstrap.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["FewRunsWarning", "bootstrap_ci", "ratio_ci"]

MIN_RUNS = 10
MAX_BOOT = 100_000


class FewRunsWarning(UserWarning):
    """Fewer runs than a bootstrap interval needs to be trusted (about 10 per group)."""


def _n_boot(n_boot) -> int:
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or not 100 <= n_boot <= MAX_BOOT:
        raise ConfigError(f"n_boot must be an integer between 100 and {MAX_BOOT}, got {n_boot!r}")
    return n_boot


def _percentile(boot: np.ndarray, alpha: float) -> tuple[float, float]:
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def _resampled_means(rng, sums: np.ndarray, counts: np.ndarray, n_boot: int) -> np.ndarray:
    """``n_boot`` means of k runs drawn with replacement from the k runs (row sums, row counts)."""
    k = len(sums)
    idx = rng.integers(0, k, size=(n_boot, k), dtype=np.int32)
    if counts.min() == counts.max():  # every run has as many rows: one gather
        return np.take(sums, idx).sum(axis=1) / (counts[0] * k)
    both = np.take(sums + 1j * counts, idx).sum(axis=1)  # sums and counts in one gather
    return both.real / both.imag


def bootstrap_ci(
    data: pd.DataFrame,
    *,
    response: str,
    by: v.Columns = None,
    run: str = "run_id",
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: v.Seed = None,
    min_runs: int = MIN_RUNS,
) -> pd.DataFrame:
    """Percentile bootstrap CI of the mean of ``response`` per configuration, resampling runs.

    Each bootstrap replicate draws, per configuration of ``by``, as many runs
    (distinct values of column ``run``) as it has, with replacement, and
    takes the mean of all their rows. A configuration with fewer than
    ``min_runs`` runs gets a :class:`FewRunsWarning` and a note: with so few
    runs the bootstrap distribution is too coarse and the interval too narrow.

    Returns one row per configuration: the ``by`` columns, ``n_runs``,
    ``n_rows``, ``mean``, ``ci_low``, ``ci_high``, ``note``.
    """
    alpha = v.alpha(alpha)
    n_boot = _n_boot(n_boot)
    data = v.frame(data)
    by = v.names(by, "by", allow_empty=True)
    v.columns(data, by + [run], "by/run")
    v.response(data, response)
    rng = np.random.default_rng(seed)
    groups = data.groupby(by, sort=True, observed=True, dropna=False) if by else [((), data)]
    rows = []
    for key, grp in groups:
        key = key if isinstance(key, tuple) else (key,)
        codes, _ = pd.factorize(grp[run], sort=False)  # rows without a run id: -1, left out
        has_run = codes >= 0
        codes, y = codes[has_run], grp[response].to_numpy(float)[has_run]
        sums, counts = np.bincount(codes, weights=y), np.bincount(codes).astype(float)
        k = len(sums)
        row = dict(zip(by, key)) | {
            "n_runs": k,
            "n_rows": int(counts.sum()),
            "mean": float(grp[response].mean()),
            "note": "",
        }
        if k < 2:
            row |= {"ci_low": np.nan, "ci_high": np.nan, "note": f"{k} run: no interval without replication"}
        else:
            boot = _resampled_means(rng, sums, counts, n_boot)
            row["ci_low"], row["ci_high"] = _percentile(boot, alpha)
            if k < min_runs:
                row["note"] = (
                    f"only {k} runs (fewer than {min_runs}): the bootstrap interval "
                    f"is too narrow; add runs or use a t interval"
                )
        if row["note"]:
            label = ", ".join(f"{b}={x!r}" for b, x in zip(by, key)) or "all data"
            warnings.warn(f"bootstrap_ci({label}): {row['note']}", FewRunsWarning, stacklevel=2)
        rows.append(row)
    return pd.DataFrame(rows, columns=by + ["n_runs", "n_rows", "mean", "ci_low", "ci_high", "note"])


def ratio_ci(
    a: v.Sample,
    b: v.Sample,
    *,
    method: str = "fieller",
    alpha: float = 0.05,
    n_boot: int = 4000,
    seed: v.Seed = None,
) -> pd.DataFrame:
    """CI of mean(a)/mean(b), ``a`` and ``b`` independent samples of runs (one value per run).

    ``method="fieller"``: Fieller's theorem (Fieller 1954) for independent
    means, t quantile on Welch-Satterthwaite degrees of freedom; with
    g = t²·var(mean b)/mean(b)² >= 1 the denominator is not distinguishable
    from 0, the interval is unbounded and NaN is returned with a note.
    ``method="bootstrap"``: percentile interval of the ratio with runs of a
    and b resampled independently.

    With positive data (throughputs, times) the bounds are never negative: a
    Fieller lower bound below 0 is reported as 0 with a note.

    Returns one row: ``method``, ``n_a``, ``n_b``, ``mean_a``, ``mean_b``,
    ``ratio``, ``ci_low``, ``ci_high``, ``overhead_pct`` (100·(ratio - 1)) and
    ``note``.
    """
    alpha = v.alpha(alpha)
    if method not in ("fieller", "bootstrap"):
        raise ConfigError(f"method must be 'fieller' or 'bootstrap', got {method!r}")
    x, y = v.sample(a, "a"), v.sample(b, "b")
    if len(x) < 2 or len(y) < 2:
        raise ConfigError(f"ratio_ci needs at least 2 runs in each sample, got {len(x)} and {len(y)}")
    ma, mb = math.fsum(x) / len(x), math.fsum(y) / len(y)
    if mb == 0:
        raise ConfigError("mean of b is 0: the ratio is undefined")
    positive = bool(np.all(x > 0) and np.all(y > 0))
    ratio = ma / mb
    note = ""
    if method == "fieller":
        va, vb = np.var(x, ddof=1) / len(x), np.var(y, ddof=1) / len(y)
        if va + vb == 0:
            lo = hi = ratio
        else:
            df = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1))
            t = float(sps.t.ppf(1 - alpha / 2, df))
            g = t * t * vb / (mb * mb)
            if g >= 1:
                lo = hi = np.nan
                note = (
                    f"g = {g:.3g} >= 1: mean(b) is not distinguishable from 0, the Fieller "
                    f"interval is unbounded; add runs"
                )
            else:
                half = t / abs(mb) * math.sqrt(va * (1 - g) + ratio * ratio * vb)
                lo, hi = (ratio - half) / (1 - g), (ratio + half) / (1 - g)
    else:
        n_boot = _n_boot(n_boot)
        rng = np.random.default_rng(seed)
        bx = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
        by = y[rng.integers(0, len(y), size=(n_boot, len(y)))].mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            lo, hi = _percentile(bx / by, alpha)
        if min(len(x), len(y)) < MIN_RUNS:
            note = f"fewer than {MIN_RUNS} runs in a sample: the bootstrap interval is too narrow"
            warnings.warn(f"ratio_ci: {note}", FewRunsWarning, stacklevel=2)
    if positive and np.isfinite(lo) and lo < 0:
        lo = 0.0
        note = (
            note
            or "the lower bound is clipped at 0 (positive data; the mean of a is not distinguishable from 0)"
        )
    return pd.DataFrame(
        [
            {
                "method": method,
                "n_a": len(x),
                "n_b": len(y),
                "mean_a": ma,
                "mean_b": mb,
                "ratio": ratio,
                "ci_low": lo,
                "ci_high": hi,
                "overhead_pct": 100 * (ratio - 1),
                "note": note,
            }
        ]
    )
