"""Issue 47, finding 4: ``labkit dashboard`` owns its children; real trials on the real command.

``rows()`` returns (section, row, value, must-be) for reliability/run.py. Each trial starts
``labkit dashboard`` on a free port of 127.0.0.1 (tests/support/dashboard.py: the page loaded
over plain HTTP, its websocket never opened; processes found by ancestry; everything killed
on the way out):

* **stop signals**: for each of SIGTERM, SIGINT, SIGHUP and SIGKILL, a dashboard with one page
  loaded (Voila and one kernel) gets the signal: the processes of it still running 5 s later
  (must be 0), whether the port still answers (must be 0), and the seconds until the last one
  ended;
* **page loads**: ``SECURITY_DASHBOARD_LOADS`` (default 50) loads, one every 0.5 s, each
  hanging up after the first KiB (a reader reloading), on the default ``--max-kernels`` with
  ``--unconnected-timeout=5``: the most kernels at once above the cap (must be 0), the most
  memory of Voila and its kernels, pages served and refused (503), and the kernels still
  running 300 s after the last load (must be 0).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SECTION = "dashboard children"


def _signal_rows(tmp: Path, sig: signal.Signals) -> list[tuple[str, str, object, str]]:
    from tests.support.dashboard import STOP_BOUND, running_dashboard

    with running_dashboard(tmp / sig.name, "--unconnected-timeout=600") as dash:
        status, _ = dash.load()
        if status != 200 or not dash.wait_for(dash.kernels, 60):
            return [(SECTION, f"{sig.name}: page not served (status {status})", 1, "0")]
        n = len(dash.processes())
        t0 = time.monotonic()
        dash.proc.send_signal(sig)
        end = t0 + STOP_BOUND
        while dash.left() and time.monotonic() < end:
            time.sleep(0.02)
        took = time.monotonic() - t0
        left = len(dash.left())
        answers = dash.answers()
    return [
        (
            SECTION,
            f"{sig.name} to labkit dashboard ({n} processes): still running after {STOP_BOUND:g} s",
            left,
            "0",
        ),
        (SECTION, f"{sig.name}: the page still answers", int(answers), "0"),
        (
            SECTION,
            f"{sig.name}: seconds until Voila and its kernel ended",
            round(took, 2) if not left else "-",
            "",
        ),
    ]


def _load_rows(tmp: Path, loads: int) -> list[tuple[str, str, object, str]]:
    from labkit.report.dashboard import DEFAULT_MAX_KERNELS
    from tests.support.dashboard import running_dashboard

    with running_dashboard(tmp / "loads", "--unconnected-timeout=5") as dash:
        base_mb = dash.rss_mb()
        most, most_mb, codes = 0, base_mb, []
        lock = threading.Lock()

        def one() -> None:
            try:
                code, _ = dash.load(timeout=600, first=1024)
            except OSError:
                code = -1
            with lock:
                codes.append(code)

        threads = []
        for _ in range(loads):
            t = threading.Thread(target=one)
            t.start()
            threads.append(t)
            stop = time.monotonic() + 0.5
            while time.monotonic() < stop:
                most = max(most, len(dash.kernels()))
                most_mb = max(most_mb, dash.rss_mb())
                time.sleep(0.1)
        while any(t.is_alive() for t in threads):
            most = max(most, len(dash.kernels()))
            most_mb = max(most_mb, dash.rss_mb())
            time.sleep(0.2)
        for t in threads:
            t.join()
        dash.wait_for(lambda: not dash.kernels(), 300, step=1)
        left = len(dash.kernels())
    return [
        (
            SECTION,
            f"{loads} page loads: most kernels at once above --max-kernels={DEFAULT_MAX_KERNELS}",
            max(0, most - DEFAULT_MAX_KERNELS),
            "0",
        ),
        (SECTION, f"{loads} page loads: most kernels at once", most, f"<= {DEFAULT_MAX_KERNELS}"),
        (
            SECTION,
            f"{loads} page loads: most MB of Voila and kernels (idle Voila {base_mb:.0f} MB)",
            round(most_mb),
            "",
        ),
        (
            SECTION,
            f"{loads} page loads: served / refused 503 / other",
            f"{codes.count(200)} / {codes.count(503)} / {len(codes) - codes.count(200) - codes.count(503)}",
            "",
        ),
        (SECTION, f"{loads} page loads: kernels still running 300 s later", left, "0"),
    ]


def rows() -> list[tuple[str, str, object, str]]:
    try:
        import voila  # noqa: F401
    except ImportError:
        return [(SECTION, "skipped: voila not installed (pip install -r requirements.txt)", "", "")]
    loads = int(os.environ.get("SECURITY_DASHBOARD_LOADS", "50"))
    out: list[tuple[str, str, object, str]] = []
    with tempfile.TemporaryDirectory(prefix="labkit-rel-dash-") as tmp:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL):
            out += _signal_rows(Path(tmp), sig)
        out += _load_rows(Path(tmp), loads)
    return out


if __name__ == "__main__":
    for row in rows():
        print(row)
