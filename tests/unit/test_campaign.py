"""The campaign on the local backend: failures stored, teardown on every path, resume after SIGKILL."""

import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from labkit.design import Design
from labkit.errors import ConfigError, StoreError
from labkit.run.campaign import Campaign
from labkit.store import Store, run_output_policy

#: this session's token in campaign ids: a suite running beside another never shares a campaign
RUN = secrets.token_hex(3)

PY = sys.executable
FACTORS = {"vcpus": [1, 2], "affinity": ["floating", "pinned"]}


def leftovers(prefix="labkit-t"):
    found = []
    for d in ("/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup"):
        p = Path(d)
        if p.exists():
            found += [x.name for x in p.glob(prefix + "*")]
    return found


@pytest.mark.root
def test_nqueens_campaign_stores_every_run(tmp_path):
    d = Design.from_dict({"factors": {**FACTORS, "count": [1, 2]}, "replications": 2, "seed": 3})
    st = Campaign(
        d,
        workload="nqueens",
        workload_params={"board": 10},
        campaign_id=f"t-nq-{RUN}",
        data_dir=tmp_path,
        progress=False,
    ).run()
    runs, tidy = st.runs(), st.tidy()
    assert len(runs) == 16 and set(runs.status) == {"ok"}
    sol = tidy[tidy.metric == "solutions"]
    assert set(sol.value) == {724.0}
    # count=2 runs measured both instances
    two = tidy[(tidy["count"] == 2) & (tidy.metric == "wall_time_s")]
    assert sorted(two.instance_index.unique()) == [0, 1]
    md = runs.metadata.iloc[0]
    assert md["spec"]["vcpus"] in (1, 2) and md["instances"][0]["limits_enforced"] is True
    pinned = runs[runs.affinity == "pinned"].metadata.iloc[0]
    assert all(i["cpus"] is not None for i in pinned["instances"])
    assert (tmp_path / f"t-nq-{RUN}" / "results.parquet").exists()
    assert leftovers(f"labkit-t-nq-{RUN}") == []


@pytest.mark.root
def test_failed_and_timed_out_runs_are_stored_and_campaign_goes_on(tmp_path):
    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": 2, "seed": 1})
    # vcpus=1 exits 1; vcpus=2 sleeps past the run timeout
    cmd = "if [ {vcpus} = 1 ]; then echo bad >&2; exit 1; else sleep 20; fi"
    st = Campaign(
        d,
        workload="command",
        workload_params={"argv": ["sh", "-c", cmd]},
        campaign_id=f"t-fail-{RUN}",
        data_dir=tmp_path,
        run_timeout=0.5,
        progress=False,
    ).run()
    runs = st.runs().set_index("vcpus")
    assert sorted(runs.loc[1, "status"]) == ["failed", "failed"]
    assert sorted(runs.loc[2, "status"]) == ["timeout", "timeout"]
    assert all("bad" in e for e in runs.loc[1, "error"])
    assert leftovers(f"labkit-t-fail-{RUN}") == []
    # retry_failed runs them again (still failing), and nothing is duplicated
    st2 = Campaign(
        d,
        workload="command",
        workload_params={"argv": ["sh", "-c", cmd]},
        campaign_id=f"t-fail-{RUN}",
        data_dir=tmp_path,
        run_timeout=0.5,
        progress=False,
    ).run(retry_failed=True)
    assert len(st2.runs()) == 4


@pytest.mark.parametrize(
    "testbed", [None, {"hosts": [{"name": "here", "platforms": ["local"]}]}], ids=["one-backend", "testbed"]
)
def test_retries_run_failed_runs_again_and_keep_their_first_attempt(tmp_path, testbed, capsys):
    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1})
    marks = tmp_path / "marks"  # beside the data dir: an instance never sees a data dir
    marks.mkdir(mode=0o777)
    marks.chmod(0o777)  # given to the instances read-write (their /tmp is their own): their uid may write
    # each configuration fails the first time it runs (it leaves a mark), then succeeds
    cmd = (
        f"if [ -e {marks}/{{vcpus}} ]; then echo 1; else touch {marks}/{{vcpus}}; echo first >&2; exit 3; fi"
    )

    def campaign(cid):
        return Campaign(
            d,
            workload="command",
            workload_params={"argv": ["sh", "-c", cmd]},
            campaign_id=f"{cid}-{RUN}",
            data_dir=tmp_path / "data",
            progress=False,
            testbed=testbed,
            backend_options={"mounts": f"{marks}:rw"},
        )

    # failures of this call run again after the others
    st = campaign("t-retry").run(retries=1)
    runs, attempts = st.runs(), st.attempts()
    assert sorted(runs.status) == ["ok", "ok"]
    assert sorted(attempts.run_id) == sorted(runs.run_id)
    assert set(attempts.status) == {"failed"} and all("first" in e for e in attempts.error)
    from labkit.cli import main

    assert main(["status", f"t-retry-{RUN}", "--data-dir", str(tmp_path / "data")]) == 0
    assert "2 run(s) ran again; their 2 earlier attempt(s) are kept ({'failed': 2}" in capsys.readouterr().out
    # without retries failures are stored as they are; a later call with retries runs them again
    for f in marks.iterdir():
        f.unlink()
    assert sorted(campaign("t-later").run().runs().status) == ["failed", "failed"]
    st = campaign("t-later").run(retries=2)
    assert sorted(st.runs().status) == ["ok", "ok"] and len(st.attempts()) == 2
    # nothing failed: retries run nothing more
    assert len(campaign("t-later").run(retries=1).attempts()) == 2
    assert leftovers(f"labkit-t-retry-{RUN}") == leftovers(f"labkit-t-later-{RUN}") == []


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_retries_must_be_a_whole_number(tmp_path, bad):
    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1})
    c = Campaign(
        d,
        workload="command",
        workload_params={"argv": ["true"]},
        campaign_id=f"t-r-{RUN}",
        data_dir=tmp_path,
        progress=False,
    )
    with pytest.raises(ConfigError, match="retries must be a whole number"):
        c.run(retries=bad)
    assert not (tmp_path / f"t-r-{RUN}").exists()


def test_resume_with_another_design_is_refused(tmp_path):
    d1 = Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1})
    d2 = Design.from_dict({"factors": {"vcpus": [1, 3]}, "seed": 1})
    c = Campaign(
        d1,
        workload="command",
        workload_params={"argv": ["true"]},
        campaign_id=f"t-x-{RUN}",
        data_dir=tmp_path,
    )
    with Store.for_campaign(tmp_path, f"t-x-{RUN}") as st:
        c._check_or_write_meta(st)
    c2 = Campaign(
        d2,
        workload="command",
        workload_params={"argv": ["true"]},
        campaign_id=f"t-x-{RUN}",
        data_dir=tmp_path,
    )
    with (
        Store.for_campaign(tmp_path, f"t-x-{RUN}") as st,
        pytest.raises(
            StoreError,
            match=r"(?s)other settings.*design_digest.*design.factors.vcpus: stored \[1, 2\], now \[1, 3\]",
        ),
    ):
        c2._check_or_write_meta(st)


def test_bad_campaign_arguments(tmp_path):
    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1})
    with pytest.raises(ConfigError, match="campaign_id"):
        Campaign(d, workload="nqueens", campaign_id="Bad Id!", data_dir=tmp_path)
    with pytest.raises(ConfigError, match="unknown workload"):
        Campaign(d, workload="nope", data_dir=tmp_path)
    with pytest.raises(ConfigError, match="unknown backend"):
        Campaign(d, backend="vmware", workload="nqueens", data_dir=tmp_path).run()
    assert list(tmp_path.iterdir()) == []  # a campaign that cannot start leaves no store


RUNNER = textwrap.dedent("""
    import sys
    from labkit.run.campaign import Campaign
    from labkit.design import Design
    d = Design.from_dict({"factors": {"vcpus": [1, 2], "affinity": ["floating", "pinned"]},
                          "replications": 3, "seed": 11})
    Campaign(d, workload="command", workload_params={"argv": ["sleep", "0.3"]},
             campaign_id=sys.argv[2], data_dir=sys.argv[1], progress=False).run()
""")


def _count_runs(path):
    if not path.exists():
        return 0
    try:
        with Store(path, readonly=True) as st:
            return len(st.completed())
    except Exception:
        return 0


def _start_and_wait(tmp_path, cid, at_least):
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    import labkit

    env = {**os.environ, "PYTHONPATH": str(Path(labkit.__file__).resolve().parents[1])}
    proc = subprocess.Popen([PY, str(script), str(tmp_path), cid], env=env)
    store = tmp_path / cid / "store.sqlite"
    deadline = time.time() + 60
    while _count_runs(store) < at_least:
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("campaign subprocess did not progress")
        time.sleep(0.05)
    return proc, store


@pytest.mark.root
def test_resume_after_sigkill_holds_exactly_the_planned_runs(tmp_path):
    proc, store = _start_and_wait(tmp_path, f"t-kill-{RUN}", 3)
    time.sleep(0.15)  # most likely in the middle of a run
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = _count_runs(store)
    assert 3 <= done_before < 12
    d = Design.from_dict({"factors": FACTORS, "replications": 3, "seed": 11})
    st = Campaign(
        d,
        workload="command",
        workload_params={"argv": ["sleep", "0.3"]},
        campaign_id=f"t-kill-{RUN}",
        data_dir=tmp_path,
        progress=False,
    ).run()
    runs = st.runs()
    assert sorted(runs.run_id) == sorted(r.run_id for r in d.plan())  # all planned, none twice
    assert set(runs.status) == {"ok"}
    assert leftovers(f"labkit-t-kill-{RUN}") == []  # the killed run's cgroup was cleaned on resume


@pytest.mark.root
def test_sigterm_tears_down_and_resume_finishes(tmp_path):
    proc, store = _start_and_wait(tmp_path, f"t-term-{RUN}", 2)
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) != 0
    assert leftovers(f"labkit-t-term-{RUN}") == []  # teardown ran in the killed process itself
    out = subprocess.run(["pgrep", "-f", f"labkit-t-term-{RUN}"], capture_output=True, text=True)
    assert out.stdout.strip() == ""
    d = Design.from_dict({"factors": FACTORS, "replications": 3, "seed": 11})
    st = Campaign(
        d,
        workload="command",
        workload_params={"argv": ["sleep", "0.3"]},
        campaign_id=f"t-term-{RUN}",
        data_dir=tmp_path,
        progress=False,
    ).run()
    assert len(st.runs()) == 12


@pytest.mark.parametrize(
    "testbed", [None, {"hosts": [{"name": "here", "platforms": ["local"]}]}], ids=["one-backend", "testbed"]
)
def test_every_run_keeps_its_commands_output_beside_the_store(tmp_path, testbed, monkeypatch, capsys):
    """Every run's command output (ok runs too, since issue 28's second pass) in output/<run_id>.log,
    0600, stating its size; LABKIT_RUN_OUTPUT=failed keeps only the others', off none."""
    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1})
    # vcpus=1 fails after printing a line on each stream; vcpus=2 succeeds
    cmd = "echo out-{vcpus}; if [ {vcpus} = 1 ]; then echo err-line >&2; exit 4; fi"

    def run(cid):
        st = Campaign(
            d,
            workload="command",
            workload_params={"argv": ["sh", "-c", cmd]},
            progress=False,
            campaign_id=cid,
            data_dir=tmp_path,
            testbed=testbed,
        ).run()
        runs = st.runs().set_index("vcpus")
        return st, runs.loc[1, "run_id"], runs.loc[2, "run_id"]

    st, failed, ok = run(f"t-out-{RUN}")
    text = st.run_output(failed)
    assert text.startswith(f"# labkit: command output of run {failed} (failed): ")
    assert "out-1" in text and "err-line" in text and "exit 4" in text
    text = st.run_output(ok)
    assert (
        text.startswith(f"# labkit: command output of run {ok} (ok): ")
        and "out-2" in text
        and "exit 0" in text
    )
    for rid in (failed, ok):
        assert (tmp_path / f"t-out-{RUN}" / "output" / f"{rid}.log").stat().st_mode & 0o777 == 0o600
    # readable from the command line
    from labkit import cli

    show = ["show", f"t-out-{RUN}", "--data-dir", str(tmp_path), "--output"]
    assert cli.main([*show, ok]) == 0 and capsys.readouterr().out == st.run_output(ok)
    assert cli.main([*show, ""]) == 0 and capsys.readouterr().out.split() == sorted([failed, ok])
    assert cli.main([*show, "c9999r001"]) == 2
    assert "no output kept for run 'c9999r001' (runs with output: " in capsys.readouterr().err
    monkeypatch.setenv("LABKIT_RUN_OUTPUT", "failed")
    st, failed, ok = run(f"t-outf-{RUN}")
    assert st.run_outputs() == [failed]
    monkeypatch.setenv("LABKIT_RUN_OUTPUT", "off")
    st, failed, ok = run(f"t-outo-{RUN}")
    assert st.run_outputs() == []
    monkeypatch.setenv("LABKIT_RUN_OUTPUT", "some")
    with pytest.raises(ConfigError, match="LABKIT_RUN_OUTPUT='some': use one of all, failed, off"):
        run_output_policy()
