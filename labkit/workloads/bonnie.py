"""Bonnie++ (Debian ``bonnie++``): sequential block write, rewrite and read, random seeks;
study 004's disk test.

One run: ``bonnie++ -d <work dir> -s <size_mb> -r <ram_mb> -n <files> -f -q -u root -D`` (``-f``
skips the slow per-character tests; ``files`` 0, the default, skips the file-creation tests;
the file is at least twice ``ram_mb``, as bonnie++ requires). ``files`` > 0 runs them with that
many files (bonnie++ counts them in multiples of 1024: 25 means 25,600 files); seed 004 varied
the number of files over 25, 50 and 100 (section 7.3; it gives no unit). ``concurrency`` > 1
(``-c``) runs that many copies of the tests at once, seed 004's "four processes in parallel"
of the seeks (Figure 7.5). ``-D`` (``direct``, on by default) opens the
file with O_DIRECT so that the block tests measure the disk, not the page cache: on a host
with spare memory a buffered 256 MiB write ends before bonnie++ can time it. Set
``direct: false`` for the classic buffered run with a file of twice the host's RAM. Its CSV line (format 1.98, bonnie++ 2.00)
is read from the end: the 12 latencies, the 17 file-creation fields, then the 12
sequential fields ``putc, putc_cpu, put_block, put_block_cpu, rewrite, rewrite_cpu,
getc, getc_cpu, get_block, get_block_cpu, seeks, seeks_cpu`` (the field order of
bonnie++'s ``BonTimer::PrintHeader``).

Metrics: ``write_kib_per_s``, ``rewrite_kib_per_s``, ``read_kib_per_s`` (KiB/s),
``seeks_per_s`` (seeks/s); with ``files`` > 0 also ``create_per_s``, ``stat_per_s``,
``delete_per_s`` (sequential) and ``random_create_per_s``, ``random_stat_per_s``,
``random_delete_per_s`` (files/s, the 17 file-creation fields before the latencies). bonnie++ prints ``+++++`` for a test that ended too fast
to time (e.g. a read served from the page cache): that metric is left out of the run,
never stored as a number; an untimed block write (the response) fails the run with a
BenchmarkError saying what to change. Parameters: ``size_mb`` (256), ``ram_mb`` (None:
half of ``size_mb``), ``direct`` (true), ``files`` (0: none; at most 1000), ``concurrency``
(1 to 64, default 1), ``timeout_s`` (1800). Response:
``write_kib_per_s``.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import BenchmarkError, ConfigError, tail
from .base import Measurement, Workload, require_tool, run_checked
from .params import TIMEOUT, Bool, Int

if TYPE_CHECKING:
    from ..backends.base import Instance

#: offset from the end of the CSV line of each sequential result -> (metric, unit)
_FROM_END = {
    -39: ("write_kib_per_s", "KiB/s"),
    -37: ("rewrite_kib_per_s", "KiB/s"),
    -33: ("read_kib_per_s", "KiB/s"),
    -31: ("seeks_per_s", "seeks/s"),
}
#: the file-creation results (``-n`` > 0), offsets from the end: the 6 rates of
#: ``seq_create, seq_stat, seq_del, ran_create, ran_stat, ran_del``, each followed by its CPU %
_FILES_FROM_END = {
    -24: "create_per_s",
    -22: "stat_per_s",
    -20: "delete_per_s",
    -18: "random_create_per_s",
    -16: "random_stat_per_s",
    -14: "random_delete_per_s",
}
_FIELDS_AFTER_SEEKS = 12 + 17


def parse(text: str, command: Sequence[str] | None = None, instance: int = 0) -> list[Measurement]:
    """Measurements from bonnie++'s ``-q`` CSV output (the line starting with a format
    version). Raises BenchmarkError when there is no such line or a value is not a number."""
    lines = [line for line in (text or "").splitlines() if line[:1].isdigit() and "," in line]
    if not lines:
        raise BenchmarkError("bonnie++ printed no CSV result line", command, tail(text))
    fields = lines[-1].split(",")
    if len(fields) < 12 + _FIELDS_AFTER_SEEKS + 5:
        raise BenchmarkError(f"bonnie++ CSV line has {len(fields)} fields, too few", command, tail(text))
    rows = []
    wanted = {**_FROM_END, **{k: (m, "files/s") for k, m in _FILES_FROM_END.items()}}
    for offset, (metric, unit) in wanted.items():
        raw = fields[offset].strip()
        if not raw or raw.startswith("+"):  # skipped (-f, -n 0) or too fast to time
            continue
        try:
            rows.append(Measurement(metric, float(raw), unit, instance))
        except ValueError:
            raise BenchmarkError(f"bonnie++ {metric}: {raw!r} is not a number", command, tail(text)) from None
    if not rows:
        raise BenchmarkError(
            "bonnie++ timed none of its tests (all '+++++': make size_mb larger)", command, tail(text)
        )
    if rows[0].metric != "write_kib_per_s":
        raise BenchmarkError(
            "bonnie++ did not time the block write ('+++++': it ended too fast); "
            "make size_mb larger or keep direct: true",
            command,
            tail(text),
        )
    return rows


class Bonnie(Workload):
    """bonnie++ block I/O in the instance's work directory; see the module docstring."""

    name = "bonnie"
    response = "write_kib_per_s"
    timed_metrics = ()
    length_param = "size_mb"
    defaults = {
        "size_mb": 256,
        "ram_mb": None,
        "direct": True,
        "files": 0,
        "concurrency": 1,
        "timeout_s": 1800,
    }
    schema = {
        "size_mb": Int(2, 10**7),
        "ram_mb": Int(1, 10**7, none=True),
        "direct": Bool(),
        "files": Int(0, 1000),
        "concurrency": Int(1, 64),
        "timeout_s": TIMEOUT,
    }
    min_memory_mb = 32

    def prepare(self, instance: Instance) -> None:
        require_tool(instance, "bonnie++", "bonnie++")

    def command(self, params: dict, directory: str) -> list[str]:
        size = int(params["size_mb"])
        ram = int(params["ram_mb"]) if params.get("ram_mb") is not None else size // 2
        if size < 2 * ram:
            raise ConfigError(f"bonnie: size_mb ({size}) must be at least twice ram_mb ({ram})")
        files = int(params.get("files") or 0)
        copies = int(params.get("concurrency") or 1)
        return (
            [
                "bonnie++",
                "-d",
                directory,
                "-s",
                str(size),
                "-r",
                str(ram),
                "-n",
                str(files),
                "-f",
                "-q",
                "-u",
                "root",
                "-m",
                "labkit",
            ]
            + (["-c", str(copies)] if copies > 1 else [])
            + (["-D"] if params.get("direct", True) else [])
        )

    def run(self, instance: Instance, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        d = f"{instance.workdir}/bonnie"
        argv = self.command(params, d)
        try:
            run_checked(instance, ["mkdir", "-p", d], timeout=60)
            res = run_checked(instance, argv, timeout=params.get("timeout_s"))
        finally:
            instance.exec(["rm", "-rf", d], check=False, timeout=120)
        return parse(res.stdout, shlex.join(argv), instance.index)

    def version(self, instance: Instance) -> dict:
        res = instance.exec(["sh", "-c", "dpkg-query -W -f '${Version}' bonnie++"], check=False, timeout=30)
        return {"bonnie++": res.stdout.strip() or "unknown"}
