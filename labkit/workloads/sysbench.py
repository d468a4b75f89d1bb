"""sysbench 1.0: cpu, memory, threads and fileio tests (Debian package ``sysbench``).

Study 004 timed sysbench's prime search (``cpu``, limit 200,000) and used its
memory test; study 000 swept threads from 1 to 8. One workload runs one test,
chosen by the ``test`` parameter (a factor like any other):

| test | metrics (unit) | response |
|---|---|---|
| ``cpu`` | ``events_per_s`` (events/s), ``latency_avg_ms``, ``latency_p95_ms`` (ms) | ``events_per_s`` |
| ``memory`` | ``mib_per_s`` (MiB/s), ``ops_per_s`` (ops/s) | ``mib_per_s`` |
| ``threads`` | ``events_per_s`` (events/s), ``latency_avg_ms``, ``latency_p95_ms`` (ms) | ``events_per_s`` |
| ``fileio`` | ``read_mib_per_s``, ``write_mib_per_s`` (MiB/s), ``reads_per_s``, ``writes_per_s``, ``fsyncs_per_s`` (ops/s) | ``read_mib_per_s`` |

Parameters: ``test`` (``cpu``), ``threads`` (None = the instance's vCPUs),
``time_s`` (2: each run lasts about this long), ``cpu_max_prime`` (10000;
004 used 200000), ``memory_block_size`` (``1K``), ``memory_total_size``
(``10G``: the run stops at ``time_s`` first), ``memory_oper``
(``write``/``read``), ``memory_access_mode`` (``seq``/``rnd``),
``fileio_total_size`` (``64M``), ``fileio_num`` (4), ``fileio_mode``
(``rndrw``; also ``seqrd``, ``seqwr``, ``rndrd``, ``rndwr``...),
``timeout_s`` (600), ``events`` (None; for ``cpu``: a fixed amount of work, that
many events, with no time limit, and the response is then ``total_time_s``, the
time the work took, in s, as study 004 timed its prime search). The fileio files
live in the instance's work directory and are removed after each run.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import BenchmarkError, ConfigError, tail
from .base import NUMBER, Measurement, Workload, find_number, require_tool, run_checked
from .params import SIZE, THREADS, TIMEOUT, Int, Num, Str
from .scaling import resolve_threads

if TYPE_CHECKING:
    from ..backends.base import Instance

TESTS = ("cpu", "memory", "threads", "fileio")
RESPONSES = {
    "cpu": "events_per_s",
    "memory": "mib_per_s",
    "threads": "events_per_s",
    "fileio": "read_mib_per_s",
}
FILEIO_MODES = ("seqwr", "seqrewr", "seqrd", "rndrd", "rndwr", "rndrw")

_VERSION = re.compile(r"sysbench\s+([0-9]+(?:\.[0-9]+)*)")


def find(pattern: str, text: str, what: str, command: Sequence[str] | None, flags: int = 0) -> float:
    """A number of a sysbench report (:func:`~labkit.workloads.base.find_number`)."""
    return find_number(pattern, text, what, command, tool="sysbench", flags=flags)


def latency(text: str, command: Sequence[str] | None) -> tuple[float, float]:
    """The average and 95th-percentile latency (ms) of a sysbench report."""
    avg = find(r"Latency \(ms\):.*?avg:\s*" + NUMBER, text, "latency avg", command, re.S)
    p95 = find(r"95th percentile:\s*" + NUMBER, text, "95th percentile latency", command)
    return avg, p95


def _events_per_s(text: str, command) -> float:
    total_time = find(r"total time:\s*" + NUMBER + "s", text, "total time", command)
    events = find(r"total number of events:\s*" + NUMBER, text, "total number of events", command)
    if total_time <= 0:
        raise BenchmarkError("sysbench reported a total time of 0 s", command, tail(text))
    return events / total_time


def parse(test: str, text: str, command: Sequence[str] | None = None, instance: int = 0) -> list[Measurement]:
    """Measurements from the output of ``sysbench <test> ... run``.

    Raises BenchmarkError (with the command and the output's tail) when a
    value the test must report is missing, e.g. on truncated output.
    """
    if test not in TESTS:
        raise ConfigError(f"sysbench: test must be one of {', '.join(TESTS)}; got {test!r}")
    text = text or ""
    if "General statistics" not in text:
        raise BenchmarkError(
            f"sysbench {test} output is incomplete (no 'General statistics')", command, tail(text)
        )
    rows: list[tuple[str, float, str]] = []
    if test == "cpu":
        rows.append(
            (
                "events_per_s",
                find(r"events per second:\s*" + NUMBER, text, "'events per second'", command),
                "events/s",
            )
        )
        avg, p95 = latency(text, command)
        rows += [
            ("latency_avg_ms", avg, "ms"),
            ("latency_p95_ms", p95, "ms"),
            ("total_time_s", find(r"total time:\s*" + NUMBER + "s", text, "total time", command), "s"),
        ]
    elif test == "memory":
        rows.append(
            (
                "mib_per_s",
                find(
                    r"MiB transferred \(" + NUMBER + r" MiB/sec\)",
                    text,
                    "'MiB transferred (... MiB/sec)'",
                    command,
                ),
                "MiB/s",
            )
        )
        rows.append(
            (
                "ops_per_s",
                find(
                    r"Total operations:\s*[0-9]+\s*\(" + NUMBER + " per second",
                    text,
                    "'Total operations'",
                    command,
                ),
                "ops/s",
            )
        )
    elif test == "threads":
        rows.append(("events_per_s", _events_per_s(text, command), "events/s"))
        avg, p95 = latency(text, command)
        rows += [("latency_avg_ms", avg, "ms"), ("latency_p95_ms", p95, "ms")]
    else:  # fileio
        rows += [
            ("read_mib_per_s", find(r"read, MiB/s:\s*" + NUMBER, text, "'read, MiB/s'", command), "MiB/s"),
            (
                "write_mib_per_s",
                find(r"written, MiB/s:\s*" + NUMBER, text, "'written, MiB/s'", command),
                "MiB/s",
            ),
            ("reads_per_s", find(r"reads/s:\s*" + NUMBER, text, "'reads/s'", command), "ops/s"),
            ("writes_per_s", find(r"writes/s:\s*" + NUMBER, text, "'writes/s'", command), "ops/s"),
            ("fsyncs_per_s", find(r"fsyncs/s:\s*" + NUMBER, text, "'fsyncs/s'", command), "ops/s"),
        ]
    return [Measurement(m, v, u, instance) for m, v, u in rows]


def parse_version(text: str) -> str:
    """'1.0.20' from ``sysbench --version`` (or the banner of a run)."""
    m = _VERSION.search(text or "")
    if not m:
        raise BenchmarkError("cannot read sysbench's version", "sysbench --version", tail(text))
    return m.group(1)


class Sysbench(Workload):
    """One sysbench test per run; see the module docstring for parameters and metrics."""

    name = "sysbench"
    response = "events_per_s"
    timed_metrics = ("total_time_s",)
    length_param = "time_s"
    defaults = {
        "test": "cpu",
        "threads": None,
        "time_s": 2,
        "cpu_max_prime": 10000,
        "memory_block_size": "1K",
        "memory_total_size": "10G",
        "memory_oper": "write",
        "memory_access_mode": "seq",
        "fileio_total_size": "64M",
        "fileio_num": 4,
        "fileio_mode": "rndrw",
        "timeout_s": 600,
        "events": None,
    }
    schema = {
        "test": Str(TESTS),
        "threads": THREADS,
        "time_s": Num(0, 86400),
        "cpu_max_prime": Int(3, 10**9),
        "memory_block_size": SIZE,
        "memory_total_size": SIZE,
        "memory_oper": Str(("read", "write", "none")),
        "memory_access_mode": Str(("seq", "rnd")),
        "fileio_total_size": SIZE,
        "fileio_num": Int(1, 10**6),
        "fileio_mode": Str(FILEIO_MODES),
        "timeout_s": TIMEOUT,
        "events": Int(1, 10**12, none=True),
    }
    min_memory_mb = 32

    def __init__(self, **params: object):
        super().__init__(**params)
        self._check_test(self.params["test"])
        self.response = RESPONSES[self.params["test"]]
        if self.params["events"] is not None:
            if self.params["test"] != "cpu":
                raise ConfigError(
                    "sysbench: parameter 'events' (a fixed amount of work) is for "
                    f"test 'cpu', not {self.params['test']!r}"
                )
            self.response = "total_time_s"

    @staticmethod
    def _check_test(test):
        if test not in TESTS:
            raise ConfigError(f"sysbench: parameter 'test' must be one of {', '.join(TESTS)}; got {test!r}")

    def prepare(self, instance: Instance) -> None:
        require_tool(instance, "sysbench", "sysbench")

    def command(self, params: dict) -> list[str]:
        """The ``sysbench ... run`` argv for one run (fileio runs in its directory)."""
        test = params["test"]
        self._check_test(test)
        threads = resolve_threads(params, "sysbench")
        time_s = params["time_s"]
        if not isinstance(time_s, (int, float)) or time_s <= 0:
            raise ConfigError(f"sysbench: time_s must be a positive number, got {time_s!r}")
        argv = ["sysbench", test, f"--threads={threads}", f"--time={max(1, round(time_s))}"]
        if test == "cpu" and params.get("events") is not None:  # fixed work, no time limit
            argv[-1:] = ["--time=0", f"--events={int(params['events'])}"]
        if test == "cpu":
            argv.append(f"--cpu-max-prime={int(params['cpu_max_prime'])}")
        elif test == "memory":
            argv += [
                f"--memory-block-size={params['memory_block_size']}",
                f"--memory-total-size={params['memory_total_size']}",
                f"--memory-oper={params['memory_oper']}",
                f"--memory-access-mode={params['memory_access_mode']}",
            ]
        elif test == "fileio":
            if params["fileio_mode"] not in FILEIO_MODES:
                raise ConfigError(
                    f"sysbench: fileio_mode must be one of {', '.join(FILEIO_MODES)}; "
                    f"got {params['fileio_mode']!r}"
                )
            argv += self._fileio_args(params) + [f"--file-test-mode={params['fileio_mode']}"]
        argv.append("run")
        return argv

    @staticmethod
    def _fileio_args(params) -> list[str]:
        return [f"--file-total-size={params['fileio_total_size']}", f"--file-num={int(params['fileio_num'])}"]

    def run(self, instance: Instance, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        argv = self.command(params)
        timeout = params.get("timeout_s")
        if params["test"] != "fileio":
            res = run_checked(instance, argv, timeout=timeout)
            return parse(params["test"], res.stdout, argv, instance.index)
        d = f"{instance.workdir}/sysbench-fileio"
        files = shlex.join(["sysbench", "fileio", *self._fileio_args(params)])
        try:
            run_checked(
                instance,
                ["sh", "-c", f"mkdir -p {shlex.quote(d)} && cd {shlex.quote(d)} && {files} prepare"],
                timeout=timeout,
            )
            res = run_checked(
                instance, ["sh", "-c", f"cd {shlex.quote(d)} && {shlex.join(argv)}"], timeout=timeout
            )
        finally:
            instance.exec(["rm", "-rf", d], check=False, timeout=120)
        return parse("fileio", res.stdout, argv, instance.index)

    def version(self, instance: Instance) -> dict:
        res = instance.exec(["sysbench", "--version"], check=False, timeout=30)
        return {"sysbench": parse_version(res.stdout + res.stderr)}
