"""Campaign efficiency on the local backend: sum of benchmark wall times / campaign wall time.

Runs a 2^2 design x 8 replications (32 runs) of a 1-second workload (`sleep 1`
inside each instance) and prints the figures. Target: efficiency >= 0.97.
No assertion on time: the machine is shared and noisy; this prints, you judge.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import pandas as pd

from labkit.campaign import Campaign
from labkit.design import Design


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=1.0, help="length of each run")
    ap.add_argument("--replications", type=int, default=8)
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="labkit-bench-")
    try:
        design = Design.from_dict({"factors": {"vcpus": [1, 2], "affinity": ["floating", "pinned"]},
                                   "replications": args.replications, "seed": 1})
        t0 = time.perf_counter()
        store = Campaign(design, workload="command", workload_params={"argv": ["sleep", str(args.seconds)]},
                         campaign_id="bench", data_dir=data, progress=False).run()
        total = time.perf_counter() - t0
        tidy = store.tidy()
        bench = tidy.loc[tidy.metric == "wall_time_s", "value"].sum()
        runs = tidy.run_id.nunique()
        r = store.runs()
        starts = pd.to_datetime(r.started)
        loop = ((starts.max() + pd.to_timedelta(r.loc[starts.idxmax(), "duration_s"], unit="s"))
                - starts.min()).total_seconds()
        print(f"runs                      {runs}")
        print(f"run length asked          {args.seconds:.3f} s")
        print(f"sum of benchmark times    {bench:.3f} s")
        print(f"campaign wall time        {total:.3f} s")
        print(f"overhead per run          {(total - bench) / runs * 1000:.1f} ms")
        print(f"run loop wall time        {loop:.3f} s   (first run start to last run end)")
        print(f"efficiency, whole         {bench / total:.4f}   (target >= 0.97; includes start-up and export)")
        print(f"efficiency, run loop      {bench / loop:.4f}")
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
