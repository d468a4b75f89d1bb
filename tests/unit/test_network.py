"""Network and link specs, tc commands, subnet choice, hosts files: no daemon, no traffic."""
from __future__ import annotations

import ipaddress

import pytest

from labkit import network as net
from labkit import runnet
from labkit.design import Design
from labkit.errors import ConfigError
from labkit.workloads import get_workload


@pytest.mark.parametrize("level,rate,delay", [
    ("1gbit/50us", 1e9, 50e-6),
    ("200mbit/", 200e6, 0.0),
    ("/2ms", None, 2e-3),
    ({"rate": "10mbps", "delay": "0.1s"}, 80e6, 0.1),   # mbps = megabytes per second, as in tc
    ("gbe", 1e9, 50e-6),
])
def test_link_levels(level, rate, delay):
    link = net.parse_link(level)
    assert link.rate_bit == pytest.approx(rate) if rate else link.rate_bit is None
    assert link.delay_s == pytest.approx(delay)


@pytest.mark.parametrize("level", ["fast", "1gbit", "1gbyte/1ms", "1gbit/1parsec", "1kbit/", "/11s",
                                   {"rate": "1gbit", "jitter": "1ms"}, 3, "/"])
def test_bad_link_levels_name_the_factor(level):
    with pytest.raises(ConfigError, match="link"):
        net.parse_link(level, "design.yaml: factor 'link'")


def test_none_is_no_link():
    assert net.parse_link("none") is None and net.parse_link(None) is None


def test_rate_only_link_is_one_tbf_at_root():
    [cmd] = net.shape_commands("lk1", net.Link(200e6, 0.0))
    assert cmd[:7] == ["tc", "qdisc", "replace", "dev", "lk1", "root", "handle"]
    assert cmd[cmd.index("tbf") + 2] == "200000000bit"
    # the burst holds 2 ms at the rate, at least 64 KiB
    assert int(cmd[cmd.index("burst") + 1]) == 65536


def test_delay_is_netem_with_tbf_child():
    netem, tbf = net.shape_commands("lk1", net.Link(10e9, 50e-6))
    assert netem[netem.index("delay") + 1] == "50us" and "root" in netem
    assert tbf[tbf.index("parent") + 1] == "1:1"
    assert int(tbf[tbf.index("burst") + 1]) == int(10e9 / 8 * 0.002)


def test_delay_only_has_no_tbf():
    [netem] = net.shape_commands("lk1", net.Link(None, 1e-3))
    assert "tbf" not in netem and "1000us" in netem


def test_subnet_skips_taken_routes():
    name = "labkit-x--net-0badcafe"
    first = net.pick_subnet(name, taken=[])
    assert first.prefixlen == 24 and first.subnet_of(net.SUBNET_POOL)
    assert net.pick_subnet(name, taken=[]) == first   # a function of the name
    second = net.pick_subnet(name, taken=[first])
    assert second != first and not second.overlaps(first)
    # a wide route over the whole pool leaves nothing
    with pytest.raises(Exception, match="no free"):
        net.pick_subnet(name, taken=[ipaddress.ip_network("10.0.0.0/8")])


def test_hosts_text_lists_every_member():
    text = net.hosts_text({"inst0": "10.200.0.2", "inst1": "10.200.0.3", "host": "10.200.0.1"})
    lines = text.splitlines()
    assert lines[0].startswith("127.0.0.1") and "inst0" not in lines[0]
    assert "10.200.0.3\tinst1" in lines and "10.200.0.1\thost" in lines


def test_short_id():
    assert net.short_id("labkit-x--net-1a2b3c4d") == "1a2b3c4d"
    with pytest.raises(ConfigError):
        net.short_id("labkit-x--net")


def test_design_accepts_network_and_link_factors_and_checks_levels():
    wl = get_workload("iperf3")
    d = Design.from_dict({"factors": {"network": ["none", "private"], "link": ["none", "1gbit/"]}})
    d.validate_for(wl)
    bad = Design.from_dict({"factors": {"network": ["none", "public"]}})
    with pytest.raises(ConfigError, match="network"):
        bad.validate_for(wl)
    bad = Design.from_dict({"factors": {"link": ["none", "fast"]}})
    with pytest.raises(ConfigError, match="link"):
        bad.validate_for(wl)


def test_spanning_workload_defaults_to_a_private_network():
    wl = get_workload("iperf3", path="instances")
    assert runnet.mode_for({}, wl, {}) == "private"
    assert runnet.mode_for({}, get_workload("iperf3"), {}) == "none"
    assert runnet.mode_for({"path": "to_host"}, get_workload("iperf3"), {"path": "to_host"}) == "private"


def test_a_link_without_a_network_is_refused():
    class NoBackend:
        def create_network(self, *a):
            raise AssertionError("must not be called")
    with pytest.raises(ConfigError, match="network: private"):
        runnet.open_network(NoBackend(), {"link": "1gbit/"}, get_workload("iperf3"), {}, 1, "labkit-x--", {})


def test_iperf3_path_is_checked():
    with pytest.raises(ConfigError, match="path"):
        get_workload("iperf3", path="internet")
