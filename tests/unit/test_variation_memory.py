"""The bootstrap of the shares of variation in bounded memory (issue 45): at 100,000 runs it held
three arrays of n_boot x runs values at once (2.4 GB with the default 1,000 resamples). Resampled
in chunks of at most BOOT_CELLS values, the result is the same and the peak is bounded."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pandas as pd

from labkit.report import variation


def _design(runs_per_cell: int, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cells = [(a, b) for a in (0, 1) for b in (0, 1)]
    rows = [(a, b, 10 + 2 * a + b + rng.normal()) for a, b in cells for _ in range(runs_per_cell)]
    return pd.DataFrame(rows, columns=["a", "b", "y"])


def test_chunked_resamples_give_the_same_intervals(monkeypatch):
    data = _design(7)
    whole = variation.variation_ci(data, ["a", "b"], "y", n_boot=1000)
    monkeypatch.setattr(variation, "BOOT_CELLS", 37 * len(data) + 5)  # 37 resamples a chunk
    chunked = variation.variation_ci(data, ["a", "b"], "y", n_boot=1000)
    assert list(chunked.term) == ["a", "b", "a:b", "error"]
    np.testing.assert_allclose(chunked[["pct_low", "pct_high"]], whole[["pct_low", "pct_high"]], rtol=1e-12)


def test_peak_memory_is_bounded_by_the_chunk_not_by_the_runs():
    data = _design(5_000)  # 20,000 runs: all 1,000 resamples at once held 3 x 160 MB
    tracemalloc.start()
    try:
        variation.variation_ci(data, ["a", "b"], "y", n_boot=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * variation.BOOT_CELLS * 8 + 50e6, f"peak {peak / 1e6:.0f} MB"
    assert peak < 1000 * len(data) * 8  # less than one whole array
