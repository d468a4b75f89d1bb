"""Slurm testbeds and the slurm backend without a cluster: parsing and validation, the salloc
command, srun's output kept apart from the command's, Slurm's records parsed, and the allocation's
life (asked, granted, released on every path) against stand-in Slurm tools that log their calls.
The real cluster is tests/integration/test_slurm.py's."""

from __future__ import annotations

import copy
import os
import stat
import textwrap

import pytest

from labkit.backends import slurm_cli
from labkit.backends.output import CappedOutput
from labkit.backends.slurm import SlurmBackend
from labkit.backends.slurm_steps import SrunLines
from labkit.errors import BackendError, ConfigError
from labkit.run import slurm_testbed as slurm
from labkit.run.campaign import Campaign
from labkit.run.platforms import options_for
from labkit.run.testbed import Host, Testbed

GOOD = """
name: cluster-a
slurm: {partition: compute, nodes: 4, exclusive: true, time: "02:00:00", account: lab-perf,
        constraint: "epyc&ib", wait: 600}
platforms:
  native: {backend: slurm}
  unconfined: {backend: slurm, enforce_limits: false}
"""


def test_a_slurm_testbed_is_its_request_until_allocated(tmp_path):
    p = tmp_path / "tb.yaml"
    p.write_text(GOOD)
    tb = Testbed.load(p)
    assert tb.hosts == [] and tb.default_platform == "slurm"
    req = tb.slurm
    assert (req.partition, req.nodes, req.exclusive, req.time, req.account, req.constraint, req.wait) == (
        "compute",
        4,
        True,
        "02:00:00",
        "lab-perf",
        "epyc&ib",
        600.0,
    )
    assert req.salloc_argv("labkit-x--alloc-1") == [
        "salloc",
        "--no-shell",
        "--no-kill",
        "--job-name=labkit-x--alloc-1",
        "--nodes=4",
        "--exclusive",
        "--partition=compute",
        "--time=02:00:00",
        "--account=lab-perf",
        "--constraint=epyc&ib",
        "--immediate=600",
    ]
    # what a resume must match is the request, never the nodes one allocation gave
    assert tb.describe()["slurm"] == {
        "partition": "compute",
        "nodes": 4,
        "exclusive": True,
        "time": "02:00:00",
        "account": "lab-perf",
        "constraint": "epyc&ib",
        "wait": 600.0,
    }
    assert tb.describe()["hosts"] == []
    tb.check_platforms(["native", "unconfined", "slurm"])
    minimal = Testbed.from_dict({"slurm": {}})
    assert minimal.slurm.salloc_argv("j") == [
        "salloc",
        "--no-shell",
        "--no-kill",
        "--job-name=j",
        "--nodes=1",
        "--exclusive",
    ]
    assert (
        Testbed.from_dict({"slurm": {"time": 30, "exclusive": False}}).slurm.salloc_argv("j")[-1]
        == "--time=30"
    )


def test_campaign_on_a_slurm_testbed_runs_on_slurm_platforms_only(tmp_path):
    tb = {"slurm": {"nodes": 2}, "platforms": {"native": {"backend": "slurm"}}}
    c = Campaign(
        {"factors": {"vcpus": [1, 2]}, "replications": 1},
        workload="command",
        workload_params={"argv": ["true"]},
        testbed=tb,
        data_dir=tmp_path,
    )
    assert c.backend_name == "slurm"
    with pytest.raises(ConfigError, match="platform 'docker' of Slurm testbed .* must use backend slurm"):
        Campaign(
            {"factors": {"platform": ["native", "docker"]}, "replications": 1},
            workload="command",
            workload_params={"argv": ["true"]},
            testbed=tb,
            data_dir=tmp_path,
        )


def test_slurm_platform_options_carry_the_allocation_and_node():
    tb = Testbed.from_dict(
        {"slurm": {"nodes": 1}, "platforms": {"native": {"backend": "slurm", "enforce_limits": False}}}
    )
    node = Host("n7", "10.0.0.7", platforms=("native", "slurm"), slurm_job="4242")
    assert options_for(tb.platform("native"), node) == {
        "enforce_limits": False,
        "job_id": "4242",
        "node": "n7",
    }
    with pytest.raises(
        ConfigError, match="runs on the nodes of a Slurm testbed's allocation; host 'h' is not one"
    ):
        options_for(tb.platform("native"), Host("h", "10.0.0.8"))


def test_slurm_backend_options_are_checked_and_steps_are_pinned_to_the_node():
    with pytest.raises(ConfigError, match="job_id and node are required"):
        SlurmBackend(node="n1")
    with pytest.raises(ConfigError, match="job_id must be a Slurm job id"):
        SlurmBackend(job_id="12; rm", node="n1")
    with pytest.raises(ConfigError, match="node must be a Slurm node name"):
        SlurmBackend(job_id=12, node="-w n2")
    with pytest.raises(ConfigError, match="unknown option.*partition"):
        SlurmBackend(job_id=12, node="n1", partition="x")
    be = SlurmBackend(job_id=12, node="n1")
    argv = be.step_argv("labkit-x--1.1")
    assert argv[:5] == ["srun", "--jobid=12", "--nodelist=n1", "--nodes=1", "--ntasks=1"]
    assert {"--overlap", "--whole", "--chdir=/", "--job-name=labkit-x--1.1"} <= set(argv)
    assert "--export=HOME,PATH,USER,LOGNAME,LANG" in argv  # nothing else of the controller's environment


def feed(sink: SrunLines, data: bytes, size: int) -> None:
    for i in range(0, len(data), size):
        sink.write(data[i : i + size])
    sink.flush()


@pytest.mark.parametrize("size", [1, 3, 7, 4096])
def test_srun_lines_are_kept_apart_from_the_commands_stderr_however_the_bytes_arrive(size):
    stream = (
        b"srun: jobid 12: nodes(1):`n1', cpu counts: 2(x1)\n"
        b"srun: launching StepId=12.7 on host n1, 1 tasks: 0\n"
        b"err one\nsrun-like but not srun\n"
        b"srun: error: n1: task 0: Exited with exit code 3\n"
        b"sr"
    )  # a last line without its newline
    err = CappedOutput()
    sink = SrunLines(err)
    feed(sink, stream, size)
    assert err.text() == "err one\nsrun-like but not srun\nsr"
    assert sink.step() == "12.7"
    assert sink.step_errors() == []  # a task's own end is not a failure of the step
    failed = SrunLines(CappedOutput())
    feed(
        failed,
        b"srun: error: Unable to create step for job 12: Requested node configuration is not available\n",
        size,
    )
    assert failed.step() is None and failed.step_errors() == [
        "srun: error: Unable to create step for job 12: Requested node configuration is not available"
    ]


def test_srun_lines_keep_the_first_and_last_ones():
    sink = SrunLines(CappedOutput())
    feed(sink, b"".join(b"srun: line %d\n" % i for i in range(100)), 4096)
    assert len(sink.lines) == 40 and sink.lines[0] == "srun: line 0" and sink.lines[-1] == "srun: line 99"
    assert sink.dropped == 60


def test_slurm_records_and_states():
    rec = slurm_cli.parse_record(
        "NodeName=n1 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.1.0.1 "
        "OS=Linux 6.1.0-13-amd64 #1 SMP Debian State=ALLOCATED+NOT_RESPONDING Port=17001"
    )
    assert (
        rec["OS"] == "Linux 6.1.0-13-amd64 #1 SMP Debian"
        and rec["NodeAddr"] == "10.1.0.1"
        and rec["Port"] == "17001"
    )
    assert slurm_cli.node_failure(rec["State"]) == "NOT_RESPONDING"
    assert (
        slurm_cli.node_failure("DOWN+DRAIN") == "DOWN" and slurm_cli.node_failure("idle*") == "NOT_RESPONDING"
    )
    assert slurm_cli.node_failure("ALLOCATED") is None and slurm_cli.node_failure("MIXED+DRAIN") is None
    assert slurm_cli.check_job_id(77) == "77"


def test_the_tools_get_no_variable_of_an_enclosing_job(monkeypatch):
    for k, v in {
        "SLURM_JOB_ID": "5",
        "SALLOC_PARTITION": "x",
        "SRUN_CPUS_PER_TASK": "2",
        "SLURM_CONF": "/c",
    }.items():
        monkeypatch.setenv(k, v)
    env = slurm_cli.environment()
    assert env["SLURM_CONF"] == "/c" and not {"SLURM_JOB_ID", "SALLOC_PARTITION", "SRUN_CPUS_PER_TASK"} & set(
        env
    )


# -- the allocation's life, against stand-in Slurm tools ------------------------------------------

TOOLS = {
    # salloc: FAKE_SALLOC=grant prints what Slurm prints and exits; pending waits until killed; refused fails
    "salloc": """
        echo "salloc $*" >> "$LOG"
        trap 'echo "salloc SIGTERM" >> "$LOG"; exit 1' TERM
        echo "salloc: Pending job allocation $JOB" >&2
        [ "$FAKE_SALLOC" = pending ] && while :; do sleep 0.05; done
        [ "$FAKE_SALLOC" = refused ] && { echo "salloc: error: Job submit/allocate failed: Invalid account or account/partition combination specified" >&2; exit 1; }
        echo "salloc: job $JOB queued and waiting for resources" >&2
        echo "salloc: Granted job allocation $JOB" >&2
        """,
    # a job runs on c1 and c2 until it is cancelled; c2's slurmd does not respond
    "scontrol": """
        echo "scontrol $*" >> "$LOG"
        case "$2" in
          job) if grep -q "^scancel .* $4\\$" "$LOG"; then echo "JobId=$4 JobName=x JobState=CANCELLED NodeList=c[1-2]"
               else echo "JobId=$4 JobName=x JobState=RUNNING NodeList=c[1-2]"; fi ;;
          hostnames) echo c1; echo c2 ;;
          node) echo "NodeName=c1 NodeAddr=10.9.0.1 CPUTot=8 AvailableFeatures=epyc Partitions=p State=ALLOCATED"
                echo "NodeName=c2 NodeAddr=10.9.0.2 CPUTot=8 AvailableFeatures=(null) Partitions=p State=DOWN+NOT_RESPONDING" ;;
        esac
        """,
    # the jobs queued under the name asked for: $FAKE_QUEUED
    "squeue": 'echo "squeue $*" >> "$LOG"; case "$*" in *--name=*) echo "$FAKE_QUEUED" ;; esac',
    "scancel": 'echo "scancel $*" >> "$LOG"',
    "srun": 'echo "srun $*" >> "$LOG"; echo "srun: error: Unable to create step (stand-in)" >&2; exit 1',
}


@pytest.fixture
def tools(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in TOOLS.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "calls.log"
    log.write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LOG", str(log))
    monkeypatch.setenv("FAKE_SALLOC", "grant")
    monkeypatch.setenv("JOB", "990077")  # no job id the test cluster will reach soon
    return log


class FakeStore:
    def __init__(self):
        self.m: dict = {}

    def meta(self):
        return dict(self.m)

    def set_meta(self, **items):
        self.m.update(items)


def test_an_allocation_is_recorded_before_it_is_granted_and_released_at_the_end(tools):
    store = FakeStore()
    seen = []
    with slurm.allocated(slurm.SlurmRequest(nodes=2, partition="p"), store, "camp") as alloc:
        seen = copy.deepcopy(store.m["slurm_jobs"])
        assert alloc.job_id == "990077" and [
            (n.name, n.address, n.cpus, n.features) for n in alloc.nodes
        ] == [("c1", "10.9.0.1", 8, "epyc"), ("c2", "10.9.0.2", 8, "")]
        assert alloc.probe(Host("c1", "10.9.0.1"), 3) == (True, "")
        ok, why = alloc.probe(Host("c2", "10.9.0.2"), 3)
        assert not ok and "DOWN+NOT_RESPONDING" in why
    (job,) = store.m["slurm_jobs"]
    assert (
        seen[0]["state"] == "running" and seen[0]["job_id"] == "990077" and seen[0]["nodes"] == ["c1", "c2"]
    )
    assert job["state"] == "released" and job["name"].startswith("labkit-camp--alloc-")
    calls = tools.read_text().splitlines()
    salloc = next(c for c in calls if c.startswith("salloc"))
    assert f"--job-name={job['name']}" in salloc and "--no-kill" in salloc and "--partition=p" in salloc
    assert calls[-1] == "scancel --quiet 990077"


def test_an_interrupt_while_waiting_for_nodes_withdraws_the_request(tools, monkeypatch):
    monkeypatch.setenv("FAKE_SALLOC", "pending")
    monkeypatch.setenv("FAKE_QUEUED", "990077")
    store = FakeStore()

    def interrupt(job_id):
        store.set_meta(seen=job_id)
        raise KeyboardInterrupt  # Ctrl-C (or the campaign's SIGTERM) while the job waits in the queue

    with pytest.raises(KeyboardInterrupt):
        slurm.allocate(slurm.SlurmRequest(nodes=2), "labkit-camp--alloc-ab", interrupt)
    calls = tools.read_text().splitlines()
    assert store.m["seen"] == "990077" and "salloc SIGTERM" in calls
    assert (
        "squeue -h --me -o %i --name=labkit-camp--alloc-ab" in calls and calls[-1] == "scancel --quiet 990077"
    )


def test_a_request_the_cluster_refuses_is_a_config_error_and_a_resume_cancels_a_killed_controllers_job(
    tools, monkeypatch
):
    monkeypatch.setenv("FAKE_SALLOC", "refused")
    with pytest.raises(ConfigError, match="(?s)Slurm refused the testbed's request .*Invalid account"):
        slurm.allocate(slurm.SlurmRequest(account="nope"), "labkit-c--alloc-1", lambda j: None)
    monkeypatch.setenv("FAKE_SALLOC", "grant")
    tools.write_text("")
    store = FakeStore()
    store.m["slurm_jobs"] = [{"name": "labkit-c--alloc-old", "job_id": "990076", "state": "running"}]
    with slurm.allocated(slurm.SlurmRequest(), store, "c") as alloc:
        assert alloc.job_id == "990077"
    calls = tools.read_text().splitlines()
    # the killed controller's job goes first
    assert calls[:3] == [
        "squeue -h --me -o %i --name=labkit-c--alloc-old",
        "scontrol show job -o 990076",
        "scancel --quiet 990076",
    ]
    old, new = store.m["slurm_jobs"]
    assert old["state"] == "released" and new["state"] == "released"


def test_clean_cancels_what_a_killed_campaign_left_queued(tools):
    meta = {
        "slurm_jobs": [
            {"name": "labkit-c--alloc-1", "job_id": "990077", "state": "pending"},
            {"name": "labkit-c--alloc-0", "job_id": "990070", "state": "released"},
        ]
    }
    out = slurm.clean(meta, "labkit-c--", {})
    # job 990077 still runs on c1 and c2: their leftovers are removed through a step on each (which
    # the stand-in srun refuses: reported, not fatal), then the job is cancelled; 990070 was released
    assert out["slurm"] == ["job 990077"] and set(out) == {"c1/slurm", "c2/slurm", "slurm"}
    assert all(v[0].startswith("(not cleaned: slurm backend: node c") for k, v in out.items() if k != "slurm")
    calls = tools.read_text().splitlines()
    assert "scancel --quiet 990077" in calls and not any("990070" in c for c in calls)
    assert sum(c.startswith("srun --jobid=990077 --nodelist=c") for c in calls) == 2


def test_a_failing_slurm_tool_is_an_error_naming_the_command(tools, monkeypatch):
    (tools.parent / "bin" / "scontrol").write_text(
        "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    with pytest.raises(BackendError, match="reading Slurm job 5: scontrol exited 1: .*Unable to contact"):
        slurm_cli.show_job("5", 5)


def test_the_counters_of_a_nodes_instances_come_through_one_long_lived_step(tmp_path, monkeypatch):
    """SlurmInstance.stats reads its files through the node's file reader (native.FILE_READER run
    by a stand-in srun here): one step however many readings, a file that cannot be read is None, a
    reader that died is started again, and a file name with white space is refused unread."""
    from labkit.backends import native
    from labkit.backends.base import StatsUnavailable

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        '#!/bin/sh\necho "srun $*" >> "$LOG"\nwhile [ "$1" != /bin/sh ]; do shift; done\nexec "$@"\n'
    )
    (bin_dir / "srun").chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LOG", str(log))
    stat_file = tmp_path / "cpu.stat"
    stat_file.write_text("usage_usec 2500000\nnr_throttled 3\nthrottled_usec 40000\n")
    be = SlurmBackend(job_id=12, node="n1")
    try:
        paths = {"cpu": str(stat_file), "memory": str(tmp_path / "none")}
        for _ in range(3):
            assert be.files.read(paths) == {"cpu": stat_file.read_text(), "memory": None}
        assert log.read_text().count("srun ") == 1 and "--job-name=labkit-files" in log.read_text()
        be.files.stop()  # the step killed (a lost node, an allocation that ended): started again
        assert be.files.read({"cpu": str(stat_file)}) == {"cpu": stat_file.read_text()}
        assert log.read_text().count("srun ") == 2
        with pytest.raises(StatsUnavailable, match="white space"):
            be.files.read({"cpu": "/sys/fs/cgroup/a b/cpu.stat"})
        texts = be.files.read({"proc_stat": "/proc/stat"})
        got = native.instance_stats(None, texts, "labkit-x--1 on n1")  # unconfined: the node's steal only
        assert set(got) == {"steal_s", "cpu_total_s"} and got["cpu_total_s"] > 0
        reader = be.files.proc
    finally:
        be.close()
    assert reader.poll() is not None and be.files.proc is None  # the step ended with the backend
