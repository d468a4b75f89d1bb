"""A real campaign on the local backend that holds each run until told to go (issue 28).

:func:`start_gated` starts ``Campaign(...).run()`` in a child process whose workload, once its
instance exists, writes the instance's name to ``<tmp>/<cid>.started`` and waits for
``<tmp>/<cid>.go``: a test (or reliability/security_registry.py) then acts while the campaign
is known to be running, with no timing assumption. The child prints ``STATUS ok,ok`` when both
runs are stored ok. :func:`labkit_cli` runs ``python -m labkit`` without a terminal.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

GATED = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from labkit.run.campaign import Campaign
    from labkit.workloads import Measurement, Workload

    cid, data_dir, started, go = sys.argv[1:5]

    class Gate(Workload):
        name = "gate"
        defaults = {}

        def run(self, instance, params):
            instance.exec(["true"])
            Path(started).write_text(instance.name)
            while not Path(go).exists():
                time.sleep(0.05)
            return [Measurement("wall_time_s", 0.01, "s", instance.index)]

    store = Campaign({"factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 3}, backend="local",
                     workload=Gate(), campaign_id=cid, data_dir=data_dir, progress=False).run()
    print("STATUS", ",".join(sorted(store.runs().status)), flush=True)
""")


def start_gated(
    cid: str, data_dir: Path, tmp: Path, hang_s: float = 300
) -> tuple[subprocess.Popen, Path, Path]:
    """Start campaign ``cid`` in ``data_dir``; return (process, started file, go file) once its first
    run's instance exists. RuntimeError (with the child's output) if it ends or hangs first."""
    started, go = tmp / f"{cid}.started", tmp / f"{cid}.go"
    proc = subprocess.Popen(
        [sys.executable, "-c", GATED, cid, str(data_dir), str(started), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    deadline = time.monotonic() + hang_s  # a bound for a hang, not a measurement
    while not started.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"campaign {cid} did not start its first run: {proc.communicate()}")
        time.sleep(0.05)
    return proc, started, go


def labkit_cli(*args: str, wrap: str = "") -> subprocess.CompletedProcess:
    """``python -m labkit args`` with no terminal; ``wrap``: a shell command run first in a private
    mount namespace (e.g. a read-only bind mount of the data dir)."""
    argv = [sys.executable, "-m", "labkit", *args]
    if wrap:
        argv = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"{wrap} && exec {shlex.join(argv)}",
        ]
    return subprocess.run(
        argv, capture_output=True, text=True, env=ENV, stdin=subprocess.DEVNULL, timeout=600
    )
