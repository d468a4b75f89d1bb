"""What labkit costs on top of the container tools: start + exec `true` + remove of one instance.

    python benchmarks/bench_containers.py [--rounds 20] [--backends docker,lxd]

For each backend, each round times one labkit cycle (provision, exec ``true``,
teardown) and one raw-CLI cycle with the same limits, alternating the two so that
load on the machine hits both alike:

    docker  docker run --rm --network none --memory 128m --memory-swap 128m --cpus 1 IMAGE true
    lxd     lxc launch IMAGE NAME --no-profiles -s POOL -c limits... ;
            lxc exec NAME -- true ; lxc delete --force NAME
            (the same init as labkit's, which brings loopback up)

Prints the median of each and the ratio labkit/raw (target: at most 1.10). It
asserts nothing about time: figures only.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cycle import SPEC, labkit_cycle  # noqa: E402

from labkit.backends import get_backend, new_name  # noqa: E402
from labkit.backends.lxd import INIT_CMD  # noqa: E402


def _sh(argv):
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.strip()}")


def docker_cli_cycle(backend) -> float:
    argv = [
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        "--memory",
        f"{SPEC.memory_mb}m",
        "--memory-swap",
        f"{SPEC.memory_mb}m",
        "--cpus",
        str(SPEC.vcpus),
        "--name",
        new_name("labkit-bench"),
        backend.image,
        "true",
    ]
    t0 = time.perf_counter()
    _sh(argv)
    return time.perf_counter() - t0


def lxd_cli_cycle(backend) -> float:
    name = new_name("labkit-bench")
    cfg = {
        "limits.memory": f"{SPEC.memory_mb}MiB",
        "limits.memory.enforce": "hard",
        "limits.memory.swap": "false",
        "limits.cpu.allowance": f"{SPEC.vcpus * 100}ms/100ms",
        "raw.lxc": f"lxc.init.cmd = {INIT_CMD}",
    }
    launch = ["lxc", "launch", backend.image, name, "--no-profiles", "-s", backend._pool()]
    for k, v in cfg.items():
        launch += ["-c", f"{k}={v}"]
    t0 = time.perf_counter()
    try:
        _sh(launch)
        _sh(["lxc", "exec", name, "--", "true"])
    finally:
        _sh(["lxc", "delete", "--force", name])
    return time.perf_counter() - t0


RAW = {
    "docker": (docker_cli_cycle, "docker run --rm"),
    "lxd": (lxd_cli_cycle, "lxc launch + lxc exec + lxc delete --force"),
}


def bench(name: str, rounds: int) -> dict:
    backend = get_backend(name)
    raw, raw_label = RAW[name]
    try:
        labkit_cycle(backend), raw(backend)  # warm caches and connections
        lk, cli = [], []
        for i in range(rounds):
            first, second = (labkit_cycle, raw) if i % 2 == 0 else (raw, labkit_cycle)
            a, b = first(backend), second(backend)
            (lk, cli)[first is raw].append(a)
            (lk, cli)[second is raw].append(b)
            print(f"  {name} round {i + 1:2d}/{rounds}: labkit {lk[-1]:.3f}s  raw {cli[-1]:.3f}s", flush=True)
    finally:
        backend.close()
    m_lk, m_cli = statistics.median(lk), statistics.median(cli)
    return {"backend": name, "raw": raw_label, "labkit_s": m_lk, "raw_s": m_cli, "ratio": m_lk / m_cli}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--backends", default="docker,lxd")
    args = ap.parse_args(argv)
    rows = []
    for name in [b for b in args.backends.split(",") if b]:
        print(f"{name}: {args.rounds} rounds of start + exec true + remove", flush=True)
        rows.append(bench(name, args.rounds))
    print()
    print(f"{'backend':8} {'labkit median':>14} {'raw CLI median':>15} {'ratio':>7}  raw CLI")
    for r in rows:
        print(f"{r['backend']:8} {r['labkit_s']:13.3f}s {r['raw_s']:14.3f}s {r['ratio']:7.3f}  {r['raw']}")
    print("target: ratio <= 1.10 (labkit / raw CLI, medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
