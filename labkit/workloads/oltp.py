"""sysbench OLTP against MariaDB in another instance (study 004's application test).

``oltp`` needs ``network: private`` and ``count >= 2``: MariaDB (Debian ``mariadb-server``)
starts in inst0 on a fresh data directory, listening only on inst0's private address at a
random port, with a database ``sbtest`` and a user whose password is random per run;
sysbench (``oltp_read_write`` by default) runs in inst1 against ``inst0``: ``prepare``,
``run``, then the server and its data directory are removed.

Parameters: ``test`` (``oltp_read_write``, ``oltp_read_only``, ``oltp_write_only``,
``oltp_point_select``), ``tables`` (1), ``table_size`` (10000), ``threads`` (1),
``time_s`` (5), ``timeout_s`` (900). Metrics: ``transactions_per_s`` (the response),
``queries_per_s``, ``latency_avg_ms``, ``latency_p95_ms``, ``errors``.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import BenchmarkError, CommandTimeout, ConfigError, tail
from .base import NUMBER, Measurement, Workload, network_address, require_tool, run_checked, server_port
from .params import TIMEOUT, Int, Num, Str
from .sysbench import find, latency

if TYPE_CHECKING:
    from ..backends.base import Instance

TESTS = ("oltp_read_write", "oltp_read_only", "oltp_write_only", "oltp_point_select")

_SERVER = r"""set -e
d=$(mktemp -d /tmp/labkit-mariadb-XXXXXX)
mariadb-install-db --no-defaults --datadir="$d/data" --user=root --skip-test-db >"$d/install.log" 2>&1
setsid mariadbd --no-defaults --datadir="$d/data" --user=root --bind-address={address} --port={port} \
  --socket="$d/sock" --pid-file="$d/pid" --skip-name-resolve --innodb-buffer-pool-size=64M \
  </dev/null >"$d/server.log" 2>&1 &
server=$!
i=0; until mariadb --no-defaults --socket="$d/sock" -uroot -e 'select 1' >/dev/null 2>&1; do
  if ! kill -0 "$server" 2>/dev/null; then   # the server ended: a busy port is tried again (exit 98)
    if grep -q 'Address already in use' "$d/server.log"; then rm -rf "$d"; exit 98; fi
    cat "$d/server.log" >&2; rm -rf "$d"; exit 1
  fi
  i=$((i+1)); [ $i -lt 600 ] || { kill "$server"; cat "$d/server.log" >&2; rm -rf "$d"; exit 1; }; sleep 0.1; done
mariadb --no-defaults --socket="$d/sock" -uroot -e "CREATE DATABASE sbtest; \
  CREATE USER 'sbtest'@'%' IDENTIFIED BY '{password}'; GRANT ALL ON sbtest.* TO 'sbtest'@'%';"
echo "$d"
"""


def parse(text: str, command: Sequence[str] | None = None, instance: int = 0) -> list[Measurement]:
    """Measurements from ``sysbench oltp_* run``: transactions and queries per second (from
    the ``SQL statistics`` block), latency avg and 95th percentile (ms), ignored errors."""
    text = text or ""
    if "SQL statistics" not in text:
        raise BenchmarkError("sysbench OLTP output is incomplete (no 'SQL statistics')", command, tail(text))
    tps = find(r"transactions:\s*[0-9]+\s*\(" + NUMBER + " per sec", text, "transactions per second", command)
    qps = find(r"queries:\s*[0-9]+\s*\(" + NUMBER + " per sec", text, "queries per second", command)
    errors = find(r"ignored errors:\s*([0-9]+)", text, "ignored errors", command)
    avg, p95 = latency(text, command)
    return [
        Measurement("transactions_per_s", tps, "tx/s", instance),
        Measurement("queries_per_s", qps, "queries/s", instance),
        Measurement("latency_avg_ms", avg, "ms", instance),
        Measurement("latency_p95_ms", p95, "ms", instance),
        Measurement("errors", errors, "count", instance),
    ]


def _hidden(exc, password: str):
    """The same error with the per-run password replaced by ``***`` in its message."""
    message = str(exc).replace(password, "***")
    return CommandTimeout(message) if isinstance(exc, CommandTimeout) else BenchmarkError(message)


class Oltp(Workload):
    """MariaDB in inst0, sysbench OLTP in inst1; see the module docstring."""

    name = "oltp"
    response = "transactions_per_s"
    timed_metrics = ()
    length_param = "time_s"
    defaults = {
        "test": "oltp_read_write",
        "tables": 1,
        "table_size": 10000,
        "threads": 1,
        "time_s": 5,
        "timeout_s": 900,
    }
    schema = {
        "test": Str(TESTS),
        "tables": Int(1, 1000),
        "table_size": Int(1, 10**9),
        "threads": Int(1, 4096),
        "time_s": Num(1, 86400),
        "timeout_s": TIMEOUT,
    }
    min_memory_mb = 256

    def spans(self, params: dict) -> bool:
        return True

    def prepare(self, instance: Instance) -> None:
        require_tool(instance, "sysbench", "sysbench")
        require_tool(instance, "mariadbd", "mariadb-server")

    def sysbench_argv(self, params: dict, host: str, port: int, password: str, step: str) -> list[str]:
        return [
            "sysbench",
            params["test"],
            "--db-driver=mysql",
            f"--mysql-host={host}",
            f"--mysql-port={port}",
            "--mysql-user=sbtest",
            f"--mysql-password={password}",
            "--mysql-db=sbtest",
            f"--tables={int(params['tables'])}",
            f"--table-size={int(params['table_size'])}",
            f"--threads={int(params['threads'])}",
            f"--time={max(1, round(params['time_s']))}",
            step,
        ]

    def run_group(self, instances: Sequence[Instance], params: dict) -> list[Measurement]:
        if len(instances) < 2 or instances[0].network is None:
            raise ConfigError(
                "oltp needs count >= 2 and network: private (MariaDB in inst0, sysbench in inst1)"
            )
        params = {**self.params, **params}
        server, client = instances[0], instances[1]
        port, password, d = self.start_server(server)
        timeout = params.get("timeout_s")
        try:
            run_checked(
                client, self.sysbench_argv(params, "inst0", port, password, "prepare"), timeout=timeout
            )
            argv = self.sysbench_argv(params, "inst0", port, password, "run")
            res = run_checked(client, argv, timeout=timeout)
        except (BenchmarkError, CommandTimeout) as exc:
            raise _hidden(exc, password) from None
        finally:
            q = shlex.quote(d)
            server.exec(
                [
                    "sh",
                    "-c",
                    f"[ -s {q}/pid ] && kill $(cat {q}/pid); i=0; while [ -s {q}/pid ] "
                    f"&& [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; rm -rf {q}",
                ],
                check=False,
                timeout=60,
            )
        shown = [a if not a.startswith("--mysql-password=") else "--mysql-password=***" for a in argv]
        return parse(res.stdout, shlex.join(shown), client.index)

    @staticmethod
    def start_server(server: Instance, tries: int = 5) -> tuple[int, str, str]:
        """Start MariaDB in ``server`` on its private address; returns (port, password, its
        directory). A port found busy (another listener, or a connection that still holds it)
        is tried again with another one, up to ``tries`` times."""
        password = secrets.token_hex(12)
        script = _SERVER.replace("{address}", network_address(server, peer=True)).replace(
            "{password}", password
        )
        try:  # the per-run password never reaches an error message (hence the store or a log)
            for _ in range(tries):
                port = server_port()
                res = server.exec(["sh", "-c", script.replace("{port}", str(port))], check=False, timeout=180)
                if res.exit_code != 98:
                    break
            if not res.ok:
                what = (
                    f"found {tries} random ports busy"
                    if res.exit_code == 98
                    else f"did not start (exit {res.exit_code})"
                )
                raise BenchmarkError(
                    f"MariaDB {what} in {server.name}", res.command, tail(res.stdout + "\n" + res.stderr)
                )
        except (BenchmarkError, CommandTimeout) as exc:
            raise _hidden(exc, password) from None
        return port, password, res.stdout.strip().splitlines()[-1]

    def run(self, instance: Instance, params: dict) -> list[Measurement]:
        raise ConfigError("oltp runs across two instances (count >= 2, network: private)")

    def version(self, instance: Instance) -> dict:
        res = instance.exec(["mariadbd", "--version"], check=False, timeout=30)
        return {"mariadb": (res.stdout + res.stderr).strip().split("\n")[0]}
