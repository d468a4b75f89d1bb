"""Private run networks on the ``ssh`` backend, on a namespace test host of scripts/setup-fleet.sh
(``ns1``, 10.231.0.11: a network namespace with its own sshd, so the bridge and the instances'
namespaces are made in a network stack that is not the controller's).

Two instances of one run reach each other and the host (the ssh host itself, not this machine),
nothing else; the link is shaped on the ssh host; the bridge, the namespaces and the FORWARD rule
are there while the run lasts and gone after teardown, and after a SIGKILL + ``cleanup(prefix)``.

Network safety: the only traffic is on networks these tests create on the namespace host (the
run's bridge and a second run's network, the "outside" that must stay unreachable).
"""

from __future__ import annotations

import json
import secrets
import shutil

import pytest

from labkit.backends import get_backend, teardown
from labkit.core import network_factors as netmod
from labkit.core.instance import InstanceSpec
from labkit.errors import BackendError, BackendUnavailable, ConfigError
from labkit.workloads import get_workload, mpi
from tests.support.processes import killed_when_ready

from . import workload_checks as checks
from .test_fleet import HOSTS, KEY, fleet_or_skip

pytestmark = [pytest.mark.fleet, pytest.mark.network]
ADDRESS = HOSTS[0][1]
OPTIONS = {"host": ADDRESS, "port": 22, "user": "root", "key_filename": KEY, "connect_timeout": 5}
PREFIX = f"labkit-test-sshnet{secrets.token_hex(2)}--"
RATE_MBIT = 100


def backend():
    return get_backend("ssh", **OPTIONS)


@pytest.fixture(scope="module", autouse=True)
def _fleet():
    fleet_or_skip()
    if shutil.which("iperf3") is None:
        pytest.skip(
            "the namespace hosts share this machine's tools: iperf3 is missing (scripts/setup-tools.sh)"
        )


def remote(be, script: str) -> str:
    return be.run_script(script, "a test's look at the host").stdout


def left_on_host(be, pfx: str) -> list[str]:
    """What of runs named ``pfx*`` is still on the ssh host: instances (work dirs, cgroups), the
    instances' network namespaces, bridges and FORWARD rules."""
    left = list(be.list_labkit(pfx))
    links = json.loads(remote(be, "ip -j -d link show type bridge") or "[]")
    left += sorted(netmod.bridges_in(links, pfx))
    left += [f"netns {n}" for n in remote(be, f"ls /run/netns | grep '^{pfx}' || true").split()]
    rules = remote(be, "iptables -S FORWARD 2>/dev/null || true")
    return left + [line for line in rules.splitlines() if f"labkit:{pfx}" in line]


@pytest.fixture(scope="module")
def run():
    """(backend, network, [inst0, inst1], outside network), removed at the end (and proven gone)."""
    be = backend()
    net = other = None
    insts: list = []
    try:
        net = be.create_network(PREFIX, 2, f"{RATE_MBIT}mbit/")
        other = be.create_network(PREFIX + "other-", 1)  # another run's network: must stay unreachable
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=128, count=2), prefix=PREFIX, network=net)
        yield be, net, insts, other
        assert teardown(insts) == []
        insts = []
        net.remove()
        other.remove()
        assert left_on_host(be, PREFIX) == []
    finally:
        teardown(insts)
        for n in (net, other):
            if n is not None:
                n.remove()
        be.cleanup(PREFIX)
        be.close()


def tcp_connect(inst, address: str, port: int):
    return inst.exec(
        ["timeout", "10", "bash", "-c", f"exec 3<>/dev/tcp/{address}/{port}"], check=False, timeout=30
    )


def test_the_network_is_on_the_ssh_host_not_here(run):
    be, net, (a, b), _ = run
    assert netmod.bridges(PREFIX) == {}  # nothing on the controller
    links = json.loads(remote(be, "ip -j -d link show type bridge"))
    assert netmod.bridges_in(links, PREFIX) == {
        net.name: net.device,
        **netmod.bridges_in(links, PREFIX + "other-"),
    }
    addrs = remote(be, f"ip -4 -br addr show dev {net.device}")
    assert f"{net.host_address}/24" in addrs
    ports = remote(be, f"ip -br link show master {net.device}")
    assert a.host_device in ports and b.host_device in ports
    assert sorted(remote(be, f"ls /run/netns | grep '^{PREFIX}'").split()) == sorted([a.name, b.name])


def test_names_resolve_to_the_run_addresses(run):
    be, net, (a, b), _ = run
    for inst in (a, b):
        for name, address in net.names().items():
            out = inst.exec(["getent", "ahostsv4", name], timeout=30).stdout
            assert out.split()[0] == address, (inst.name, name, out)
    assert [a.address, b.address] == net.addresses
    # in its own network namespace: loopback and eth0 at its address, nothing else
    addrs = a.exec(["ip", "-4", "-br", "addr"], timeout=30).stdout.split("\n")
    assert [line.split()[0].split("@")[0] for line in addrs if line.strip()] == ["lo", "eth0"]
    assert f"{a.address}/24" in addrs[1]


def test_instances_reach_each_other_and_the_host_both_ways(run):
    """iperf3 between the instances, from an instance to the ssh host and back (the host end is
    the ssh host: its server runs there, in the host's own network namespace)."""
    be, net, (a, b), _ = run
    rows = get_workload("iperf3", path="instances", protocol="tcp", duration_s=1).run_group([a, b], {})
    assert next(r.value for r in rows if r.metric == "tcp_mbit_per_s") > 0
    for path in ("to_host", "from_host"):
        rows = get_workload("iperf3", path=path, protocol="tcp", duration_s=1).run_group([a, b], {})
        assert next(r.value for r in rows if r.metric == "tcp_mbit_per_s") > 0
    # the host end (the network's name + "h", SshHostEnd) is gone; an instance's random name may end in "h" too
    assert net.name + "h" not in be.list_labkit(PREFIX)


def test_nothing_outside_the_run_network_is_reachable(run):
    be, net, (a, b), other = run
    res = tcp_connect(a, other.host_address, 9)  # another run's bridge on the same host
    assert not res.ok and "unreachable" in (res.stdout + res.stderr).lower(), res.stderr
    res = tcp_connect(a, ADDRESS, 22)  # the ssh host's own address: not routed either
    assert not res.ok and "unreachable" in (res.stdout + res.stderr).lower(), res.stderr
    routes = a.exec(["ip", "-4", "route"], timeout=30).stdout
    assert "default" not in routes and routes.count("\n") == 1, routes


def test_shaped_link_measures_as_shaped(run):
    """Traffic into an instance is shaped on the ssh host to the link's rate (as on local: never
    above it +2 %, at least half of it on a loaded machine)."""
    be, net, (a, b), _ = run
    qdisc = remote(be, f"tc qdisc show dev {a.host_device}")
    assert "tbf" in qdisc and "100Mbit" in qdisc, qdisc
    rows = get_workload("iperf3", path="instances", protocol="tcp", duration_s=3).run_group([a, b], {})
    got = next(r.value for r in rows if r.metric == "tcp_mbit_per_s")
    assert 0.5 * RATE_MBIT <= got <= 1.02 * RATE_MBIT, got


def test_metadata_of_the_run(run):
    be, net, (a, b), _ = run
    meta = net.metadata()
    assert meta["mode"] == "private" and meta["device"] == net.device
    assert meta["link"] == {"rate_bit_per_s": RATE_MBIT * 1e6, "delay_s": 0.0}
    assert a.metadata["network"] == {
        "name": net.name,
        "host": "inst0",
        "address": a.address,
        "host_device": a.host_device,
    }
    json.dumps(meta)


def test_mpi_refuses_a_network_this_machine_is_not_on(run):
    be, net, insts, _ = run
    with pytest.raises(ConfigError, match="mpirun runs on this machine"):
        mpi.launch(insts, ["true"], ranks=2, timeout=60)


def test_a_network_of_another_backend_is_refused(run):
    be, net, _, _ = run
    other = backend()
    try:
        with pytest.raises(ConfigError, match="belongs to another backend"):
            other.provision(InstanceSpec(vcpus=1, memory_mb=64), prefix=PREFIX, network=net)
        assert other.list_labkit(PREFIX) == be.list_labkit(PREFIX)
    finally:
        other.close()


KILLED = """
import sys, time
from labkit.backends import get_backend
from labkit.core.instance import InstanceSpec
be = get_backend("ssh", **eval(sys.argv[1]))
net = be.create_network(sys.argv[2], 2, "1gbit/")
be.provision(InstanceSpec(vcpus=1, memory_mb=128, count=2), prefix=sys.argv[2], network=net)
print("ready", flush=True)
time.sleep(600)
"""


def test_network_is_gone_after_sigkill_and_cleanup():
    pfx = PREFIX + "killed-"
    be = None
    try:
        with killed_when_ready(KILLED, repr(OPTIONS), pfx):
            be = backend()  # connected after the kill (its probe's listing stands for a few seconds)
            left = left_on_host(be, pfx)
            # two instances, their namespaces and the bridge (and its FORWARD rule where br_netfilter is on)
            assert len(be.list_labkit(pfx)) == 2 and len([x for x in left if not x.startswith("-A ")]) == 5, (
                left
            )
            removed = be.cleanup(pfx)
            assert len(removed) == 3 and any("-net-" in n for n in removed), removed
            assert left_on_host(be, pfx) == []
    finally:
        be = be or backend()
        be.cleanup(pfx)
        be.close()


def test_making_a_bridge_that_exists_fails_and_leaves_it_alone():
    """The bridge script stops at ``ip link add`` when the bridge exists: it never deletes a bridge
    it did not make (its clean-up on failure is for the bridge it just added)."""
    be = backend()
    pfx = PREFIX + "twice-"
    try:
        net = be.create_network(pfx, 1)
        try:
            (inst,) = be.provision(InstanceSpec(vcpus=1, memory_mb=64), prefix=pfx, network=net)
            from labkit.backends import ssh_network

            with pytest.raises(BackendError, match="creating network again failed"):
                be.run_script(ssh_network.bridge_script(net), "creating network again")
            assert netmod.bridges_in(json.loads(remote(be, "ip -j -d link show type bridge")), pfx) == {
                net.name: net.device
            }
            assert inst.exec(["getent", "ahostsv4", "host"], timeout=30).stdout.split()[0] == net.host_address
            inst.destroy()
        finally:
            net.remove()
        assert left_on_host(be, pfx) == []
    finally:
        be.cleanup(pfx)
        be.close()


def test_link_delay_or_a_clear_refusal_where_the_kernel_has_no_netem():
    """A 5 ms link delay makes the round trip inst1 -> inst0 about 10 ms; on a kernel without
    netem the instance is refused with BackendUnavailable naming netem, and nothing is left."""
    be = backend()
    pfx = PREFIX + "delay-"
    net = be.create_network(pfx, 2, "/5ms")
    insts: list = []
    try:
        try:
            insts = be.provision(InstanceSpec(vcpus=1, memory_mb=128, count=2), prefix=pfx, network=net)
        except BackendUnavailable as exc:
            assert "netem" in str(exc) and be.list_labkit(pfx) == []
            pytest.skip(str(exc).splitlines()[0])
        rtt_us = checks.connect_rtt_us(insts[0], insts[1])
        assert rtt_us >= 10_000, rtt_us
    finally:
        teardown(insts)
        net.remove()
        assert left_on_host(be, pfx) == []
        be.cleanup(pfx)
        be.close()
