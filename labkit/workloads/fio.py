"""fio: sequential and random read/write on a file inside the instance (Debian package ``fio``).

One run executes the chosen patterns one after another (``--stonewall``) on a
single file in the instance's work directory, then removes the file. Output
is fio's JSON. Metrics per pattern ``p`` in ``seqread``, ``seqwrite``,
``randread``, ``randwrite``:

| metric | unit |
|---|---|
| ``<p>_iops`` | IO/s |
| ``<p>_bw_mib_per_s`` | MiB/s |
| ``<p>_lat_mean_us`` (completion latency) | us |

Parameters: ``patterns`` (list or comma string, default all four),
``size_mb`` (file size, 64), ``bs`` (block size, ``4k``), ``runtime_s``
(seconds per pattern, 1), ``ioengine`` (``psync``), ``direct`` (0: through
the page cache, which containers and VMs handle differently — set 1 to
measure the device, where the filesystem allows O_DIRECT), ``iodepth`` (1),
``numjobs`` (1), ``timeout_s``. The response is the first pattern's IOPS.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..errors import BenchmarkError, ConfigError, tail
from .base import Measurement, Workload, require_tool, run_checked
from .params import SIZE, TIMEOUT, Int, Num, Str, StrList

if TYPE_CHECKING:
    from ..backends.base import Instance

PATTERNS = {"seqread": "read", "seqwrite": "write", "randread": "randread", "randwrite": "randwrite"}
_DIRECTION = {"seqread": "read", "randread": "read", "seqwrite": "write", "randwrite": "write"}


def _patterns(value) -> list[str]:
    items = [p.strip() for p in value.split(",")] if isinstance(value, str) else list(value or [])
    bad = [p for p in items if p not in PATTERNS]
    if not items or bad:
        raise ConfigError(f"fio: patterns must be a non-empty subset of {', '.join(PATTERNS)}; got {value!r}")
    return items


def _json_document(text: str, command):
    """fio's JSON object; fio may print warnings before it on stdout."""
    start = (text or "").find("{")
    if start < 0:
        raise BenchmarkError("fio printed no JSON", command, tail(text))
    try:
        return json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise BenchmarkError(
            f"fio's JSON output is malformed or truncated ({exc})", command, tail(text)
        ) from exc


def parse(
    text: str, patterns: Iterable[str] | None = None, command: Sequence[str] | None = None, instance: int = 0
) -> list[Measurement]:
    """IOPS, bandwidth and mean completion latency per job from ``fio --output-format=json``.

    Each job must be named after its pattern (``seqread`` ...). Raises
    BenchmarkError on malformed/truncated JSON, a job that reports an error, or
    a pattern in ``patterns`` with no job.
    """
    doc = _json_document(text, command)
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list) or not jobs:
        raise BenchmarkError("fio JSON has no jobs", command, tail(text))
    rows: list[Measurement] = []
    seen = set()
    try:
        for job in jobs:
            name = job["jobname"]
            if job.get("error"):
                raise BenchmarkError(
                    f"fio job {name!r} failed with error {job['error']}", command, tail(text)
                )
            if name not in _DIRECTION:
                continue
            side = job[_DIRECTION[name]]
            if not side.get("total_ios") and not side.get("io_bytes"):
                raise BenchmarkError(f"fio job {name!r} did no I/O", command, tail(text))
            clat = side.get("clat_ns", {}).get("mean")
            rows += [
                Measurement(f"{name}_iops", float(side["iops"]), "IO/s", instance),
                Measurement(f"{name}_bw_mib_per_s", float(side["bw_bytes"]) / 1048576, "MiB/s", instance),
            ]
            if clat is not None:
                rows.append(Measurement(f"{name}_lat_mean_us", float(clat) / 1000, "us", instance))
            seen.add(name)
    except (KeyError, TypeError, ValueError) as exc:
        raise BenchmarkError(f"fio JSON lacks an expected field ({exc!r})", command, tail(text)) from exc
    missing = [p for p in (patterns or []) if p not in seen]
    if missing:
        raise BenchmarkError(f"fio output has no result for {', '.join(missing)}", command, tail(text))
    if not rows:
        raise BenchmarkError("fio output has no seqread/seqwrite/randread/randwrite job", command, tail(text))
    return rows


def parse_version(text: str) -> str:
    m = re.search(r"fio-([0-9]+(?:\.[0-9]+)*)", text or "")
    if not m:
        raise BenchmarkError("cannot read fio's version", "fio --version", tail(text))
    return m.group(1)


#: fio's units in its classic text output -> the factor to bytes/s (bandwidth) or to us (latency)
_BW_UNITS = {
    "B": 1.0,
    "KiB": 1024.0,
    "MiB": 1048576.0,
    "GiB": 1073741824.0,
    "TiB": 1024.0**4,
    "kB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KB": 1024.0,
}  # fio 2.x: KB = KiB
_LAT_UNITS = {"nsec": 1e-3, "usec": 1.0, "msec": 1e3, "sec": 1e6}
_SUFFIX = {"": 1.0, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "g": 1e9, "G": 1e9}
_TEXT_JOB = re.compile(r"^(\S+): \(groupid=\d+, jobs=\d+\): err=\s*(-?\d+)", re.MULTILINE)
_TEXT_SIDE = re.compile(r"^\s+(read|write|trim)\s*:\s*(.*)$", re.MULTILINE)
_TEXT_IOPS = re.compile(r"\biops=([0-9.]+)([kKmMgG]?)", re.IGNORECASE)
_TEXT_BW = re.compile(r"\bbw=([0-9.]+)([KMGT]?i?B|[kMGT]B|B)/s", re.IGNORECASE)
_TEXT_CLAT = re.compile(r"^\s+clat \((nsec|usec|msec|sec)\):.*?\bavg=\s*([0-9.]+)", re.MULTILINE)


def _job_prefix(name: str, direction: str) -> str:
    """Metric prefix of one job's ``direction``: labkit's own ``<pattern>`` for a job named after
    one of its patterns (``randread_iops``), else ``<job>_<direction>`` (``mixed_write_iops``)."""
    if _DIRECTION.get(name) == direction:
        return name
    safe = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "job"
    return f"{safe}_{direction}"


def _add(acc: dict, prefix: str, iops: float, bw_bytes: float, lat_us: float | None) -> None:
    """Jobs of one name (numjobs without group_reporting) add their IOPS and bandwidth; the
    latency is their mean."""
    a = acc.setdefault(prefix, {"iops": 0.0, "bw": 0.0, "lat": []})
    a["iops"] += iops
    a["bw"] += bw_bytes
    if lat_us is not None:
        a["lat"].append(lat_us)


def _rows(acc: dict, instance: int) -> list[Measurement]:
    rows = []
    for prefix, a in acc.items():
        rows += [
            Measurement(f"{prefix}_iops", a["iops"], "IO/s", instance),
            Measurement(f"{prefix}_bw_mib_per_s", a["bw"] / 1048576, "MiB/s", instance),
        ]
        if a["lat"]:
            rows.append(Measurement(f"{prefix}_lat_mean_us", sum(a["lat"]) / len(a["lat"]), "us", instance))
    return rows


def parse_report(text: str, command: Sequence[str] | None = None, instance: int = 0) -> list[Measurement]:
    """IOPS, bandwidth (MiB/s) and mean completion latency (us) of every job and direction that did
    I/O, from one fio report: its JSON (``--output-format=json``) or its classic text (fio 3's
    ``read: IOPS=19.3k, BW=75.5MiB/s`` and fio 2's ``read : io=..., bw=77283KB/s, iops=19320``),
    in the units fio printed. Metric names as :func:`parse` for jobs named after labkit's
    patterns, ``<job>_<read|write|trim>_...`` for others. BenchmarkError on a job that reports an
    error, a report without jobs, or truncated output."""
    text = text or ""
    if text.lstrip().startswith("{") or ("{" in text and '"jobs"' in text):
        doc = _json_document(text, command)
        jobs = doc.get("jobs") if isinstance(doc, dict) else None
        if not isinstance(jobs, list) or not jobs:
            raise BenchmarkError("fio JSON has no jobs", command, tail(text))
        acc: dict = {}
        try:
            for job in jobs:
                name = str(job["jobname"])
                if job.get("error"):
                    raise BenchmarkError(
                        f"fio job {name!r} failed with error {job['error']}", command, tail(text)
                    )
                for direction in ("read", "write", "trim"):
                    side = job.get(direction)
                    if not isinstance(side, dict) or not (side.get("total_ios") or side.get("io_bytes")):
                        continue
                    clat = side.get("clat_ns", {}).get("mean")
                    _add(
                        acc,
                        _job_prefix(name, direction),
                        float(side["iops"]),
                        float(side["bw_bytes"]),
                        None if clat is None else float(clat) / 1000,
                    )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BenchmarkError(f"fio JSON lacks an expected field ({exc!r})", command, tail(text)) from exc
    else:
        heads = list(_TEXT_JOB.finditer(text))
        if not heads:
            raise BenchmarkError(
                "fio output has no job result ('<job>: (groupid=0, jobs=1): err= 0: ...')",
                command,
                tail(text),
            )
        if "Run status group" not in text:
            raise BenchmarkError("fio output is truncated (no 'Run status group' line)", command, tail(text))
        acc = {}
        for i, head in enumerate(heads):
            name, err = head.group(1), int(head.group(2))
            if err:
                raise BenchmarkError(f"fio job {name!r} failed with error {err}", command, tail(text))
            end = heads[i + 1].start() if i + 1 < len(heads) else text.find("Run status group", head.end())
            block = text[head.end() : end]
            sides = list(_TEXT_SIDE.finditer(block))
            for j, side in enumerate(sides):
                direction, line = side.group(1), side.group(2)
                iops, bw = _TEXT_IOPS.search(line), _TEXT_BW.search(line)
                if not iops or not bw:
                    raise BenchmarkError(
                        f"fio job {name!r} {direction}: expected 'IOPS=..., BW=...' (or "
                        f"'bw=..., iops=...'), got {line.strip()[:80]!r}",
                        command,
                        tail(text),
                    )
                unit = bw.group(2)
                if unit not in _BW_UNITS:
                    raise BenchmarkError(
                        f"fio job {name!r} {direction}: unknown bandwidth unit {unit + '/s'!r} "
                        f"(expected one of {', '.join(u + '/s' for u in _BW_UNITS)})",
                        command,
                        tail(text),
                    )
                part = block[side.end() : sides[j + 1].start() if j + 1 < len(sides) else len(block)]
                clat = _TEXT_CLAT.search(part)
                _add(
                    acc,
                    _job_prefix(name, direction),
                    float(iops.group(1)) * _SUFFIX[iops.group(2)],
                    float(bw.group(1)) * _BW_UNITS[unit],
                    None if clat is None else float(clat.group(2)) * _LAT_UNITS[clat.group(1)],
                )
    rows = _rows(acc, instance)
    if not rows:
        raise BenchmarkError("fio report has no job that did I/O", command, tail(text))
    return rows


class Fio(Workload):
    """fio patterns on a file in the instance; see the module docstring."""

    name = "fio"
    response = "randread_iops"
    timed_metrics = ()
    length_param = "runtime_s"
    defaults = {
        "patterns": ["seqread", "seqwrite", "randread", "randwrite"],
        "size_mb": 64,
        "bs": "4k",
        "runtime_s": 1,
        "ioengine": "psync",
        "direct": 0,
        "iodepth": 1,
        "numjobs": 1,
        "timeout_s": 600,
    }
    schema = {
        "patterns": StrList(tuple(PATTERNS)),
        "size_mb": Num(0, 10**7),
        "bs": SIZE,
        "runtime_s": Num(0, 86400),
        "ioengine": Str(pattern=r"[a-z0-9_]{1,32}"),
        "direct": Int(0, 1),
        "iodepth": Int(1, 65536),
        "numjobs": Int(1, 4096),
        "timeout_s": TIMEOUT,
    }
    min_memory_mb = 64

    def __init__(self, **params: object):
        super().__init__(**params)
        self.response = f"{_patterns(self.params['patterns'])[0]}_iops"

    def prepare(self, instance: Instance) -> None:
        require_tool(instance, "fio", "fio")

    def command(self, params: dict, filename: str) -> list[str]:
        patterns = _patterns(params["patterns"])
        size = params["size_mb"]
        if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
            raise ConfigError(f"fio: size_mb must be a positive number, got {size!r}")
        argv = [
            "fio",
            f"--filename={filename}",
            f"--size={int(size)}M",
            f"--bs={params['bs']}",
            f"--runtime={max(1, round(params['runtime_s']))}",
            "--time_based",
            f"--ioengine={params['ioengine']}",
            f"--direct={int(params['direct'])}",
            f"--iodepth={int(params['iodepth'])}",
            f"--numjobs={int(params['numjobs'])}",
            "--group_reporting",
            "--stonewall",
            "--output-format=json",
        ]
        for p in patterns:
            argv += [f"--name={p}", f"--rw={PATTERNS[p]}"]
        return argv

    def run(self, instance: Instance, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        filename = f"{instance.workdir}/labkit-fio-{secrets.token_hex(4)}.dat"
        argv = self.command(params, filename)
        try:
            instance.exec(["mkdir", "-p", instance.workdir], timeout=30)
            res = run_checked(instance, argv, timeout=params.get("timeout_s"))
        finally:
            instance.exec(["rm", "-f", filename], check=False, timeout=60)
        return parse(res.stdout, _patterns(params["patterns"]), argv, instance.index)

    def version(self, instance: Instance) -> dict:
        res = instance.exec(["fio", "--version"], check=False, timeout=30)
        return {"fio": parse_version(res.stdout + res.stderr)}
