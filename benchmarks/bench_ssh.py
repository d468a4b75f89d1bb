"""What labkit's ssh backend costs on top of plain ssh: provision + exec `true` + teardown.

    python benchmarks/bench_ssh.py [--rounds 20]

The host comes from LABKIT_SSH_HOST/_PORT/_USER/_KEY, as for the backend
(``bash scripts/setup-ssh.sh`` starts one on 127.0.0.1:2222). Each round times,
alternating the order so that load on the machine hits both alike:

    labkit   provision one instance (a cgroup with cpuset, quota and memory limit, and a
             work dir), exec ``true`` in it, tear it down, over the backend's open connection
    raw      ssh -i KEY -p PORT -o BatchMode=yes USER@HOST true   (a new connection each time)

and, for reference, labkit's exec ``true`` alone in a standing instance. Prints the
medians and the ratio labkit / raw. It asserts nothing about time: figures only.
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

from labkit.backends import get_backend, teardown  # noqa: E402


def raw_argv(backend) -> list[str]:
    argv = [
        "ssh",
        "-p",
        str(backend.port),
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "-o",
        f"ConnectTimeout={int(backend.connect_timeout)}",
    ]
    if backend.key_filename:
        argv += ["-i", backend.key_filename, "-o", "IdentitiesOnly=yes"]
    return argv + [f"{backend.user}@{backend.host}", "true"]


def raw_cycle(argv) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return elapsed


def exec_only(inst) -> float:
    t0 = time.perf_counter()
    inst.exec(["true"])
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    backend = get_backend("ssh")
    raw = raw_argv(backend)
    print(
        f"ssh backend at {backend.target}: {args.rounds} rounds of provision + exec true + teardown "
        f"vs `{' '.join(raw)}`",
        flush=True,
    )
    lk, cli, ex = [], [], []
    try:
        labkit_cycle(backend), raw_cycle(raw)  # warm caches
        for i in range(args.rounds):
            if i % 2 == 0:
                lk.append(labkit_cycle(backend))
                cli.append(raw_cycle(raw))
            else:
                cli.append(raw_cycle(raw))
                lk.append(labkit_cycle(backend))
            print(
                f"  round {i + 1:2d}/{args.rounds}: labkit {lk[-1]:.3f}s  raw ssh {cli[-1]:.3f}s", flush=True
            )
        (inst,) = backend.provision(SPEC, prefix="labkit-bench")
        try:
            ex = [exec_only(inst) for _ in range(args.rounds)]
        finally:
            teardown([inst])
    finally:
        backend.close()
    m_lk, m_cli, m_ex = statistics.median(lk), statistics.median(cli), statistics.median(ex)
    print()
    print(f"labkit provision+exec+teardown median {m_lk:.3f}s")
    print(f"raw `ssh host true` median            {m_cli:.3f}s")
    print(f"ratio labkit / raw ssh                {m_lk / m_cli:.3f}")
    print(f"labkit exec `true` alone median       {m_ex:.3f}s  (ratio {m_ex / m_cli:.3f} to raw ssh)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
