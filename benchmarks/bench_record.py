"""Recording rate of a campaign's runs: one transaction per run (before issue 45) vs group commit.

Each run is written as a fleet worker writes it (:meth:`labkit.run.engine.Dispatcher._claim` and
``_record``): its claim (:meth:`Store.claim_group <labkit.store.Store.claim_group>`), the check that
the claim is still the worker's, its command output file (:meth:`~labkit.store.Store.write_run_output`;
left out with ``--no-output``), then the run with 3 measurements and 200 telemetry rows (10 s at
1 Hz, 20 metrics), either

* **old**: :meth:`~labkit.store.Store.record_run`, one transaction per run (what the engine did
  before group commit), or
* **new**: :class:`~labkit.store.group.GroupCommit` as the engine uses it (up to 64 runs or 50 ms
  in one transaction; a run reported done only after its commit), flushed at the end.

Prints runs/s of each (and the CPU time this process spent per run, less sensitive to other load),
side by side, and the ratio new / old, with the machine's load average before and after (runs/s on
a machine whose load exceeds its cores measures the load as much as the store). Both modes write
a run's 200 telemetry rows as ready tuples; group commit writes those of all the runs of a batch with
one statement (:func:`labkit.store.samples.insert_samples`). Never asserts a duration: this prints,
you judge (a loaded machine's numbers vary; the two modes alternate, each ``--repeat`` times, and
the best of each is shown beside the median).

    .venv/bin/python benchmarks/bench_record.py                 # 5,000 runs per mode
    .venv/bin/python benchmarks/bench_record.py --runs 20000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _sim_runs  # noqa: E402  (benchmarks/: the simulated runs of issue 45)

CID = "rec"
OWNER = "bench:1:0"


def plan(runs: int):
    return _sim_runs.plan("rec", runs)


def record(data: Path, design, runs: list, *, group: bool, output: bool) -> tuple[float, float, int]:
    """Write ``runs`` into a new store under ``data``; (runs/s, CPU ms per run of this process, transactions
    that wrote runs)."""
    from labkit.store import Store, now_iso
    from labkit.store.group import GroupCommit

    st = Store.for_campaign(data, CID)
    st.set_meta(
        campaign_id=CID,
        design=design.to_dict(),
        backend="sim",
        created=now_iso(),
        workload={"name": "sim", "response": "wall_time_s"},
    )
    done: list[str] = []
    writer = GroupCommit(st, owner=OWNER, on_done=done.append)
    t0, c0 = time.perf_counter(), time.process_time()
    for r in runs:
        with (
            writer.lock
        ):  # the connection's lock, as the fleet's (the timer writes a batch on its own thread)
            if not st.claim_group([[r.run_id]], "h1", OWNER, 60.0):
                raise SystemExit(f"run {r.run_id} not claimed")
            if st.claim_owner(r.run_id) != OWNER:
                raise SystemExit(f"run {r.run_id}: claim lost")
        if output:
            st.write_run_output(r.run_id, f"$ sim run {r.run_id}\n" + "output line\n" * 40, "ok")
        result = _sim_runs.result(r, CID)
        if group:
            with writer.lock:
                writer.add(r, **result)
        else:
            st.record_run(r, **result)
            done.append(r.run_id)
    writer.flush()
    rate = len(runs) / (time.perf_counter() - t0)
    cpu_ms = 1e3 * (time.process_time() - c0) / len(runs)
    if len(done) != len(runs) or len(st.completed()) != len(runs) or st.claims():
        raise SystemExit(f"{len(done)} reported done, {len(st.completed())} stored of {len(runs)}")
    st.close()
    return rate, cpu_ms, writer.transactions if group else len(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5000, help="runs per campaign (default 5000)")
    ap.add_argument("--repeat", type=int, default=2, help="campaigns per mode (default 2)")
    ap.add_argument("--no-output", action="store_true", help="leave out the per-run output file")
    args = ap.parse_args()
    design, runs = plan(args.runs)
    rates: dict[str, list[float]] = {"old": [], "new": []}
    cpus: dict[str, list[float]] = {"old": [], "new": []}
    txs: dict[str, int] = {}
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="labkit-bench-record-") as tmp:
        for i in range(args.repeat):
            for mode in ("old", "new"):
                rate, cpu, n_tx = record(
                    Path(tmp) / f"{mode}{i}", design, runs, group=mode == "new", output=not args.no_output
                )
                rates[mode].append(rate)
                cpus[mode].append(cpu)
                txs[mode] = n_tx
                print(
                    f"  {mode} #{i + 1}: {rate:7.0f} runs/s, {cpu:.2f} CPU ms/run ({n_tx} transactions writing runs)",
                    flush=True,
                )
    what = "without" if args.no_output else "with"
    load1 = os.getloadavg()
    print(
        f"\n{args.runs:,d} runs, 3 measurements and 200 telemetry rows each, {what} the output file; "
        f"load average (1/5/15 min) {'/'.join(f'{x:.2f}' for x in load0)} before, "
        f"{'/'.join(f'{x:.2f}' for x in load1)} after, {os.cpu_count()} CPUs"
    )
    print(f"{'':24s}{'old (1 tx/run)':>18s}{'new (group commit)':>20s}{'new / old':>11s}")
    for label, pick in (("best runs/s", max), ("median runs/s", statistics.median)):
        old, new = pick(rates["old"]), pick(rates["new"])
        print(f"{label:24s}{old:18.0f}{new:20.0f}{new / old:10.2f}x")
    old, new = statistics.median(cpus["old"]), statistics.median(cpus["new"])
    print(f"{'median CPU ms/run':24s}{old:18.3f}{new:20.3f}{new / old:10.2f}x")
    print(f"{'transactions (runs)':24s}{txs['old']:18d}{txs['new']:20d}")


if __name__ == "__main__":
    main()
