"""Telemetry's cost: N-queens on local and docker with telemetry off and on, interleaved in one randomized design.

The design is labkit's own: factors ``backend: [local, docker]`` (``--backends``) and ``telemetry:
[off, on]``, ``--reps`` replicates, its plan randomized by :meth:`labkit.design.Design.plan`
(seeded), so the four cells share the same moments of the machine's life. Each run of the plan
goes through the real run path, :meth:`Campaign.measure <labkit.run.campaign.Campaign.measure>`
(provision, the run hooks, workload, teardown), of one of four campaigns alike but for backend
and ``telemetry`` (off, or ``--interval`` seconds): the cell picks the campaign, so the hook is on
or off exactly as in a campaign, with the same instances' settings (1 vCPU pinned) and one backend
object per backend. Every campaign is entered (its hooks' ``around_campaign``) for the whole
benchmark, as :meth:`Campaign.run` enters it: each runs its one host sampler thread, which with
telemetry off still reads the host for the quiet-host guard (nothing stored), so the on/off
difference is what telemetry adds to a run: its window and the instances' stats. (The design is
not given to a Campaign: ``telemetry`` is not a workload parameter or host factor a campaign's
design may have.)

Printed per backend, side by side: the mean N-queens wall time (the solver's own clock) per
level, the ratio on/off with Fieller's 95 % CI (:func:`labkit.stats.ratio_ci`) and Welch's p
(:func:`labkit.stats.ttest`), and the sampler's CPU on the controller: its thread's CPU per pass
(a reading of the host and of the instances of the runs in flight) as % of one core at the
interval, and as measured during the runs (``sampler_cpu_pct`` of each run's summary: the
campaign's sampler while the run ran, its end reading included); how the guard's look before each
run was taken (``quiet_check.source``); the load average before and after. Targets (issue 32):
effect <= 1 % and not significant; sampler <= 2 % of one core at 1 s. No assertion: the machine is
shared; this prints figures, you judge.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.backends import get_backend  # noqa: E402
from labkit.core.instance import InstanceSpec  # noqa: E402
from labkit.design import Design  # noqa: E402
from labkit.run.campaign import Campaign  # noqa: E402
from labkit.run.hooks import around_campaign  # noqa: E402
from labkit.stats import ratio_ci, ttest  # noqa: E402

WORKLOAD = {"factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 1}  # only to build the campaigns


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="local,docker", help="comma-separated (default local,docker)")
    ap.add_argument("--reps", type=int, default=20, help="runs per cell (default 20)")
    ap.add_argument("--board", type=int, default=15, help="N-queens board (default 15: about a second)")
    ap.add_argument("--interval", type=float, default=1.0, help="telemetry interval, s (default 1.0)")
    ap.add_argument("--seed", type=int, default=32)
    args = ap.parse_args(argv)
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    design = Design.from_dict(
        {
            "name": "telemetry-overhead",
            "factors": {"backend": names, "telemetry": ["off", "on"]},
            "replications": args.reps,
            "seed": args.seed,
        }
    )
    backends = {name: get_backend(name) for name in names}
    spec = InstanceSpec(vcpus=1, memory_mb=256, affinity="pinned", count=1)
    times: dict[tuple, list[float]] = collections.defaultdict(list)
    per_run: dict[str, list[float]] = collections.defaultdict(list)
    sources: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    load_before = load()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as entered:
        campaigns = {
            (b, level): Campaign(
                WORKLOAD,
                backend=backends[b],
                workload="nqueens",
                workload_params={"board": args.board},
                campaign_id=f"bench-telemetry-{b}-{level}",
                data_dir=tmp,
                defaults=spec,
                progress=False,
                telemetry=args.interval if level == "on" else "off",
            )
            for b in names
            for level in ("off", "on")
        }
        for c in campaigns.values():
            entered.enter_context(around_campaign(c.hooks, c))
        for run in design.plan():
            cell = (run.levels["backend"], run.levels["telemetry"])
            out = campaigns[cell].measure(run, backends[cell[0]])
            if out.status != "ok":
                print(f"run {run.run_id} {cell} {out.status}: {out.error}")
                continue
            times[cell].append(next(m.value for m in out.measurements if m.metric == "wall_time_s"))
            sources[cell][(out.metadata.get("quiet_check") or {}).get("source", "not measured")] += 1
            tele = out.metadata.get("telemetry")
            if tele and tele.get("collected") and tele.get("sampler_cpu_pct") is not None:
                per_run[cell[0]].append(tele["sampler_cpu_pct"])
        samplers = {b: campaigns[(b, "on")].host_sampler for b in names}
        passes = {b: (s.cpu_s, s.readings) for b, s in samplers.items()}
    for be in backends.values():
        be.close()
    print(
        f"N-queens board {args.board}, {args.reps} runs per cell, backends {', '.join(names)} x telemetry "
        f"off/on in one randomized plan (seed {args.seed}), interval {args.interval} s"
    )
    print(f"load average (1, 5, 15 min) before {load_before}, after {load()}")
    print(
        f"{'backend':8} {'off mean s':>11} {'on mean s':>10} {'ratio on/off':>13} {'95% CI':>19} "
        f"{'effect':>8} {'Welch p':>8} {'sampler ms/pass':>16} {'% core':>7} {'% core in runs':>15}  guard look"
    )
    for b in names:
        on, off = times[(b, "on")], times[(b, "off")]
        if len(on) < 2 or len(off) < 2:
            print(f"{b:8} too few ok runs (off {len(off)}, on {len(on)})")
            continue
        r = ratio_ci(on, off).iloc[0]
        t = ttest(on, off).iloc[0]
        cpu_s, n = passes[b]
        ms = 1000 * cpu_s / n if n else float("nan")
        in_runs = statistics.mean(per_run[b]) if per_run[b] else float("nan")
        looks = "; ".join(
            f"{lvl}: " + ", ".join(f"{k} {v}" for k, v in sorted(sources[(b, lvl)].items()))
            for lvl in ("off", "on")
        )
        print(
            f"{b:8} {statistics.mean(off):11.4f} {statistics.mean(on):10.4f} {r['ratio']:13.4f} "
            f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}] {100 * (r['ratio'] - 1):+7.2f}% {t['p']:8.3f} "
            f"{ms:16.2f} {ms / 10 / args.interval:7.3f} {in_runs:15.3f}  {looks}"
        )
    print("targets: effect <= 1 % and not significant; sampler <= 2 % of one core at 1 s")


if __name__ == "__main__":
    main()
