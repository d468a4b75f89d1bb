"""The local sandbox's cost across a code change: this checkout against a git revision, side by side.

What a run's instance goes through on the ``local`` backend with isolation ``strict`` (made, ``true``
run once, destroyed) is timed for the code of ``--rev`` (default ``HEAD``: on a clean checkout the
two sides are the same code, a check of the method) and for this checkout, in alternating blocks of
``--block`` rounds (default 10), ``--blocks`` blocks each (default 6), each block in a fresh Python
process (so each side builds and uses its own ``lkns``). Printed: the median of each side, the ratio
of the medians (this checkout / the revision) and the median of the paired differences (round i
of a block against round i of the revision's block just before it) with its exact distribution-free
95 % interval (:func:`labkit.stats.quantile_ci`): an interval that holds 0 means the change costs
nothing measurable at that many rounds. Issue 47 used it for the user namespace, the private
``/tmp`` and ``/dev`` and the bounded hidden set (``--rev`` the commit before them).

Needs root (cgroups and namespaces). No assertion on time: the machine is shared; this prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from labkit.stats import quantile_ci  # noqa: E402

#: one block: ``argv[1]`` the tree to import labkit from, ``argv[2]`` rounds; prints the times (ms)
CYCLE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from labkit.backends import get_backend, teardown
from labkit.core.instance import InstanceSpec
be = get_backend("local")
out = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    insts = be.provision(InstanceSpec(vcpus=1, memory_mb=256, count=1), prefix="labkit-bench-sbx-")
    try:
        insts[0].exec(["true"], timeout=60)
    finally:
        teardown(insts)
    out.append((time.perf_counter() - t) * 1000)
print(json.dumps(out))
"""


def block(tree: Path, rounds: int) -> list[float]:
    res = subprocess.run(
        [sys.executable, "-c", CYCLE, str(tree), str(rounds)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tree,
    )
    if res.returncode != 0:
        raise SystemExit(f"a block in {tree} failed: {res.stderr.strip()[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", default="HEAD", help="the git revision to compare with (default HEAD)")
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--block", type=int, default=10, help="rounds per block")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_sandbox_change: needs root (the local backend's isolation); skipped")
        return
    with tempfile.TemporaryDirectory(prefix="labkit-bench-rev-") as tmp:
        old = Path(tmp)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.rev], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        before: list[float] = []
        after: list[float] = []
        for _ in range(args.blocks):
            before += block(old, args.block)
            after += block(ROOT, args.block)
    diffs = np.array(after) - np.array(before)
    ci = quantile_ci(diffs, q=0.5, confidence=0.95).iloc[0]
    print(
        f"local isolation strict, make + exec `true` + destroy, {len(after)} rounds a side "
        f"({args.blocks} alternating blocks of {args.block})"
    )
    print(f"  {args.rev:>12}: median {statistics.median(before):7.2f} ms")
    print(
        f"  {'this checkout':>12}: median {statistics.median(after):7.2f} ms   "
        f"ratio of medians {statistics.median(after) / statistics.median(before):.3f}"
    )
    print(
        f"  paired differences (this checkout - {args.rev}): median {ci.estimate:+.2f} ms, "
        f"exact 95 % interval [{ci.low:+.2f}, {ci.high:+.2f}] ms"
    )
    print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
