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
        raise ConfigError(f"fio: patterns must be a non-empty subset of {', '.join(PATTERNS)}; "
                          f"got {value!r}")
    return items


def _json_document(text: str, command):
    """fio's JSON object; fio may print warnings before it on stdout."""
    start = (text or "").find("{")
    if start < 0:
        raise BenchmarkError("fio printed no JSON", command, tail(text))
    try:
        return json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise BenchmarkError(f"fio's JSON output is malformed or truncated ({exc})", command,
                             tail(text)) from exc


def parse(text: str, patterns: Iterable[str] | None = None, command: Sequence[str] | None = None, instance: int = 0) -> list[Measurement]:
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
                raise BenchmarkError(f"fio job {name!r} failed with error {job['error']}", command,
                                     tail(text))
            if name not in _DIRECTION:
                continue
            side = job[_DIRECTION[name]]
            if not side.get("total_ios") and not side.get("io_bytes"):
                raise BenchmarkError(f"fio job {name!r} did no I/O", command, tail(text))
            clat = side.get("clat_ns", {}).get("mean")
            rows += [Measurement(f"{name}_iops", float(side["iops"]), "IO/s", instance),
                     Measurement(f"{name}_bw_mib_per_s", float(side["bw_bytes"]) / 1048576, "MiB/s",
                                 instance)]
            if clat is not None:
                rows.append(Measurement(f"{name}_lat_mean_us", float(clat) / 1000, "us", instance))
            seen.add(name)
    except (KeyError, TypeError, ValueError) as exc:
        raise BenchmarkError(f"fio JSON lacks an expected field ({exc!r})", command, tail(text)) from exc
    missing = [p for p in (patterns or []) if p not in seen]
    if missing:
        raise BenchmarkError(f"fio output has no result for {', '.join(missing)}", command, tail(text))
    if not rows:
        raise BenchmarkError("fio output has no seqread/seqwrite/randread/randwrite job", command,
                             tail(text))
    return rows


def parse_version(text: str) -> str:
    m = re.search(r"fio-([0-9]+(?:\.[0-9]+)*)", text or "")
    if not m:
        raise BenchmarkError("cannot read fio's version", "fio --version", tail(text))
    return m.group(1)


class Fio(Workload):
    """fio patterns on a file in the instance; see the module docstring."""

    name = "fio"
    response = "randread_iops"
    defaults = {"patterns": ["seqread", "seqwrite", "randread", "randwrite"], "size_mb": 64,
                "bs": "4k", "runtime_s": 1, "ioengine": "psync", "direct": 0, "iodepth": 1,
                "numjobs": 1, "timeout_s": 600}
    schema = {"patterns": StrList(tuple(PATTERNS)), "size_mb": Num(0, 10**7), "bs": SIZE,
              "runtime_s": Num(0, 86400), "ioengine": Str(pattern=r"[a-z0-9_]{1,32}"),
              "direct": Int(0, 1), "iodepth": Int(1, 65536), "numjobs": Int(1, 4096), "timeout_s": TIMEOUT}
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
        argv = ["fio", f"--filename={filename}", f"--size={int(size)}M", f"--bs={params['bs']}",
                f"--runtime={max(1, round(params['runtime_s']))}", "--time_based",
                f"--ioengine={params['ioengine']}", f"--direct={int(params['direct'])}",
                f"--iodepth={int(params['iodepth'])}", f"--numjobs={int(params['numjobs'])}",
                "--group_reporting", "--stonewall", "--output-format=json"]
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
