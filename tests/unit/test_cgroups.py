"""The one cgroup driver: its operations, applied in Python and run as a shell script, build
the same files; detection reads a mount table; readers parse the kernel's formats."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from labkit.backends import cgroup_script, cgroups
from labkit.errors import BackendError, BackendUnavailable


def v1_tree(root: Path) -> dict[str, str]:
    roots = {}
    for ctl in ("cpuset", "cpu", "memory"):
        d = root / ctl
        d.mkdir(parents=True)
        roots[ctl] = str(d)
    (root / "cpuset" / "cpuset.mems").write_text("0\n")
    (root / "cpuset" / "cpuset.cpus").write_text("0-3\n")
    return roots


def v2_tree(root: Path) -> str:
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    return str(root)


def snapshot(root: Path) -> dict[str, str]:
    """Every file below ``root`` with its text (paths relative to root)."""
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def run_script(ops) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", cgroup_script.script(ops, timeout=1)], capture_output=True, text=True)


@pytest.mark.parametrize("quota", [None, 2])
def test_v1_python_and_shell_write_the_same_files(tmp_path, quota):
    a, b = cgroups.CgroupV1(v1_tree(tmp_path / "a")), cgroups.CgroupV1(v1_tree(tmp_path / "b"))
    cpus = [1, 2] if quota is None else [0, 1, 2, 3]
    cgroups.apply(a.create("labkit-x", cpus, quota, 256))
    assert run_script(b.create("labkit-x", cpus, quota, 256)).returncode == 0
    files = snapshot(tmp_path / "a")
    assert files == snapshot(tmp_path / "b")
    assert files["cpuset/labkit-x/cpuset.cpus"] == ("1,2" if quota is None else "0,1,2,3")
    assert files["cpuset/labkit-x/cpuset.mems"] == "0"
    assert files["cpu/labkit-x/cpu.cfs_quota_us"] == ("-1" if quota is None else "200000")
    assert files["memory/labkit-x/memory.limit_in_bytes"] == str(256 << 20)
    # optional knobs that do not exist are skipped, not created
    assert "memory/labkit-x/memory.memsw.limit_in_bytes" not in files


@pytest.mark.parametrize("quota", [None, 1])
def test_v2_python_and_shell_write_the_same_files(tmp_path, quota):
    a, b = cgroups.CgroupV2(v2_tree(tmp_path / "a")), cgroups.CgroupV2(v2_tree(tmp_path / "b"))
    cgroups.apply(a.create("labkit-y", [0, 3], quota, 128))
    assert run_script(b.create("labkit-y", [0, 3], quota, 128)).returncode == 0
    files = snapshot(tmp_path / "a")
    assert files == snapshot(tmp_path / "b")
    assert files["labkit-y/cpu.max"] == ("max 100000" if quota is None else "100000 100000")
    assert files["labkit-y/memory.max"] == str(128 << 20)
    assert files["labkit-y/cpuset.cpus"] == "0,3"
    assert files["cgroup.subtree_control"] == "+memory"  # (a fake file keeps the last write)
    assert cgroups.CgroupV2("/r").procs_files("n") == ["/r/n/cgroup.procs"]


def test_a_failed_write_stops_both_with_the_path(tmp_path):
    drv = cgroups.CgroupV2(v2_tree(tmp_path / "a"))
    ops = [cgroups.Op("write", str(tmp_path / "a" / "missing" / "cpu.max"), "1")]
    with pytest.raises(BackendError, match="missing/cpu.max"):
        cgroups.apply(ops)
    res = run_script(ops)
    assert res.returncode == 1 and "missing/cpu.max" in res.stderr
    assert drv.version == 2


def test_rmdir_of_an_empty_group_and_of_one_gone(tmp_path):
    for runner in ("python", "sh"):
        d = tmp_path / runner / "labkit-z"
        d.mkdir(parents=True)
        ops = [cgroups.Op("rmdir", str(d)), cgroups.Op("rmdir", str(d))]  # second: already gone
        if runner == "python":
            cgroups.apply(ops)
        else:
            assert run_script(ops).returncode == 0
        assert not d.exists()


def test_detection_from_a_mount_table():
    v2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n"
    drv = cgroups.detect(v2, lambda p: "cpuset cpu memory" if p == "/sys/fs/cgroup" else None)
    assert isinstance(drv, cgroups.CgroupV2) and drv.root == "/sys/fs/cgroup"
    v1 = (
        "cgroup /a cgroup rw,cpuset 0 0\ncgroup /b cgroup rw,cpu,cpuacct 0 0\n"
        "cgroup /c cgroup rw,memory 0 0\n"
    )
    drv = cgroups.detect(v1, lambda p: None)
    assert isinstance(drv, cgroups.CgroupV1) and drv.roots["cpu"] == "/b" and drv.roots["cpuacct"] == "/b"
    assert drv.dirs("n") == ["/a/n", "/b/n", "/c/n"]
    with pytest.raises(BackendUnavailable, match="enforce_limits=False"):
        cgroups.detect(v2, lambda p: "cpu memory")  # no cpuset controller
    with pytest.raises(BackendUnavailable):
        cgroups.detect("", lambda p: None)


def test_readers_parse_the_kernel_formats():
    v2 = cgroups.CgroupV2("/r")
    path, parse = v2.cpu_time("n")
    assert path == "/r/n/cpu.stat"
    assert parse("usage_usec 2500000\nuser_usec 1\nsystem_usec 2\n") == 2.5
    path, parse = v2.oom_kills("n")
    assert path == "/r/n/memory.events"
    assert parse("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\n") == 1
    v1 = cgroups.CgroupV1({"cpuset": "/s", "cpu": "/c", "cpuacct": "/c", "memory": "/m"})
    path, parse = v1.oom_kills("n")
    assert path == "/m/n/memory.oom_control"
    assert parse("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n") == 3
    path, parse = v1.cpu_time("n")
    assert path == "/c/n/cpuacct.usage" and parse("1500000000\n") == 1.5
    with pytest.raises(BackendError, match="oom_kill"):
        parse_oom = v1.oom_kills("n")[1]
        parse_oom("oom_kill_disable 0\nunder_oom 0\n")


def test_cpulist_parsing():
    assert cgroups.parse_cpulist("0-2,4,6-7\n") == [0, 1, 2, 4, 6, 7]
    assert cgroups.format_cpulist([3, 1, 1]) == "1,3"
