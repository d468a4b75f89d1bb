"""``labkit dashboard`` as a real subprocess, for tests and reliability rows.

:func:`running_dashboard` starts ``python -m labkit dashboard`` on a free port of 127.0.0.1
(token in the environment as always; Jupyter's config and runtime dirs in a temporary
directory), waits until the page answers, and yields a :class:`Dashboard`: its processes found
by ancestry (psutil: ``labkit dashboard`` > Voila > kernels), page loads over plain HTTP (the
page's websocket is never opened: nothing runs its JavaScript), and memory. On the way out,
whatever happened, every process it ever saw is killed, so a test leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
#: the issue's bound: Voila and its kernels gone within this many seconds of a stop signal
STOP_BOUND = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def running(p: psutil.Process) -> bool:
    """Whether ``p`` (the same process, not a reused pid) still runs; a zombie has ended."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


class Dashboard:
    """One ``labkit dashboard`` subprocess (``proc``) serving ``url`` (with its token) on ``port``."""

    def __init__(self, proc: subprocess.Popen, url: str, port: int, log: Path):
        self.proc, self.url, self.port, self.log = proc, url, port, log
        self.labkit = psutil.Process(proc.pid)
        self.seen: dict[int, psutil.Process] = {}

    def processes(self) -> list[psutil.Process]:
        """Voila and its kernels running now (descendants of ``labkit dashboard``), remembered
        in ``seen`` for :meth:`left` and the final clean-up."""
        try:
            now = self.labkit.children(recursive=True)
        except psutil.NoSuchProcess:
            now = []
        for p in now:
            self.seen.setdefault(p.pid, p)
        return [p for p in now if running(p)]

    def kernels(self) -> list[psutil.Process]:
        """The kernel processes running now (``ipykernel`` in their command line)."""
        return [p for p in self.processes() if "ipykernel" in _cmdline(p)]

    def voila(self) -> list[psutil.Process]:
        return [p for p in self.processes() if "-m voila" in _cmdline(p)]

    def left(self) -> list[psutil.Process]:
        """Every process of it ever seen that still runs (wherever it was re-parented to)."""
        return [p for p in self.seen.values() if running(p)]

    def rss_mb(self) -> float:
        """Resident memory of Voila and its kernels now, MB."""
        total = 0
        for p in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                total += p.memory_info().rss
        return total / 2**20

    def load(self, timeout: float = 600, first: int | None = None) -> tuple[int, str]:
        """GET the page with its token, read to the end (or its ``first`` bytes, then hang up, as
        a reader reloading does): (HTTP status, body). The page's JavaScript never runs, so its
        kernel's websocket is never opened."""
        try:
            with urllib.request.urlopen(self.url, timeout=timeout) as r:
                return r.status, (r.read() if first is None else r.read(first)).decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def answers(self) -> bool:
        """Whether anything still answers on the port."""
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/status", timeout=2)
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False
        return True

    def wait_for(self, what, deadline_s: float, step: float = 0.1):
        """Poll ``what()`` until true (returned) or ``deadline_s`` seconds passed (its last value)."""
        end = time.monotonic() + deadline_s
        while True:
            v = what()
            if v or time.monotonic() > end:
                return v
            time.sleep(step)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def running_dashboard(
    tmp: Path, *args: str, start_timeout: float = 180, ignored: tuple[int, ...] = ()
) -> Iterator[Dashboard]:
    """``labkit dashboard --port=<free> *args`` running and answering; everything it started is
    killed on the way out (see the module docstring). It starts with SIGINT and SIGHUP at their
    defaults (as from a terminal), except the signals in ``ignored``, inherited as ignored (as a
    shell's ``&`` does for SIGINT)."""

    def dispositions() -> None:
        for s in (signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN if s in ignored else signal.SIG_DFL)

    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = tmp / f"dashboard-{port}.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LABKIT_ROOT": str(ROOT),
        "JUPYTER_CONFIG_DIR": str(tmp / "cfg"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "rt"),
    }
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "labkit", "dashboard", f"--port={port}", *args],
            cwd=tmp,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=dispositions,
        )
    dash = None
    try:
        end = time.monotonic() + start_timeout
        url = None
        while url is None:
            m = re.search(r"open (http://127\.0\.0\.1:\d+/\?token=\S+)", log.read_text(errors="replace"))
            if m:
                url = m.group(1)
            elif proc.poll() is not None or time.monotonic() > end:
                raise AssertionError("labkit dashboard did not start:\n" + log.read_text()[-3000:])
            else:
                time.sleep(0.2)
        dash = Dashboard(proc, url, port, log)
        while not dash.answers():
            if proc.poll() is not None or time.monotonic() > end:
                raise AssertionError("Voila did not answer:\n" + log.read_text()[-3000:])
            time.sleep(0.3)
        dash.processes()
        yield dash
    finally:
        if dash is not None:
            dash.processes()
            procs = list(dash.seen.values())
        else:
            procs = []
        if proc.poll() is None:  # its own stop first (Voila removes its connection files) ...
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(15)
        with contextlib.suppress(ProcessLookupError):  # ... then whatever is left, killed
            os.killpg(proc.pid, signal.SIGKILL)
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        proc.wait(30)
        psutil.wait_procs(procs, timeout=10)
