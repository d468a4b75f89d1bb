"""cgroup v2 on a real kernel: labkit's v2 driver inside a libvirt guest.

This machine mounts cpuset, cpu and memory as cgroup v1, and a controller
lives in one hierarchy only, so the v2 drivers cannot be exercised on the
host. The guest is a clean kernel with nothing mounted: the test mounts the
unified hierarchy there and runs the ``ssh`` backend's v2 scripts
(:mod:`labkit.backends.remote_cgroup`) through the guest agent, exactly the
text the ssh backend would send to a v2 host. The local v2 driver
(:class:`labkit.backends.cgroups.CgroupV2`) writes the same files (a unit test
keeps the two equal, tests/unit/test_ssh_backend.py); here its readers parse
the kernel's own cpu.stat, memory.events and cpuset files copied out of the guest.

Proved from inside the guest's cgroups: a pinned group sees exactly its CPU,
a floating group with two busy loops gets at most one CPU's worth of time
(and the kernel throttled it), an allocation past memory.max is OOM-killed,
a timeout's kill finds the exec's whole tree, and removal leaves nothing.
"""
from __future__ import annotations

import secrets
import time

import pytest

from labkit.backends import cgroups
from labkit.backends import remote_cgroup as rc
from labkit.instance import InstanceSpec

from .conftest import PREFIX, instances, parse_cpu_list

pytestmark = pytest.mark.libvirt

ROOT = "/sys/fs/cgroup"
WALL_S = 3.0


def sh(inst, script: str, timeout: float = 120, check: bool = True):
    return inst.exec(["sh", "-c", script], timeout=timeout, check=check)


def in_group(inst, driver, name: str, command: str, token: str | None = None, check: bool = True):
    """Run ``command`` inside cgroup ``name`` with the ssh backend's own exec script."""
    line = rc.exec_script(["sh", "-c", command], name=name, token=token or secrets.token_hex(8),
                          workdir="/tmp", procs_files=driver.procs_files(name))
    return sh(inst, line, check=check)


def read(inst, path: str) -> str:
    return sh(inst, f"cat {rc.q(path)}").stdout


def local_driver_over(tmp_path, files: dict[str, str], name: str) -> cgroups.CgroupV2:
    """A local CgroupV2 over a directory holding copies of the guest's real files."""
    d = tmp_path / name
    d.mkdir(parents=True)
    for fname, text in files.items():
        (d / fname).write_text(text)
    return cgroups.CgroupV2(tmp_path)


@pytest.fixture(scope="class")
def guest(backend):
    """One 2-vCPU guest with the unified hierarchy mounted at /sys/fs/cgroup, and its driver."""
    with instances(backend, InstanceSpec(vcpus=2, memory_mb=512, affinity="floating")) as (inst,):
        sh(inst, f"grep -q ' {ROOT} ' /proc/mounts || mount -t cgroup2 cgroup2 {ROOT}")
        facts = rc.parse_probe(sh(inst, rc.PROBE).stdout)
        driver = rc.detect(facts)
        yield inst, facts, driver


class TestCgroupV2InGuest:
    backend_name = "libvirt"

    def test_probe_detects_v2_with_the_three_controllers(self, guest, tmp_path):
        inst, facts, driver = guest
        assert isinstance(driver, rc.RemoteCgroupV2) and driver.version == 2 and driver.root == ROOT
        assert {"cpuset", "cpu", "memory"} <= facts.controllers[ROOT]
        driver.check_writable(facts)
        assert driver.available_cpus(facts) == [0, 1]
        # the local driver's detection reads the same mount table the same way
        (tmp_path / "mounts").write_text(read(inst, "/proc/self/mounts").replace(ROOT, str(tmp_path)))
        (tmp_path / "cgroup.controllers").write_text(read(inst, f"{ROOT}/cgroup.controllers"))
        (tmp_path / "cpuset.cpus.effective").write_text(read(inst, f"{ROOT}/cpuset.cpus.effective"))
        local = cgroups.detect(str(tmp_path / "mounts"))
        assert isinstance(local, cgroups.CgroupV2) and local.available_cpus() == [0, 1]

    def test_pinned_group_sees_exactly_its_cpu(self, guest):
        inst, _, driver = guest
        name = f"{PREFIX}-v2pin-{secrets.token_hex(3)}"
        sh(inst, driver.create_script(name, [1], None, 64))
        try:
            assert read(inst, f"{ROOT}/{name}/cpuset.cpus").strip() == "1"
            assert read(inst, f"{ROOT}/{name}/cpu.max").split() == ["max", "100000"]
            assert read(inst, f"{ROOT}/{name}/memory.max").strip() == str(64 << 20)
            assert {"cpuset", "cpu", "memory"} <= set(read(inst, f"{ROOT}/cgroup.subtree_control").split())
            out = in_group(inst, driver, name, "grep Cpus_allowed_list /proc/self/status; nproc").stdout
            allowed, nproc = out.splitlines()
            assert parse_cpu_list(allowed.split(":", 1)[1].strip()) == {1}
            assert nproc.strip() == "1"
            assert read(inst, f"{ROOT}/{name}/cpuset.cpus.effective").strip() == "1"
        finally:
            sh(inst, driver.remove_script(name))
        assert sh(inst, driver.exists_script(name), check=False).exit_code != 0

    def test_floating_group_is_capped_at_one_cpu_of_time(self, guest, tmp_path):
        inst, _, driver = guest
        name = f"{PREFIX}-v2float-{secrets.token_hex(3)}"
        sh(inst, driver.create_script(name, [0, 1], 1, 64))
        try:
            assert read(inst, f"{ROOT}/{name}/cpu.max").split() == ["100000", "100000"]
            before = driver.parse_cpu_time(sh(inst, driver.cpu_time_script(name)).stdout)
            # the wall time of the loops is measured inside the guest, around the same loops
            # (a nominal duration is no bound: a loaded host stretches the loops' lifetime)
            out = in_group(inst, driver, name,
                           "s=$(cat /proc/uptime); for i in 1 2; do timeout "
                           f"{WALL_S} sh -c 'while :; do :; done' & done; wait; "
                           "e=$(cat /proc/uptime); echo ${s%% *} ${e%% *}").stdout.split()
            wall = float(out[-1]) - float(out[-2])
            stat = read(inst, f"{ROOT}/{name}/cpu.stat")
            used = driver.parse_cpu_time(stat) - before
            fields = dict(line.split() for line in stat.splitlines())
            # two busy loops on two vCPUs, one CPU of quota: the kernel throttled the group
            assert int(fields["nr_throttled"]) > 0, stat
            # quota 1 CPU: at most the loops' wall time, plus one 100 ms period of slack
            assert used <= wall * 1.05 + 0.1, f"{used:.2f}s of CPU in {wall:.2f}s with quota 1 CPU"
            assert used > 0.2 * wall, f"the busy loops barely ran ({used:.2f}s in {wall:.2f}s)"
            # the local driver reads the kernel's own cpu.stat to the same figure
            local = local_driver_over(tmp_path, {"cpu.stat": stat}, name)
            assert local.cpu_time_s(name) == driver.parse_cpu_time(stat)
        finally:
            sh(inst, driver.remove_script(name))

    def test_allocation_past_memory_max_is_oom_killed(self, guest, tmp_path):
        inst, _, driver = guest
        name = f"{PREFIX}-v2mem-{secrets.token_hex(3)}"
        sh(inst, driver.create_script(name, [0, 1], None, 64))
        try:
            small = in_group(inst, driver, name, "head -c 16m /dev/zero | tail | wc -c")
            assert small.stdout.strip() == str(16 << 20)
            big = in_group(inst, driver, name, "head -c 200m /dev/zero | tail > /dev/null", check=False)
            assert big.exit_code == 137, big.describe()
            events = read(inst, f"{ROOT}/{name}/memory.events")
            local = local_driver_over(tmp_path, {"memory.events": events}, name)
            assert local.memory_events(name)["oom_kill"] >= 1, events
            assert in_group(inst, driver, name, "echo alive").stdout == "alive\n"
        finally:
            sh(inst, driver.remove_script(name))

    def test_kill_finds_the_exec_tree_and_removal_leaves_nothing(self, guest):
        inst, _, driver = guest
        name = f"{PREFIX}-v2kill-{secrets.token_hex(3)}"
        token = secrets.token_hex(8)
        sh(inst, driver.create_script(name, [0], None, 64))
        try:
            in_group(inst, driver, name, "setsid sleep 300 >/dev/null 2>&1 & sleep 301 >/dev/null 2>&1 &",
                     token=token)
            pids = {int(p) for p in sh(inst, driver.pids_script(name)).stdout.split()}
            assert len(pids) == 2, pids
            sh(inst, rc.kill_exec_script(token, driver, name))
            deadline = time.monotonic() + 10
            while sh(inst, driver.pids_script(name)).stdout.split() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert sh(inst, driver.pids_script(name)).stdout.split() == []
            # a group with a live process is still removed: remove kills first (cgroup.kill on 5.14+)
            in_group(inst, driver, name, "sleep 302 >/dev/null 2>&1 &")
        finally:
            sh(inst, driver.remove_script(name))
        assert sh(inst, driver.exists_script(name), check=False).exit_code != 0
        assert sh(inst, driver.glob_script(PREFIX + "-v2")).stdout.split() == []
        assert "sleep 30" not in sh(inst, "ps -eo args").stdout
