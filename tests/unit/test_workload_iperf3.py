"""iperf3 JSON parser, address guard and runners, against real captured outputs (fixtures/iperf3)."""

import json

import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads.iperf3 import Iperf3, check_address, client_command, pair, parse, parse_version

from .fixtures.fakes import FakeInstance, fixture


def test_tcp():
    text = fixture("iperf3", "iperf3_tcp.json")
    r = {m.metric: (m.value, m.unit) for m in parse(text, "tcp")}
    end = json.loads(text)["end"]
    assert r["tcp_mbit_per_s"] == (pytest.approx(end["sum_received"]["bits_per_second"] / 1e6), "Mbit/s")
    assert r["tcp_sender_mbit_per_s"][0] == pytest.approx(end["sum_sent"]["bits_per_second"] / 1e6)
    assert r["tcp_retransmits"] == (0.0, "count")


def test_udp():
    text = fixture("iperf3", "iperf3_udp.json")
    r = {m.metric: (m.value, m.unit) for m in parse(text, "udp")}
    s = json.loads(text)["end"]["sum_received"]
    assert r["udp_mbit_per_s"][0] == pytest.approx(s["bits_per_second"] / 1e6)
    assert r["udp_lost_percent"] == (pytest.approx(s["lost_percent"]), "%")
    assert r["udp_jitter_ms"] == (pytest.approx(s["jitter_ms"]), "ms")


def test_udp_old_iperf_without_sum_received():
    doc = json.loads(fixture("iperf3", "iperf3_udp.json"))
    del doc["end"]["sum_received"]
    r = {m.metric: m.value for m in parse(json.dumps(doc), "udp")}
    assert r["udp_mbit_per_s"] == pytest.approx(doc["end"]["sum"]["bits_per_second"] / 1e6)


def test_error_field_connection_refused():
    with pytest.raises(BenchmarkError, match="Connection refused") as err:
        parse(fixture("iperf3", "iperf3_refused.json"), "tcp", command=["iperf3", "-c"])
    assert err.value.command == ["iperf3", "-c"]


def test_truncated_and_malformed():
    text = fixture("iperf3", "iperf3_tcp.json")
    for cut in (50, len(text) // 2, len(text) - 10):
        with pytest.raises(BenchmarkError, match="malformed or truncated"):
            parse(text[:cut], "tcp")
    with pytest.raises(BenchmarkError, match="no JSON"):
        parse("iperf3: error - unable to connect", "tcp")
    with pytest.raises(BenchmarkError, match="summary"):
        parse('{"end": {}}', "tcp")
    with pytest.raises(BenchmarkError, match="summary"):
        parse('{"end": {"sum_sent": {}}}', "udp")
    with pytest.raises(ConfigError):
        parse(text, "sctp")


def test_version():
    assert parse_version(fixture("iperf3", "version.txt")) == "3.12"
    with pytest.raises(BenchmarkError):
        parse_version("")


@pytest.mark.parametrize("ok", ["127.0.0.1", "10.99.0.2", "192.168.77.1", "172.18.0.3", "::1"])
def test_private_and_loopback_addresses_are_allowed(ok):
    assert check_address(ok) == ok


@pytest.mark.parametrize("bad", ["8.8.8.8", "1.1.1.1", "172.32.0.1", "example.com", "169.254.1.1", ""])
def test_other_addresses_are_refused(bad):
    with pytest.raises(ConfigError):
        check_address(bad)
    with pytest.raises(ConfigError):
        client_command(bad, 5201, "tcp", 1, "1G")


def test_client_command():
    assert client_command("10.0.0.1", 5201, "udp", 2, "1G") == [
        "iperf3",
        "-c",
        "10.0.0.1",
        "-p",
        "5201",
        "-t",
        "2",
        "-P",
        "1",
        "-J",
        "-u",
        "-b",
        "1G",
    ]


def test_loopback_run_starts_and_stops_servers():
    inst = FakeInstance(
        {
            "iperf3 -c 127.0.0.1 -p 5300 -t 1 -P 1 -J -u": (0, fixture("iperf3", "iperf3_udp.json")),
            "iperf3 -c 127.0.0.1": (0, fixture("iperf3", "iperf3_tcp.json")),
        }
    )
    w = Iperf3(duration_s=1, port=5300)
    assert w.response == "tcp_mbit_per_s"
    rows = w.run(inst, w.params_for({}, 1))
    assert [r.metric for r in rows][:1] == ["tcp_mbit_per_s"] and rows[3].metric == "udp_mbit_per_s"
    servers = [c for c in inst.calls if "iperf3 -s -1 -D" in " ".join(c)]
    assert len(servers) == 2 and all("-B 127.0.0.1" in " ".join(c) for c in servers)
    assert sum("kill -0 $p" in " ".join(c) for c in inst.calls) == 2  # stopped, and waited for
    assert Iperf3(protocol="udp").response == "udp_mbit_per_s"
    with pytest.raises(ConfigError):
        Iperf3(protocol="quic")


def test_pair_refuses_outside_address_before_running_anything():
    a, b = FakeInstance(), FakeInstance()
    with pytest.raises(ConfigError):
        pair(a, b, "93.184.216.34")
    assert a.calls == [] and b.calls == []


def test_pair_client_failure_still_stops_server():
    server = FakeInstance()
    client = FakeInstance({"iperf3 -c": (0, fixture("iperf3", "iperf3_refused.json"))})
    with pytest.raises(BenchmarkError, match="Connection refused"):
        pair(server, client, "10.0.0.1", protocol="tcp", port=5301)
    assert server.ran("kill")


def test_loopback_down_is_explained():
    unreachable = fixture("iperf3", "iperf3_refused.json").replace(
        "Connection refused", "Network is unreachable"
    )
    inst = FakeInstance({"iperf3 -c": (0, unreachable)})
    with pytest.raises(BenchmarkError, match="loopback interface is down"):
        Iperf3(protocol="tcp", port=5302).run(inst, {"vcpus": 1})
