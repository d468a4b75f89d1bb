"""Every workload of issue 6 run for real on the local backend (root + cgroups: marker ``root``).

Parameters are tiny (each run lasts about a second on 2 CPUs). Each test checks
the metrics and units the workload documents, that its tool version is recorded,
and that it leaves no process behind in the instance's cgroup.
"""

from __future__ import annotations

import glob
import secrets
import subprocess

import pytest

from labkit.backends import get_backend, teardown
from labkit.backends.base import Wrapped
from labkit.core.instance import InstanceSpec
from labkit.design.host_scaling import thread_levels
from labkit.workloads import get_workload
from labkit.workloads.iperf3 import pair

pytestmark = pytest.mark.root

# name, constructor parameters, {metric: unit} that must come back (value > 0 unless in ZERO_OK)
CASES = [
    (
        "sysbench-cpu",
        "sysbench",
        {"test": "cpu", "time_s": 1},
        {"events_per_s": "events/s", "latency_avg_ms": "ms", "latency_p95_ms": "ms"},
    ),
    (
        "sysbench-memory",
        "sysbench",
        {"test": "memory", "time_s": 1, "memory_total_size": "512M"},
        {"mib_per_s": "MiB/s", "ops_per_s": "ops/s"},
    ),
    ("sysbench-threads", "sysbench", {"test": "threads", "time_s": 1}, {"events_per_s": "events/s"}),
    (
        "sysbench-fileio",
        "sysbench",
        {"test": "fileio", "time_s": 1, "fileio_total_size": "16M"},
        {"read_mib_per_s": "MiB/s", "write_mib_per_s": "MiB/s", "fsyncs_per_s": "ops/s"},
    ),
    (
        "stream",
        "stream",
        {"array_mb": 24, "ntimes": 3},
        {
            "copy_mb_per_s": "MB/s",
            "scale_mb_per_s": "MB/s",
            "add_mb_per_s": "MB/s",
            "triad_mb_per_s": "MB/s",
            "array_mib": "MiB",
        },
    ),
    (
        "fio",
        "fio",
        {"size_mb": 8, "patterns": "seqwrite,randread"},
        {
            "seqwrite_iops": "IO/s",
            "seqwrite_bw_mib_per_s": "MiB/s",
            "randread_iops": "IO/s",
            "randread_lat_mean_us": "us",
        },
    ),
    (
        "iperf3",
        "iperf3",
        {"duration_s": 1},
        {
            "tcp_mbit_per_s": "Mbit/s",
            "tcp_retransmits": "count",
            "udp_mbit_per_s": "Mbit/s",
            "udp_lost_percent": "%",
            "udp_jitter_ms": "ms",
        },
    ),
    (
        "apache",
        "apache",
        {"requests": 1000, "concurrency": 10},
        {"requests_per_s": "req/s", "time_per_request_ms": "ms", "failed_requests": "count"},
    ),
]
ZERO_OK = {"tcp_retransmits", "udp_lost_percent", "failed_requests", "non_2xx_responses", "udp_jitter_ms"}
VERSION_KEYS = {
    "sysbench": {"sysbench"},
    "stream": {"stream"},
    "fio": {"fio"},
    "iperf3": {"iperf3"},
    "apache": {"apache2", "ab"},
}


@pytest.fixture(scope="module")
def local():
    be = get_backend("local")
    try:
        yield be
    finally:
        be.close()


@pytest.fixture(scope="module")
def instance(local):
    insts = local.provision(InstanceSpec(vcpus=2, memory_mb=512), prefix="labkit-test")
    try:
        yield insts[0]
    finally:
        assert not teardown(insts)
        assert insts[0].name not in local.list_labkit(insts[0].name)


def local_pids(backend, name: str) -> set[int]:
    """Processes in a local instance's cgroup."""
    found = set()
    for f in backend.driver.procs_files(name):
        try:
            with open(f) as fh:
                found.update(int(p) for p in fh.read().split())
        except FileNotFoundError:
            pass
    return found


def check_rows(rows, expected, index=0):
    got = {r.metric: r for r in rows}
    for metric, unit in expected.items():
        assert metric in got, f"{metric} missing from {sorted(got)}"
        assert got[metric].unit == unit
        assert got[metric].instance == index
        if metric not in ZERO_OK:
            assert got[metric].value > 0, got[metric]


@pytest.mark.parametrize("case,name,params,expected", CASES, ids=[c[0] for c in CASES])
def test_workload_runs_for_real(local, instance, case, name, params, expected):
    w = get_workload(name, **params)
    w.prepare(instance)
    rows = w.run(instance, w.params_for({}, instance.spec.vcpus))
    check_rows(rows, expected)
    assert w.response in {r.metric for r in rows}
    version = w.version(instance)
    assert set(version) >= VERSION_KEYS[name] and all(version.values()), version
    # nothing left running in the instance (httpd, iperf3 servers, fio...)
    assert local_pids(local, instance.name) == set()


def test_apache_leaves_no_directory(instance):
    before = set(glob.glob("/tmp/labkit-httpd-*"))
    w = get_workload("apache", requests=200, concurrency=2)
    w.run(instance, w.params_for({}, 1))
    assert set(glob.glob("/tmp/labkit-httpd-*")) <= before


def test_thread_scaling_sweep(instance):
    """threads as a factor, 1..vcpus (study 000): every level runs and is honoured."""
    levels = thread_levels(instance.spec.vcpus)
    assert levels == [1, 2]
    w = get_workload("sysbench", test="cpu", time_s=1)
    for t in levels:
        argv = w.command(w.params_for({"threads": t}, instance.spec.vcpus))
        assert f"--threads={t}" in argv
        res = instance.exec(argv, timeout=60)
        assert f"Number of threads: {t}" in res.stdout
    s = get_workload("stream", array_mb=16, ntimes=2)
    s.prepare(instance)
    for t in levels:
        rows = s.run(instance, s.params_for({"threads": t}, instance.spec.vcpus))
        assert {r.metric for r in rows} >= {"triad_mb_per_s"}


class InNamespace(Wrapped):
    """A local instance whose commands run inside network namespace ``ns`` (made by the test)."""

    def __init__(self, inner, ns):
        super().__init__(inner.backend, inner.name, inner, inner.spec, inner.index)
        self.ns = ns

    def _start(self, argv, env):
        return self.inner._start(["nsenter", f"--net=/run/netns/{self.ns}", "--", *argv], env)


def sh(*argv):
    subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=30)


def test_iperf3_between_two_instances_on_a_test_made_network(local):
    """Two instances, each in its own network namespace, joined by a veth pair in 10.213.x.

    Traffic stays between the two namespaces this test creates: nothing else is addressed.
    The test moves the instances' commands into its namespaces, which an isolated instance
    may not do (no capabilities): isolation ``none``.
    """
    local = get_backend("local", isolation="none")
    tag = secrets.token_hex(4)
    ns = [f"labkit-test-{tag}-s", f"labkit-test-{tag}-c"]
    veth = [f"lk{tag}s", f"lk{tag}c"]
    addr = ["10.213.0.1", "10.213.0.2"]
    insts = []
    try:
        for n in ns:
            sh("ip", "netns", "add", n)
        sh("ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for n, v, a in zip(ns, veth, addr):
            sh("ip", "link", "set", v, "netns", n)
            sh("ip", "-n", n, "addr", "add", f"{a}/24", "dev", v)
            sh("ip", "-n", n, "link", "set", v, "up")
            sh("ip", "-n", n, "link", "set", "lo", "up")
        insts = local.provision(InstanceSpec(vcpus=1, memory_mb=256, count=2), prefix="labkit-test")
        server, client = (InNamespace(i, n) for i, n in zip(insts, ns))
        routes = client.exec(["ip", "-4", "route"]).stdout
        assert "default" not in routes  # the client namespace can reach only 10.213.0.0/24
        rows = pair(server, client, addr[0], protocol="both", duration_s=1)
        check_rows(
            rows, {"tcp_mbit_per_s": "Mbit/s", "udp_mbit_per_s": "Mbit/s", "udp_lost_percent": "%"}, index=1
        )
        assert local_pids(local, insts[0].name) == set()  # the server went away
    finally:
        teardown(insts)
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)  # removes the veths too
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert tag not in out
