"""Network and link specs, tc commands, subnet choice, hosts files: no daemon, no traffic."""

from __future__ import annotations

import ipaddress
import re

import pytest

from labkit.backends.base import Backend
from labkit.core import network_factors as net
from labkit.design import Design
from labkit.errors import ConfigError
from labkit.run import network_setup as runnet
from labkit.workloads import get_workload


@pytest.mark.parametrize(
    "level,rate,delay",
    [
        ("1gbit/50us", 1e9, 50e-6),
        ("200mbit/", 200e6, 0.0),
        ("/2ms", None, 2e-3),
        ({"rate": "10mbps", "delay": "0.1s"}, 80e6, 0.1),  # mbps = megabytes per second, as in tc
        ("gbe", 1e9, 50e-6),
    ],
)
def test_link_levels(level, rate, delay):
    link = net.parse_link(level)
    assert link.rate_bit == pytest.approx(rate) if rate else link.rate_bit is None
    assert link.delay_s == pytest.approx(delay)


@pytest.mark.parametrize(
    "level",
    [
        "fast",
        "1gbit",
        "1gbyte/1ms",
        "1gbit/1parsec",
        "1kbit/",
        "/11s",
        {"rate": "1gbit", "jitter": "1ms"},
        3,
        "/",
    ],
)
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
    assert net.pick_subnet(name, taken=[]) == first  # a function of the name
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
    """Names labkit made before (8 hex digits) keep their id; today's names (13 characters of
    a-z2-7, issue 45) get 8 hex digits of their SHA-256: a device name stays within 15 characters,
    and two names give two ids."""
    assert net.short_id("labkit-x--net-1a2b3c4d") == "1a2b3c4d"
    new = net.short_id("labkit-x--net-bk7j7mitpvj5l")
    assert re.fullmatch(r"[0-9a-f]{8}", new) and new == net.short_id("labkit-x--net-bk7j7mitpvj5l")
    assert new != net.short_id("labkit-x--net-bk7j7mitpvj5m") and len(f"lk{new}h15") <= 15
    with pytest.raises(ConfigError):
        net.short_id("")


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


@pytest.mark.parametrize("level", [0, 9, "2", 1.5, True, None])
def test_bad_nics_levels_name_the_factor(level):
    with pytest.raises(ConfigError, match=r"factor 'nics' level.*whole number from 1"):
        Design.from_dict({"factors": {"nics": [1, level]}}).validate_for(get_workload("iperf3"))


def test_nics_factor_is_accepted_and_needs_a_private_network():
    Design.from_dict({"factors": {"nics": [1, 2, 4]}}).validate_for(get_workload("iperf3"))

    class NoBackend:
        def create_network(self, *a):
            raise AssertionError("must not be called")

    with pytest.raises(ConfigError, match="'nics' level 2 needs network: private"):
        runnet.open_network(NoBackend(), {"nics": 2}, get_workload("iperf3"), {}, 1, "labkit-x--", {})


class FakeBackend(Backend):
    """A backend with no instances: what ``create_network`` does before the backend's hook."""

    name = "fake"

    def check(self):
        pass

    def host_cpus(self):
        return 2

    def fingerprint(self):
        return {}

    def _create(self, spec, name, index, cpus, network=None):
        raise AssertionError("no instances here")

    def cleanup(self, prefix):
        return []

    def list_labkit(self, prefix="labkit-"):
        return []


def test_a_backend_that_cannot_bond_refuses_nics_and_names_libvirt():
    be = FakeBackend()
    with pytest.raises(ConfigError, match=r"nics: 2: the fake backend cannot aggregate NICs.*libvirt"):
        be.create_network("labkit-x--", 2, nics=2)


def test_a_campaign_with_nics_on_a_backend_that_cannot_bond_fails_before_any_run(tmp_path):
    from labkit.run.campaign import Campaign

    design = Design.from_dict({"factors": {"nics": [1, 2]}, "name": "agg"})
    camp = Campaign(
        design, backend="local", workload="iperf3", workload_params={"path": "instances"}, data_dir=tmp_path
    )
    with pytest.raises(
        ConfigError, match=r"'nics' level 2: the local backend cannot aggregate NICs.*libvirt"
    ):
        camp.run()
    assert not (tmp_path / camp.campaign_id / "store.sqlite").exists()  # nothing ran, no store


def test_bonded_network_has_a_data_subnet_the_instances_name_each_other_on(monkeypatch):
    monkeypatch.setattr(net, "_routes", lambda: [])
    made = []

    class Bonding(FakeBackend):
        MAX_NICS = 4

        def _create_network(self, network):
            made.append(network)

    n = Bonding().create_network("labkit-x--", 3, "1gbit/", nics=4)
    assert made == [n] and n.nics == 4
    main, data = ipaddress.ip_network(n.subnet), ipaddress.ip_network(n.data_subnet)
    assert not main.overlaps(data)
    assert all(ipaddress.ip_address(a) in main for a in n.addresses)
    assert all(ipaddress.ip_address(a) in data for a in n.data_addresses) and len(n.data_addresses) == 3
    assert n.peer_addresses == n.data_addresses and n.peer_subnet == n.data_subnet
    hosts = dict(line.split("\t")[::-1] for line in n.hosts_text().splitlines()[2:])
    assert hosts == {
        "inst0": n.data_addresses[0],
        "inst1": n.data_addresses[1],
        "inst2": n.data_addresses[2],
        "host": n.host_address,
    }  # instances talk over the bond
    assert [n.data_device(j) for j in (1, 4)] == [n.device + "1", n.device + "4"]
    with pytest.raises(ConfigError, match="data NICs 1-4, not 5"):
        n.data_device(5)
    assert n.metadata()["nics"] == 4 and n.metadata()["data_subnet"] == n.data_subnet
    plain = Bonding().create_network("labkit-x--", 2)
    assert plain.nics == 1 and plain.peer_addresses == plain.addresses and plain.peer_subnet == plain.subnet
    assert "data_subnet" not in plain.metadata()


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
