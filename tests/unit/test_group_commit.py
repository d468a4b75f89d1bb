"""Group commit (issue 45): runs that end close together are stored in one transaction, each reported
done only after its commit; the queue is written on exit; a writer killed with SIGKILL loses only runs
it never reported, which a resume runs again, and nothing is stored twice."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from labkit.core.waiting import wait_until
from labkit.design import Design
from labkit.errors import StoreError
from labkit.run.campaign import Campaign
from labkit.store import Store
from labkit.store.group import GroupCommit
from labkit.workloads import Measurement, Workload
from tests.unit.test_reliability_campaign import FakeBackend

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = [(float(t), f"m{j}", float(t * j)) for t in range(5) for j in range(4)]  # 20 rows a run


def _plan(n: int):
    design = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": (n + 1) // 2, "seed": 3})
    return design.plan()[:n]


def _result(run):
    return dict(
        status="ok",
        started="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
        measurements=[Measurement("wall_time_s", 1.0 + run.order, "s")],
        metadata={"host": "h"},
        samples=SAMPLES,
    )


def _committed(path: Path) -> set[str]:
    """The runs another connection sees: what is committed."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        return {r for (r,) in con.execute("SELECT run_id FROM runs")}


def test_runs_wait_in_the_queue_and_are_written_together_on_exit(tmp_path):
    st = Store.for_campaign(tmp_path, "g")
    runs = _plan(5)
    done: list[str] = []
    with GroupCommit(st, max_runs=64, max_wait_s=60, on_done=done.append) as gc:
        for r in runs:
            gc.add(r, **_result(r))
        assert gc.pending() == 5 and done == [] and _committed(st.path) == set()
    assert done == [r.run_id for r in runs] and _committed(st.path) == set(done)
    assert gc.transactions == 1 and gc.committed == 5
    with pytest.raises(StoreError, match="closed"):
        gc.add(runs[0], **_result(runs[0]))
    tidy = st.tidy()
    assert len(tidy) == 5 and len(st.samples()) == 5 * len(SAMPLES)


def test_a_full_queue_is_written_at_once_and_each_run_is_reported_after_its_commit(tmp_path):
    st = Store.for_campaign(tmp_path, "g")
    seen: list[tuple[str, bool]] = []
    gc = GroupCommit(
        st, max_runs=3, max_wait_s=60, on_done=lambda rid: seen.append((rid, rid in _committed(st.path)))
    )
    runs = _plan(7)
    for r in runs:
        gc.add(r, **_result(r))
    assert [rid for rid, _ in seen] == [r.run_id for r in runs[:6]] and all(ok for _, ok in seen)
    assert gc.pending() == 1 and gc.transactions == 2
    assert gc.flush() == [runs[6].run_id] and gc.pending() == 0


def test_the_oldest_run_waits_at_most_max_wait_s(tmp_path):
    st = Store.for_campaign(tmp_path, "g")
    reported = threading.Event()
    gc = GroupCommit(st, max_runs=64, max_wait_s=0.05, on_done=lambda rid: reported.set())
    r = _plan(1)[0]
    with gc.lock:
        gc.add(r, **_result(r))
    assert wait_until(reported.is_set, timeout=30, interval=0.01, error=None, what="the timer's batch")
    assert _committed(st.path) == {r.run_id} and gc.pending() == 0


def test_owner_check_duplicates_and_invalid_rows(tmp_path):
    st = Store.for_campaign(tmp_path, "g")
    a, b, c, d = _plan(4)
    st.record_run(c, **_result(c))  # stored already
    assert [st.claim([r.run_id], "h", "me", 60) for r in (a, b, c)] == [a.run_id, b.run_id, None]
    assert st.claim([d.run_id], "h", "other", 60) == d.run_id  # another controller's claim
    done: list[str] = []
    gc = GroupCommit(st, max_runs=64, max_wait_s=60, owner="me", on_done=done.append)
    with pytest.raises(StoreError, match="sample row 0"):
        gc.add(a, **{**_result(a), "samples": [(0.0, "", 1.0)]})
    assert gc.pending() == 0
    for r in (a, b, c, d):
        gc.add(r, **_result(r))
    # c is refused by the claim check (its claim went with its row); d's claim is not "me"'s: both left out
    assert gc.flush() == [a.run_id, b.run_id] and done == [a.run_id, b.run_id]
    assert st.completed() == {a.run_id, b.run_id, c.run_id}
    assert [cl["run_id"] for cl in st.claims()] == [d.run_id]
    # without an owner a run stored already fails alone; the rest of its batch commits
    e, f = _plan(6)[4:]
    gc2 = GroupCommit(st, max_runs=64, max_wait_s=60)
    for r in (e, a, f):
        gc2.add(r, **_result(r))
    with pytest.raises(StoreError, match=f"run {a.run_id} could not be stored"):
        gc2.flush()
    assert st.completed() >= {e.run_id, f.run_id}
    assert len(st.samples(a.run_id)) == len(SAMPLES)  # not twice
    with pytest.raises(StoreError, match="max_runs"):
        GroupCommit(st, max_runs=0)


class Once(Workload):
    name = "once"

    def run(self, instance, params):
        return [Measurement("wall_time_s", 1.0, "s", instance.index)]


def test_a_campaign_flushes_its_queue_when_it_ends(tmp_path, monkeypatch):
    """With batches that never fill nor time out, only the engine's flush on exit stores the runs."""
    from labkit.store import group

    monkeypatch.setattr(group, "GROUP_RUNS", 10_000)
    monkeypatch.setattr(group, "GROUP_WAIT_S", 60.0)
    st = Campaign(
        {"factors": {"vcpus": [1, 2]}, "replications": 3, "seed": 1},
        backend=FakeBackend(),
        workload=Once(),
        campaign_id="t-gc",
        data_dir=tmp_path,
        progress=False,
    ).run()
    runs = st.runs()
    assert len(runs) == 6 and runs.run_id.is_unique and st.claims() == []


#: a controller in a subprocess: a Campaign on the scripted backend whose runs take a few ms, printing
#: each run the engine reports done (Dispatcher._stored: after its group committed)
CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[3])
    from labkit.run import engine
    from labkit.run.campaign import Campaign
    from labkit.workloads import Measurement, Workload
    from tests.unit.test_reliability_campaign import FakeBackend

    class Quick(Workload):
        name = "quick"
        def run(self, instance, params):
            time.sleep(0.01)
            return [Measurement("wall_time_s", 0.01, "s", instance.index)]

    stored = engine.Dispatcher._stored
    def reported(self, run_id):
        stored(self, run_id)
        print(run_id, flush=True)
    engine.Dispatcher._stored = reported
    Campaign({"factors": {"vcpus": [1, 2]}, "replications": int(sys.argv[2]), "seed": 2}, backend=FakeBackend(),
             workload=Quick(), campaign_id="t-kill", data_dir=sys.argv[1], progress=False).run()
""")


def test_sigkill_mid_campaign_loses_only_unreported_runs_and_resume_stores_each_once(tmp_path):
    reps = 60  # 120 runs
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), str(reps), str(ROOT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "LABKIT_RUN_OUTPUT": "all"},
    )
    assert proc.stdout is not None
    reported: list[str] = []
    try:
        for line in proc.stdout:
            reported.append(line.strip())
            if len(reported) >= 20:
                break
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=60)
    assert len(reported) >= 20, err[-2000:]
    assert proc.returncode == -signal.SIGKILL
    db = tmp_path / "t-kill" / "store.sqlite"
    with Store(db, readonly=True) as st:
        stored = st.completed()
        assert set(reported) <= stored  # every run reported done was committed
        assert 0 < len(stored) < 2 * reps
    # resume in a new controller: the killed one's claims are released, its queued runs run again
    resumed = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), str(reps), str(ROOT)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = resumed.stdout.split()
    assert not set(again) & stored  # nothing stored before ran twice
    assert set(again) | stored == {
        r.run_id
        for r in Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": reps, "seed": 2}).plan()
    }
    with Store(db, readonly=True) as st:
        runs, tidy = st.runs(), st.tidy()
        assert len(runs) == 2 * reps and runs.run_id.is_unique and st.claims() == []
        assert tidy.groupby("run_id").size().eq(1).all()  # one measurement per run: none twice
        assert st.attempts().empty


def test_runs_not_stored_are_handed_to_on_lost_and_never_to_on_done(tmp_path):
    """A run whose claim is another owner's by the time its batch is written: not stored, reported
    lost (so the engine forgets it: Dispatcher.queued), never done."""
    st = Store.for_campaign(tmp_path, "g")
    a, b = _plan(2)
    assert st.claim([a.run_id], "h", "me", 60) == a.run_id
    assert st.claim([b.run_id], "h", "other", 60) == b.run_id
    done: list[str] = []
    lost: list[str] = []
    gc = GroupCommit(st, max_runs=64, max_wait_s=60, owner="me", on_done=done.append, on_lost=lost.append)
    for r in (a, b):
        gc.add(r, **_result(r))
    assert gc.flush() == [a.run_id]
    assert done == [a.run_id] and lost == [b.run_id]
