"""Instance reuse on libvirt: the campaign time to reach a target CI half-width, fresh VMs per run
against ``runs_per_instance`` k.

Two real campaigns of the same design (N-queens, 1 vCPU, factor ``affinity: [floating, pinned]``)
run on the libvirt backend, interleaved so that both see the same moments of a shared machine
(fresh runs, then one boot of k runs, and again, in proportion so that both end together:
``Campaign.run(max_runs=...)`` resumes each in turn): F boots a fresh VM for every run (``runs_per_instance: 1``, ``--fresh-reps`` replicates), K
runs k runs on each VM (``--k``, ``--reuse-reps`` replicates: ``reuse-reps / k`` boots per
configuration). From K, the variance components of a configuration's runs (instance and residual:
:func:`labkit.stats.mixed_effects`, REML, instance random, affinity fixed) and from each campaign
its own measured cost: the stored durations of its runs, per fresh run (F) and summed per boot of
k runs (K), everything a run holds included (guard, telemetry, boot, agent, workload, teardown).

For a target half-width ``h`` of a configuration mean's 95 % CI (``--target``, relative to the mean)
the runs a campaign needs follow from what each campaign measured (Kalibera & Jones, ISMM 2013: the
mean of b boots of k runs has variance ``s2_instance / b + s2_residual / (b k)``): the fewest n fresh
runs with ``t(n-1) sqrt(s2_fresh / n) <= h``, ``s2_fresh`` the fresh campaign's own variance of a
run within its configuration (every fresh run is the first run of a new VM: that is the error a
fresh design sees), and the fewest b boots with ``t(b-1) sqrt((s2_i + s2_r / k) / b) <= h``.
Printed: both campaigns' measured costs, the components, n and b, the campaign times
``n x cost per fresh run`` and ``b x cost per boot`` and their ratio (issue 32's target: <= 0.5),
the same ratio had fresh runs the reuse campaign's variance (``s2_i + s2_r``), and the k that Kalibera
& Jones' rule ``sqrt(c_boot s2_r / (c_run s2_i))`` picks from these costs. k is stated (``--k``,
default 4): the library's planner (``runs_needed``) is the statistics side's. ``--data-dir`` keeps
the two stores (default: a temporary directory). No assertion: this prints figures.
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
from labkit.store import Store  # noqa: E402


def make(data_dir: str, cid: str, reps: int, k: int, board: int, seed: int, backend: str) -> Campaign:
    design = {"name": cid, "factors": {"affinity": ["floating", "pinned"]}, "replications": reps, "seed": seed,
              "runs_per_instance": k}
    return Campaign(design, backend=backend, workload="nqueens", workload_params={"board": board, "threads": 1},
                    campaign_id=cid, data_dir=data_dir, defaults=InstanceSpec(vcpus=1, memory_mb=512),
                    progress=False, run_timeout=1800)


def interleave(fresh: Campaign, reuse: Campaign, k: int) -> dict:
    """Run both campaigns to their end, in turn: as many fresh runs as there are fresh boots per
    reuse boot, then one boot of ``k`` runs (so both end together); returns each one's store
    (read-only)."""
    total = {fresh: len(fresh.design.plan()), reuse: len(reuse.design.plan())}
    per_boot = max(1, round(total[fresh] / -(-total[reuse] // k)))
    stored = dict.fromkeys(total, 0)
    while any(stored[c] < total[c] for c in total):
        for c, step in ((fresh, per_boot), (reuse, k)):
            if stored[c] < total[c]:
                with c.run(max_runs=step) as st:
                    stored[c] = len(st.runs())
                print(f"  {c.campaign_id}: {stored[c]} of {total[c]} runs", flush=True)
    return {c: Store.for_campaign(c.data_dir, c.campaign_id, readonly=True) for c in total}


def rows_of(store) -> tuple:
    """(ok wall-time rows, runs, failed runs) of a store."""
    tidy, runs = store.tidy(), store.runs()
    rows = tidy[(tidy.metric == "wall_time_s") & (tidy.status == "ok")].copy()
    return rows, runs, int((runs.status != "ok").sum())


def fewest(var_of, h: float, start: int = 2, top: int = 100_000) -> int:
    """The smallest m >= start with t(0.975, m-1) * sqrt(var_of(m)) <= h."""
    for m in range(start, top):
        if sps.t.ppf(0.975, m - 1) * math.sqrt(var_of(m)) <= h:
            return m
    return top


#: the command line: option, type, default, what it is
OPTIONS = (("--backend", str, "libvirt", "the backend"),
           ("--k", int, 4, "runs per instance of the reuse campaign"),
           ("--fresh-reps", int, 5, "replicates of the fresh campaign"),
           ("--reuse-reps", int, 12, "replicates of the reuse campaign (a multiple of k)"),
           ("--board", int, 13, "N-queens board (13: about a second under TCG)"),
           ("--target", float, 0.02, "95 %% CI half-width of a configuration mean, relative to the mean"),
           ("--seed", int, 32, "the designs' seed"),
           ("--data-dir", str, None, "where the two campaigns' stores go (kept)"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, kind, default, what in OPTIONS:
        ap.add_argument(flag, type=kind, default=default, help=f"{what} (default {default})")
    args = ap.parse_args(argv)
    if args.reuse_reps % args.k:
        ap.error("--reuse-reps must be a multiple of --k")
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.data_dir or scratch
        cf = make(tmp, "bench-reuse-fresh", args.fresh_reps, 1, args.board, args.seed, args.backend)
        ck = make(tmp, "bench-reuse-k", args.reuse_reps, args.k, args.board, args.seed + 1, args.backend)
        t0 = time.monotonic()
        stores = interleave(cf, ck, args.k)
        wall = time.monotonic() - t0
        fresh, runs_f, bad_f = rows_of(stores[cf])
        reuse, runs_k, bad_k = rows_of(stores[ck])
    boot_of = runs_k.metadata.map(lambda m: m["boot_group"])
    c_fresh = float(runs_f.duration_s.mean())
    c_boot_k = float(runs_k.groupby(boot_of).duration_s.sum().mean())
    other = [m.get("telemetry", {}).get("cpu_other_mean_pct") for m in list(runs_f.metadata) + list(runs_k.metadata)]
    other = sorted(o for o in other if o is not None)
    fit = mixed_effects(reuse, response="value", fixed=["affinity"], random=["instance"])
    comp = fit.variance.set_index("component")["variance"]
    s2_i, s2_r = float(comp["instance"]), float(comp["residual"])
    mean = float(reuse.value.mean())
    h = args.target * mean
    k = args.k
    pooled_f = float(fresh.groupby("affinity").value.var().mean())
    n = fewest(lambda m: pooled_f / m, h)
    n_model = fewest(lambda m: (s2_i + s2_r) / m, h)
    b = fewest(lambda m: (s2_i + s2_r / k) / m, h)
    t_fresh, t_reuse = n * c_fresh, b * c_boot_k
    print(f"backend {args.backend}, N-queens board {args.board} (1 thread, 1 vCPU), affinity floating/pinned; "
          f"both campaigns interleaved, {wall:.0f} s in all")
    if other:
        print(f"  processes outside the campaigns used {other[len(other) // 2]:.0f} % of a CPU during a run "
              f"(median; {other[0]:.0f}-{other[-1]:.0f} %; {int(sum(runs_f.suspect) + sum(runs_k.suspect))} of "
              f"{len(runs_f) + len(runs_k)} runs suspect)")
    print(f"  fresh: {len(runs_f)} runs ({bad_f} failed), {c_fresh:.1f} s per run (a boot each)")
    print(f"  reuse: k = {k}, {boot_of.nunique()} boots ({bad_k} failed runs), {c_boot_k:.1f} s per boot of {k} runs")
    print(f"  wall time mean {mean:.4f} s; variance components (REML, reuse campaign): instance {s2_i:.3g} "
          f"({100 * s2_i / (s2_i + s2_r):.0f} %), residual {s2_r:.3g} (sum {s2_i + s2_r:.3g}); the fresh campaign's "
          f"within-configuration variance {pooled_f:.3g} (mean {float(fresh.value.mean()):.4f} s)")
    print(f"  target: 95 % CI half-width of a configuration mean {100 * args.target:g} % = {h:.4g} s")
    print(f"  fresh needs {n} runs per configuration: {t_fresh:.0f} s; reuse (k = {k}) needs {b} boots "
          f"({b * k} runs): {t_reuse:.0f} s")
    print(f"  campaign time ratio reuse/fresh = {t_reuse / t_fresh:.3f}  (target <= 0.5)")
    print(f"  (had fresh runs the reuse campaign's variance s2_i + s2_r: {n_model} runs, ratio "
          f"{t_reuse / (n_model * c_fresh):.3f})")
    if k > 1:
        c_run = max((c_boot_k - c_fresh) / (k - 1), 1e-9)
        c_boot = max(c_fresh - c_run, 0.0)
        best = math.sqrt(c_boot * s2_r / (c_run * s2_i)) if s2_i > 0 else float("inf")
        print(f"  costs: boot {c_boot:.1f} s, run {c_run:.2f} s; Kalibera & Jones' k = sqrt(c_boot s2_r / "
              f"(c_run s2_i)) = {best:.1f}")


if __name__ == "__main__":
    main()
