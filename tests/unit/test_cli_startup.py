"""``labkit list`` and ``labkit show`` read counts by SQL (issue 45): they must not load the analysis
and its statistics stack (scipy, statsmodels) just to start. The report package's face imports its
names when first used (PEP 562), so reading the catalog loads only what the catalog needs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from labkit.store import Store

PROBE = """
import runpy, sys
sys.argv = ["labkit", *sys.argv[1:]]
try:
    runpy.run_module("labkit", run_name="__main__")
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in ("scipy", "statsmodels", "labkit.report.analysis", "labkit.stats") if m in sys.modules)
print("HEAVY", ",".join(heavy), "EXIT", code)
"""


@pytest.mark.parametrize("command", [["list"], ["show", "tiny"]])
def test_list_and_show_start_without_the_statistics_stack(tmp_path, command):
    with Store.for_campaign(tmp_path, "tiny") as st:
        st.set_meta(
            campaign_id="tiny",
            design={"name": "tiny", "factors": {"vcpus": [1, 2]}, "replications": 1},
            backend="local",
            workload={"name": "nqueens", "response": "wall_time_s"},
        )
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *command, "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = [x for x in out.stdout.splitlines() if x.startswith("HEAVY")][-1]
    assert line == "HEAVY  EXIT 0", (line, out.stderr[-2000:])


def test_the_report_face_still_gives_every_public_name():
    import labkit.report as report

    for name in report.__all__:
        assert getattr(report, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        report.nothing_here  # noqa: B018
