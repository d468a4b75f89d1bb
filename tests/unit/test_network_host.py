"""labkit.backends.network_host.host_end: the host end of a run's network, shared by iperf3 and apache."""
import os
from types import SimpleNamespace

import pytest

from labkit.backends.network_host import HostEnd, host_end
from labkit.errors import BenchmarkError, ConfigError

from .fixtures.fakes import FakeInstance


def on_network(host=None):
    """An instance on a network whose backend's host end is this machine's (:class:`HostEnd`), or
    ``host`` (another machine's, as the ssh backend's)."""
    inst = FakeInstance()
    inst.network = SimpleNamespace(name="labkit-t--net-1a2b3c4d", host_address="10.77.0.1")
    inst.network.backend = SimpleNamespace(host_end=(lambda net: HostEnd(net)) if host is None else (lambda net: host))
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
    assert not os.path.exists(workdir)          # removed even when the workload raised


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
