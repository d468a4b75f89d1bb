"""Memory bandwidth in the manner of STREAM (studies 000 and 004).

labkit's own kernel (``csrc/stream.c``, pthreads, compiled statically on the
controller and copied in) runs STREAM's four vector operations over three
double arrays and reports the best rate of each, in MB/s (10^6 bytes/s):

| metric | operation | unit |
|---|---|---|
| ``copy_mb_per_s`` | c = a | MB/s |
| ``scale_mb_per_s`` | b = s·c | MB/s |
| ``add_mb_per_s`` | c = a + b | MB/s |
| ``triad_mb_per_s`` (response) | a = b + s·c | MB/s |
| ``array_mib`` | size of each array in this run | MiB |

The arrays must be well above the last-level cache (STREAM's rule: each array
at least 4x the LLC). ``array_mb=None`` (default) reads the LLC size inside
the instance and uses 4x it, capped so the three arrays stay within 60% of the
instance's memory limit (the cap is then recorded through ``array_mib``).
Parameters: ``array_mb`` (MiB per array, or None), ``ntimes`` (passes per
kernel, first discarded; default 5), ``threads`` (None = vCPUs; make it a
factor to sweep 1..vcpus as study 000 did), ``timeout_s``, ``mergeable`` (default
false; true marks the arrays ``madvise(MADV_MERGEABLE)`` so that kernel same-page
merging can merge them: a native process's memory is never merged otherwise, so
a KSM study of STREAM needs it; the output's ``Mergeable memory:`` line says
whether the kernel accepted the mark), ``ksm_settle_s`` (default 0; with ``mergeable``, the
most seconds to wait after filling the arrays, before the first timed pass, until KSM has merged
half of their pages: ksmd merges a page only once it stayed unchanged between two scans, and
the timed passes rewrite every page, so without the wait KSM rarely merges anything in a run;
the pages merged are reported as ``ksm_settle_pages`` and the wait as ``ksm_settle_s``).

The parser also reads the output of McCalpin's reference ``stream.c``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core import cbuild
from ..errors import BenchmarkError, ConfigError, tail
from .base import Measurement, Workload, run_checked
from .params import THREADS, TIMEOUT, Bool, Int, Num
from .scaling import resolve_threads

if TYPE_CHECKING:
    from ..backends.base import Instance

KERNELS = ("copy", "scale", "add", "triad")
_ROW = re.compile(
    r"^\s*(Copy|Scale|Add|Triad):\s+([0-9]+(?:\.[0-9]+)?)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)", re.MULTILINE
)
_SIZE = re.compile(r"Array size = ([0-9]+)")
_SETTLE = re.compile(r"^KSM settle: ([0-9]+) pages merged of [0-9]+ after ([0-9.]+) s$", re.MULTILINE)
#: the header of the rate column: ``Best Rate MB/s`` (STREAM 5.10), ``Rate (MB/s)`` (5.x before),
#: ``Best Rate GB/s`` / ``Rate (GB/s)`` (variants that print GB/s), MiB/s and GiB/s in others
_RATE_HEADER = re.compile(r"^\s*Function\b.*?\bRate\s*\(?\s*([KMG]i?B)/s\s*\)?", re.MULTILINE | re.IGNORECASE)
#: a rate in the header's unit -> MB/s (10^6 bytes/s)
TO_MB_PER_S = {
    "kb": 1e-3,
    "mb": 1.0,
    "gb": 1e3,
    "kib": 1024 / 1e6,
    "mib": 1048576 / 1e6,
    "gib": 1073741824 / 1e6,
}
DEFAULT_LLC_BYTES = 32 * 1024 * 1024
MIN_ARRAY_MB = 16


def parse(text: str, command: Sequence[str] | None = None, instance: int = 0) -> list[Measurement]:
    """The four best rates (MB/s) and the array size from STREAM-format output.

    The rates are read in the unit the column header names (``Best Rate MB/s``, ``Rate (GB/s)``,
    MiB/s, GiB/s) and given in MB/s (10^6 bytes/s). Raises BenchmarkError when the header (so the
    unit) is missing, a kernel's row is missing (truncated output) or the run did not print
    "Solution Validates".
    """
    text = text or ""
    if "Failed Validation" in text or "Solution Validates" not in text:
        raise BenchmarkError(
            "STREAM did not validate its arrays (or its output is truncated)", command, tail(text)
        )
    header = _RATE_HEADER.search(text)
    if header is None:
        raise BenchmarkError(
            "STREAM output has no 'Function ... Rate (MB/s)' header line: the unit of its "
            "rates is unknown (expected MB/s, GB/s, MiB/s or GiB/s)",
            command,
            tail(text),
        )
    scale = TO_MB_PER_S[header.group(1).lower()]
    rates = {m.group(1).lower(): float(m.group(2)) * scale for m in _ROW.finditer(text)}
    missing = [k for k in KERNELS if k not in rates]
    if missing:
        raise BenchmarkError(f"STREAM output lacks the {', '.join(missing)} row(s)", command, tail(text))
    rows = [Measurement(f"{k}_mb_per_s", rates[k], "MB/s", instance) for k in KERNELS]
    size = _SIZE.search(text)
    if size:
        rows.append(Measurement("array_mib", int(size.group(1)) * 8 / 1048576, "MiB", instance))
    settle = _SETTLE.search(text)
    if settle:  # labkit's kernel with ksm_settle_s: what KSM merged before the timed passes
        rows.append(Measurement("ksm_settle_pages", float(settle.group(1)), "pages", instance))
        rows.append(Measurement("ksm_settle_s", float(settle.group(2)), "s", instance))
    return rows


def parse_cache_sizes(text: str) -> int:
    """Largest cache size in bytes from lines like ``32K`` / ``32768K`` / ``1M`` (sysfs format)."""
    best = 0
    for tok in (text or "").split():
        m = re.fullmatch(r"([0-9]+)([KMG]?)", tok.strip())
        if m:
            best = max(best, int(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2)])
    return best


def array_elements(array_mb: object, llc_bytes: int, memory_mb: int | None) -> int:
    """Elements per array: ``array_mb`` MiB if given, else 4 x LLC capped at 60% of memory / 3."""
    if array_mb is not None:
        if not isinstance(array_mb, (int, float)) or isinstance(array_mb, bool) or array_mb <= 0:
            raise ConfigError(f"stream: array_mb must be a positive number or None, got {array_mb!r}")
        return max(1000, int(array_mb * 1048576 // 8))
    size = 4 * (llc_bytes or DEFAULT_LLC_BYTES)
    if memory_mb:
        size = min(size, int(memory_mb * 1048576 * 0.6 / 3))
    size = max(size, MIN_ARRAY_MB * 1048576)
    return size // 8


class Stream(Workload):
    """STREAM copy/scale/add/triad bandwidth; see the module docstring."""

    name = "stream"
    response = "triad_mb_per_s"
    timed_metrics = ()
    length_param = "ntimes"
    defaults = {
        "array_mb": None,
        "ntimes": 5,
        "threads": None,
        "timeout_s": 900,
        "mergeable": False,
        "ksm_settle_s": 0,
    }
    schema = {
        "array_mb": Num(0, 10**7, none=True),
        "ntimes": Int(2, 10**4),
        "threads": THREADS,
        "timeout_s": TIMEOUT,
        "mergeable": Bool(),
        "ksm_settle_s": Num(0, 3600),
    }
    min_memory_mb = 128
    remote_path = "labkit-stream"

    def __init__(self, **params: object):
        super().__init__(**params)
        nt = self.params["ntimes"]
        if isinstance(nt, bool) or not isinstance(nt, int) or nt < 2:
            raise ConfigError(f"stream: ntimes must be an integer >= 2, got {nt!r}")
        array_elements(self.params["array_mb"], DEFAULT_LLC_BYTES, None)  # validates

    def prepare(self, instance: Instance) -> None:
        binary = cbuild.build("stream.c")
        instance.exec(["mkdir", "-p", instance.workdir], timeout=30)
        instance.put(binary, f"{instance.workdir}/{self.remote_path}")

    def llc_bytes(self, instance: Instance) -> int:
        res = instance.exec(
            ["sh", "-c", "cat /sys/devices/system/cpu/cpu0/cache/index*/size"], check=False, timeout=30
        )
        return parse_cache_sizes(res.stdout)

    def run(self, instance: Instance, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        threads = resolve_threads(params, "stream")
        ntimes = int(params["ntimes"])
        llc = self.llc_bytes(instance) if params["array_mb"] is None else 0
        n = array_elements(params["array_mb"], llc, getattr(instance.spec, "memory_mb", None))
        cmd = [f"{instance.workdir}/{self.remote_path}", str(n), str(ntimes), str(threads)]
        if params.get("mergeable"):  # madvise(MADV_MERGEABLE) on the arrays: KSM may merge them
            cmd.append("1")
            if params.get("ksm_settle_s"):
                cmd.append(str(int(round(float(params["ksm_settle_s"]) * 1000))))
        res = run_checked(instance, cmd, timeout=params.get("timeout_s"))
        return parse(res.stdout, cmd, instance.index)

    def version(self, instance: Instance) -> dict:
        return {"stream": "labkit-" + cbuild.build("stream.c").parent.name}
