"""Slurm testbeds on a real Slurm: the test cluster of scripts/setup-slurm.sh (marker ``slurm``).

Debian's slurmctld and slurmdbd (accounting in MariaDB) on this machine and one slurmd per node
(n1-n4, each in its own UTS namespace): every allocation, step and accounting record below is
Slurm's own.

* the ``slurm`` backend on a node of a real allocation: the instance meaning from inside the
  steps (pinned CPUs, cgroups), the exec contract, timeouts, files, the steps' accounting (sacct);
* a design with a ``platform`` factor on a 2-node Slurm testbed: runs interleaved on both nodes,
  each run's job, steps, node and accounting stored, the allocation given back;
* a campaign on 3 nodes where one node's slurmd is killed mid-campaign (its runs move to live
  nodes), then the controller is SIGKILLed twice: ``labkit clean <id>`` cancels the first killed
  controller's allocation, a resume cancels the second's and finishes on a new allocation: no
  run lost or stored twice, no labkit job left in the queue, nothing left on the nodes.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.backends import get_backend, slurm_cli, teardown
from labkit.core.ids import campaign_prefix
from labkit.core.instance import InstanceSpec
from labkit.errors import CommandError, CommandTimeout
from labkit.run import slurm_testbed as slurm
from labkit.run.campaign import Campaign
from labkit.run.status import status_text
from labkit.store import Store

from .conftest import allowed_cpus, check_exec_contract

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
PARTITION = "labkit"


def queue(prefix: str) -> list[str]:
    """This user's jobs in the queue (any state) whose names start with ``prefix``."""
    out = slurm_cli.run(["squeue", "-h", "--me", "-o", "%i %j %T"], timeout=30, what="squeue").stdout
    return [ln for ln in out.splitlines() if ln.split()[1].startswith(prefix)]


def wait_for(cond, what: str, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def restore() -> None:
    """Every test node back (setup-slurm.sh starts a stopped slurmd; the node returns to service)."""
    subprocess.run(
        ["bash", str(ROOT / "scripts/setup-slurm.sh")],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def leftovers(cid: str) -> list[str]:
    """What campaign ``cid`` left on the nodes: the nodes share this machine's cgroups and file
    system, so they are read here (a job step needs an allocation, which the test has given back)."""
    prefix = campaign_prefix(cid)
    paths = glob.glob(f"/sys/fs/cgroup/*/{prefix}*") + glob.glob(f"/sys/fs/cgroup/{prefix}*")
    return paths + glob.glob(os.path.expanduser(f"~/.cache/labkit/instances/{prefix}*"))


@pytest.fixture
def allocation():
    """One node of a real allocation, given back afterwards."""
    name = slurm.job_name("t-slurm-backend")
    seen = []
    alloc = slurm.allocate(slurm.SlurmRequest(nodes=1, partition=PARTITION, time="10"), name, seen.append)
    try:
        assert seen == [alloc.job_id] and len(alloc.nodes) == 1
        yield alloc
    finally:
        alloc.release()
        wait_for(lambda: not queue(name), f"job {alloc.job_id} to leave the queue", 60)


def test_backend_on_a_node_of_a_real_allocation(allocation):
    node = allocation.nodes[0].name
    be = get_backend("slurm", job_id=allocation.job_id, node=node)
    prefix = "labkit-t-slurm-backend--"
    fp = be.fingerprint()
    assert fp["backend"] == "slurm" and fp["hostname"] == node and fp["slurm"]["node"] == node
    assert fp["slurm"]["version"].split()[-1][:2].isdigit()
    host = be.host_cpus()
    spec = InstanceSpec(vcpus=1, memory_mb=128, affinity="pinned")
    insts = be.provision(spec, prefix=prefix)
    try:
        inst = insts[0]
        # the step runs on its node (its own hostname), in the instance's cgroup, on the pinned CPU
        assert inst.exec("hostname").stdout.strip() == node
        assert allowed_cpus(inst) == set(spec.placement(host)[0])
        assert f"/{inst.name}" in inst.exec("cat /proc/self/cgroup").stdout
        check_exec_contract(inst)
        t0 = time.monotonic()
        with pytest.raises(CommandTimeout):
            inst.exec("sleep 40 & sleep 41; echo never", timeout=2)
        assert time.monotonic() - t0 < 20
        assert (
            "sleep 4"
            not in inst.exec(
                f"cat {be.driver.procs_files(inst.name)[0]} | xargs -r ps -o args= -p", check=False
            ).stdout
        )
        src = Path(f"/tmp/labkit-slurm-put-{os.getpid()}.sh")
        src.write_text("#!/bin/sh\necho hello from $(hostname)\n")
        try:
            inst.put(src, "sub/hello.sh", mode=0o750)
        finally:
            src.unlink()
        assert inst.exec(["sub/hello.sh"]).stdout == f"hello from {node}\n"
        assert inst.exec("stat -c %a sub/hello.sh").stdout.strip() == "750"
        with pytest.raises(CommandError):
            inst.exec("exit 5")
        assert inst.name in be.list_labkit(prefix)
    finally:
        assert teardown(insts) == []
    assert be.list_labkit(prefix) == []
    steps = insts[0].metadata["slurm"]["steps"]
    assert insts[0].metadata["slurm"]["job_id"] == allocation.job_id
    # every command was its own step of the job, on the node, accounted by slurmdbd
    assert all(s["step"].startswith(f"{allocation.job_id}.") for s in steps) and len(
        {s["step"] for s in steps}
    ) == len(steps)
    by_cmd = {s["command"]: s for s in steps}
    assert by_cmd["sh -c hostname"]["state"] == "COMPLETED"
    assert by_cmd["sh -c hostname"]["accounting"]["nodelist"] == node
    assert (
        by_cmd["sh -c 'exit 5'"]["state"] == "FAILED"
        and by_cmd["sh -c 'exit 5'"]["accounting"]["exitcode"] == "5:0"
    )
    assert int(by_cmd["sh -c 'sleep 40 & sleep 41; echo never'"]["accounting"]["elapsedraw"]) >= 1


PLATFORMS = {"native": {"backend": "slurm"}, "unconfined": {"backend": "slurm", "enforce_limits": False}}


def test_platform_design_on_a_two_node_slurm_testbed(tmp_path):
    tb = {
        "name": "t-slurm",
        "slurm": {"partition": PARTITION, "nodes": 2, "time": "10", "account": "labkit"},
        "platforms": PLATFORMS,
    }
    d = {"factors": {"platform": ["native", "unconfined"], "vcpus": [1, 2]}, "replications": 2, "seed": 7}
    st = Campaign(
        d,
        workload="command",
        workload_params={"argv": ["sh", "-c", "hostname; sleep 0.3"]},
        campaign_id="t-slurm-plat",
        data_dir=tmp_path,
        testbed=tb,
        progress=False,
    ).run()
    runs = st.runs().sort_values("run_order")
    assert len(runs) == 8 and set(runs.status) == {"ok"}, runs[["status", "error"]]
    seq = list(runs.platform)
    assert seq.count("native") == 4 and sum(a != b for a, b in zip(seq, seq[1:])) >= 1
    jobs = st.meta()["slurm_jobs"]
    assert len(jobs) == 1 and jobs[0]["state"] == "released" and jobs[0]["request"]["nodes"] == 2
    job, nodes = jobs[0]["job_id"], jobs[0]["nodes"]
    assert len(nodes) == 2
    hosts = runs.metadata.map(lambda m: m["host"])
    assert set(hosts) == set(nodes)  # a block per node: both ran runs
    for _, r in runs.iterrows():
        md = r.metadata
        assert md["backend"] == "slurm" and md["platform"] == r.platform
        (inst,) = md["instances"]
        assert inst["slurm"]["job_id"] == job and inst["slurm"]["node"] == md["host"]
        # the workload's one command, and labkit's treatment check (its vCPUs read inside: a step too)
        (step,) = [s for s in inst["slurm"]["steps"] if "hostname" in s["command"]]
        assert all("Cpus_allowed_list" in s["command"] for s in inst["slurm"]["steps"] if s is not step)
        assert step["step"].startswith(f"{job}.") and step["state"] == "COMPLETED"
        assert step["accounting"]["nodelist"] == md["host"]
    assert wait_for(lambda: not queue(campaign_prefix("t-slurm-plat")), "the allocation to be given back", 60)
    assert leftovers("t-slurm-plat") == []


CONTROLLER = """
import sys
from labkit.run.campaign import Campaign
from labkit.run.status import status_text
Campaign({design!r}, workload="command", workload_params={{"argv": ["sleep", "1.5"]}}, campaign_id="t-slurm-kill",
         data_dir=sys.argv[1], testbed={testbed!r}, progress=False, run_timeout=120).run()
"""
KILL_TB = {"slurm": {"partition": PARTITION, "nodes": 3, "time": "15"}, "connect_timeout": 5}
KILL_DESIGN = {"factors": {"vcpus": [1, 2]}, "replications": 6, "seed": 5}


def _stored(data: Path) -> tuple[list, dict]:
    try:
        with Store.for_campaign(data, "t-slurm-kill", readonly=True) as st:
            runs = st.runs()
            return ([] if runs.empty else list(runs.metadata.map(lambda m: m.get("host")))), st.meta()
    except Exception:
        return [], {}


def _controller(script: Path, data: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(script), str(data)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def test_lost_node_controller_kills_clean_and_resume(tmp_path):
    data = tmp_path / "data"
    script = tmp_path / "controller.py"
    script.write_text(CONTROLLER.format(design=KILL_DESIGN, testbed=KILL_TB))
    prefix = campaign_prefix("t-slurm-kill")
    proc = _controller(script, data)
    try:
        # stop the slurmd of the node of the second block once it has stored a run there
        first = wait_for(lambda: _stored(data)[1].get("fleet_assignment") or {}, "the block assignment", 120)
        victim = sorted(set(first.values()))[1]
        wait_for(lambda: victim in _stored(data)[0], f"a first run on {victim}", 120)
        pid = int(Path(f"/run/labkit-slurm/slurmd-{victim}.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        wait_for(
            lambda: victim in (_stored(data)[1].get("fleet_hosts") or {}).get("lost", {}),
            f"{victim} lost",
            120,
        )
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        hosts, meta = _stored(data)
        assert len(hosts) < 12 and {m["from"] for m in meta["fleet_moves"]} == {victim}
        _kill(proc)
        # the killed controller's allocation is still held: `labkit clean <id>` cleans its nodes and cancels it
        (job1,) = [j["job_id"] for j in _stored(data)[1]["slurm_jobs"]]
        assert any(ln.split()[0] == job1 for ln in queue(prefix))
        out = subprocess.run(
            [sys.executable, "-m", "labkit", "clean", "t-slurm-kill", "--data-dir", str(data)],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0 and f"job {job1}" in out.stdout, out.stdout + out.stderr
        wait_for(lambda: not queue(prefix), "no labkit job of the campaign in the queue", 60)
        assert leftovers("t-slurm-kill") == []
        # a second controller resumes, and is killed too once it has stored a run
        before = len(_stored(data)[0])
        proc = _controller(script, data)
        wait_for(lambda: len(_stored(data)[0]) > before, "a run stored by the second controller", 180)
        _kill(proc)
        job2 = _stored(data)[1]["slurm_jobs"][-1]["job_id"]
        assert job2 != job1 and any(ln.split()[0] == job2 for ln in queue(prefix))
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        # the last resume cancels the second controller's allocation and finishes on a new one
        st = Campaign(
            KILL_DESIGN,
            workload="command",
            workload_params={"argv": ["sleep", "1.5"]},
            campaign_id="t-slurm-kill",
            data_dir=data,
            testbed=KILL_TB,
            progress=False,
            run_timeout=120,
        ).run()
        runs, meta = st.runs(), st.meta()
        assert len(runs) == 12 and runs.run_id.is_unique and st.claims() == []
        assert set(runs.status) <= {"ok", "host-lost"}, runs[["status", "error"]]
        hosts = runs.metadata.map(lambda m: m["host"])
        lost = runs[runs.status == "host-lost"]
        assert 1 <= len(lost) <= 2 and set(hosts[lost.index]) == {victim}
        moved = runs[runs.metadata.map(lambda m: "moved_from" in m)]
        assert len(moved) >= 1 and victim not in set(hosts[moved.index])
        jobs = meta["slurm_jobs"]
        # job 1: cancelled by `labkit clean` (gone when the second controller looked); 2 and 3 by a resume
        assert [j["state"] for j in jobs] == ["gone", "released", "released"] and jobs[1]["job_id"] == job2
        assert not queue(prefix) or wait_for(lambda: not queue(prefix), "the last allocation given back", 60)
        assert leftovers("t-slurm-kill") == []
        text = status_text(st, "t-slurm-kill")  # `labkit status`: the nodes and the allocations
        assert f"lost host {victim}" in text and f"slurm job {job2} (" in text and "released" in text
    finally:
        restore()


def _clean(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labkit", "clean", "--backend", "slurm", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def test_clean_without_an_id_keeps_a_running_campaigns_job_and_cancels_an_unknown_ones_after_its_grace():
    from labkit.core.registry import register

    orphan, live = slurm.job_name("t-slurm-orphan"), slurm.job_name("t-slurm-live")
    jobs = [
        slurm.allocate(slurm.SlurmRequest(nodes=1, partition=PARTITION, time="10"), name, lambda _: None)
        for name in (orphan, live)
    ]
    try:
        with register("t-slurm-live", None):
            # default grace (10 min): the unknown campaign's job was submitted just now: kept
            out = _clean()
            assert f"slurm: {orphan}: kept" in out.stdout and "not registered on this host" in out.stdout, (
                out.stdout
            )
            assert f"slurm: {live}: kept: campaign t-slurm-live is running" in out.stdout, out.stdout
            assert queue(orphan) and queue(live)
            # --grace 0: the unknown one's job is cancelled, the running one's stays
            out = _clean("--grace", "0", "--yes")
            assert out.returncode == 0 and f"slurm: removed 1 leftover(s): {orphan}" in out.stdout, (
                out.stdout + out.stderr
            )
            wait_for(lambda: not queue(orphan), f"job {jobs[0].job_id} to leave the queue", 60)
            assert queue(live)
    finally:
        for alloc in jobs:
            alloc.release()
        wait_for(lambda: not queue(live), "the test's jobs to leave the queue", 60)
