"""Issue 32 (b): two campaigns started at once on one host. The second warns (naming the first), both
record it in their runs' metadata (``others_running``), and the runs that overlapped the other
campaign are flagged suspect; the runs of the first that ended before the second started are not
flagged for it. An exclusive campaign refuses to start beside another.

Both campaigns are real ``labkit run`` processes on the local backend (root), with a registry of
running campaigns of the test's own (``LABKIT_RUN_DIR``), so that other campaigns on the machine do
not enter the picture.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from labkit.store import Store

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[2]
# a quiet run of about a second: the flags come from the registry, not from CPU load
ARGV = json.dumps(["sh", "-c", "sleep 1"])


def start(tmp_path, cid: str, replications: int, *extra: str) -> subprocess.Popen:
    design = tmp_path / f"{cid}.yaml"
    design.write_text(f"name: {cid}\nfactors:\n  vcpus: [1, 2]\nreplications: {replications}\nseed: 3\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LABKIT_RUN_DIR": str(tmp_path / "registry")}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "labkit",
            "run",
            str(design),
            "--workload",
            "command",
            "--param",
            f"argv={ARGV}",
            "--campaign-id",
            cid,
            "--data-dir",
            str(tmp_path / "data"),
            "--telemetry",
            "0.5",
            "--no-quarantine",
            *extra,
        ],  # the first attempts, as run
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM (the campaign tears its instances down, then exits); SIGKILL only past 2 minutes."""
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=120)
        return
    proc.kill()
    proc.communicate()


def stored(tmp_path, cid: str) -> int:
    path = tmp_path / "data" / cid / "store.sqlite"
    if not path.exists():
        return 0
    try:
        with Store(path, readonly=True) as st:
            return len(st.runs())
    except Exception:  # being written: try again
        return 0


def intervals(runs: pd.DataFrame) -> pd.DataFrame:
    start = pd.to_datetime(runs.started)
    return runs.assign(start=start, end=start + pd.to_timedelta(runs.duration_s, unit="s"))


def test_two_campaigns_at_once_warn_record_and_flag_the_overlap(tmp_path):
    first = start(tmp_path, "guard-first", 5)  # 10 runs of about 1.5 s
    try:
        deadline = time.monotonic() + 300
        while stored(tmp_path, "guard-first") < 2:  # the second starts once two runs of the first are done
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first campaign did not store two runs"
            time.sleep(0.2)
        launched = pd.Timestamp.now(tz="UTC")
        second = start(tmp_path, "guard-second", 1)  # 2 runs, while the first goes on
        out2, err2 = second.communicate(timeout=300)
        assert second.returncode == 0, err2
        out1, err1 = first.communicate(timeout=300)
        assert first.returncode == 0, err1
    finally:
        for proc in (first, locals().get("second")):
            if proc is not None and proc.poll() is None:
                stop(proc)
    assert "another campaign runs on this host: guard-first" in err2
    assert "another campaign runs on this host: guard-second" in err1  # the first saw it too, mid-way
    with Store(tmp_path / "data" / "guard-first" / "store.sqlite", readonly=True) as st:
        one = intervals(st.runs())
    with Store(tmp_path / "data" / "guard-second" / "store.sqlite", readonly=True) as st:
        two = intervals(st.runs())
    assert set(one.status) == set(two.status) == {"ok"}
    # every run of the second overlapped the first: recorded and flagged
    for md, flag, why in zip(two.metadata, two.suspect, two.suspect_reason):
        assert md["others_running"] == ["guard-first"] and flag and "guard-first" in why
    # runs of the first that overlapped a run of the second: recorded and flagged
    overlapped = [
        any(a.start < b.end and b.start < a.end for b in two.itertuples()) for a in one.itertuples()
    ]
    assert sum(overlapped) >= 1
    for ok, md, flag, why in zip(overlapped, one.metadata, one.suspect, one.suspect_reason):
        if ok:
            assert "guard-second" in md["others_running"] and flag and "guard-second" in why
    # the runs of the first that ended before the second was launched are not flagged for it
    early = one[one.end < launched]
    assert len(early) >= 2
    for md, why in zip(early.metadata, early.suspect_reason):
        assert md["others_running"] == [] and "other campaign" not in (why or "")
    tidy = Store(tmp_path / "data" / "guard-second" / "store.sqlite", readonly=True).tidy()
    assert tidy.suspect.all() and tidy.suspect_reason.str.contains("guard-first").all()


def test_an_exclusive_campaign_refuses_beside_another(tmp_path):
    first = start(tmp_path, "guard-busy", 3)
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "registry" / "guard-busy.json").exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        refused = start(tmp_path, "guard-excl", 1, "--exclusive")
        _, err = refused.communicate(timeout=120)
        assert refused.returncode != 0
        assert "refused: this campaign is exclusive" in err and "guard-busy" in err
        assert not (tmp_path / "data" / "guard-excl" / "store.sqlite").exists()
    finally:
        stop(first)
    assert first.returncode != 0  # interrupted: its instances torn down (SIGTERM), none left
