"""sysbench OLTP parser against real captured output (fixtures/sysbench/
sysbench_oltp_read_write.txt: sysbench 1.0.20 oltp_read_write, 1 table of 1000 rows, 2 s,
against MariaDB 10.11 in another local instance, captured through labkit on this machine)."""

from pathlib import Path

import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads import get_workload
from labkit.workloads.oltp import parse

TEXT = (Path(__file__).parent / "fixtures" / "sysbench" / "sysbench_oltp_read_write.txt").read_text()


def test_oltp_figures():
    rows = {r.metric: (r.value, r.unit) for r in parse(TEXT, instance=1)}
    assert rows == {
        "transactions_per_s": (68.42, "tx/s"),
        "queries_per_s": (1368.34, "queries/s"),
        "latency_avg_ms": (14.59, "ms"),
        "latency_p95_ms": (23.95, "ms"),
        "errors": (0.0, "count"),
    }


def test_truncated_output_raises():
    with pytest.raises(BenchmarkError, match="no 'SQL statistics'"):
        parse(TEXT.split("SQL statistics")[0])
    with pytest.raises(BenchmarkError, match="latency"):
        parse(TEXT.split("Latency (ms)")[0])


def test_needs_two_networked_instances_and_hides_the_password():
    w = get_workload("oltp", table_size=100)
    assert w.response == "transactions_per_s" and w.spans({})
    with pytest.raises(ConfigError, match="count >= 2 and network: private"):
        w.run_group([object()], {})
    argv = w.sysbench_argv(w.params, "inst0", 3306, "pw", "run")
    assert argv[:2] == ["sysbench", "oltp_read_write"] and "--mysql-host=inst0" in argv and argv[-1] == "run"
    with pytest.raises(ConfigError):
        get_workload("oltp", test="tpcc")


def test_a_failed_run_never_shows_the_password():
    from labkit.backends.base import ExecResult

    class Inst:
        index, address, peer_address, network = 0, "10.0.0.2", "10.0.0.2", object()

        def __init__(self, fail_on):
            self.fail_on, self.name, self.seen = fail_on, "i", []

        def exec(self, argv, check=True, timeout=None, env=None):
            self.seen.append(argv)
            text = " ".join(argv)
            code = 1 if self.fail_on in text else 0
            res = ExecResult(argv, code, "/tmp/labkit-mariadb-x\n", "boom", 0.1, self.name)
            if check and code:
                from labkit.errors import CommandError

                raise CommandError(res.describe(), res)
            return res

    server, client = Inst("never"), Inst("prepare")
    with pytest.raises(BenchmarkError) as info:
        get_workload("oltp").run_group([server, client], {})
    password = next(a for a in client.seen[0] if a.startswith("--mysql-password=")).split("=", 1)[1]
    assert password not in str(info.value) and "***" in str(info.value)
    assert any("rm -rf" in " ".join(a) for a in server.seen)  # the server is removed anyway


def test_a_busy_port_is_tried_again_with_another_and_gives_up_after_five(monkeypatch):
    """The server script exits 98 when MariaDB could not bind its port; the workload draws
    another port, and after five busy ports says so without the password."""
    from labkit.backends.base import ExecResult
    from labkit.workloads import oltp

    class Server:
        index, address, peer_address, network, name = 0, "10.0.0.2", "10.0.0.2", object(), "i"

        def __init__(self, busy):
            self.busy, self.ports = busy, []

        def exec(self, argv, check=True, timeout=None, env=None):
            self.ports.append(int(argv[-1].split("--port=")[1].split()[0]))
            self.password = argv[-1].split("IDENTIFIED BY '")[1].split("'")[0]
            code = 98 if len(self.ports) <= self.busy else 0
            return ExecResult(argv, code, "/tmp/labkit-mariadb-x\n", "", 0.1, self.name)

    ports = iter([21000, 22000, 23000, 24000, 25000, 26000])
    monkeypatch.setattr(oltp, "server_port", lambda: next(ports))
    server = Server(busy=2)
    port, password, d = oltp.Oltp.start_server(server)
    assert server.ports == [21000, 22000, 23000] and port == 23000 and d == "/tmp/labkit-mariadb-x"
    server = Server(busy=9)
    ports = iter(range(30000, 30010))
    with pytest.raises(BenchmarkError, match="found 5 random ports busy in i") as info:
        oltp.Oltp.start_server(server)
    assert len(server.ports) == 5 and len(server.password) == 24 and server.password not in str(info.value)
