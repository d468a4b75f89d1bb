"""Processes in tests: whether one runs, and a Python child killed with SIGKILL once it is ready."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def killed_when_ready(script: str, *args: str) -> Iterator[subprocess.Popen]:
    """Run ``python -c script args...`` (labkit importable), wait for its line ``ready``, SIGKILL it
    (what a killed campaign leaves) and yield it, dead; killed on every path out."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.strip() == "ready", (
            proc.stderr.read() if proc.poll() is not None and proc.stderr else line
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
