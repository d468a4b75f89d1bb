"""cgroup v2 without root (issue 44): labkit finds its own cgroup in /proc/self/cgroup, drives
instances in the subtree systemd delegated to the user (``Delegate=yes``), moves its own processes
to a leaf first and enables the controllers there, and refuses by name (with the fix) a subtree that is
not writable or lacks a controller. On fixture files: a fake /proc/self/cgroup and a tmp dir shaped
like a delegated v2 subtree (this machine mounts cgroup v1; the real kernel path is left to a guest)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from labkit.backends import cgroup_script, cgroups
from labkit.errors import BackendUnavailable

SCOPE = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1234.scope"
PROC_SELF_CGROUP = f"0::{SCOPE}\n"
PROC_SELF_CGROUP_HYBRID = (
    "12:memory:/user.slice\n11:cpuset:/\n1:name=systemd:/user.slice\n" + PROC_SELF_CGROUP
)


def v2_host(tmp_path: Path, controllers: str = "cpuset cpu io memory pids", procs: str = "4242\n4343\n"):
    """A fake unified hierarchy mounted at ``tmp_path/cgroup`` with this process's scope in it."""
    mount = tmp_path / "cgroup"
    scope = Path(str(mount) + SCOPE)
    scope.mkdir(parents=True)
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (scope / "cgroup.controllers").write_text(controllers + "\n")
    (scope / "cgroup.subtree_control").write_text("")
    (scope / "cgroup.procs").write_text(procs)
    mounts = f"cgroup2 {mount} cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"

    def controllers_of(path: str) -> str | None:
        f = Path(path) / "cgroup.controllers"
        return f.read_text() if f.exists() else None

    return mounts, controllers_of, mount, scope


def not_root_writable(mount: Path, delegated: Path | None):
    """writable(path): only what is under ``delegated`` (the user's subtree), never the mount point."""
    return lambda p: delegated is not None and (Path(p) == delegated or delegated in Path(p).parents)


def test_own_cgroup_is_the_unified_line_of_proc_self_cgroup():
    assert cgroups.own_cgroup(PROC_SELF_CGROUP) == SCOPE
    assert cgroups.own_cgroup(PROC_SELF_CGROUP_HYBRID) == SCOPE
    assert cgroups.own_cgroup("0::/\n") == "/"
    assert cgroups.own_cgroup("12:memory:/user.slice\n4:cpuset:/\n") is None  # v1 only


def test_a_delegated_subtree_is_used_when_the_mount_point_is_not_writable(tmp_path):
    mounts, controllers_of, mount, scope = v2_host(tmp_path)
    drv = cgroups.detect(mounts, controllers_of, own=SCOPE, writable=not_root_writable(mount, scope))
    assert isinstance(drv, cgroups.CgroupV2)
    assert drv.root == str(scope) and drv.has_pids
    assert cgroups.writable_roots(drv) == [str(scope)]
    # as root (mount point writable) nothing changes: the hierarchy's root
    root = cgroups.detect(mounts, controllers_of, own=SCOPE, writable=lambda p: True)
    assert root.root == str(mount) and root.leaf is None


def test_instances_in_a_delegated_subtree_move_its_processes_to_a_leaf_then_enable_controllers(tmp_path):
    mounts, controllers_of, mount, scope = v2_host(tmp_path)
    drv = cgroups.detect(mounts, controllers_of, own=SCOPE, writable=not_root_writable(mount, scope))
    ops = drv.create("labkit-test-x", [0], None, 256, pids_max=64)
    leaf = f"{scope}/{cgroups.LEAF}"
    kinds = [(o.kind, o.path) for o in ops]
    assert kinds[:2] == [("mkdir?", leaf), ("move", str(scope))] and ops[1].value == leaf
    enables = [o.value for o in ops if o.path == f"{scope}/cgroup.subtree_control"]
    assert enables == ["+cpuset", "+cpu", "+memory", "+pids"]
    assert kinds.index(("mkdir", f"{scope}/labkit-test-x")) > kinds.index(("move", str(scope)))
    # applied on the fixture: the leaf is made (twice is fine), each process written to its cgroup.procs
    # (a plain file here: it keeps the last one written)
    cgroups.apply(ops[:2])
    cgroups.apply(ops[:2])
    assert os.path.isdir(leaf)
    assert Path(leaf, "cgroup.procs").read_text() == "4343"
    script = cgroup_script.script(ops[:2])
    assert f"[ -d {leaf} ] || mkdir {leaf}" in script and f"> {leaf}/cgroup.procs" in script


def test_a_subtree_that_is_not_delegated_is_refused_with_the_fix(tmp_path):
    mounts, controllers_of, mount, scope = v2_host(tmp_path)
    with pytest.raises(BackendUnavailable) as err:
        cgroups.detect(mounts, controllers_of, own=SCOPE, writable=not_root_writable(mount, None))
    msg = str(err.value)
    assert f"cgroup {scope} is not delegated" in msg
    assert "systemd-run --user --scope -p Delegate=yes" in msg and "enforce_limits=false" in msg


def test_a_controller_not_delegated_is_named_with_the_fix(tmp_path):
    """systemd's user@.service delegates cpu, memory and pids by default, not cpuset."""
    mounts, controllers_of, mount, scope = v2_host(tmp_path, controllers="cpu io memory pids")
    with pytest.raises(BackendUnavailable) as err:
        cgroups.detect(mounts, controllers_of, own=SCOPE, writable=not_root_writable(mount, scope))
    msg = str(err.value)
    assert "controller cpuset not delegated" in msg and str(scope) in msg
    assert "Delegate=cpu cpuset memory pids" in msg and "systemd-run --user --scope -p Delegate=yes" in msg


def test_detect_here_reads_proc_self_cgroup(monkeypatch, tmp_path):
    mounts, controllers_of, mount, scope = v2_host(tmp_path)
    files = {"/proc/self/mounts": mounts, "/proc/self/cgroup": PROC_SELF_CGROUP}

    def read(path):
        if path in files:
            return files[path]
        return Path(path).read_text()

    monkeypatch.setattr(cgroups, "read_local", read)
    monkeypatch.setattr(cgroups.os, "access", lambda p, mode: Path(p) == scope or scope in Path(p).parents)
    drv = cgroups.detect_here()
    assert drv.root == str(scope) and drv.leaf == f"{scope}/{cgroups.LEAF}"
