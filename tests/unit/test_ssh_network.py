"""The ssh backend's private-network scripts (labkit.backends.ssh_network) as text: what the host
must have, quoting, the netem refusal's exit status, and the parsing of what the host prints.
They run for real against a namespace host in tests/integration/test_ssh_network.py."""

from __future__ import annotations

import json
import shlex

import pytest

from labkit.backends import ssh_network as sn
from labkit.backends.private_network import Network
from labkit.backends.ssh import SshBackend
from labkit.core import network_factors as netmod
from labkit.errors import BackendError


def network(link=None) -> Network:
    return Network(
        name="labkit-t--net-1a2b3c4d",
        subnet="10.200.1.0/24",
        host_address="10.200.1.1",
        addresses=["10.200.1.2", "10.200.1.3"],
        device="lk1a2b3c4d",
        backend=SshBackend(host="192.0.2.1"),
        link=link,
    )


def test_what_the_host_lacks():
    assert sn.missing({"ip", "nsenter", "unshare"}, "0", None) == []
    assert sn.missing({"ip", "nsenter", "unshare"}, "0", netmod.Link(1e9, 0.0)) == ["tc"]
    assert sn.missing({"ip"}, "1000", None) == ["root", "nsenter", "unshare"]


def test_attach_script_quotes_every_value_and_refuses_a_missing_netem_with_its_own_status():
    net = network(netmod.Link(1e8, 0.005))
    script = sn.attach_script("labkit-t--0a0b0c0d", net, 1, "/root/work dir/hosts")
    assert "'/root/work dir/hosts'" in script  # a path with a space stays one word
    assert "ip link add lk1a2b3c4dh1 type veth peer name lk1a2b3c4dc1 netns labkit-t--0a0b0c0d" in script
    assert "ip -n labkit-t--0a0b0c0d addr add 10.200.1.3/24 dev eth0" in script
    (netem,) = [line for line in script.splitlines() if " netem " in line]
    assert netem.endswith(f"exit {sn.UNAVAILABLE}; }}") and "tbf" in script.split(netem)[1]
    # each of the 9 set-up commands and the tbf stops the script on failure (the hosts text,
    # quoted, spans lines of its own)
    assert script.count(" || exit 1\n") == 10
    words = shlex.split(script.split("printf ", 1)[1])
    assert words[:4] == ["%s", net.hosts_text(), ">", "/root/work dir/hosts"]


def test_bridge_and_namespace_removal_are_quiet_when_gone():
    remove = sn.remove_bridge_script("lk1a2b3c4d", "labkit-t--net-1a2b3c4d")
    assert (
        "while iptables -D FORWARD -i lk1a2b3c4d -o lk1a2b3c4d" in remove
        and "labkit:labkit-t--net-1a2b3c4d" in remove
    )
    assert "if ip link show lk1a2b3c4d" in remove
    assert sn.remove_netns_script("labkit-t--0a0b0c0d").startswith("if [ -e /run/netns/labkit-t--0a0b0c0d ]")
    create = sn.bridge_script(network())
    assert create.startswith(
        "ip link add lk1a2b3c4d type bridge || exit 1\n"
    )  # an existing bridge is not touched
    assert "|| { ip link delete lk1a2b3c4d type bridge; exit 1; }" in create


def test_enter_argv_keeps_the_pid_and_binds_the_hosts_file():
    argv = sn.enter_argv("labkit-t--0a0b0c0d", "/w/hosts")
    assert argv[:3] == ["nsenter", "--net=/run/netns/labkit-t--0a0b0c0d", "--"]
    assert argv[-2:] == [sn.HOSTS, "/w/hosts"] and 'exec "$@"' in sn.HOSTS


def test_parsing_what_the_host_printed():
    links = [
        {"ifname": "lk1a2b3c4d", "ifalias": "labkit-t--net-1a2b3c4d", "linkinfo": {"info_kind": "bridge"}},
        {"ifname": "lkother", "ifalias": "labkit-u--net-00000000", "linkinfo": {"info_kind": "bridge"}},
        {"ifname": "veth0", "ifalias": "labkit-t--x", "linkinfo": {"info_kind": "veth"}},
        "junk",
    ]
    assert sn.parse_bridges(json.dumps(links), "labkit-t--") == {"labkit-t--net-1a2b3c4d": "lk1a2b3c4d"}
    assert sn.parse_bridges("", "labkit-t--") == {} and sn.parse_bridges('{"a": 1}', "labkit-") == {}
    with pytest.raises(BackendError, match="no JSON"):
        sn.parse_bridges('Object "link" is unknown', "labkit-")
    routes = [{"dst": "default", "gateway": "10.0.0.1"}, {"dst": "10.231.0.0/24"}, {"dst": "10.200.3.7"}]
    assert [str(r) for r in netmod.parse_routes(json.dumps(routes))] == ["10.231.0.0/24", "10.200.3.7/32"]
    with pytest.raises(BackendError):
        netmod.parse_routes("not json")


def test_netdevs_lists_only_devices_named_like_a_bridge_with_shell_builtins(tmp_path):
    import subprocess

    dev = tmp_path / "dev"
    dev.write_text(
        "Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes\n"
        "    lo: 100 1 0 0 0 0 0 0 100\n"
        "lk1a2b3c4d: 0 0 0 0 0 0 0 0 0\n"
        "  lk1a2b3c4dh0: 5 0 0 0 0 0 0 0 0\n"  # a veth's host end: not a bridge
        "lkfleet0: 1 0 0 0 0 0 0 0 0\n"
        "  lk0000ffff: 1 0 0 0 0 0 0 0 0\n"
    )
    from labkit.backends import native

    script = native.NETDEVS.replace("/proc/net/dev", str(dev))
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30, env={})
    assert out.stdout.splitlines() == ["netdev lk1a2b3c4d", "netdev lk0000ffff"] and out.returncode == 0


def test_a_host_without_root_or_tools_is_refused_before_anything_runs_there():
    """The probe's facts decide: no ``ip``/``nsenter``/``unshare`` or no root on the host is a
    BackendUnavailable naming them, before a route is read or a bridge made."""
    from labkit.backends.ssh import HostFacts
    from labkit.errors import BackendUnavailable

    be = SshBackend(host="192.0.2.1")
    be.conn, be.facts = object(), HostFacts("uid 1000\nhome /home/u\ntool ip\ntool setsid\n")  # as probed
    be.run_script = None  # nothing may run on the host
    with pytest.raises(BackendUnavailable, match="needs root, nsenter, unshare there"):
        be.create_network("labkit-t--", 1)
    be.facts = HostFacts("uid 0\nhome /root\ntool ip\ntool nsenter\ntool unshare\n")
    with pytest.raises(BackendUnavailable, match="needs tc there"):
        be._require_network_tools(netmod.Link(1e9, 0.0))
