"""labkit.backends.host_end.host_end: the host end of a run's network, shared by iperf3 and apache."""

import os
from types import SimpleNamespace

import pytest

from labkit.backends.host_end import HostEnd, host_end
from labkit.errors import BenchmarkError, ConfigError

from .fixtures.fakes import FakeInstance


def on_network(host=None):
    """An instance on a network whose backend's host end is this machine's (:class:`HostEnd`), or
    ``host`` (another machine's, as the ssh backend's)."""
    inst = FakeInstance()
    inst.network = SimpleNamespace(name="labkit-t--net-1a2b3c4d", host_address="10.77.0.1")
    inst.network.backend = SimpleNamespace(
        host_end=(lambda net: HostEnd(net)) if host is None else (lambda net: host)
    )
    return inst


def test_needs_a_private_network():
    with pytest.raises(ConfigError, match="apache path 'from_host' needs network: private"):
        with host_end([FakeInstance()], "apache", "from_host", "sh", "dash"):
            pass


def test_missing_host_tool_names_its_package():
    with pytest.raises(BenchmarkError, match=r"apt-get install apache2-utils"):
        with host_end([on_network()], "apache", "from_host", "no-such-tool-labkit", "apache2-utils"):
            pass


def test_yields_the_host_end_and_removes_its_work_directory():
    with pytest.raises(RuntimeError):
        with host_end([on_network()], "apache", "from_host", "sh", "dash") as host:
            assert isinstance(host, HostEnd) and host.address == "10.77.0.1"
            assert host.exec(["pwd"], timeout=30).stdout.strip() == host.workdir
            workdir = host.workdir
            raise RuntimeError("the workload failed")
    assert not os.path.exists(workdir)  # removed even when the workload raised


def test_a_spawned_command_is_seen_to_end():
    """Process.running() polls with timeout 0: the host end must still drain the pipes and reap
    the command (subprocess's communicate(timeout=0) alone never would)."""
    import time

    host = HostEnd(on_network().network)
    try:
        p = host.spawn(["sh", "-c", "echo served; exit 3"])
        deadline = time.monotonic() + 30
        while p.running():
            assert time.monotonic() < deadline, "the ended command still looks running"
            time.sleep(0.01)
        assert (p.result.exit_code, p.result.stdout) == (3, "served\n")
    finally:
        host.destroy()


def test_a_remote_host_end_is_asked_for_the_tool_and_destroyed():
    """A backend whose networks are on another machine (ssh) hands its own host end: the tool is
    looked for there (``command -v``), and the host end is destroyed on every path."""
    missing = FakeInstance({"command -v no-such-tool-labkit": (1, "")})
    with pytest.raises(BenchmarkError, match=r"not installed on the host of network labkit-t--net-1a2b3c4d"):
        with host_end([on_network(missing)], "iperf3", "to_host", "no-such-tool-labkit", "iperf3"):
            pass
    assert missing._destroyed and ["sh", "-c", "command -v no-such-tool-labkit"] in missing.calls
    there = FakeInstance()
    with host_end([on_network(there)], "iperf3", "to_host", "iperf3", "iperf3") as host:
        assert host is there and not there._destroyed
    assert there._destroyed


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a host end's cgroup needs root")


@needs_root
def test_a_host_ends_commands_are_counted_in_a_cgroup_named_after_the_campaign():
    """The quiet-host guard took ``ab`` on the host (apache ``path: from_host``) for a process
    outside the campaign and flagged every run: a host end's commands now run in a cgroup named
    with the campaign's prefix, which the campaign's telemetry counts, and which goes with it."""
    from labkit.backends import cgroups
    from labkit.run.readings import CgroupWatch

    watch = CgroupWatch(cgroups.detect_here(), "labkit-t--", holds_instances=False)
    retired = "labkit-t--host-retired"
    before_all = sum(cpu for cpu, _ in watch.read().values())
    host = HostEnd(on_network().network)
    try:
        name = host.group_name
        assert name.startswith("labkit-t--host-") and host.metadata["cgroup"] == name
        assert f"/{name}" in host.exec(["cat", "/proc/self/cgroup"], timeout=30).stdout
        before = host.stats()["cpu_s"]
        host.exec(["sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"], timeout=120)
        used = host.stats()["cpu_s"] - before
        assert used > 0.05
        assert watch.read()[name][0] >= used
        # a process that left the command's session is still the host end's, and dies with it
        host.exec(["sh", "-c", "setsid -f sleep 600 </dev/null >/dev/null 2>&1"], timeout=30)
        path = f"{cgroups.accounting_root(cgroups.detect_here())}/{name}"
        assert cgroups.read_local(f"{path}/cgroup.procs").split()
    finally:
        host.destroy()
    assert not os.path.exists(path)
    # gone between two readings, its CPU is still the campaign's: the watch's retired count holds it
    after = watch.read()
    assert name not in after and sum(cpu for cpu, _ in after.values()) - before_all >= used
    assert after[retired][0] >= used


@needs_root
def test_remove_leftovers_removes_only_the_campaigns_host_end_cgroups():
    from labkit.backends import cgroups
    from labkit.backends.host_end import remove_leftovers

    root = cgroups.accounting_root(cgroups.detect_here())
    ours, theirs = f"{root}/labkit-t--host-0badc0de", f"{root}/labkit-t2--host-0badc0de"
    os.mkdir(ours)
    os.mkdir(theirs)
    try:
        assert remove_leftovers("labkit-t--") == ["labkit-t--host-0badc0de"]
        assert not os.path.exists(ours) and os.path.isdir(theirs)
    finally:
        for d in (ours, theirs):
            if os.path.isdir(d):
                os.rmdir(d)
