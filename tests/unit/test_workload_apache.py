"""ab parser and the httpd+ab runner, against real captured outputs (fixtures/apache)."""

import pytest

from labkit.errors import BenchmarkError, CommandTimeout, ConfigError
from labkit.workloads import get_workload
from labkit.workloads.apache import Apache, ab_command, parse, parse_versions, scaled

from .fixtures.fakes import FakeInstance, fixture


def rows(text, **kw):
    return {r.metric: (r.value, r.unit) for r in parse(text, **kw)}


def test_parse_real_ab_report():
    r = rows(fixture("apache", "ab_c10.txt"), requests=2000)
    assert r["requests_per_s"] == (5950.27, "req/s")
    # the first "Time per request" line is the per-client mean, not the across-clients one
    assert r["time_per_request_ms"] == (1.681, "ms")
    assert r["failed_requests"] == (0.0, "count")
    assert r["non_2xx_responses"] == (0.0, "count")
    assert r["transfer_kb_per_s"] == (25120.15, "KB/s")


def test_keepalive_report():
    r = rows(fixture("apache", "ab_keepalive.txt"), requests=1000)
    assert r["requests_per_s"][0] > 0


def test_failed_requests_are_counted():
    assert rows(fixture("apache", "ab_failed_edited.txt"))["failed_requests"] == (7.0, "count")


def test_non_2xx_is_a_failed_run():
    with pytest.raises(BenchmarkError, match="non-2xx"):
        parse(fixture("apache", "ab_non2xx.txt"), command=["ab"])


def test_fewer_complete_requests_than_asked():
    with pytest.raises(BenchmarkError, match="completed 2000 of 5000"):
        parse(fixture("apache", "ab_c10.txt"), requests=5000)


@pytest.mark.parametrize("name", ["ab_refused.txt", "apache2_v.txt"])
def test_foreign_or_failed_output(name):
    with pytest.raises(BenchmarkError) as err:
        parse(fixture("apache", name), command=["ab", "-n", "10"])
    assert err.value.command == ["ab", "-n", "10"]


def test_truncated_report():
    text = fixture("apache", "ab_c10.txt")
    for marker in ("Requests per second", "Time per request", "Transfer rate"):
        with pytest.raises(BenchmarkError) as err:
            parse(text[: text.index(marker)], command=["ab"])
        assert "Failed requests" in err.value.output_tail or "Complete" in err.value.output_tail
    with pytest.raises(BenchmarkError):
        parse("")


def test_versions():
    v = parse_versions(fixture("apache", "apache2_v.txt"), fixture("apache", "ab_V.txt"))
    assert v == {"apache2": "2.4.71", "ab": "2.3"}
    with pytest.raises(BenchmarkError):
        parse_versions("", "")


def test_defaults_scale_with_vcpus():
    w = get_workload("apache")
    assert scaled(w.params_for({}, 1)) == (5000, 10)
    assert scaled(w.params_for({}, 16)) == (80000, 100)
    assert scaled(Apache(requests=1_000_000, concurrency=100).params_for({}, 2)) == (1_000_000, 100)
    with pytest.raises(ConfigError):
        scaled({"requests": 10, "concurrency": 20, "vcpus": 1})
    with pytest.raises(ConfigError):
        scaled({"requests": -1, "vcpus": 1})


def test_run_starts_measures_and_always_stops():
    inst = FakeInstance(
        {"mktemp": (0, "/tmp/labkit-httpd-abc123\n"), "ab -n": (0, fixture("apache", "ab_c10.txt"))}
    )
    out = Apache(requests=2000, concurrency=10).run(inst, {"vcpus": 1})
    assert out[0].metric == "requests_per_s"
    assert inst.ran("-k start") and inst.ran("-k stop") and inst.ran("rm -rf")
    ab = next(c for c in inst.calls if c[0] == "ab")
    assert ab[-1].startswith("http://127.0.0.1:") and "-n" in ab and "2000" in ab
    failing = FakeInstance({"mktemp": (0, "/tmp/labkit-httpd-x\n"), "ab -n": (22, "apr_socket_recv")})
    with pytest.raises(BenchmarkError, match="exit 22"):
        Apache(requests=10, concurrency=1).run(failing, {"vcpus": 1})
    assert failing.ran("-k stop") and failing.ran("rm -rf /tmp/labkit-httpd-x")


def test_httpd_that_will_not_start():
    inst = FakeInstance(
        {"mktemp": (0, "/tmp/labkit-httpd-x\n"), "-k start": (1, "", "(98)Address already in use")}
    )
    with pytest.raises(BenchmarkError, match="httpd did not start"):
        Apache(requests=10, concurrency=1).run(inst, {"vcpus": 1})


def test_missing_tools_name_their_packages():
    with pytest.raises(BenchmarkError, match="apache2-utils"):
        Apache().prepare(FakeInstance({"command -v": (1, "")}))
    with pytest.raises(BenchmarkError, match="Debian package 'apache2'"):
        Apache().prepare(FakeInstance({"command -v ab": (0, "/usr/bin/ab\n"), "apache2": (1, "")}))


def test_loopback_down_is_explained():
    inst = FakeInstance(
        {
            "mktemp": (0, "/tmp/labkit-httpd-x\n"),
            "ab -n": (1, "", "apr_socket_connect(): Network is unreachable (101)"),
        }
    )
    with pytest.raises(BenchmarkError, match="loopback interface is down"):
        Apache(requests=10, concurrency=1).run(inst, {"vcpus": 1})


# -- path: from_host (ab on the host end of the run's network, httpd in every instance) ------
def served(index: int, address: str) -> FakeInstance:
    inst = FakeInstance({"mktemp": (0, f"/tmp/labkit-httpd-i{index}\n")}, index=index)
    inst.address, inst.name = address, f"inst{index}"
    return inst


def test_ab_command():
    assert ab_command(2000, 10, "http://10.0.0.2:3000/index.html") == [
        "ab",
        "-n",
        "2000",
        "-c",
        "10",
        "-q",
        "http://10.0.0.2:3000/index.html",
    ]
    assert ab_command(5, 1, "http://x/", keepalive=True)[-2:] == ["-k", "http://x/"]


def test_from_host_loads_every_instance_at_once_and_stops_them_all():
    a, b = served(0, "10.77.0.2"), served(1, "10.77.0.3")
    host = FakeInstance({"ab -n": (0, fixture("apache", "ab_c10.txt"))})
    rows = Apache(path="from_host", requests=2000, concurrency=10).from_host(host, [a, b], {"vcpus": 1})
    assert {r.instance for r in rows} == {0, 1}  # one set of rows per instance
    assert sorted(r.value for r in rows if r.metric == "requests_per_s") == [5950.27, 5950.27]
    abs_ = [c for c in host.calls if c[0] == "ab"]
    assert [c[-1].split(":")[1] for c in abs_] == ["//10.77.0.2", "//10.77.0.3"]  # each its own httpd
    for inst in (a, b):  # httpd listened on the instance's private address, and was stopped
        assert inst.ran(f"Listen {inst.address}:") and inst.ran("-k stop") and inst.ran("rm -rf")
    assert not a.ran("ab -n") and not b.ran("ab -n")  # no load generator inside


def test_from_host_failure_of_one_ab_fails_the_run_and_stops_both_httpd():
    a, b = served(0, "10.77.0.2"), served(1, "10.77.0.3")
    host = FakeInstance(
        {
            "10.77.0.3": (22, "apr_socket_recv: Connection reset by peer (104)"),
            "ab -n": (0, fixture("apache", "ab_c10.txt")),
        }
    )
    with pytest.raises(BenchmarkError, match="ab against httpd in inst1 exited 22"):
        Apache(path="from_host", requests=2000, concurrency=10).from_host(host, [a, b], {"vcpus": 1})
    assert a.ran("-k stop") and b.ran("-k stop")


def test_from_host_timeout_kills_every_ab():
    a = served(0, "10.77.0.2")
    host = FakeInstance({"ab -n": (None, "")})  # runs until killed
    with pytest.raises(CommandTimeout, match="timeout_s=0.1s"):
        Apache(path="from_host", requests=10, concurrency=1, timeout_s=0.1).from_host(host, [a], {"vcpus": 1})
    assert host.ran("kill ab -n") and a.ran("-k stop")


def test_from_host_needs_the_private_network():
    w = Apache(path="from_host", requests=10, concurrency=1)
    assert w.spans({}) and Apache(path="instances").spans({}) and not Apache().spans({})
    from labkit.run.network_setup import mode_for

    assert mode_for({}, w, {}) == "private" and mode_for({}, Apache(), {}) == "none"  # the default network
    with pytest.raises(ConfigError, match="from_host.*network: private"):
        w.run_group([FakeInstance()], {"vcpus": 1})  # network None
    with pytest.raises(ConfigError, match="no address"):
        w.from_host(FakeInstance(), [FakeInstance()], {"vcpus": 1})
    with pytest.raises(ConfigError, match="path"):
        get_workload("apache", path="to_host")
