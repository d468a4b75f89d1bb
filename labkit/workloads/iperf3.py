"""iperf3 TCP and UDP throughput (Debian package ``iperf3``), after study 004 Table 7.2.

Network safety (docs/design.md): traffic stays on loopback inside one instance, or
between instances on a network the backend or the test created. Nothing is
ever sent to another address.

* :class:`Iperf3` — the workload: server and client in the same instance over
  127.0.0.1. It measures the instance's network stack and the CPU it gets,
  not a NIC.
* :func:`pair` — server in one instance, client in another, on a network you
  created (a Docker ``internal`` network, network namespaces joined by a
  veth...). ``server_ip`` must be a private (10/8, 172.16/12, 192.168/16) or
  loopback address.

Metrics (unit ``Mbit/s``, as Table 7.2 reports): ``tcp_mbit_per_s`` (received),
``tcp_sender_mbit_per_s``, ``tcp_retransmits`` (count); ``udp_mbit_per_s``
(received), ``udp_lost_percent`` (%), ``udp_jitter_ms`` (ms).

Across a run's private network (``path``, after Table 7.2 of study 004, which
measured between the instance and its host): ``loopback`` (the default: client and
server in each instance), ``instances`` (server in inst0, client in inst1),
``to_host`` (client in inst0, server on the host end), ``from_host`` (client on the
host end, server in inst0). Any path but loopback needs ``network: private`` (the
default for it) and runs once per run; rows carry the instance index 0 for the
host paths and the client's (1) between instances.

Parameters: ``path`` (above), ``protocol`` (``tcp``, ``udp`` or ``both``; default ``both``),
``duration_s`` (2; 004 used 10), ``udp_bandwidth`` (target rate of the UDP
test, ``1G`` as in 004), ``parallel`` (streams, 1), ``port`` (None: a random
port from 20000-59999, retried when busy), ``timeout_s``.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.waiting import retry
from ..errors import BenchmarkError, ConfigError, tail
from .base import Measurement, Workload, network_address, require_tool, run_checked, server_port
from .params import SIZE, TIMEOUT, Int, Num, Str

if TYPE_CHECKING:
    from ..backends.base import Instance

PROTOCOLS = ("tcp", "udp", "both")
PATHS = ("loopback", "instances", "to_host", "from_host")
ALLOWED_NETWORKS = [
    ipaddress.ip_network(n)
    for n in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::1/128")
]


def _document(text: str, command):
    start = (text or "").find("{")
    if start < 0:
        raise BenchmarkError("iperf3 printed no JSON", command, tail(text))
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise BenchmarkError(f"iperf3 JSON is malformed or truncated ({exc})", command, tail(text)) from exc
    if not isinstance(doc, dict):
        raise BenchmarkError("iperf3 JSON is not an object", command, tail(text))
    if doc.get("error"):
        raise BenchmarkError(f"iperf3 failed: {doc['error']}", command, tail(text))
    return doc


def parse(
    text: str, protocol: str, command: Sequence[str] | None = None, instance: int = 0
) -> list[Measurement]:
    """Throughput rows from ``iperf3 -c ... -J`` output for ``protocol`` ``tcp`` or ``udp``.

    Raises BenchmarkError on malformed or truncated JSON, an ``error`` field
    (connection refused, server busy...), or missing summary fields.
    """
    if protocol not in ("tcp", "udp"):
        raise ConfigError(f"iperf3: protocol must be 'tcp' or 'udp' here, got {protocol!r}")
    doc = _document(text, command)
    try:
        end = doc["end"]
        if protocol == "tcp":
            recv, sent = end["sum_received"], end["sum_sent"]
            rows = [
                ("tcp_mbit_per_s", recv["bits_per_second"] / 1e6, "Mbit/s"),
                ("tcp_sender_mbit_per_s", sent["bits_per_second"] / 1e6, "Mbit/s"),
                ("tcp_retransmits", float(sent.get("retransmits", 0)), "count"),
            ]
        else:
            # iperf3 >= 3.7 reports what the server received in sum_received;
            # older versions have only "sum" (client view with the server's loss counts).
            s = end.get("sum_received") or end["sum"]
            if "jitter_ms" not in s or "lost_percent" not in s:
                s = end["sum"]
            rows = [
                ("udp_mbit_per_s", s["bits_per_second"] / 1e6, "Mbit/s"),
                ("udp_lost_percent", float(s["lost_percent"]), "%"),
                ("udp_jitter_ms", float(s["jitter_ms"]), "ms"),
            ]
    except (KeyError, TypeError) as exc:
        raise BenchmarkError(f"iperf3 JSON lacks the summary field {exc}", command, tail(text)) from exc
    return [Measurement(m, float(v), u, instance) for m, v, u in rows]


#: iperf3's rate units -> bits/s: bits are decimal (Kbits = 1000 bits), bytes binary (``-f M``:
#: MBytes = 1024^2 bytes; iperf3's units.c), 8 bits a byte
RATE_UNITS = {
    "bits": 1.0,
    "Kbits": 1e3,
    "Mbits": 1e6,
    "Gbits": 1e9,
    "Tbits": 1e12,
    "Bytes": 8.0,
    "KBytes": 8.0 * 1024,
    "MBytes": 8.0 * 1024**2,
    "GBytes": 8.0 * 1024**3,
    "TBytes": 8.0 * 1024**4,
}
_SUMMARY = re.compile(
    r"^\[\s*(?:SUM|\d+)\]\s+[0-9.]+-[0-9.]+\s+sec\s+[0-9.]+\s+\S+\s+([0-9.]+)\s+(\S+)/sec"
    r"(.*?)\s(sender|receiver)\s*$",
    re.MULTILINE,
)
_UDP_TAIL = re.compile(r"([0-9.]+)\s+ms\s+\d+/\d+\s+\(([0-9.e+-]+)%\)")


def parse_report(text: str, command: Sequence[str] | None = None, instance: int = 0) -> list[Measurement]:
    """One iperf3 client report, JSON (``-J``: the protocol read from ``start.test_start``) or
    text (the summary's ``sender``/``receiver`` lines, ``[SUM]`` when there are several streams), in
    the unit it printed: ``Mbits/sec`` or, with ``-f M``, ``MBytes/sec`` (bytes, 1024-based,
    times 8); rows as :func:`parse`, in Mbit/s."""
    text = text or ""
    if text.lstrip().startswith("{"):
        doc = _document(text, command)
        proto = str(doc.get("start", {}).get("test_start", {}).get("protocol", "TCP")).lower()
        return parse(text, "udp" if proto == "udp" else "tcp", command, instance)
    found: dict[str, tuple[float, str]] = {}
    for m in _SUMMARY.finditer(text):
        value, unit, rest, side = m.groups()
        if unit not in RATE_UNITS:
            raise BenchmarkError(
                f"iperf3 summary: unknown rate unit {unit + '/sec'!r} (expected one of "
                f"{', '.join(u + '/sec' for u in RATE_UNITS)})",
                command,
                tail(text),
            )
        if side not in found or m.group(0).lstrip().startswith("[SUM]"):
            found[side] = (float(value) * RATE_UNITS[unit] / 1e6, rest)
    if "receiver" not in found or "sender" not in found:
        raise BenchmarkError(
            "iperf3 output has no summary 'sender' and 'receiver' lines (truncated?)", command, tail(text)
        )
    udp = _UDP_TAIL.search(found["receiver"][1])
    if udp:
        return [
            Measurement("udp_mbit_per_s", found["receiver"][0], "Mbit/s", instance),
            Measurement("udp_lost_percent", float(udp.group(2)), "%", instance),
            Measurement("udp_jitter_ms", float(udp.group(1)), "ms", instance),
        ]
    retr = re.match(r"\s*([0-9]+)", found["sender"][1])
    rows = [
        Measurement("tcp_mbit_per_s", found["receiver"][0], "Mbit/s", instance),
        Measurement("tcp_sender_mbit_per_s", found["sender"][0], "Mbit/s", instance),
    ]
    if retr:
        rows.append(Measurement("tcp_retransmits", float(retr.group(1)), "count", instance))
    return rows


def parse_version(text: str) -> str:
    m = re.search(r"iperf\s+([0-9]+(?:\.[0-9]+)*)", text or "")
    if not m:
        raise BenchmarkError("cannot read iperf3's version", "iperf3 --version", tail(text))
    return m.group(1)


def check_address(address: str) -> str:
    """``address`` if it is loopback or RFC 1918 private; ConfigError otherwise (network safety)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError as exc:
        raise ConfigError(f"iperf3: server address {address!r} is not an IP address") from exc
    if not any(ip in net for net in ALLOWED_NETWORKS):
        raise ConfigError(
            f"iperf3: refusing to send traffic to {address}: only loopback and private addresses "
            "(10/8, 172.16/12, 192.168/16) on a network the backend or test created are allowed"
        )
    return address


def _protocols(value) -> list[str]:
    if value not in PROTOCOLS:
        raise ConfigError(f"iperf3: protocol must be one of {', '.join(PROTOCOLS)}; got {value!r}")
    return ["tcp", "udp"] if value == "both" else [value]


def client_command(
    server_ip: str, port: int, protocol: str, duration_s: float, udp_bandwidth: str, parallel: int = 1
) -> list[str]:
    argv = [
        "iperf3",
        "-c",
        check_address(server_ip),
        "-p",
        str(port),
        "-t",
        str(max(1, round(duration_s))),
        "-P",
        str(int(parallel)),
        "-J",
    ]
    if protocol == "udp":
        argv += ["-u", "-b", str(udp_bandwidth)]
    return argv


def start_server(
    instance: Instance, port: int | None = None, bind: str | None = None, tries: int = 5
) -> tuple[int, str]:
    """Start a one-shot iperf3 server (``-s -1 -D``) in ``instance``; returns (port, pidfile).

    A busy port is retried with another random one when ``port`` is None.
    """
    last = None
    for _ in range(tries):
        p = port or server_port()
        pidfile = f"{instance.workdir}/labkit-iperf3-{p}.pid"
        argv = ["iperf3", "-s", "-1", "-D", "-p", str(p), "-I", pidfile]
        if bind:
            argv += ["-B", check_address(bind)]
        script = (
            f"mkdir -p {shlex.quote(instance.workdir)} && rm -f {shlex.quote(pidfile)} && "
            f"{shlex.join(argv)} && i=0; while [ $i -lt 50 ]; do "
            f"if [ -s {shlex.quote(pidfile)} ] && kill -0 $(cat {shlex.quote(pidfile)}) 2>/dev/null; "
            "then exit 0; fi; i=$((i+1)); sleep 0.1; done; exit 1"
        )
        last = instance.exec(["sh", "-c", script], check=False, timeout=30)
        if last.ok:
            time.sleep(0.2)  # -D returns after the fork; give the listener a moment
            return p, pidfile
        if port:
            break
    raise BenchmarkError(
        "could not start the iperf3 server",
        last.command if last else None,
        tail((last.stdout + last.stderr) if last else ""),
    )


def stop_server(instance: Instance, pidfile: str) -> None:
    """Kill the server if it is still running (it exits by itself after one test)."""
    q = shlex.quote(pidfile)
    # TERM, then wait (bounded) until it is gone, then KILL: the server never outlives its run
    instance.exec(
        [
            "sh",
            "-c",
            f"if [ -s {q} ]; then p=$(cat {q}); kill $p 2>/dev/null; i=0; "
            f"while kill -0 $p 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); "
            f"done; kill -9 $p 2>/dev/null; fi; rm -f {q}; true",
        ],
        check=False,
        timeout=30,
    )


#: what iperf3 says when nothing listens (yet) on the server's port
REFUSED = "Connection refused"


def refused(exc: BaseException) -> bool:
    """Whether the client failed because the server did not accept the connection (yet).
    iperf3 says so only in its text (the JSON ``error``; it exits 1 for every error), so the
    text decides here."""
    return isinstance(exc, BenchmarkError) and REFUSED in str(exc)


def _client(instance, argv, protocol, timeout, retries: int = 10):
    """Run the client, tried again (``retries`` times in all, 0.2 s apart) while the server
    refuses the connection (:func:`refused`: it is not listening yet)."""

    def once():
        res = run_checked(instance, argv, timeout=timeout)
        if REFUSED in res.stdout:
            raise BenchmarkError("iperf3 client: the server refused the connection", argv, tail(res.stdout))
        return res

    return retry(
        once,
        transient=refused,
        attempts=retries,
        interval=0.2,
        backoff=1,
        what=f"iperf3 client in {instance.name}",
    )


def measure(
    server_instance: Instance,
    client_instance: Instance,
    server_ip: str,
    *,
    protocol: str = "tcp",
    duration_s: float = 2,
    udp_bandwidth: str = "1G",
    parallel: int = 1,
    port: int | None = None,
    timeout_s: float = 120,
    bind: str | None = None,
) -> list[Measurement]:
    """One iperf3 test (tcp or udp) from ``client_instance`` to a server in ``server_instance``."""
    check_address(server_ip)
    p, pidfile = start_server(server_instance, port, bind)
    try:
        argv = client_command(server_ip, p, protocol, duration_s, udp_bandwidth, parallel)
        try:
            res = _client(client_instance, argv, protocol, timeout_s)
            return parse(res.stdout, protocol, argv, client_instance.index)
        except BenchmarkError as exc:
            if "Network is unreachable" in str(exc) and server_ip.startswith("127."):
                raise BenchmarkError(
                    f"iperf3 cannot reach 127.0.0.1 in {client_instance.name}: its loopback "
                    "interface is down (the backend must bring 'lo' up when it starts an instance)",
                    exc.command,
                    exc.output_tail,
                ) from exc
            raise
    finally:
        stop_server(server_instance, pidfile)


def pair(
    server_instance: Instance,
    client_instance: Instance,
    server_ip: str,
    *,
    protocol: str = "both",
    duration_s: float = 2,
    udp_bandwidth: str = "1G",
    parallel: int = 1,
    port: int | None = None,
    timeout_s: float = 120,
) -> list[Measurement]:
    """TCP and/or UDP throughput between two instances on a network you created.

    ``server_ip`` is the server instance's address on that network (private
    or loopback only, see :func:`check_address`). Returns the client's view;
    rows carry the client instance's index.
    """
    rows: list[Measurement] = []
    for proto in _protocols(protocol):
        rows += measure(
            server_instance,
            client_instance,
            server_ip,
            protocol=proto,
            duration_s=duration_s,
            udp_bandwidth=udp_bandwidth,
            parallel=parallel,
            port=port,
            timeout_s=timeout_s,
        )
    return rows


class Iperf3(Workload):
    """iperf3 client and server inside one instance over loopback; see the module docstring."""

    name = "iperf3"
    response = "tcp_mbit_per_s"
    timed_metrics = ()
    length_param = "duration_s"
    defaults = {
        "protocol": "both",
        "duration_s": 2,
        "udp_bandwidth": "1G",
        "parallel": 1,
        "port": None,
        "timeout_s": 120,
        "path": "loopback",
    }
    schema = {
        "path": Str(PATHS),
        "protocol": Str(PROTOCOLS),
        "duration_s": Num(0, 86400),
        "udp_bandwidth": SIZE,
        "parallel": Int(1, 128),
        "port": Int(1, 65535, none=True),
        "timeout_s": TIMEOUT,
    }
    min_memory_mb = 32

    def __init__(self, **params: object):
        super().__init__(**params)
        self.response = f"{_protocols(self.params['protocol'])[0]}_mbit_per_s"

    def prepare(self, instance: Instance) -> None:
        require_tool(instance, "iperf3", "iperf3")

    def run(self, instance: Instance, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        rows: list[Measurement] = []
        for proto in _protocols(params["protocol"]):
            rows += measure(
                instance,
                instance,
                "127.0.0.1",
                protocol=proto,
                duration_s=params["duration_s"],
                udp_bandwidth=params["udp_bandwidth"],
                parallel=params["parallel"],
                port=params["port"],
                timeout_s=params["timeout_s"],
                bind="127.0.0.1",
            )
        return rows

    def spans(self, params: dict) -> bool:
        """Whether this run goes across the run's network (any ``path`` but loopback)."""
        return {**self.params, **params}["path"] != "loopback"

    def run_group(self, instances: Sequence[Instance], params: dict) -> list[Measurement]:
        """One test along ``path`` over the run's private network (see the module docstring)."""
        params = {**self.params, **params}
        path = params["path"]
        if path == "instances":
            if instances[0].network is None:
                raise ConfigError(f"iperf3 path {path!r} needs network: private")
            if len(instances) < 2:
                raise ConfigError("iperf3 path 'instances' needs count >= 2")
            return self._along(
                instances[0], instances[1], params, 1, network_address(instances[0], peer=True)
            )
        from ..backends.host_end import host_end

        with host_end(instances, "iperf3", path, "iperf3", "iperf3") as host:
            server, client = (host, instances[0]) if path == "to_host" else (instances[0], host)
            return self._along(server, client, params, 0, network_address(server))

    @staticmethod
    def _along(server, client, params: dict, index: int, address: str) -> list[Measurement]:
        """Each protocol's test from ``client`` to a server in ``server`` listening on ``address``
        (between instances, the server's peer address); rows carry ``index``."""
        rows: list[Measurement] = []
        for proto in _protocols(params["protocol"]):
            rows += measure(
                server,
                client,
                address,
                protocol=proto,
                duration_s=params["duration_s"],
                udp_bandwidth=params["udp_bandwidth"],
                parallel=params["parallel"],
                port=params["port"],
                timeout_s=params["timeout_s"],
                bind=address,
            )
        return [Measurement(r.metric, r.value, r.unit, index) for r in rows]

    def version(self, instance: Instance) -> dict:
        res = instance.exec(["iperf3", "--version"], check=False, timeout=30)
        return {"iperf3": parse_version(res.stdout + res.stderr)}
