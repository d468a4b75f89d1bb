"""Fleet parallel efficiency: 40 runs of `sleep 1` (the `command` workload, native over SSH) on
1, 4 and 16 namespace test hosts (scripts/setup-fleet.sh; this script sets up 16 and puts the
earlier number back at the end: none when there were none).

Prints, per fleet size: wall time, Σ run time (each run's stored duration: provisioning, the
workload and teardown), parallel efficiency = Σ run time / (hosts × wall) (targets: >= 0.9 at 4
hosts, >= 0.8 at 16; 40 runs on 16 hosts is 2.5 rounds, so 0.83 is the ceiling there), and the
controller's CPU seconds and resident memory growth per host, and where each host's idle time
went (before its first run, between its runs, after its last), and the ceiling that the rounds
alone allow (runs / (hosts × ⌈runs / hosts⌉): equal runs and free start-up). Then the largest fleet
again with ``--long-runs`` (160: 10 rounds on 16 hosts, ceiling 1.0), where the start-up and the last
round weigh less. Runs go to hosts with ``assign: random`` (any idle host takes the next run). The
controller's own cost at 1,000 hosts, without SSH, is ``bench_dispatch.py``'s. No assertion: this
prints, you judge.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from labkit.run.campaign import Campaign

ROOT = Path(__file__).resolve().parents[1]
KEY = "/root/.ssh/labkit_test_ed25519"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def setup(n: int) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts/setup-fleet.sh")],
        check=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "LABKIT_FLEET_HOSTS": str(n)},
    )


def one(hosts: int, runs: int, seconds: float, data: str) -> dict:
    testbed = {
        "hosts": [
            {"name": f"ns{i}", "address": f"10.231.0.{10 + i}", "key": KEY} for i in range(1, hosts + 1)
        ],
        "assign": "random",
    }
    design = {"factors": {"vcpus": [1, 2]}, "replications": runs // 2, "seed": 1}
    cpu0, rss0, t0 = resource.getrusage(resource.RUSAGE_SELF), rss_mb(), time.perf_counter()
    epoch0 = time.time()
    store = Campaign(
        design,
        workload="command",
        workload_params={"argv": ["sleep", str(seconds)]},
        campaign_id=f"bench-fleet-{hosts}",
        data_dir=data,
        testbed=testbed,
        progress=False,
    ).run()
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    rs = store.runs()
    busy = float(rs.duration_s.sum())
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    rounds = -(-len(rs) // hosts)
    return {
        "hosts": hosts,
        "runs": len(rs),
        "ok": int((rs.status == "ok").sum()),
        "wall_s": wall,
        "sum_run_s": busy,
        "efficiency": busy / (hosts * wall),
        "ceiling": len(rs) / (hosts * rounds),
        **idle(rs, epoch0, wall, hosts),
        "ctl_cpu_s_per_host": cpu / hosts,
        "ctl_rss_mb_per_host": max(0.0, rss_mb() - rss0) / hosts,
    }


def idle(rs, epoch0: float, wall: float, hosts: int) -> dict:
    """Where the hosts' idle time went, in host-seconds per host: before each host's first run
    (campaign set-up, connecting, cleaning, fingerprinting), between its runs (claim and store),
    and after its last run until the campaign returned (the last round's imbalance, closing)."""
    import pandas as pd

    t = pd.DataFrame(
        {
            "host": rs.metadata.map(lambda m: m.get("host")),
            "start": pd.to_datetime(rs.started).map(lambda x: x.timestamp()) - epoch0,
            "dur": rs.duration_s,
        }
    ).sort_values("start")
    first = gaps = last = 0.0
    for _h, g in t.groupby("host"):
        ends = g.start + g.dur
        first += g.start.iloc[0]
        gaps += float((g.start.iloc[1:].to_numpy() - ends.iloc[:-1].to_numpy()).sum())
        last += wall - ends.iloc[-1]
    return {"idle_first_s": first / hosts, "idle_gaps_s": gaps / hosts, "idle_tail_s": last / hosts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--hosts", default="1,4,16")
    ap.add_argument("--long-runs", type=int, default=160, help="runs on the largest fleet once more (0: not)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.hosts.split(",")]
    before = len(glob.glob("/run/netns/labkit-fleet-*"))
    setup(max(sizes + [before, 1]))
    data = tempfile.mkdtemp(prefix="labkit-bench-fleet-")
    rows = []
    try:
        one(1, 2, 0.1, data + "/warm-up")  # warm-up: imports and first connections are not per-host costs
        todo = [(n, args.runs) for n in sizes] + ([(max(sizes), args.long_runs)] if args.long_runs else [])
        for i, (n, runs) in enumerate(todo):
            rows.append(one(n, runs, args.seconds, f"{data}/{i}"))
            r = rows[-1]
            print(
                f"{r['hosts']:>3} hosts: {r['ok']}/{r['runs']} ok, wall {r['wall_s']:.1f}s, Σ run "
                f"{r['sum_run_s']:.1f}s, efficiency {r['efficiency']:.2f} (ceiling {r['ceiling']:.2f}: "
                f"{r['runs']} equal runs on {r['hosts']} hosts, nothing else); idle per host: before the "
                f"first run {r['idle_first_s']:.2f}s, between runs {r['idle_gaps_s']:.2f}s, after the last "
                f"{r['idle_tail_s']:.2f}s; controller "
                f"{r['ctl_cpu_s_per_host']:.2f} CPU-s and {r['ctl_rss_mb_per_host']:.1f} MB RSS per host",
                flush=True,
            )
    finally:
        shutil.rmtree(data, ignore_errors=True)
        if not before:  # none were here: remove the ones this script made
            subprocess.run(
                ["bash", str(ROOT / "scripts/setup-fleet.sh"), "teardown"],
                check=True,
                capture_output=True,
                timeout=600,
            )
        elif before < max(sizes):
            setup(max(before, 4))
    import pandas as pd

    print(pd.DataFrame(rows).round(3).to_string(index=False))


if __name__ == "__main__":
    main()
