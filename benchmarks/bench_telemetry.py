"""Telemetry's cost: N-queens with telemetry off and on, interleaved in one randomized design.

The design is labkit's own: one factor ``telemetry: [off, on]`` with ``--reps`` replicates, its plan
randomized by :meth:`labkit.design.Design.plan` (seeded). Each run of the plan goes through the real
run path, :meth:`Campaign.measure <labkit.run.campaign.Campaign.measure>` (provision, the run hooks,
workload, teardown), of one of two campaigns alike but for ``telemetry`` (off, or ``--interval``
seconds): the factor picks the campaign, so the hook is on or off exactly as in a campaign, and the
two levels share the same instances' settings (1 vCPU pinned), the same backend object and the
same moments of the machine's life. (The design is not given to a Campaign: ``telemetry`` is not a
workload parameter or host factor a campaign's design may have.)

Printed: the mean N-queens wall time (the solver's own clock) per level, the ratio on/off with
Fieller's 95 % CI (:func:`labkit.stats.ratio_ci`) and Welch's p (:func:`labkit.stats.ttest`), and the
sampler's CPU on the controller: its thread CPU per reading, as % of one core at the interval, and
as measured per run (``sampler_cpu_pct``: start and stop readings included). Targets (issue 32):
effect <= 1 % and not significant; sampler <= 2 % of one core at 1 s. No assertion: the machine is
shared; this prints figures, you judge.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.backends import get_backend  # noqa: E402
from labkit.core.instance import InstanceSpec  # noqa: E402
from labkit.design import Design  # noqa: E402
from labkit.run.campaign import Campaign  # noqa: E402
from labkit.stats import ratio_ci, ttest  # noqa: E402

WORKLOAD = {"factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 1}   # only to build the campaigns


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="local")
    ap.add_argument("--reps", type=int, default=30, help="runs per level (default 30)")
    ap.add_argument("--board", type=int, default=15, help="N-queens board (default 15: about a second)")
    ap.add_argument("--interval", type=float, default=1.0, help="telemetry interval, s (default 1.0)")
    ap.add_argument("--seed", type=int, default=32)
    args = ap.parse_args(argv)
    design = Design.from_dict({"name": "telemetry-overhead", "factors": {"telemetry": ["off", "on"]},
                               "replications": args.reps, "seed": args.seed})
    backend = get_backend(args.backend)
    spec = InstanceSpec(vcpus=1, memory_mb=256, affinity="pinned", count=1)
    with tempfile.TemporaryDirectory() as tmp:
        campaigns = {level: Campaign(WORKLOAD, backend=backend, workload="nqueens", workload_params={"board": args.board},
                                     campaign_id=f"bench-telemetry-{level}", data_dir=tmp, defaults=spec,
                                     progress=False, telemetry=args.interval if level == "on" else "off")
                     for level in ("off", "on")}
        times: dict[str, list[float]] = {"off": [], "on": []}
        per_reading, per_run = [], []
        for run in design.plan():
            level = run.levels["telemetry"]
            out = campaigns[level].measure(run, backend)
            if out.status != "ok":
                print(f"run {run.run_id} ({level}) {out.status}: {out.error}")
                continue
            times[level].append(next(m.value for m in out.measurements if m.metric == "wall_time_s"))
            tele = out.metadata.get("telemetry")
            if tele and tele.get("collected"):
                per_reading.append(tele["sampler_cpu_s"] / tele["samples"])
                per_run.append(tele["sampler_cpu_pct"])
    backend.close()
    on, off = times["on"], times["off"]
    r = ratio_ci(on, off).iloc[0]
    t = ttest(on, off).iloc[0]
    print(f"backend {args.backend}, N-queens board {args.board}, {len(off)} runs off / {len(on)} on, "
          f"interval {args.interval} s, randomized order (seed {args.seed})")
    print(f"  wall time off {statistics.mean(off):.4f} s (sd {statistics.stdev(off):.4f}), "
          f"on {statistics.mean(on):.4f} s (sd {statistics.stdev(on):.4f})")
    print(f"  ratio on/off {r['ratio']:.4f}  95% CI [{r['ci_low']:.4f}, {r['ci_high']:.4f}]  "
          f"effect {100 * (r['ratio'] - 1):+.2f} %  Welch p = {t['p']:.3f}  (target: <= 1 %, not significant)")
    if per_reading:
        ms = 1000 * statistics.mean(per_reading)
        print(f"  sampler: {ms:.2f} ms CPU per reading = {ms / 10 / args.interval:.3f} % of one core at "
              f"{args.interval} s (target <= 2 %); per run as measured (start/stop readings included): "
              f"{statistics.mean(per_run):.2f} %")


if __name__ == "__main__":
    main()
