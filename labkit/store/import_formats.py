"""The parsers ``labkit import`` reads other tools' reports with (:mod:`labkit.store.imports`).

A :class:`Format` is one tool's parser: ``split`` cuts a file into :class:`Report` s (a file with
several reports, repeated runs appended to one log, gives several runs) and ``parse`` reads one
report with the labkit workload's own parser, returning its measurements and the tool versions it
names. :data:`FORMATS` holds each by name, :data:`ALIASES` the other names a manifest may use, and
:data:`CSV` names the CSV reader with a column mapping (:func:`labkit.store.imports.parse_manifest`).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import BenchmarkError


@dataclass
class Report:
    """One report found in a file: its text and where it is (1-based lines, inclusive)."""

    text: str
    first: int
    last: int
    levels: dict = field(default_factory=dict)  # csv: the row's own factor levels


@dataclass
class Format:
    """A parser of one tool's reports: ``split`` cuts a file into reports, ``parse`` reads one
    (text, params) -> (rows, tool versions); ``version`` changes whenever what it reads changes."""

    name: str
    tool: str
    version: str
    split: Callable[[str], list[Report]]
    parse: Callable[[str, dict], tuple[list, dict]]
    response: Callable[[list], str | None] = lambda rows: None
    expected: str = ""


# -- cutting a file into reports -------------------------------------------------------------
def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def split_at(start: str, anchor: str | None = None) -> Callable[[str], list[Report]]:
    """A splitter: each report begins at a line matching ``start`` (the first line the tool
    prints); with none found, at each line matching ``anchor`` (a line printed once per report).
    Text before the first belongs to the first report."""
    start_re = re.compile(start, re.MULTILINE)
    anchor_re = re.compile(anchor, re.MULTILINE) if anchor else None

    def split(text: str) -> list[Report]:
        cuts = [m.start() for m in start_re.finditer(text)]
        if not cuts and anchor_re is not None:
            cuts = [text.rfind("\n", 0, m.start()) + 1 for m in anchor_re.finditer(text)]
        if not cuts:
            return []
        cuts[0] = 0
        out = []
        for i, a in enumerate(cuts):
            b = cuts[i + 1] if i + 1 < len(cuts) else len(text)
            chunk = text[a:b]
            out.append(Report(chunk, _line_of(text, a), _line_of(text, a) + chunk.rstrip("\n").count("\n")))
        return out

    return split


def split_json(text: str) -> list[Report]:
    """Concatenated JSON documents (fio ``--output-format=json``, iperf3 ``-J`` appended to one
    log); text between them (a tool's warnings) is skipped. A document that does not parse to its
    end is one report (its parser says what is wrong)."""
    dec = json.JSONDecoder()
    out: list[Report] = []
    pos = 0
    while True:
        m = re.compile(r"^\{", re.MULTILINE).search(text, pos)
        if m is None:
            return out
        try:
            _doc, end = dec.raw_decode(text, m.start())
        except ValueError:
            out.append(
                Report(text[m.start() :], _line_of(text, m.start()), _line_of(text, len(text.rstrip())))
            )
            return out
        out.append(Report(text[m.start() : end], _line_of(text, m.start()), _line_of(text, end)))
        pos = end


def split_fio(text: str) -> list[Report]:
    """fio: JSON documents, or the classic text (a report per ``fio-3.x`` version line)."""
    if re.search(r"^\{", text, re.MULTILINE) and '"jobs"' in text:
        return split_json(text)
    return split_at(r"^fio-[0-9][^\n]*$", r"^Run status group 0 ")(text)


def split_iperf3(text: str) -> list[Report]:
    if re.search(r"^\{", text, re.MULTILINE) and '"start"' in text:
        return split_json(text)
    return split_at(r"^Connecting to host", r"^iperf Done")(text)


def split_redis(text: str) -> list[Report]:
    """redis-benchmark ``--csv``: a header line (``"test","rps",...``) begins a report; without
    headers (Redis < 6.2) a test seen again does."""
    out: list[Report] = []
    lines = text.splitlines(keepends=True)
    cur: list[str] = []
    first = 1
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        name = next(csv.reader([line]), [""])
        key = name[0].strip().lower() if name else ""
        if key and (key == "test" or key in seen) and any(x.strip() for x in cur):
            out.append(Report("".join(cur), first, n - 1))
            cur, first, seen = [], n, set()
        if key and key != "test":
            seen.add(key)
        cur.append(line)
    if any(x.strip() for x in cur):
        out.append(Report("".join(cur), first, len(lines)))
    return out


# -- reading one report ------------------------------------------------------------------------
def _version(pattern: str, text: str, key: str) -> dict:
    m = re.search(pattern, text, re.MULTILINE)
    return {key: m.group(1)} if m else {}


def _stream(text: str, params: dict) -> tuple[list, dict]:
    from ..workloads.stream import parse

    return parse(text), _version(r"STREAM version \$Revision:\s*([0-9.]+)", text, "stream")


def _fio(text: str, params: dict) -> tuple[list, dict]:
    from ..workloads.fio import parse_report

    return parse_report(text), _version(r"fio-([0-9]+(?:\.[0-9]+)*)", text, "fio")


SYSBENCH_SIGNS = (
    ("SQL statistics", "oltp"),
    ("Prime numbers limit", "cpu"),
    ("memory speed test", "memory"),
    ("Extra file open flags", "fileio"),
)


def _sysbench(text: str, params: dict) -> tuple[list, dict]:
    from ..workloads import oltp, sysbench

    test = params.get("test")
    if test is None:
        test = next((t for sign, t in SYSBENCH_SIGNS if sign in text), None)
        if test is None:
            raise BenchmarkError(
                "cannot tell which sysbench test this report is (no 'Prime numbers limit', "
                "'memory speed test', 'Extra file open flags' or 'SQL statistics'); give "
                "params: {test: threads} (or cpu, memory, fileio, oltp) in the manifest"
            )
    rows = oltp.parse(text) if test == "oltp" else sysbench.parse(str(test), text)
    return rows, _version(r"^sysbench ([0-9]+(?:\.[0-9]+)*)", text, "sysbench")


def _iperf3(text: str, params: dict) -> tuple[list, dict]:
    from ..workloads.iperf3 import parse_report

    found = _version(r'"version"\s*:\s*"iperf\s+([0-9.]+)', text, "iperf3")
    return parse_report(text), found


def _hpcc(text: str, params: dict) -> tuple[list, dict]:
    from ..workloads.mpi import parse_hpcc

    return parse_hpcc(text), _version(r"HPC Challenge Benchmark version ([0-9.]+)", text, "hpcc")


def _ab(text: str, params: dict) -> tuple[list, dict]:
    from ..workloads.apache import parse

    return parse(text), _version(r"This is ApacheBench, Version ([0-9.]+)", text, "ab")


def _redis(text: str, params: dict) -> tuple[list, dict]:
    from ..workloads.external import parse_redis_csv

    return parse_redis_csv(text), {}


def _npb(text: str, params: dict) -> tuple[list, dict]:
    from ..workloads.external import parse_npb

    rows, info = parse_npb(text)
    return rows, {
        "npb": str(info.get("version", "unknown")),
        "benchmark": f"{info['benchmark']}.{info['class']}",
    }


def _parsec(text: str, params: dict) -> tuple[list, dict]:
    """``parsecmgmt -a run`` output ([PARSEC] lines) or a hooks build run directly ([HOOKS] lines)."""
    from ..workloads.external import parse_parsec, parse_parsec_hooks

    if "[PARSEC]" in text:
        return parse_parsec(text), {
            "parsec": "parsecmgmt",
            **_version(r"Running benchmark (parsec\.[\w.-]+)", text, "benchmark"),
        }
    return parse_parsec_hooks(text), _version(
        r"\[HOOKS\] PARSEC Hooks Version ([0-9.]+)", text, "parsec_hooks"
    )


def split_parsec(text: str) -> list[Report]:
    """parsecmgmt logs (which hold the hooks lines too) at each '[PARSEC] Benchmarks to run:';
    the output of hooks builds run directly at each '[HOOKS] PARSEC Hooks Version'."""
    if re.search(r"^\[PARSEC\] ", text, re.MULTILINE):
        return split_at(r"^\[PARSEC\] Benchmarks to run:")(text)
    return split_at(r"^\[HOOKS\] PARSEC Hooks Version")(text)


def _parsec_response(rows: list) -> str | None:
    names = [r.metric for r in rows]
    return next((m for m in ("roi_time_s", "wall_time_s") if m in names), None)


def _first(suffix: str) -> Callable[[list], str | None]:
    return lambda rows: next((r.metric for r in rows if r.metric.endswith(suffix)), None)


def _named(metric: str) -> Callable[[list], str | None]:
    return lambda rows: metric if any(r.metric == metric for r in rows) else None


def _sysbench_response(rows: list) -> str | None:
    names = [r.metric for r in rows]
    return next(
        (m for m in ("transactions_per_s", "events_per_s", "mib_per_s", "read_mib_per_s") if m in names), None
    )


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "stream",
            "McCalpin's STREAM (and labkit's kernel)",
            "2",
            split_at(r"^\s*(?:STREAM version|labkit STREAM)", r"^\s*Function\b.*\bRate\b"),
            _stream,
            _named("triad_mb_per_s"),
            "a STREAM report: 'Function  Best Rate MB/s ...' (or GB/s) then Copy/Scale/Add/Triad rows",
        ),
        Format(
            "fio",
            "fio (JSON or classic text)",
            "1",
            split_fio,
            _fio,
            _first("_iops"),
            "a fio report: its JSON, or '<job>: (groupid=0, jobs=1): err= 0' blocks",
        ),
        Format(
            "sysbench",
            "sysbench cpu/memory/fileio/threads/oltp",
            "1",
            split_at(r"^sysbench [0-9]", r"^General statistics"),
            _sysbench,
            _sysbench_response,
            "a sysbench report: 'sysbench 1.x' banner ... 'General statistics'",
        ),
        Format(
            "iperf3",
            "iperf3 (JSON -J, or text)",
            "1",
            split_iperf3,
            _iperf3,
            _first("_mbit_per_s"),
            "an iperf3 client report: its JSON, or the 'sender'/'receiver' summary lines",
        ),
        Format(
            "hpcc",
            "HPC Challenge (hpccoutf.txt)",
            "1",
            split_at(r"^This is the DARPA/DOE HPC Challenge Benchmark", r"^Begin of Summary section"),
            _hpcc,
            _named("hpl_gflops"),
            "an hpccoutf.txt: 'Begin of Summary section.' ... 'End of Summary section.'",
        ),
        Format(
            "apache",
            "ApacheBench (ab)",
            "1",
            split_at(r"^This is ApacheBench", r"^Requests per second"),
            _ab,
            _named("requests_per_s"),
            "an ab report: 'This is ApacheBench' ... 'Requests per second'",
        ),
        Format(
            "redis",
            "redis-benchmark --csv",
            "1",
            split_redis,
            _redis,
            _first("_rps"),
            'redis-benchmark CSV rows: "TEST","rps"[,latencies]',
        ),
        Format(
            "npb",
            "NAS Parallel Benchmarks",
            "1",
            split_at(r"^\s*NAS Parallel Benchmarks", r"^\s*[A-Z]+(?:-MZ)? Benchmark Completed"),
            _npb,
            _named("time_s"),
            "an NPB report: '<XX> Benchmark Completed.' then 'Time in seconds = ...'",
        ),
        Format(
            "parsec",
            "PARSEC (parsecmgmt -a run output, or a hooks build run directly)",
            "1",
            split_parsec,
            _parsec,
            _parsec_response,
            "a PARSEC report: '[PARSEC] Benchmarks to run: ...' ... 'End of output' and its 'real' time, or "
            "'[HOOKS] PARSEC Hooks Version' ... 'Total time spent in ROI' ... '[HOOKS] Terminating'",
        ),
    )
}
ALIASES = {"ab": "apache", "redis-benchmark": "redis", "oltp": "sysbench"}
CSV = "csv"


def format_names() -> list[str]:
    return sorted([*FORMATS, *ALIASES, CSV])
