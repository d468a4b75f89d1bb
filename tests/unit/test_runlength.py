"""Runs long enough (issue 42, item 3): each workload's minimum of measured work, the runs below it
counted and said (:mod:`labkit.run.runlength`), once per campaign while it runs."""

from __future__ import annotations

import logging
import secrets

import pandas as pd
import pytest

from labkit.run.runlength import measured_work, run_length_of
from labkit.workloads import REGISTRY, workload_class

RUN = secrets.token_hex(3)
META = {"workload": {"name": "nqueens", "params": {"board": 12}}, "design": {"factors": {"vcpus": [1, 2]}}}


def runs_table(rows) -> pd.DataFrame:
    """rows: (run_id, status, duration_s, workload_s list or None, extra columns)."""
    out = []
    for rid, status, dur, took, *extra in rows:
        md = {"workload_s": took} if took is not None else {}
        out.append(
            {
                "run_id": rid,
                "status": status,
                "duration_s": dur,
                "metadata": md,
                **(extra[0] if extra else {}),
            }
        )
    return pd.DataFrame(out)


def tidy_table(rows) -> pd.DataFrame:
    return pd.DataFrame(
        [{"run_id": r, "metric": m, "value": v} for r, m, v in rows], columns=["run_id", "metric", "value"]
    )


def test_measured_work_is_the_timed_metric_else_workload_s_else_duration():
    runs = runs_table(
        [
            ("a", "ok", 5.0, [0.3]),
            ("b", "ok", 5.0, [0.2, 0.4]),
            ("c", "ok", 0.7, None),
            ("d", "failed", 0.1, [0.1]),
        ]
    )
    # run a reports its own timing twice (two iterations): their median
    tidy = tidy_table([("a", "wall_time_s", 0.010), ("a", "wall_time_s", 0.030), ("a", "solutions", 14200)])
    secs, src = measured_work(tidy, runs, ("wall_time_s",))
    assert secs.to_dict() == pytest.approx({"a": 0.020, "b": 0.3, "c": 0.7})
    assert src.to_dict() == {"a": "wall_time_s", "b": "workload_s", "c": "duration_s"}
    secs, src = measured_work(tidy, runs, ())  # no timed metric: workload_s
    assert secs["a"] == pytest.approx(0.3) and src["a"] == "workload_s"


def test_the_warning_and_the_sentence_count_the_short_runs_and_name_the_parameter():
    runs = runs_table([(f"r{i}", "ok", 2.0, None) for i in range(4)] + [("f", "failed", 0.0, None)])
    tidy = tidy_table(
        [
            ("r0", "wall_time_s", 0.014),
            ("r1", "wall_time_s", 0.042),
            ("r2", "wall_time_s", 0.02),
            ("r3", "wall_time_s", 1.5),
        ]
    )
    rl = run_length_of(tidy, runs, META)
    assert rl is not None and rl.minimum_s == 1.0 and rl.param == "board"
    assert rl.warning() == (
        "nqueens: 3 runs of 0.014-0.042 s, below the 1 s this workload needs for a "
        "trustworthy timing; raise `board` (board=12 takes 0.014-1.5 s here)"
    )
    assert rl.sentence() == (
        "3 of 4 runs shorter than the workload's minimum (1 s of measured work; counted "
        "as wall_time_s): raise `board` (board=12 takes 0.014-1.5 s here)"
    )


def test_the_hint_names_the_smallest_level_measured_long_enough():
    meta = {
        "workload": {"name": "nqueens", "params": {"board": 12}},
        "design": {"factors": {"board": [8, 14, 15]}},
    }
    levels = {"a": 8, "b": 8, "c": 14, "d": 14, "e": 15}
    runs = runs_table([(r, "ok", 3.0, None, {"board": b}) for r, b in levels.items()])
    tidy = tidy_table(
        [
            ("a", "wall_time_s", 0.001),
            ("b", "wall_time_s", 0.002),
            ("c", "wall_time_s", 1.3),
            ("d", "wall_time_s", 1.4),
            ("e", "wall_time_s", 9.0),
        ]
    )
    rl = run_length_of(tidy, runs, meta)
    assert rl is not None and len(rl.short) == 2
    assert rl.hint() == "raise `board` (e.g. board=14 takes 1.3-1.4 s here)"
    # the short runs' longest shown below the minimum (0.99, not a rounded 1)
    runs = runs_table([("a", "ok", 3.0, None)])
    rl = run_length_of(tidy_table([("a", "wall_time_s", 0.996)]), runs, META)
    assert rl is not None and "1 run of 0.996 s, below the 1 s" in rl.warning()


def test_nothing_short_nothing_said_and_what_is_not_judged():
    runs = runs_table([("a", "ok", 2.0, None)])
    rl = run_length_of(tidy_table([("a", "wall_time_s", 1.2)]), runs, META)
    assert rl is not None and rl.warning() is None
    assert rl.sentence() == (
        "0 of 1 runs shorter than the workload's minimum (1 s of measured work; counted as wall_time_s)"
    )
    assert run_length_of(tidy_table([]), runs, {**META, "imported": {"files": []}}) is None
    assert run_length_of(tidy_table([]), runs, {"workload": {"name": "csv"}}) is None
    assert run_length_of(tidy_table([]), runs_table([("a", "failed", 1.0, None)]), META) is None


def test_a_parameter_named_like_a_runs_column_is_read_from_the_workload():
    """iperf3's ``duration_s`` parameter is not the runs' ``duration_s`` column."""
    meta = {
        "workload": {"name": "iperf3", "params": {"duration_s": 0.5}},
        "design": {"factors": {"vcpus": [1]}},
    }
    runs = runs_table([("a", "ok", 9.0, [0.6]), ("b", "ok", 8.0, [0.7])])
    rl = run_length_of(tidy_table([]), runs, meta)
    assert rl is not None
    assert rl.hint() == "raise `duration_s` (duration_s=0.5 takes 0.6-0.7 s here)"
    none = run_length_of(tidy_table([]), runs, {"workload": {"name": "pingpong", "params": {}}})
    assert none is not None and "no parameter that lengthens it" in none.hint()


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_workload_states_its_minimum_and_what_lengthens_it(name):
    cls = workload_class(name)
    assert cls.min_measured_s > 0 and len(cls.min_measured_why) > 20
    assert cls.length_param is None or cls.length_param in cls.defaults
    assert isinstance(cls.timed_metrics, tuple)


@pytest.mark.root
def test_a_short_local_campaign_warns_once_and_records_its_code_state(tmp_path, caplog, monkeypatch):
    """A real ``local`` campaign of N-queens on a board of 8 (milliseconds): one warning naming the
    runs, the minimum and ``board``; and its store holds the diff the campaign ran with."""
    import subprocess

    from labkit.core import fingerprint
    from labkit.core.fingerprint import capture_diff
    from labkit.design import Design
    from labkit.run.campaign import Campaign
    from labkit.store import codestate
    from labkit.store.codestate import code_state

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    (repo / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    (repo / "a.py").write_text("x = 2\n")
    diff = capture_diff(repo)
    assert diff is not None
    # the campaign runs from this dirty checkout
    monkeypatch.setattr(fingerprint, "labkit_commit", lambda: f"{diff.commit}+dirty")
    monkeypatch.setattr(fingerprint, "code_diff", lambda: diff)
    monkeypatch.setattr(codestate, "code_diff", lambda: diff)

    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 5})
    with caplog.at_level(logging.WARNING, logger="labkit"):
        st = Campaign(
            d,
            workload="nqueens",
            workload_params={"board": 8},
            campaign_id=f"t-len-{RUN}",
            data_dir=tmp_path / "data",
            progress=False,
        ).run()
    said = [r.getMessage() for r in caplog.records if "trustworthy timing" in r.getMessage()]
    assert len(said) == 1
    assert said[0].startswith(f"campaign t-len-{RUN}: nqueens: 2 runs of ")
    assert (
        "below the 1 s this workload needs for a trustworthy timing; raise `board` (board=8 takes" in said[0]
    )
    state = code_state(st)
    assert state.kind == "dirty with diff" and set(state.diffs) == {diff.sha256}
    assert st.code_diffs()[diff.sha256]["diff"] == diff.text


def test_linpack_counts_hpls_own_seconds_not_the_hpcc_suites():
    """HPL reports Gflops = (2/3 N^3 + 3/2 N^2) / time / 1e9 (HPL 2.3, testing/ptest/HPL_pdtest.c):
    at N = 500 and 5 Gflop/s that is (83,333,333.3 + 375,000) / 5e9 = 0.0167417 s, while the hpcc
    process (DGEMM, STREAM, PTRANS, RandomAccess and FFT too) ran 0.42 s."""
    meta = {"workload": {"name": "linpack", "params": {"n": 1000}}, "design": {"factors": {"n": [500, 2000]}}}
    runs = runs_table([("a", "ok", 3.0, [0.42], {"n": 500}), ("b", "ok", 3.0, [0.40], {"n": 500})])
    tidy = tidy_table(
        [
            ("a", "hpl_gflops", 5.0),
            ("a", "wall_time_s", 0.42),
            ("b", "hpl_gflops", 4.0),
            ("b", "hpl_gflops", 6.0),
            ("b", "wall_time_s", 0.40),
        ]
    )
    rl = run_length_of(tidy, runs, meta)
    assert rl is not None
    assert rl.measured.to_dict() == pytest.approx({"a": 0.01674167, "b": 0.01674167}, rel=1e-6)
    assert set(rl.source) == {"the workload's own time derived from its metrics"}
    # without the Gflops (a failed parse): the process time
    rl = run_length_of(tidy[tidy.metric != "hpl_gflops"], runs, meta)
    assert rl is not None and rl.measured["a"] == pytest.approx(0.42)
