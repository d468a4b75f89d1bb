"""Issue 28, finding 6, the parts that need no instance: what is hidden, the environment
policy, option checks, and the cgroup driver's pids limit and freeze-and-kill operations."""

import os
import subprocess
import sys

import pytest

from labkit.backends import cgroup_script, cgroups, sandbox
from labkit.backends.cgroups import Op
from labkit.errors import ConfigError


def test_hidden_dirs_keep_only_outermost_existing_ones_that_hide_nothing_needed(tmp_path):
    data, inner = tmp_path / "data", tmp_path / "data" / "c1"
    inner.mkdir(parents=True)
    mounted = tmp_path / "suite"
    mounted.mkdir()
    got = sandbox.hidden_dirs(
        ["/", "/usr", "/", str(tmp_path / "missing"), str(inner), str(data), str(tmp_path), "", None],
        needed=[str(mounted / "bin")],
    )
    assert got == [str(data)]  # tmp_path holds a mount target; inner is inside data
    assert sandbox.hidden_dirs(["/tmp"]) == [] and sandbox.hidden_dirs(["/"]) == []


def test_environment_keeps_only_the_listed_variables(monkeypatch):
    monkeypatch.setenv("LABKIT_TEST_SECRET_X", "controller")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = sandbox.environment("/w", {"OMP_NUM_THREADS": "2"}, {"LABKIT_CGROUP_PROCS": "/p"})
    assert "LABKIT_TEST_SECRET_X" not in env
    assert env["HOME"] == "/w" and env["LANG"] == "C.UTF-8" and env["OMP_NUM_THREADS"] == "2"
    assert set(env) <= {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "OMP_NUM_THREADS", "LABKIT_CGROUP_PROCS"}
    # the instance's own TMPDIR whatever the controller's (a workload may still give its own)
    monkeypatch.setenv("TMPDIR", "/tmp")
    assert env["TMPDIR"] == "/w/.tmp" and sandbox.environment("/w", None)["TMPDIR"] == "/w/.tmp"
    assert sandbox.environment("/w", {"TMPDIR": "/scratch"})["TMPDIR"] == "/scratch"
    monkeypatch.delenv("PATH")
    assert sandbox.environment("/w", None)["PATH"] == sandbox.DEFAULT_PATH


def test_options_are_checked():
    with pytest.raises(ConfigError, match="isolation"):
        sandbox.check_mode("loose")
    with pytest.raises(ConfigError, match="absolute"):
        sandbox.check_hide(["data"])
    assert sandbox.check_hide("/srv/data/") == ["/srv/data"]
    assert sandbox.capabilities("strict") == [] and "setuid" in sandbox.capabilities("relaxed")


@pytest.mark.skipif(os.geteuid() != 0, reason="the local backend makes its work root as root here")
@pytest.mark.parametrize(
    "options, words",
    [
        ({"pids_max": 0}, "pids_max"),
        ({"pids_max": True}, "pids_max"),
        ({"isolation": "off"}, "isolation"),
        ({"hide": "rel"}, "hide"),
    ],
)
def test_local_backend_refuses_bad_isolation_options(tmp_path, options, words):
    from labkit.backends.local import LocalBackend

    with pytest.raises(ConfigError, match=words):
        LocalBackend(workroot=str(tmp_path / "w"), **options)


def test_v1_driver_caps_pids_and_freezes_before_killing():
    v1 = cgroups.CgroupV1(
        {"cpuset": "/s", "cpu": "/c", "cpuacct": "/c", "memory": "/m", "pids": "/p", "freezer": "/f"}
    )
    ops = v1.create("n", [0], None, 64, pids_max=100)
    assert Op("mkdir", "/p/n") in ops and Op("write", "/p/n/pids.max", "100") in ops
    assert "/p/n/cgroup.procs" in v1.procs_files("n") and "/f/n/cgroup.procs" in v1.procs_files("n")
    kill = v1.kill("n")
    assert kill[:3] == [
        Op("write?", "/f/n/freezer.state", "FROZEN"),
        Op("kill", "/f/n"),
        Op("write?", "/f/n/freezer.state", "THAWED"),
    ]
    assert {op.kind for op in kill[3:]} == {"drain"}
    plain = cgroups.CgroupV1({"cpuset": "/s", "cpu": "/c", "memory": "/m"})
    assert not plain.has_pids and all(op.kind == "drain" for op in plain.kill("n"))
    assert not any("pids" in op.path for op in plain.create("n", [0], None, 64, pids_max=100))


def test_v2_driver_enables_pids_where_the_kernel_has_it():
    v2 = cgroups.CgroupV2("/r", has_pids=True)
    ops = v2.create("n", [0], 1, 64, pids_max=50)
    assert (
        Op("write", "/r/cgroup.subtree_control", "+pids") in ops and Op("write", "/r/n/pids.max", "50") in ops
    )
    assert ops.index(Op("mkdir", "/r/n")) < ops.index(Op("write", "/r/n/pids.max", "50"))
    assert not any(
        "pids" in op.path + op.value for op in cgroups.CgroupV2("/r").create("n", [0], 1, 64, pids_max=50)
    )


def test_detect_finds_the_optional_controllers():
    mounts = "\n".join(
        f"cgroup /sys/fs/cgroup/{c} cgroup rw,{c} 0 0"
        for c in ("cpuset", "cpu", "cpuacct", "memory", "pids", "freezer")
    )
    drv = cgroups.detect(mounts, lambda p: None)
    assert drv.has_pids and drv.roots["freezer"] == "/sys/fs/cgroup/freezer"
    v2 = cgroups.detect("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0", lambda p: "cpuset cpu memory pids")
    assert v2.has_pids


def test_kill_op_signals_every_listed_process_once(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "cgroup.procs").write_text(f"{child.pid}\n")
        cgroups.apply([Op("kill", str(tmp_path))])
        assert child.wait(timeout=10) == -9
    finally:
        child.kill()
    script = cgroup_script.script([Op("kill", "/f/n")])
    assert "kill -KILL" in script and "/f/n/cgroup.procs" in script


def test_join_leaves_no_trace_in_the_environment(tmp_path):
    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    out = subprocess.run(
        ["sh", "-c", cgroups.JOIN, "labkit-join", "env"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "LABKIT_CGROUP_PROCS": str(procs)},
    ).stdout
    assert "LABKIT_CGROUP_PROCS" not in out and procs.read_text().strip()


def test_unconfined_identity_names_the_controllers_user(monkeypatch):
    """An unconfined command runs as the controller's user: root keeps every capability (None),
    any other user none; the record never says "root" for a user's run (it did, issue 44)."""
    import pwd

    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    assert sandbox.unconfined_identity() == ("root", None)
    nobody = pwd.getpwnam("nobody")
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: nobody.pw_uid)
    assert sandbox.unconfined_identity() == (f"uid {nobody.pw_uid} (nobody), the controller's user", [])
    unused = max(p.pw_uid for p in pwd.getpwall()) + 1
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: unused)
    assert sandbox.unconfined_identity() == (f"uid {unused} (no passwd entry), the controller's user", [])
