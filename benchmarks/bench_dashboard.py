"""Benchmark: seconds to ``labkit dashboard``'s first page on the committed data (issue 46: 32 s).

For each way, ``--repeat`` times: start ``labkit dashboard`` on a free port of 127.0.0.1
(tests/support/dashboard.py, as the dashboard tests start it), wait until Voila answers, then GET
the page with its token and read it to the end (HTTP 200 with the rendered notebook, as a
browser's first request gets it: the explorer's kernel started and its cells run). Printed per
way: the best and median seconds to that page, and the seconds from the command's start to it.

The ways: ``deferred`` (now: the page is served once the campaign list is read; the first
campaign's analysis and telemetry are computed by the kernel after it, and fill their tabs a few
seconds later) and ``eager`` (``LABKIT_EXPLORER_DEFER=0``: every view of the first campaign
computed before the page, with this tree's other fix: one analysis shared by the analysis and
telemetry tabs, each view computed once); with ``--old PATH``, also ``old``: the dashboard of
another labkit tree, e.g. the commit before the change (``git worktree add /tmp/old COMMIT`` or
``git archive COMMIT | tar -x -C /tmp/old``), each way's loads interleaved. No timed assertion:
a benchmark, not a test. Exits non-zero only if a page was not served (status other than 200).

Run: ``python benchmarks/bench_dashboard.py [--repeat 3] [--way deferred|eager|both] [--old PATH]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from labkit.report.deferred import DEFER_ENV  # noqa: E402
from tests.support.dashboard import running_dashboard  # noqa: E402

WAYS = {"deferred": "1", "eager": "0"}


def _starter(tree: Path):
    """``running_dashboard`` of another labkit tree (its own tests/support/dashboard.py: it runs
    that tree's labkit on that tree's data)."""
    spec = importlib.util.spec_from_file_location(
        "old_dashboard_support", tree / "tests" / "support" / "dashboard.py"
    )
    if spec is None or spec.loader is None or not (tree / "labkit").is_dir():
        raise SystemExit(f"--old {tree}: not a labkit tree (needs labkit/ and tests/support/dashboard.py)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.running_dashboard


def first_page(way: str, start=running_dashboard) -> tuple[float, float, int]:
    """(seconds from the GET to the whole first page, seconds from the command's start, status)."""
    old = os.environ.get(DEFER_ENV)
    os.environ[DEFER_ENV] = WAYS.get(way, "0")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
            t0 = time.monotonic()
            with start(Path(tmp)) as dash:
                t1 = time.monotonic()
                status, _ = dash.load()
                t2 = time.monotonic()
    finally:
        if old is None:
            os.environ.pop(DEFER_ENV, None)
        else:
            os.environ[DEFER_ENV] = old
    return t2 - t1, t2 - t0, status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--repeat", type=int, default=3, help="page loads per way, each on a new dashboard (default 3)"
    )
    ap.add_argument("--way", choices=["deferred", "eager", "both"], default="both")
    ap.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed loads per way first (a tree's first start compiles its modules and reads its "
        "stores from disk; default 1)",
    )
    ap.add_argument(
        "--old", type=Path, help="another labkit tree (the code before) measured as the way 'old'"
    )
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    ways = list(WAYS) if args.way == "both" else [args.way]
    starts = {way: running_dashboard for way in ways}
    if args.old is not None:
        starts["old"] = _starter(args.old.resolve())
        ways.append("old")
    print(
        f"labkit dashboard, first page on the committed data ({len(list((ROOT / 'data').glob('*/store.sqlite')))} "
        f"campaigns), {args.repeat} loads per way after {args.warmup} untimed, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    page: dict[str, list[float]] = {w: [] for w in ways}
    start: dict[str, list[float]] = {w: [] for w in ways}
    codes: set[int] = set()
    for _ in range(max(args.warmup, 0)):
        for way in ways:
            codes.add(first_page(way, starts[way])[2])
    for _ in range(args.repeat):  # the ways interleaved: a load on the machine hits all alike
        for way in ways:
            p, s, code = first_page(way, starts[way])
            page[way].append(p)
            start[way].append(s)
            codes.add(code)
    medians = {w: statistics.median(v) for w, v in page.items()}
    for way in ways:
        print(
            f"{way:>9}: first page in {min(page[way]):.2f} s best, {medians[way]:.2f} s median "
            f"(from the command's start {statistics.median(start[way]):.2f} s)"
        )
    if "deferred" in medians:
        for way in (w for w in ways if w != "deferred"):
            print(
                f"    ratio: {way} / deferred = {medians[way] / medians['deferred']:.1f}x "
                "(> 1: the deferred first page is faster)"
            )
    print(f"HTTP status: {sorted(codes)}")
    return 1 if codes != {200} else 0


if __name__ == "__main__":
    sys.exit(main())
