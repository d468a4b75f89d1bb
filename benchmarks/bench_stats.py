"""Benchmark: labkit.stats.factorial_effects vs statsmodels OLS + anova_lm on a 2^10·5 design.

Prints both timings, the ratio and whether the sums of squares agree; makes
no timed assertion (the issue's target is >= 50x). Exits non-zero only if the
two disagree. Run: ``python benchmarks/bench_stats.py [--k 10] [--r 5] [--repeat 5]``.

statsmodels is given its best case: numeric -1/+1 columns, a formula with
every interaction, and ``anova_lm(typ=1)`` (sequential SS, one QR; for a
balanced 2^k design types 1, 2 and 3 agree).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from labkit.stats import factorial_effects  # noqa: E402


def make_design(k: int, r: int, seed: int = 0) -> tuple[pd.DataFrame, list[str]]:
    """A balanced 2^k·r data set in random run order, factors coded -1/+1."""
    rng = np.random.default_rng(seed)
    factors = [f"x{j}" for j in range(k)]
    cells = np.repeat(np.arange(2 ** k), r)
    rng.shuffle(cells)
    data = pd.DataFrame({f: np.where(cells >> j & 1, 1, -1) for j, f in enumerate(factors)})
    beta = rng.normal(0, 1, k)
    data["y"] = 100 + (2 * (cells[:, None] >> np.arange(k) & 1) - 1) @ beta \
        + rng.normal(0, 1, len(cells))
    return data, factors


def best_of(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def statsmodels_anova(data: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    from statsmodels.formula.api import ols
    from statsmodels.stats.anova import anova_lm
    model = ols("y ~ " + " * ".join(factors), data=data).fit()
    return anova_lm(model, typ=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--r", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5, help="labkit repetitions (best of)")
    ap.add_argument("--sm-repeat", type=int, default=1, help="statsmodels repetitions (best of)")
    args = ap.parse_args(argv)
    data, factors = make_design(args.k, args.r)
    print(f"design: 2^{args.k} x r={args.r} = {len(data)} observations, "
          f"{2 ** args.k - 1} terms")

    t_lab, table = best_of(lambda: factorial_effects(data, factors, "y"), args.repeat)
    print(f"labkit.stats.factorial_effects : {t_lab * 1e3:10.2f} ms (best of {args.repeat})")
    t_sm, sm = best_of(lambda: statsmodels_anova(data, factors), args.sm_repeat)
    print(f"statsmodels ols + anova_lm     : {t_sm * 1e3:10.2f} ms (best of {args.sm_repeat})")
    print(f"ratio statsmodels / labkit     : {t_sm / t_lab:10.1f}x (target >= 50x)")

    ours = table.set_index("term")["ss"]
    theirs = sm["sum_sq"].rename(index={"Residual": "error"})
    common = ours.index.intersection(theirs.index)
    diff = np.max(np.abs(ours[common] - theirs[common]) / np.maximum(1.0, np.abs(theirs[common])))
    agree = len(common) == len(theirs) and diff < 1e-9
    print(f"sums of squares: {len(common)} of {len(theirs)} terms compared, "
          f"max relative difference {diff:.2e} -> {'agree' if agree else 'DISAGREE'}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
