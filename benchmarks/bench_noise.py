"""Run-to-run noise through labkit against the host: coefficient of variation of N-queens.

labkit's N-queens solver (one thread, board sized for about one second here) runs
``--runs`` times (default 30) in one pinned 1-vCPU instance of each backend, and
``hyperfine`` runs the same binary ``--runs`` times on the host pinned to the same
CPU with ``taskset``. Printed per backend: the CV of the solver's own clock and of
labkit's exec duration, and their ratio to hyperfine's CV (< 1: quieter than the
host reference). Targets (issue 12): local <= 1.0x, containers <= 1.2x.
``local-noiso`` is the local backend with ``isolation: none`` (issue 28): beside
``local`` (isolation ``strict``), it shows what the isolation costs in noise.

A backend that cannot run here is listed as skipped with the reason. No
assertion: the machine is shared; this prints figures, you judge.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.backends import get_backend, teardown  # noqa: E402
from labkit.core import cbuild  # noqa: E402
from labkit.core.instance import InstanceSpec  # noqa: E402
from labkit.errors import LabkitError  # noqa: E402
from labkit.workloads.nqueens import parse  # noqa: E402

BACKENDS = ("local", "local-noiso", "docker", "lxd", "libvirt", "ssh")
#: names of this script -> (backend, options)
VARIANTS = {"local-noiso": ("local", {"isolation": "none"})}


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values)


def board_for(binary: Path, target_s: float) -> int:
    """The smallest board whose single-thread solve takes at least ``target_s`` on CPU 0."""
    for board in range(10, 18):
        out = subprocess.run(["taskset", "-c", "0", str(binary), str(board), "1"],
                             capture_output=True, text=True, check=True).stdout
        if parse(out)[3] >= target_s * 0.6:
            return board
    return 17


def host_reference(binary: Path, board: int, runs: int) -> float:
    """CV of hyperfine's wall times for the pinned binary on the host."""
    if not shutil.which("hyperfine"):
        raise SystemExit("hyperfine is missing: apt-get install hyperfine (make setup-tools does it)")
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(["hyperfine", "-N", "--warmup", "2", "--runs", str(runs), "--export-json", out.name,
                        f"taskset -c 0 {binary} {board} 1"], check=True, capture_output=True)
        times = json.loads(Path(out.name).read_text())["results"][0]["times"]
    return cv(times)


def through_labkit(name: str, binary: Path, board: int, runs: int) -> tuple[float, float]:
    """(CV of the solver's clock, CV of exec durations) in a pinned 1-vCPU instance."""
    backend, options = VARIANTS.get(name, (name, {}))
    be = get_backend(backend, **options)
    try:
        (inst,) = be.provision(InstanceSpec(vcpus=1, memory_mb=256, affinity="pinned"),
                               prefix="labkit-bench-noise--")
        try:
            inst.put(binary, f"{inst.workdir}/nqueens")
            argv = [f"{inst.workdir}/nqueens", str(board), "1"]
            inst.exec(argv, timeout=600)
            inst.exec(argv, timeout=600)                 # two warm-ups, as hyperfine does
            solver, durations = [], []
            for _ in range(runs):
                res = inst.exec(argv, timeout=600)
                solver.append(parse(res.stdout)[3])
                durations.append(res.duration_s)
        finally:
            teardown([inst])
    finally:
        be.close()
    return cv(solver), cv(durations)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=1.0, help="target length of one solve")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    args = ap.parse_args()
    binary = cbuild.build("nqueens.c")
    board = board_for(binary, args.seconds)
    ref = host_reference(binary, board, args.runs)
    print(f"N-queens board {board}, 1 thread, {args.runs} runs; host (hyperfine, taskset -c 0): CV {ref:.4f}")
    print(f"{'backend':10} {'CV solver':>10} {'CV exec':>10} {'ratio solver':>13} {'ratio exec':>11}")
    for name in args.backends.split(","):
        try:
            c_solver, c_exec = through_labkit(name, binary, board, args.runs)
        except LabkitError as exc:
            print(f"{name:10} skipped: {str(exc).splitlines()[0][:100]}")
            continue
        print(f"{name:10} {c_solver:10.4f} {c_exec:10.4f} {c_solver / ref:12.2f}x {c_exec / ref:10.2f}x")


if __name__ == "__main__":
    main()
