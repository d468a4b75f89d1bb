"""The fleet engine's own cost at scale, by simulation: N simulated hosts, no sockets.

Drives :class:`labkit.run.engine.Dispatcher` (the one engine: claims with leases and a heartbeat, blocks
per host, host-loss monitor, the crash-safe store) over N stand-in hosts
(:class:`labkit.backends.testing.SimulatedBackend`: every round trip to a host costs ``--latency``
seconds, slept; ``sleep 10`` takes 10 s without a process) at N = 16, 128 and 1,000, each host
running ``--rounds`` runs of the ``command`` workload (``sleep --seconds``) in whole blocks. No
host is contacted: what is measured is the controller, on this machine's 2 shared cores.

Prints, per N:

* dispatch efficiency = Σ stored run time / (hosts × wall of the dispatch), the set-up (opening,
  cleaning and fingerprinting N hosts) excluded, and with it included;
* the controller's CPU per run (process CPU time during the dispatch / runs);
* store claims per second: claim + store of a run in a tight loop on a store of the same size
  (the capacity), beside what the fleet needs (hosts / run time);
* memory per host: the controller's peak RSS growth during the dispatch / hosts.

Targets at 1,000 hosts with 10-s runs: efficiency >= 0.95, CPU <= 5 ms per run, memory <= 1 MiB per
host. No assertion: this prints, you judge.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import threading
import time
from pathlib import Path

from labkit.backends.testing import SimulatedBackend
from labkit.design import Design
from labkit.run.campaign import Campaign
from labkit.run.claim_index import ClaimIndex
from labkit.run.platforms import BackendPool, Platform
from labkit.run.testbed import Host, Testbed
from labkit.store import Store, now_iso


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def testbed(hosts: int) -> Testbed:
    """N remote hosts offering the simulated platform; their liveness probe answers at once."""
    tb = Testbed(
        [Host(f"h{i:04d}", f"sim-{i}", platforms=("sim",)) for i in range(hosts)],
        {"sim": Platform("sim", "simulated", {})},
        name=f"sim-{hosts}",
    )
    tb.prober = lambda host, timeout, thorough: (True, "")
    return tb


def design(hosts: int, rounds: int) -> Design:
    # 2 configurations a block, rounds/2 blocks a host: every host runs `rounds` runs
    return Design.from_dict(
        {"name": "dispatch", "factors": {"vcpus": [1, 2]}, "replications": hosts * rounds // 2, "seed": 1}
    )


def one(hosts: int, rounds: int, seconds: float, latency: float, data: str) -> dict:
    d = design(hosts, rounds)
    tb = testbed(hosts)
    camp = Campaign(
        d,
        backend="sim",
        workload="command",
        workload_params={"argv": ["sleep", str(seconds)]},
        campaign_id=f"bench-dispatch-{hosts}",
        data_dir=data,
        testbed=tb,
        progress=False,
        telemetry=None,
        run_timeout=None,
    )
    store = Store.for_campaign(data, camp.campaign_id)
    store.set_meta(created=now_iso(), campaign_id=camp.campaign_id)
    pool = BackendPool(opener=lambda p, opts: SimulatedBackend(latency=latency, host="sim"))
    plan = d.plan()
    peak = [0.0]
    stop = threading.Event()

    def sample():
        while not stop.wait(0.25):
            peak[0] = max(peak[0], rss_mib())

    rss0 = rss_mib()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    engine = camp.dispatcher(tb, store, default_platform="sim", pool=pool)
    engine.prepare(plan)
    t1, c1 = time.perf_counter(), cpu_s()
    engine.run(plan, progress=False)
    t2, c2 = time.perf_counter(), cpu_s()
    stop.set()
    sampler.join()
    peak[0] = max(peak[0], rss_mib())
    engine.close()
    runs = store.runs()
    store.close()
    busy = float(runs.duration_s.sum())
    return {
        "hosts": hosts,
        "runs": len(runs),
        "ok": int((runs.status == "ok").sum()),
        "setup_s": t1 - t0,
        "wall_s": t2 - t1,
        "sum_run_s": busy,
        "efficiency": busy / (hosts * (t2 - t1)),
        "efficiency_with_setup": busy / (hosts * (t2 - t0)),
        "cpu_ms_per_run": 1000 * (c2 - c1) / max(1, len(runs)),
        "mib_per_host": max(0.0, peak[0] - rss0) / hosts,
    }


def claims_per_second(runs: int, data: str, seconds: float = 3.0) -> float:
    """Claim + store one run at a time on a store of ``runs`` runs, as a worker does: its candidates
    through the engine's :class:`~labkit.run.claim_index.ClaimIndex`, then :meth:`Store.claim`, then
    :meth:`Store.record_run` (one transaction each)."""
    d = Design.from_dict(
        {"name": "claims", "factors": {"vcpus": [1, 2]}, "replications": runs // 2, "seed": 1}
    )
    plan = d.plan()
    ids = [r.run_id for r in plan]
    by_id = {r.run_id: r for r in plan}
    index = ClaimIndex()
    index.reset(())
    n = 0
    with Store(Path(data) / "claims" / "store.sqlite") as st:
        t0 = time.perf_counter()
        while n < len(ids) and time.perf_counter() - t0 < seconds:
            rid = st.claim(index.claimable("h", lambda: {"h": ids}), "h", "bench", 30.0)
            if rid is None:
                break
            st.record_run(by_id[rid], status="ok", started=now_iso(), duration_s=1.0)
            index.stored(rid)
            n += 1
        return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="16,128,1000")
    ap.add_argument("--rounds", type=int, default=4, help="runs per host (even)")
    ap.add_argument("--seconds", type=float, default=10.0, help="each run's sleep")
    ap.add_argument("--latency", type=float, default=0.005, help="seconds per round trip to a host")
    args = ap.parse_args()
    rounds = max(2, args.rounds // 2 * 2)
    rows = []
    with tempfile.TemporaryDirectory(prefix="labkit-bench-dispatch-") as data:
        for n in (int(x) for x in args.hosts.split(",")):
            r = one(n, rounds, args.seconds, args.latency, data)
            rows.append(r)
            need = n / args.seconds
            r["claims_per_s"] = claims_per_second(r["runs"], f"{data}/c{n}")
            print(
                f"{n:>5} hosts: {r['ok']}/{r['runs']} ok, set-up {r['setup_s']:.1f} s, dispatch {r['wall_s']:.1f} s, "
                f"efficiency {r['efficiency']:.3f} ({r['efficiency_with_setup']:.3f} with the set-up; target "
                f">= 0.95 at 1,000), controller {r['cpu_ms_per_run']:.2f} ms CPU per run (target <= 5), "
                f"{r['mib_per_host'] * 1024:.0f} KiB per host (target <= 1024), store claims "
                f"{r['claims_per_s']:.0f}/s (the fleet needs {need:.1f}/s)",
                flush=True,
            )
    import pandas as pd

    print(pd.DataFrame(rows).round(3).to_string(index=False))


if __name__ == "__main__":
    main()
