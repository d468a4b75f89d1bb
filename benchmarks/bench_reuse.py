"""Instance reuse on libvirt: the campaign time to reach a target CI half-width, fresh VMs per run
against ``runs_per_instance`` k.

Two real campaigns of the same design (N-queens, 1 vCPU, factor ``affinity: [floating, pinned]``)
run one after the other on the libvirt backend: F boots a fresh VM for every run
(``runs_per_instance: 1``, ``--fresh-reps`` replicates), K runs k runs on each VM (``--k``,
``--reuse-reps`` replicates: ``reuse-reps / k`` boots per configuration). From K, the variance
components of a configuration's runs (instance and residual: :func:`labkit.stats.mixed_effects`,
REML, instance random, affinity fixed) and from each campaign its own measured cost: campaign wall
time per fresh run (F) and per boot of k runs (K), everything included (boot, agent, workload,
telemetry, guard, teardown).

For a target half-width ``h`` of a configuration mean's 95 % CI (``--target``, relative to the mean)
the runs a campaign needs follow from the components (Kalibera & Jones, ISMM 2013: the mean of b
boots of k runs has variance ``s2_instance / b + s2_residual / (b k)``; fresh runs are b boots of 1):
the fewest n fresh runs with ``t(n-1) sqrt((s2_i + s2_r) / n) <= h`` and the fewest b boots with
``t(b-1) sqrt((s2_i + s2_r / k) / b) <= h``. Printed: both campaigns' measured costs, the
components, n and b, the campaign times ``n x cost per fresh run`` and ``b x cost per boot`` and
their ratio (issue 32's target: <= 0.5), and the k that Kalibera & Jones' rule
``sqrt(c_boot s2_r / (c_run s2_i))`` picks from these costs. k is stated (``--k``, default 4): the
library's planner (``runs_needed``) is the statistics side's. No assertion: this prints figures.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy import stats as sps  # noqa: E402

from labkit.core.instance import InstanceSpec  # noqa: E402
from labkit.run.campaign import Campaign  # noqa: E402
from labkit.stats import mixed_effects  # noqa: E402


def campaign(data_dir: str, cid: str, reps: int, k: int, board: int, seed: int, backend: str):
    design = {"name": cid, "factors": {"affinity": ["floating", "pinned"]}, "replications": reps, "seed": seed,
              "runs_per_instance": k}
    t0 = time.monotonic()
    st = Campaign(design, backend=backend, workload="nqueens", workload_params={"board": board, "threads": 1},
                  campaign_id=cid, data_dir=data_dir, defaults=InstanceSpec(vcpus=1, memory_mb=512),
                  progress=True, run_timeout=1800).run()
    wall = time.monotonic() - t0
    tidy = st.tidy()
    rows = tidy[(tidy.metric == "wall_time_s") & (tidy.status == "ok")].copy()
    failed = tidy[tidy.status != "ok"].run_id.nunique()
    return rows, wall, failed


def fewest(var_of, h: float, start: int = 2, top: int = 100_000) -> int:
    """The smallest m >= start with t(0.975, m-1) * sqrt(var_of(m)) <= h."""
    for m in range(start, top):
        if sps.t.ppf(0.975, m - 1) * math.sqrt(var_of(m)) <= h:
            return m
    return top


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="libvirt")
    ap.add_argument("--k", type=int, default=4, help="runs per instance of the reuse campaign (default 4)")
    ap.add_argument("--fresh-reps", type=int, default=5, help="replicates of the fresh campaign (default 5)")
    ap.add_argument("--reuse-reps", type=int, default=12, help="replicates of the reuse campaign (default 12)")
    ap.add_argument("--board", type=int, default=13, help="N-queens board (default 13: about a second under TCG)")
    ap.add_argument("--target", type=float, default=0.02, help="CI half-width relative to the mean (default 0.02)")
    ap.add_argument("--seed", type=int, default=32)
    args = ap.parse_args(argv)
    if args.reuse_reps % args.k:
        ap.error("--reuse-reps must be a multiple of --k")
    with tempfile.TemporaryDirectory() as tmp:
        fresh, wall_f, bad_f = campaign(tmp, "bench-reuse-fresh", args.fresh_reps, 1, args.board, args.seed,
                                        args.backend)
        reuse, wall_k, bad_k = campaign(tmp, "bench-reuse-k", args.reuse_reps, args.k, args.board, args.seed + 1,
                                        args.backend)
    runs_f = fresh.run_id.nunique() + bad_f
    boots_k = reuse.instance.nunique() + math.ceil(bad_k / args.k)
    c_fresh, c_boot_k = wall_f / runs_f, wall_k / boots_k
    fit = mixed_effects(reuse, response="value", fixed=["affinity"], random=["instance"])
    comp = fit.variance.set_index("component")["variance"]
    s2_i, s2_r = float(comp["instance"]), float(comp["residual"])
    mean = float(reuse.value.mean())
    h = args.target * mean
    k = args.k
    n = fewest(lambda m: (s2_i + s2_r) / m, h)
    b = fewest(lambda m: (s2_i + s2_r / k) / m, h)
    t_fresh, t_reuse = n * c_fresh, b * c_boot_k
    pooled_f = float(fresh.groupby("affinity").value.var().mean())
    print(f"backend {args.backend}, N-queens board {args.board} (1 thread, 1 vCPU), affinity floating/pinned")
    print(f"  fresh: {runs_f} runs ({bad_f} failed) in {wall_f:.0f} s = {c_fresh:.1f} s per run (a boot each)")
    print(f"  reuse: k = {k}, {boots_k} boots ({bad_k} failed runs) in {wall_k:.0f} s = {c_boot_k:.1f} s per boot "
          f"of {k} runs")
    print(f"  wall time mean {mean:.4f} s; variance components (REML, reuse campaign): instance {s2_i:.3g} "
          f"({100 * s2_i / (s2_i + s2_r):.0f} %), residual {s2_r:.3g}; the fresh campaign's within-configuration "
          f"variance {pooled_f:.3g} (their sum expected)")
    print(f"  target: 95 % CI half-width of a configuration mean {100 * args.target:g} % = {h:.4g} s")
    print(f"  fresh needs {n} runs per configuration: {t_fresh:.0f} s; reuse (k = {k}) needs {b} boots "
          f"({b * k} runs): {t_reuse:.0f} s")
    print(f"  campaign time ratio reuse/fresh = {t_reuse / t_fresh:.3f}  (target <= 0.5)")
    if k > 1:
        c_run = max((c_boot_k - c_fresh) / (k - 1), 1e-9)
        c_boot = max(c_fresh - c_run, 0.0)
        best = math.sqrt(c_boot * s2_r / (c_run * s2_i)) if s2_i > 0 else float("inf")
        print(f"  costs: boot {c_boot:.1f} s, run {c_run:.2f} s; Kalibera & Jones' k = sqrt(c_boot s2_r / "
              f"(c_run s2_i)) = {best:.1f}")


if __name__ == "__main__":
    main()
