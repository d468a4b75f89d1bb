"""Run-to-run noise through labkit against the host: coefficient of variation of N-queens.

labkit's N-queens solver (one thread, board sized for about one second here) runs
``--runs`` times (default 30) in one pinned 1-vCPU instance of each backend, and
``hyperfine`` runs the same binary ``--runs`` times on the host pinned to the same
CPU with ``taskset``. Printed per backend: the CV of the solver's own clock and of
labkit's exec duration, and their ratio to hyperfine's CV (< 1: quieter than the
host reference). Targets (issue 12): local <= 1.0x, containers <= 1.2x.
``local-noiso`` is the local backend with ``isolation: none`` (issue 28): beside
``local`` (isolation ``strict``), it shows what the isolation costs in noise. The two are
measured side by side (below), never one after the other: measured apart, on a shared machine,
they once differed (CV ratios 1.17 and 0.89) by nothing but the load of their minutes.

``--interleave A,B,...`` measures those variants side by side instead: one pinned instance of
each made at once, then ``--runs`` rounds in which each variant (and ``host``: the binary run
with ``taskset -c 0`` from this process) solves once, in an order shuffled per round, so slow
phases of a shared machine fall on all of them alike. Printed per variant: the CV of the
solver's clock with its 95 % bootstrap interval (percentile, resampling runs), and for each
pair with the first variant the ratio of their CVs with its interval (resampling rounds,
paired) and Levene's test of equal spread (median-centred, on the solver's times).
With ``--rusage`` each solve runs under a small Python wrapper that also reports the solver's
CPU time (user + system) and its involuntary context switches (``getrusage`` of the child): CPU
time is what the solver itself did (a sandbox that added work would show there), the switches
how often something else took its CPU; both barely depend on how loaded the machine is.
Variants: the backend names, ``local-noiso``, ``local-relaxed`` (capabilities kept) and
``local-nonet`` (no network namespace), each as ``name`` or ``name:opt=value,...``.

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
VARIANTS = {
    "local-noiso": ("local", {"isolation": "none"}),
    "local-relaxed": ("local", {"isolation": "relaxed"}),
    "local-nonet": ("local", {"network": "host"}),
}
BOOTSTRAP = 10000
#: runs argv, prints its output then "RUSAGE <cpu s> <involuntary switches>" of it
RUSAGE = (
    "import resource, subprocess, sys\n"
    "out = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True).stdout\n"
    "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(out.strip()); print('RUSAGE', r.ru_utime + r.ru_stime, r.ru_nivcsw)\n"
)


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values)


def board_for(binary: Path, target_s: float) -> int:
    """The smallest board whose single-thread solve takes at least ``target_s`` on CPU 0."""
    for board in range(10, 18):
        out = subprocess.run(
            ["taskset", "-c", "0", str(binary), str(board), "1"], capture_output=True, text=True, check=True
        ).stdout
        if parse(out)[3] >= target_s * 0.6:
            return board
    return 17


def host_reference(binary: Path, board: int, runs: int) -> float:
    """CV of hyperfine's wall times for the pinned binary on the host."""
    if not shutil.which("hyperfine"):
        raise SystemExit("hyperfine is missing: apt-get install hyperfine (make setup-tools does it)")
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            [
                "hyperfine",
                "-N",
                "--warmup",
                "2",
                "--runs",
                str(runs),
                "--export-json",
                out.name,
                f"taskset -c 0 {binary} {board} 1",
            ],
            check=True,
            capture_output=True,
        )
        times = json.loads(Path(out.name).read_text())["results"][0]["times"]
    return cv(times)


def through_labkit(name: str, binary: Path, board: int, runs: int) -> tuple[float, float]:
    """(CV of the solver's clock, CV of exec durations) in a pinned 1-vCPU instance."""
    backend, options = variant(name)
    be = get_backend(backend, **options)
    try:
        (inst,) = be.provision(
            InstanceSpec(vcpus=1, memory_mb=256, affinity="pinned"), prefix="labkit-bench-noise--"
        )
        try:
            inst.put(binary, f"{inst.workdir}/nqueens")
            argv = [f"{inst.workdir}/nqueens", str(board), "1"]
            inst.exec(argv, timeout=600)
            inst.exec(argv, timeout=600)  # two warm-ups, as hyperfine does
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


def variant(name: str) -> tuple[str, dict]:
    """(backend, options) of a variant name, ``name:key=value,...`` adding options (JSON values)."""
    base, _, extra = name.partition(":")
    backend, options = VARIANTS.get(base, (base, {}))
    options = dict(options)
    for item in filter(None, extra.split(",")):
        key, _, value = item.partition("=")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return backend, options


def interval(samples, stat, rng, rounds: int = BOOTSTRAP) -> tuple[float, float]:
    """95 % percentile bootstrap interval of ``stat`` over ``samples`` (arrays of one length,
    resampled together: paired)."""
    import numpy as np

    n = len(samples[0])
    idx = rng.integers(0, n, size=(rounds, n))
    values = np.array([stat(*(s[i] for s in samples)) for i in idx])
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def interleaved(
    names: list[str], binary: Path, board: int, runs: int, seed: int, rusage: bool = False
) -> None:
    """Side-by-side rounds of ``names`` and ``host`` (see the module docstring); prints the table."""
    import numpy as np
    from scipy import stats

    rng = np.random.default_rng(seed)
    backends, insts = {}, {}
    try:
        for name in names:
            backend, options = variant(name)
            backends[name] = be = get_backend(backend, **options)
            (insts[name],) = be.provision(
                InstanceSpec(vcpus=1, memory_mb=256, affinity="pinned"), prefix="labkit-bench-noise--"
            )
            insts[name].put(binary, f"{insts[name].workdir}/nqueens")
        arms = ["host", *names]

        def solve(arm: str) -> tuple[float, float, float]:
            """(solver's clock, CPU s, involuntary switches; the last two NaN without --rusage)"""
            where = str(binary) if arm == "host" else f"{insts[arm].workdir}/nqueens"
            argv = ["python3", "-c", RUSAGE] if rusage else []
            argv += [where, str(board), "1"]
            if arm == "host":
                out = subprocess.run(
                    ["taskset", "-c", "0", *argv], capture_output=True, text=True, check=True
                ).stdout
            else:
                out = insts[arm].exec(argv, timeout=600).stdout
            usage = [line.split()[1:] for line in out.splitlines() if line.startswith("RUSAGE ")]
            cpu, switches = (
                (float(usage[0][0]), float(usage[0][1])) if usage else (float("nan"), float("nan"))
            )
            return parse(out)[3], cpu, switches

        for _ in range(2):  # warm-ups, as hyperfine does
            for arm in arms:
                solve(arm)
        times: dict[str, list[tuple[float, float, float]]] = {a: [] for a in arms}
        for _ in range(runs):
            for arm in rng.permutation(arms):
                times[str(arm)].append(solve(str(arm)))
    finally:
        teardown(list(insts.values()))
        for be in backends.values():
            be.close()
    data = {a: np.array([t[0] for t in v]) for a, v in times.items()}
    cpu = {a: np.array([t[1] for t in v]) for a, v in times.items()}
    switches = {a: np.array([t[2] for t in v]) for a, v in times.items()}

    def cv_of(x):
        return float(np.std(x, ddof=1) / np.mean(x))

    def rcv_of(x):  # robust: 1.4826 MAD / median (a normal sample's CV; one slow outlier moves it little)
        return float(1.4826 * np.median(np.abs(x - np.median(x))) / np.median(x))

    print(
        f"interleaved, {runs} rounds in shuffled order (seed {seed}); CV of the solver's clock, 95 % bootstrap; "
        "rCV: 1.4826 MAD / median:"
    )
    print(
        f"{'arm':16} {'mean s':>8} {'CV':>8} {'95% interval':>20} {'rCV':>8}"
        + (
            f" {'CPU s':>8} {'CV CPU':>8} {'95% interval':>20} {'rCV CPU':>8} {'invol. sw.':>10}"
            if rusage
            else ""
        )
    )
    for a in arms:
        lo, hi = interval([data[a]], cv_of, rng)
        line = f"{a:16} {data[a].mean():8.4f} {cv_of(data[a]):8.4f}   [{lo:.4f}, {hi:.4f}] {rcv_of(data[a]):8.4f}"
        if rusage:
            clo, chi = interval([cpu[a]], cv_of, rng)
            line += (
                f" {cpu[a].mean():8.4f} {cv_of(cpu[a]):8.4f}   [{clo:.4f}, {chi:.4f}] {rcv_of(cpu[a]):8.4f}"
                f" {np.median(switches[a]):10.0f}"
            )
        print(line)
    first = names[0]
    for other in [*names[1:], "host"]:
        lo, hi = interval([data[first], data[other]], lambda x, y: cv_of(x) / cv_of(y), rng)
        p = stats.levene(data[first], data[other], center="median").pvalue
        print(
            f"CV {first} / CV {other}: {cv_of(data[first]) / cv_of(data[other]):.2f} [{lo:.2f}, {hi:.2f}]; "
            f"Levene p = {p:.2f}"
        )
        if rusage:
            lo, hi = interval([cpu[first], cpu[other]], lambda x, y: cv_of(x) / cv_of(y), rng)
            p = stats.levene(cpu[first], cpu[other], center="median").pvalue
            print(
                f"  CPU time: CV {first} / CV {other}: {cv_of(cpu[first]) / cv_of(cpu[other]):.2f} "
                f"[{lo:.2f}, {hi:.2f}]; Levene p = {p:.2f}; mean {cpu[first].mean() / cpu[other].mean():.3f}x"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=1.0, help="target length of one solve")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--interleave", help="comma list of variants measured side by side (see above)")
    ap.add_argument("--seed", type=int, default=1, help="of the round orders and the bootstrap")
    ap.add_argument(
        "--rusage",
        action="store_true",
        help="with --interleave: also the solver's CPU time and involuntary context switches",
    )
    args = ap.parse_args()
    binary = cbuild.build("nqueens.c")
    board = board_for(binary, args.seconds)
    if args.interleave:
        ref = host_reference(binary, board, args.runs)
        print(
            f"N-queens board {board}, 1 thread; host (hyperfine, taskset -c 0, {args.runs} runs): CV {ref:.4f}"
        )
        interleaved(args.interleave.split(","), binary, board, args.runs, args.seed, args.rusage)
        return
    ref = host_reference(binary, board, args.runs)
    print(f"N-queens board {board}, 1 thread, {args.runs} runs; host (hyperfine, taskset -c 0): CV {ref:.4f}")
    print(f"{'backend':10} {'CV solver':>10} {'CV exec':>10} {'ratio solver':>13} {'ratio exec':>11}")
    names = args.backends.split(",")
    for name in names:
        if name == "local-noiso" and "local" in names:
            continue  # measured beside local, below
        try:
            c_solver, c_exec = through_labkit(name, binary, board, args.runs)
        except LabkitError as exc:
            print(f"{name:10} skipped: {str(exc).splitlines()[0][:100]}")
            continue
        print(f"{name:10} {c_solver:10.4f} {c_exec:10.4f} {c_solver / ref:12.2f}x {c_exec / ref:10.2f}x")
    if "local" in names and "local-noiso" in names:  # what isolation costs: only side by side
        print("\nlocal isolation strict against none, side by side:")
        interleaved(["local", "local-noiso"], binary, board, args.runs, args.seed, rusage=True)


if __name__ == "__main__":
    main()
