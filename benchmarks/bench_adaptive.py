"""Benchmark: adaptive replication on the flagship design against fixed replication.

Runs study 002's 2^4 design (labkit.studies.affinity_levels: vCPUs x memory x
affinity x instances, N-queens) on the local backend with
``replications: {target_ci: 0.02, min: 3, max: 20}``: every configuration gets 3
replicates, then more only where its 95 % CI of the mean wall time is wider than
2 % of the mean. Then prints the runs it needed against the fixed replication count
that would bring every configuration to the same worst-case CI half-width (from
each configuration's measured standard deviation), and the saving (target >= 30 %).
Makes no timed assertion. Needs root (cgroups). Default short (board 13, ~0.05 s a run); scale up
with ``--board 12 --max 30``. Run: ``python benchmarks/bench_adaptive.py [--target 0.02]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from labkit.design import Design  # noqa: E402
from labkit.run.adaptive import stored_values, worst_fixed_equivalent  # noqa: E402
from labkit.run.campaign import Campaign  # noqa: E402
from labkit.stats.samplesize import n_for_halfwidth  # noqa: E402
from labkit.studies import affinity_levels  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=float, default=0.02, help="relative CI half-width target")
    ap.add_argument("--min", type=int, default=3, help="initial replicates per configuration")
    ap.add_argument("--max", type=int, default=20, help="hard cap on runs per configuration")
    ap.add_argument("--board", type=int, default=13, help="N-queens board size (run length)")
    ap.add_argument("--seed", type=int, default=2017)
    ap.add_argument("--data-dir", default=None, help="keep the campaign here (default: a temp dir)")
    ap.add_argument("--campaign-id", default=f"bench-adaptive-{os.getpid()}")
    args = ap.parse_args(argv)
    cpus = os.cpu_count() or 1
    mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    design = Design.from_dict(
        {
            "name": "affinity-adaptive",
            "factors": affinity_levels(cpus, mem_mb),
            "seed": args.seed,
            "replications": {"target_ci": args.target, "min": args.min, "max": args.max},
        }
    )
    print(design.describe())
    with tempfile.TemporaryDirectory(prefix="labkit-bench-adaptive-") as tmp:
        data_dir = Path(args.data_dir or tmp)
        t0 = time.perf_counter()
        store = Campaign(
            design,
            backend="local",
            workload="nqueens",
            workload_params={"board": args.board},
            campaign_id=args.campaign_id,
            data_dir=data_dir,
            progress=False,
        ).run()
        elapsed = time.perf_counter() - t0
        runs = stored_values(store, "wall_time_s")
        store.close()
    per_cfg = runs.groupby("config").size()
    cmp = worst_fixed_equivalent(design, runs)
    print(
        f"\nrun time: {elapsed:.0f} s; runs per configuration: min {per_cfg.min()}, "
        f"median {per_cfg.median():g}, max {per_cfg.max()} (cap {args.max})"
    )
    print(f"adaptive runs                      : {cmp['adaptive_runs']}")
    print(
        f"worst-case CI half-width reached   : {100 * cmp['worst_half_width']:.2f} % of the mean "
        f"(target {100 * args.target:g} %)"
    )
    print(
        f"fixed replication for the same     : {cmp['fixed_replicates']} per configuration = "
        f"{cmp['fixed_runs']} runs"
    )
    print(f"saving                             : {100 * cmp['saving']:.0f} % fewer runs (target >= 30 %)")
    per_configuration(runs, args.target)
    return 0
    return 0


def per_configuration(runs, target: float) -> None:
    """Print each configuration's runs, CV and reached half-width: the saving depends on how
    much the configurations' CVs differ (equal CVs need equal replication)."""
    from scipy import stats as sps

    g = runs.dropna(subset=["value"]).groupby("config")["value"].agg(["count", "mean", "std"])
    g["cv"] = g["std"] / g["mean"]
    g["half_width"] = sps.t.ppf(0.975, g["count"] - 1) * g["cv"] / g["count"] ** 0.5
    g["needed"] = n_for_halfwidth(g["cv"].to_numpy(), target)
    print("\nconfig  runs  mean (s)   CV %   half-width %   runs the target needs at this CV")
    for c, r in g.iterrows():
        print(
            f"{c:6d}  {int(r['count']):4d}  {r['mean']:8.4f}  {100 * r['cv']:5.2f}  "
            f"{100 * r['half_width']:12.2f}   {r['needed']:6.0f}"
        )
    print(
        f"CV: min {100 * g['cv'].min():.2f} %, median {100 * g['cv'].median():.2f} %, "
        f"max {100 * g['cv'].max():.2f} % (target half-width {100 * target:g} %)"
    )
    if (g["needed"] > g["count"]).all():
        print(
            "no configuration reached the target before the cap: at these CVs adaptive and "
            "fixed replication both run the cap (see benchmarks/sim_adaptive.py for the "
            "saving at other CVs)"
        )


if __name__ == "__main__":
    sys.exit(main())
