"""labkit.backends.network_host.host_end: the host end of a run's network, shared by iperf3 and apache."""
import os
from types import SimpleNamespace

import pytest

from labkit.backends.network_host import HostEnd, host_end
from labkit.errors import BenchmarkError, ConfigError

from .fixtures.fakes import FakeInstance


def on_network():
    inst = FakeInstance()
    inst.network = SimpleNamespace(backend=None, host_address="10.77.0.1")
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
