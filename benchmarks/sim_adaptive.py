"""Simulation (not a measurement): adaptive replication's saving as a function of run-to-run CV.

Feeds normal run values with a given coefficient of variation per configuration to
the adaptive rule itself (:func:`labkit.run.adaptive.next_round`) for a 16-configuration
design with ``replications: {target_ci: 0.02, min: 3, max: 20}`` and compares, as
``bench_adaptive.py`` does (:func:`labkit.run.adaptive.worst_fixed_equivalent`), with the
fixed replication that reaches the same worst-case half-width. It shows what
``bench_adaptive.py`` can measure at the CVs it prints: with every configuration at
the cap (CV >~ 6 %) the two are equal. Run: ``python benchmarks/sim_adaptive.py
[--campaigns 40]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from labkit.design import Design  # noqa: E402
from labkit.run.adaptive import next_round, worst_fixed_equivalent  # noqa: E402


def campaign(design: Design, cvs, rng) -> dict:
    """One simulated adaptive campaign; the comparison with fixed replication."""
    rows = []

    def add(c, r):
        rows.append(
            {
                "run_id": f"c{c:04d}r{r:03d}",
                "run_order": len(rows),
                "config": c,
                "replicate": r,
                "status": "ok",
                "value": 1.0 + cvs[c] * rng.standard_normal(),
            }
        )

    for c in range(design.n_configurations):
        for r in range(1, design.replications + 1):
            add(c, r)
    round_no = 1
    while runs := next_round(design, pd.DataFrame(rows), round_no):
        for run in runs:
            add(run.config, run.replicate)
        round_no += 1
    return worst_fixed_equivalent(design, pd.DataFrame(rows))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaigns", type=int, default=40, help="simulated campaigns per scenario")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    design = Design.from_dict(
        {
            "factors": {f: [1, 2] for f in "abcd"},
            "seed": 1,
            "replications": {"target_ci": 0.02, "min": 3, "max": 20},
        }
    )
    rng = np.random.default_rng(args.seed)
    k = design.n_configurations
    scenarios = {f"every CV {c:g} %": [c / 100] * k for c in (0.5, 1, 2, 3, 4, 5, 10, 20)}
    scenarios["CVs 1 to 4 %"] = list(np.linspace(0.01, 0.04, k))
    scenarios["CVs 0.5 to 8 %"] = list(np.geomspace(0.005, 0.08, k))
    print(
        f"{'scenario':18s} {'adaptive':>9s} {'fixed':>7s} {'saving':>7s}  (means of "
        f"{args.campaigns} simulated campaigns)"
    )
    for name, cvs in scenarios.items():
        out = [campaign(design, cvs, rng) for _ in range(args.campaigns)]
        print(
            f"{name:18s} {np.mean([o['adaptive_runs'] for o in out]):9.1f} "
            f"{np.mean([o['fixed_runs'] for o in out]):7.1f} "
            f"{100 * np.mean([o['saving'] for o in out]):6.1f} %"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
