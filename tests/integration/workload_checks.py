"""Checks of the workloads that span instances, shared by the network tests of every backend
(test_network.py on local/docker/lxd, test_libvirt_study.py on libvirt guests). Each asserts only
positive figures, never a nominal rate: the machine is shared."""

from __future__ import annotations

from labkit.workloads import get_workload


def apache_across(a, b, requests: int, concurrency: int) -> None:
    """httpd in ``a``, ab in ``b``: requests/s stored for ``b``, no failed request."""
    wl = get_workload("apache", path="instances", requests=requests, concurrency=concurrency)
    wl.prepare(a)
    rows = wl.run_group([a, b], {"vcpus": 1})
    got = {r.metric: r.value for r in rows}
    assert got["requests_per_s"] > 0 and got["failed_requests"] == 0
    assert {r.instance for r in rows} == {1}


def apache_from_host(a, b, requests: int, concurrency: int) -> None:
    """Seed 002's form: httpd in every instance, one ab per instance on the host, all at once."""
    wl = get_workload("apache", path="from_host", requests=requests, concurrency=concurrency)
    rows = wl.run_group([a, b], {"vcpus": 1})
    rps = {r.instance: r.value for r in rows if r.metric == "requests_per_s"}
    assert set(rps) == {0, 1} and all(v > 0 for v in rps.values())
    assert all(r.value == 0 for r in rows if r.metric == "failed_requests")


def oltp_across(a, b, table_size: int, time_s: float, timeout: float = 30) -> None:
    """MariaDB in ``a``, sysbench OLTP in ``b``; the server's data directory is gone afterwards."""
    wl = get_workload("oltp", table_size=table_size, time_s=time_s)
    wl.prepare(a)
    got = {r.metric: r.value for r in wl.run_group([a, b], {})}
    assert got["transactions_per_s"] > 0 and got["queries_per_s"] > got["transactions_per_s"]
    assert got["errors"] == 0
    assert not a.exec(["sh", "-c", "ls -d /tmp/labkit-mariadb-*"], check=False, timeout=timeout).ok


def bonnie_in(a, size_mb: int, timeout: float = 30) -> dict:
    """bonnie++ (O_DIRECT) in ``a``'s work directory: a timed block write, the directory left empty."""
    wl = get_workload("bonnie", size_mb=size_mb)
    wl.prepare(a)
    rows = {r.metric: r for r in wl.run(a, {})}
    assert rows["write_kib_per_s"].value > 0 and rows["write_kib_per_s"].unit == "KiB/s"
    assert "bonnie++" in wl.version(a)
    assert not a.exec(["test", "-e", f"{a.workdir}/bonnie"], check=False, timeout=timeout).ok
    return rows


def connect_rtt_us(server, client) -> int:
    """One TCP round trip from ``client`` to ``server`` (inst0) in µs: the time of a connect from
    bash's /dev/tcp to iperf3's listener in ``server`` (no other tool in either instance)."""
    from labkit.workloads.iperf3 import start_server, stop_server

    port, pidfile = start_server(server, bind=server.address)
    try:
        res = client.exec(
            [
                "bash",
                "-c",
                "s=$(date +%s%N); exec 3<>/dev/tcp/inst0/"
                + str(port)
                + "; e=$(date +%s%N); echo $(( (e - s) / 1000 ))",
            ],
            timeout=30,
        )
    finally:
        stop_server(server, pidfile)
    return int(res.stdout.split()[-1])
