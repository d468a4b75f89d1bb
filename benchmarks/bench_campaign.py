"""Campaign efficiency on the local backend: sum of benchmark wall times / campaign wall time.

Runs a 2^2 design x 8 replications (32 runs) of a 1-second workload (`sleep 1`
inside each instance) and prints the figures. Targets: efficiency >= 0.97 for the whole
campaign (start-up and export included) and >= 0.99 for the run loop (issue 33, whose 0.991 was
measured before telemetry existed: its like-for-like figure is the campaign with ``telemetry="off"``),
with the local backend's default isolation ``strict`` (``--isolation none`` to compare). The
campaign runs first with the default telemetry (a sample of the host every second, and one at
each run's start and end, :mod:`labkit.run.telemetry`; its cost on a workload is issue 32's
``bench_telemetry.py``), then with ``telemetry="off"``, and the two are printed side by side
(``--telemetry`` picks one). For each, the time the campaign's hooks take on the run's path
(the quiet-host guard's look before the run, the telemetry's window: entering plus leaving each
hook's ``around_run``, median per run) and the load average are printed beside it, and how many
paths each instance hides (one mount each in its namespace holder: every data dir recorded on this
host that still exists counts, so a machine where test suites ran pays more per instance).

Then the cost of the local backend's isolation (issue 28): one instance with isolation
``strict`` (the default) and one with ``none``, side by side, ``--pairs`` rounds (default
200) each running ``true`` once in both, in alternating order; ``--pairs // 10`` rounds
making and destroying one instance of each; and ``--pairs // 2`` rounds of what a run's
instance goes through (make, run ``true`` once, destroy). Printed: the median of each, the
ratio of the medians (strict / none), the 2.5-97.5 % range of the per-round ratios, and for
the whole cycle the median of the paired differences (strict - none) with its exact
distribution-free 95 % interval (:func:`labkit.stats.quantile_ci`): an interval that holds 0
means the sandbox's cost is not measurable at that many rounds.
No assertion on time: the machine is shared and noisy; this prints, you judge.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time

import pandas as pd

from labkit.backends import get_backend, teardown
from labkit.core.instance import InstanceSpec
from labkit.design import Design
from labkit.run.campaign import Campaign
from labkit.run.hooks import RunHook
from labkit.stats import quantile_ci

ISOLATION = ("strict", "none")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=1.0, help="length of each run")
    ap.add_argument("--replications", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=200, help="rounds of the isolation comparison")
    ap.add_argument("--only-isolation", action="store_true", help="skip the campaign")
    ap.add_argument(
        "--isolation",
        choices=ISOLATION,
        default="strict",
        help="the local backend's isolation in the campaign (default strict)",
    )
    ap.add_argument(
        "--telemetry",
        choices=("both", "on", "off"),
        default="both",
        help="the campaign with the default telemetry (on), without (off), or both in turn",
    )
    args = ap.parse_args()
    if not args.only_isolation:
        rows = [
            campaign(args, telemetry)
            for telemetry in (("on", "off") if args.telemetry == "both" else (args.telemetry,))
        ]
        if len(rows) == 2:
            (on, off) = rows
            print(
                f"telemetry on / off: run-loop efficiency {on['loop']:.4f} / {off['loop']:.4f}, whole "
                f"{on['whole']:.4f} / {off['whole']:.4f}, overhead per run {on['per_run_ms']:.1f} / "
                f"{off['per_run_ms']:.1f} ms, of it in the hooks {on['hooks_ms']:.2f} / {off['hooks_ms']:.2f} ms; "
                f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
            )
    isolation_cost(args.pairs)


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=200, method="inclusive")[max(0, round(q * 200) - 1)]


def _print_pair(what: str, times: dict[str, list[float]]) -> None:
    strict, none = times["strict"], times["none"]
    ratios = [a / b for a, b in zip(strict, none)]
    print(
        f"{what:26} strict {statistics.median(strict) * 1000:8.2f} ms   none "
        f"{statistics.median(none) * 1000:8.2f} ms   ratio of medians "
        f"{statistics.median(strict) / statistics.median(none):.3f}   per-round ratio 2.5-97.5 % "
        f"{_quantile(ratios, 0.025):.3f}-{_quantile(ratios, 0.975):.3f} (n={len(ratios)})"
    )


def _interleaved(rounds: int, measure) -> dict[str, list[float]]:
    """``measure(mode)`` for each isolation mode, ``rounds`` times, the order alternating per round."""
    out: dict[str, list[float]] = {m: [] for m in ISOLATION}
    for i in range(rounds):
        for mode in ISOLATION if i % 2 == 0 else ISOLATION[::-1]:
            out[mode].append(measure(mode))
    return out


def isolation_cost(pairs: int) -> None:
    """Per-exec and per-instance cost of isolation strict vs none, interleaved (see the docstring)."""
    backends = {mode: get_backend("local", isolation=mode) for mode in ISOLATION}
    spec = InstanceSpec(vcpus=1, memory_mb=128)
    insts = {mode: be.provision(spec, prefix="labkit-bench-iso--")[0] for mode, be in backends.items()}

    def make_destroy(mode: str, run: bool) -> float:
        t = time.perf_counter()
        made_now = backends[mode].provision(spec, prefix="labkit-bench-iso--")
        try:
            if run:
                made_now[0].exec(["true"], timeout=60)
        finally:
            teardown(made_now)
        return time.perf_counter() - t

    try:
        execs = _interleaved(pairs, lambda mode: insts[mode].exec(["true"], timeout=60).duration_s)
        made = _interleaved(max(2, pairs // 10), lambda mode: make_destroy(mode, run=False))
        cycle = _interleaved(max(6, pairs // 2), lambda mode: make_destroy(mode, run=True))
    finally:
        teardown(list(insts.values()))
    print(f"isolation cost (local backend; {pairs} interleaved rounds)")
    _print_pair("exec of `true`", execs)
    _print_pair("make + destroy instance", made)
    _print_pair("make + exec + destroy", cycle)
    diff = quantile_ci([1000 * (a - b) for a, b in zip(cycle["strict"], cycle["none"])]).iloc[0]
    said = (
        "holds 0: the sandbox's cost is not measurable"
        if diff.low <= 0 <= diff.high
        else "strict is cheaper"
        if diff.high < 0
        else "strict costs more"
    )
    print(
        f"{'':26} strict - none, median of the paired differences {diff.estimate:+.2f} ms, exact 95 % "
        f"interval [{diff.low:+.2f}, {diff.high:+.2f}] ms ({said}; n={int(diff.n)})"
    )


class Timed(RunHook):
    """One of the campaign's hooks, delegated to as is, with the time its ``around_run`` takes on
    the run's path (entering plus leaving) recorded per run."""

    def __init__(self, hook: RunHook):
        self.hook, self.times = hook, []

    def around_campaign(self, campaign):
        return self.hook.around_campaign(campaign)

    def instances_ready(self, ctx) -> None:
        self.hook.instances_ready(ctx)

    @contextlib.contextmanager
    def around_run(self, ctx):
        t0 = time.perf_counter()
        with self.hook.around_run(ctx) as value:
            spent = time.perf_counter() - t0
            yield value
            t1 = time.perf_counter()
        self.times.append(spent + time.perf_counter() - t1)


def campaign(args, telemetry: str) -> dict:
    """The 2^2 x r campaign of ``sleep`` and its efficiency (see the docstring), with the default
    telemetry (``on``) or none (``off``)."""
    data = tempfile.mkdtemp(prefix="labkit-bench-")
    try:
        design = Design.from_dict(
            {
                "factors": {"vcpus": [1, 2], "affinity": ["floating", "pinned"]},
                "replications": args.replications,
                "seed": 1,
            }
        )
        t0 = time.perf_counter()
        c = Campaign(
            design,
            workload="command",
            workload_params={"argv": ["sleep", str(args.seconds)]},
            campaign_id=f"bench-{os.getpid()}",
            data_dir=data,
            progress=False,
            backend_options={"isolation": args.isolation},
            **({} if telemetry == "on" else {"telemetry": "off"}),
        )
        c.hooks = [Timed(h) for h in c.hooks]
        store = c.run()
        total = time.perf_counter() - t0
        tidy = store.tidy()
        bench = tidy.loc[tidy.metric == "wall_time_s", "value"].sum()
        runs = tidy.run_id.nunique()
        r = store.runs()
        starts = pd.to_datetime(r.started)
        loop = (
            (starts.max() + pd.to_timedelta(r.loc[starts.idxmax(), "duration_s"], unit="s")) - starts.min()
        ).total_seconds()
        print(f"runs                      {runs}   (local isolation {args.isolation}, telemetry {telemetry})")
        print(f"run length asked          {args.seconds:.3f} s")
        print(f"sum of benchmark times    {bench:.3f} s")
        print(f"campaign wall time        {total:.3f} s")
        print(f"overhead per run          {(total - bench) / runs * 1000:.1f} ms")
        print(f"run loop wall time        {loop:.3f} s   (first run start to last run end)")
        print(
            f"efficiency, whole         {bench / total:.4f}   (target >= 0.97; includes start-up and export)"
        )
        print(f"efficiency, run loop      {bench / loop:.4f}   (target >= 0.99 with telemetry off)")
        workload = r.metadata.map(
            lambda m: max(((m or {}).get("workload_s") or [0.0]), default=0.0)
        )  # per instance
        print(
            f"per run, outside the work  {1000 * (r.duration_s - workload).mean():.1f} ms in the run (provisioning, "
            f"hooks, teardown), {1000 * (workload.sum() - bench) / runs:.1f} ms starting the command, "
            f"{1000 * (loop - r.duration_s.sum()) / max(1, runs - 1):.1f} ms between runs (engine, store)"
        )
        hidden = {
            ((i.get("isolation") or {}).get("hidden"))
            for m in r.metadata
            for i in (m or {}).get("instances", [])
        }
        print(
            f"paths hidden per instance  {', '.join(str(h) for h in sorted(hidden, key=str))}   (one mount each: "
            "the data dirs recorded on this host that exist, /run/labkit, the work root, the homes' secrets)"
        )
        hooks = {type(h.hook).__name__: 1000 * statistics.median(h.times) for h in c.hooks if h.times}
        print(
            "hooks on the run's path    "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in hooks.items())
            + "   (median per run, entering + leaving)\n",
            flush=True,
        )
        return {
            "loop": bench / loop,
            "whole": bench / total,
            "per_run_ms": (total - bench) / runs * 1000,
            "hooks_ms": sum(hooks.values()),
        }
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
