"""Apache httpd serving a static page, loaded by ab (on loopback, from another instance, or
from the host).

Debian packages: ``apache2`` (the server, ``/usr/sbin/apache2``) and
``apache2-utils`` (``ab``). Each run writes a private httpd configuration and
a static page under a fresh ``/tmp/labkit-httpd-*`` directory in the instance
(world-readable, because httpd's workers drop root privileges to
``www-data``), starts httpd on a random loopback port, runs
``ab -n <requests> -c <concurrency>``, stops httpd and removes the directory.

Study 002 used 1,000,000 requests at concurrency 100. The defaults scale to
the instance so a run lasts a few seconds: ``requests`` = 5000 x vCPUs,
``concurrency`` = min(100, 10 x vCPUs).

Metrics: ``requests_per_s`` (the response, req/s), ``time_per_request_ms``
(ms, mean per request as seen by one client), ``failed_requests`` (count),
``non_2xx_responses`` (count), ``transfer_kb_per_s`` (KB/s). A run with
fewer complete requests than asked, or with non-2xx answers, is a failed run.

Across a run's private network (seed 002's Apache benchmark over the network):
``path: instances`` starts httpd in inst0 on its address and runs ab in inst1
against ``http://inst0:<port>/`` (``network: private`` is then the default; one
ab per run, rows carry instance index 1). ``path: loopback`` (the default) is the
one-instance case above, run in every instance.

``path: from_host`` is seed 002's form (the load generator outside the VMs): httpd
starts in EVERY instance on its private address, then one ab per instance is
started on the host end of the run's network (:func:`labkit.backends.host_end.host_end`),
all at once, each against its own instance; rows carry the index of the instance
whose httpd answered (``network: private`` is the default; ``ab`` must be on the
host). httpd runs inside the limited instances (their vCPUs, memory, pinning), ab
runs on the host outside them: ab's CPU is not part of any instance's budget, as
in the paper, but on a small host it competes with the instances for the same CPUs.

Parameters: ``path`` (above), ``requests`` (None = scaled), ``concurrency`` (None = scaled),
``page_kb`` (size of the static page, 4), ``keepalive`` (False; ``ab -k``),
``timeout_s`` (600).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.waiting import wait_until
from ..errors import BenchmarkError, CommandTimeout, ConfigError, tail
from .base import (
    NUMBER,
    Measurement,
    Workload,
    find_number,
    network_address,
    require_tool,
    run_checked,
    server_port,
)
from .iperf3 import check_address
from .params import TIMEOUT, Bool, Int, Num, Str

if TYPE_CHECKING:
    from ..backends.base import ExecResult, Instance

PATHS = ("loopback", "instances", "from_host")

MODULES = "/usr/lib/apache2/modules"
HTTPD = "/usr/sbin/apache2"


def _find(pattern: str, text: str, what: str, command: Sequence[str] | None) -> float:
    return find_number(pattern, text, what, command, tool="ab")


def parse(
    text: str, command: Sequence[str] | None = None, instance: int = 0, requests: int | None = None
) -> list[Measurement]:
    """Measurements from ApacheBench's report.

    Raises BenchmarkError on truncated or foreign output, when fewer than
    ``requests`` requests completed, or when any answer was not 2xx (the page
    was not served: the measurement would be of error pages).
    """
    text = text or ""
    rps = _find(r"Requests per second:\s*" + NUMBER, text, "'Requests per second'", command)
    tpr = _find(
        r"Time per request:\s*" + NUMBER + r" \[ms\] \(mean\)", text, "'Time per request (mean)'", command
    )
    complete = _find(r"Complete requests:\s*([0-9]+)", text, "'Complete requests'", command)
    failed = _find(r"Failed requests:\s*([0-9]+)", text, "'Failed requests'", command)
    rate = _find(r"Transfer rate:\s*" + NUMBER, text, "'Transfer rate'", command)
    m = re.search(r"Non-2xx responses:\s*([0-9]+)", text)
    non2xx = float(m.group(1)) if m else 0.0
    if requests is not None and complete < requests:
        raise BenchmarkError(f"ab completed {int(complete)} of {requests} requests", command, tail(text))
    if non2xx:
        raise BenchmarkError(
            f"httpd answered {int(non2xx)} requests with a non-2xx status", command, tail(text)
        )
    return [
        Measurement("requests_per_s", rps, "req/s", instance),
        Measurement("time_per_request_ms", tpr, "ms", instance),
        Measurement("failed_requests", failed, "count", instance),
        Measurement("non_2xx_responses", non2xx, "count", instance),
        Measurement("transfer_kb_per_s", rate, "KB/s", instance),
    ]


def parse_versions(httpd_text: str, ab_text: str) -> dict:
    """{'apache2': '2.4.x', 'ab': '2.3'} from ``apache2 -v`` and ``ab -V``."""
    m1 = re.search(r"Apache/([0-9][0-9.]*)", httpd_text or "")
    m2 = re.search(r"ApacheBench, Version ([0-9][0-9.]*)", ab_text or "")
    if not m1 or not m2:
        raise BenchmarkError(
            "cannot read the versions of apache2 and ab",
            "apache2 -v; ab -V",
            tail((httpd_text or "") + "\n" + (ab_text or "")),
        )
    return {"apache2": m1.group(1), "ab": m2.group(1)}


def scaled(params: dict) -> tuple[int, int]:
    """(requests, concurrency) for a run: the parameters, or the defaults scaled to vCPUs."""
    vcpus = int(params.get("vcpus") or 1)
    requests = params.get("requests") or 5000 * vcpus
    concurrency = params.get("concurrency") or min(100, 10 * vcpus)
    for key, value in (("requests", requests), ("concurrency", concurrency)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"apache: parameter {key!r} must be a positive integer, got {value!r}")
    if concurrency > requests:
        raise ConfigError(f"apache: concurrency ({concurrency}) cannot exceed requests ({requests})")
    return requests, concurrency


def ab_command(requests: int, concurrency: int, url: str, keepalive: bool = False) -> list[str]:
    """ApacheBench's argv: ``ab -n <requests> -c <concurrency> -q [-k] <url>``."""
    return [
        "ab",
        "-n",
        str(int(requests)),
        "-c",
        str(int(concurrency)),
        "-q",
        *(["-k"] if keepalive else []),
        url,
    ]


_SETUP = r"""
set -e
d=$(mktemp -d /tmp/labkit-httpd-XXXXXX)
chmod 755 "$d"
mkdir "$d/htdocs"
head -c {page_bytes} /dev/zero | tr '\0' 'x' > "$d/htdocs/index.html"
chmod 644 "$d/htdocs/index.html"
cat > "$d/httpd.conf" <<EOF
ServerRoot "$d"
ServerName localhost
Listen {listen}:{port}
LoadModule mpm_event_module {modules}/mod_mpm_event.so
LoadModule authz_core_module {modules}/mod_authz_core.so
PidFile "$d/httpd.pid"
ErrorLog "$d/error.log"
LogLevel warn
DefaultRuntimeDir "$d"
Mutex file:$d default
KeepAlive On
DocumentRoot "$d/htdocs"
<Directory "$d/htdocs">
  Require all granted
</Directory>
EOF
if [ "$(id -u)" = 0 ]; then
  u=www-data; id -u "$u" >/dev/null 2>&1 || u=nobody
  echo "User $u" >> "$d/httpd.conf"
  echo "Group $(id -gn "$u")" >> "$d/httpd.conf"
fi
echo "$d"
"""


class Apache(Workload):
    """httpd + ab on loopback in one instance; see the module docstring."""

    name = "apache"
    response = "requests_per_s"
    timed_metrics = ()
    length_param = "requests"
    defaults = {
        "requests": None,
        "concurrency": None,
        "page_kb": 4,
        "keepalive": False,
        "timeout_s": 600,
        "path": "loopback",
    }
    schema = {
        "path": Str(PATHS),
        "requests": Int(1, 10**9, none=True),
        "concurrency": Int(1, 20000, none=True),
        "page_kb": Num(0, 10**6),
        "keepalive": Bool(),
        "timeout_s": TIMEOUT,
    }
    min_memory_mb = 64

    def prepare(self, instance: Instance) -> None:
        require_tool(instance, "ab", "apache2-utils")
        res = instance.exec(
            ["sh", "-c", f"command -v apache2 || test -x {HTTPD} && echo {HTTPD}"], check=False, timeout=30
        )
        if not res.stdout.strip():
            raise BenchmarkError(
                f"'apache2' is not installed in {instance.name}; it comes with the "
                "Debian package 'apache2' (apt-get install apache2)"
            )

    def _start(self, instance: Instance, params: dict, listen: str = "127.0.0.1") -> tuple[str, int]:
        """Write the config, start httpd on ``listen`` at a free random port; returns its
        directory and port."""
        page = int(float(params["page_kb"]) * 1024)
        last: ExecResult | None = None
        for _ in range(5):
            port = server_port()
            script = (
                _SETUP.replace("{page_bytes}", str(page))
                .replace("{port}", str(port))
                .replace("{modules}", MODULES)
                .replace("{listen}", check_address(listen))
            )
            res = run_checked(instance, ["sh", "-c", script], timeout=60)
            d = res.stdout.strip().splitlines()[-1]
            conf = f"{d}/httpd.conf"
            start = instance.exec([HTTPD, "-f", conf, "-k", "start"], check=False, timeout=60)
            if start.ok:
                return d, port
            last = start
            self._stop(instance, d)
        if last is None:  # five tries, so never
            raise BenchmarkError("httpd did not start: it was never tried")
        raise BenchmarkError("httpd did not start", last.command, tail(last.stdout + last.stderr))

    @staticmethod
    def _stop(instance, d: str) -> None:
        q = shlex.quote(d)
        instance.exec(
            [
                "sh",
                "-c",
                f"if [ -s {q}/httpd.pid ]; then {HTTPD} -f {q}/httpd.conf -k stop; "
                f"i=0; while [ -e {q}/httpd.pid ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; "
                f"fi; rm -rf {q}",
            ],
            check=False,
            timeout=60,
        )

    def spans(self, params: dict) -> bool:
        """Whether this run goes across the run's network (``path`` instances or from_host)."""
        return {**self.params, **params}["path"] != "loopback"

    def run_group(self, instances: Sequence[Instance], params: dict) -> list[Measurement]:
        """``path: instances``: httpd in inst0, ab in inst1; ``path: from_host``: ab on the host
        against every instance at once (see the module docstring)."""
        params = {**self.params, **params}
        if params["path"] == "from_host":
            from ..backends.host_end import host_end

            with host_end(instances, "apache", "from_host", "ab", "apache2-utils") as host:
                return self.from_host(host, instances, params)
        if len(instances) < 2 or instances[0].network is None:
            raise ConfigError("apache path 'instances' needs count >= 2 and network: private")
        return self.run(instances[1], params, server=instances[0])

    def from_host(self, host: Instance, instances: Sequence[Instance], params: dict) -> list[Measurement]:
        """httpd in every instance of ``instances`` on its private address, one ab per instance
        started together on ``host`` (an Instance on the same network, e.g.
        :class:`labkit.backends.host_end.HostEnd`); returns every instance's measurements (rows carry
        its index). Any ab that fails or outlives ``timeout_s`` fails the run; every ab and
        every httpd is stopped whatever happens."""
        params = {**self.params, **params}
        requests, concurrency = scaled(params)
        timeout = params.get("timeout_s")
        started, urls, procs = [], [], []
        try:
            for inst in instances:
                if inst.address is None:
                    raise ConfigError(
                        f"apache path 'from_host': {inst.name} has no address on the run's "
                        "private network (network: private)"
                    )
                d, port = self._start(inst, params, inst.address)
                started.append((inst, d))
                urls.append(f"http://{inst.address}:{port}/index.html")
            argvs = [ab_command(requests, concurrency, url, bool(params.get("keepalive"))) for url in urls]
            procs = [host.spawn(argv) for argv in argvs]  # all load generators at once
            wait_until(
                lambda: not any(p.running() for p in procs),
                timeout=timeout,
                interval=0.05,
                error=CommandTimeout,
                what=f"ab on the host against {len(procs)} instance(s) to end (timeout_s={timeout}s)",
            )
            rows: list[Measurement] = []
            for inst, argv, p in zip(instances, argvs, procs):
                res = p.result
                if res is None:  # never: the loop above waited for every ab
                    raise BenchmarkError(f"ab against httpd in {inst.name} has not ended", argv)
                out = res.stdout + res.stderr
                if res.exit_code != 0:
                    raise BenchmarkError(
                        f"ab against httpd in {inst.name} exited {res.exit_code}", argv, tail(out)
                    )
                rows += parse(res.stdout, argv, inst.index, requests)
            return rows
        finally:
            for p in procs:
                p.stop()
            for inst, d in started:
                self._stop(inst, d)

    def run(self, instance: Instance, params: dict, server: Instance | None = None) -> list[Measurement]:
        params = {**self.params, **params}
        requests, concurrency = scaled(params)
        server = server or instance
        address = "127.0.0.1" if server is instance else network_address(server, peer=True)
        d, port = self._start(server, params, address)
        try:
            host = "127.0.0.1" if server is instance else f"inst{server.index}"
            argv = ab_command(
                requests, concurrency, f"http://{host}:{port}/index.html", bool(params.get("keepalive"))
            )
            try:
                res = run_checked(instance, argv, timeout=params.get("timeout_s"))
            except BenchmarkError as exc:
                if "unreachable" in exc.output_tail.lower():
                    raise BenchmarkError(
                        f"ab cannot reach httpd on 127.0.0.1 in {instance.name}: its loopback "
                        "interface is down (the backend must bring 'lo' up when it starts an "
                        "instance)",
                        exc.command,
                        exc.output_tail,
                    ) from exc
                raise
        finally:
            self._stop(server, d)
        return parse(res.stdout, argv, instance.index, requests)

    def version(self, instance: Instance) -> dict:
        h = instance.exec([HTTPD, "-v"], check=False, timeout=30)
        a = instance.exec(["ab", "-V"], check=False, timeout=30)
        return parse_versions(h.stdout + h.stderr, a.stdout + a.stderr)
