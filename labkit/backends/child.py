"""A command run as a child process of the controller, its output drained as it comes.

The ``local`` backend and a private network's host end run commands on this machine:
:func:`start` starts one in its own session (stdin empty) and drains its stdout and
stderr into capped sinks on two threads (:class:`~.output.PipeReader`), so the
controller keeps at most the head and tail of each stream whatever the command prints;
:func:`wait` waits for it to exit and for both pipes to close (a child it left behind
that still holds them keeps it "running", as ``communicate`` would). It waits on a pidfd
(``poll``), not by polling ``waitpid`` with growing sleeps as ``Popen.wait(timeout)`` does: a
command's end is seen when it happens, not up to 50 ms later (which inflated every measured
duration).
"""

from __future__ import annotations

import math
import os
import select
import subprocess
import time

from .base import RawResult
from .output import PipeReader


class Child:
    """A started command: its ``Popen`` (``proc``), ``pid`` (its session and process group)
    and the ``output`` reader."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.pid = proc, proc.pid
        self.output = PipeReader(proc.stdout, proc.stderr)


def start(argv: list[str], *, cwd, env: dict) -> Child:
    """Start ``argv`` in ``cwd`` with environment ``env``, in a new session, stdin empty.
    Raises what ``Popen`` raises (FileNotFoundError for a missing program)."""
    return Child(
        subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    )


def wait(child: Child, timeout: float | None) -> RawResult | None:
    """Its :class:`RawResult` (exit code ``128 + n`` when killed by signal ``n``) once it has
    exited and both pipes are closed; None if that has not happened within ``timeout`` s."""
    deadline = None if timeout is None else time.monotonic() + timeout
    if not exited(child.proc, timeout):
        return None
    code = child.proc.wait()
    if not child.output.join(None if deadline is None else max(0.0, deadline - time.monotonic())):
        return None
    return RawResult.from_sinks(code if code >= 0 else 128 - code, child.output.stdout, child.output.stderr)


def exited(proc: subprocess.Popen, timeout: float | None) -> bool:
    """Whether ``proc`` (our child, not yet reaped by anyone else) exits within ``timeout`` s
    (None: waits as long as it takes), seen on its pidfd; falls back to ``Popen.wait`` where
    the kernel has no pidfds."""
    if timeout is None or proc.returncode is not None:
        return True
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:  # no pidfd_open (Linux < 5.3)
        try:
            proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(math.ceil(max(0.0, timeout) * 1000)))
    finally:
        os.close(fd)
