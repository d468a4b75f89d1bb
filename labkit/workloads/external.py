"""PARSEC and the NAS Parallel Benchmarks: EXPERIMENTAL runners for binaries you bring.

labkit cannot download or build PARSEC 3.0 or NPB here, and does not ship
them. These runners take a path *inside the instance* where you have already
installed and built the suite (copy it into the image, or give the run your
host's install with the backends' ``mounts`` option, labkit.core.mounts: same path
on ``local``, a bind on ``docker``, a disk device on ``lxd``), run one
benchmark, and parse its standard output. They stay experimental: their parsers
are tested on output captured from small programs in labkit's tests
(tests/support/npb_like.c, an MPI/OpenMP kernel with a verification printing
NPB 3.4's report format; tests/support/parsec_like.c, a pthreads kernel printing
PARSEC's hooks lines), run through these workloads across instances, not on the
real suites.

PARSEC (study 000 used blackscholes, freqmine, vips, swaptions, streamcluster
and raytrace with 1-8 threads), through ``parsecmgmt`` or one built binary::

    Parsec(install_path="/opt/parsec-3.0", package="blackscholes", input="simsmall")
    # runs: <install_path>/bin/parsecmgmt -a run -p <package> -i <input> -n <threads> -c <config>
    Parsec(binary="/opt/parsec-3.0/pkgs/apps/swaptions/inst/amd64-linux.gcc-hooks/bin/swaptions",
           args="-ns 64 -sm 20000 -nt {threads}")
    # runs the binary with those arguments ({threads} = the run's threads) in the instance

Metrics: ``wall_time_s`` (the response: parsecmgmt's ``real`` time, or labkit's
timing of the binary), ``roi_time_s`` (the hooks' "Total time spent in ROI"; a
binary run directly must be a hooks build, ``-c gcc-hooks``, so that a truncated
run is told from a finished one) and ``threads`` when the program prints
"Number of threads: N" (swaptions does; a count other than the run's is an error).

NPB (study 003 used BT, SP, FT, IS, LU, CG, EP, MG)::

    Npb(install_path="/opt/NPB3.4.2/NPB3.4-OMP", benchmark="ep", klass="S")
    # runs: <install_path>/bin/<benchmark>.<klass>.x with OMP_NUM_THREADS=<threads>
    Npb(install_path="/opt/NPB3.4.2/NPB3.4-MPI", benchmark="ep", klass="S", ranks=4)
    # across the run's instances (network: private): mpirun on the host starts 4 ranks
    # over them (labkit.workloads.mpi.launch); the binary must be at that path in each
    Npb(install_path=..., benchmark="is", klass="A", mpirun="mpirun --allow-run-as-root -np {threads}")
    # MPI inside each instance, with a launcher prefix

Metrics: ``time_s`` (the response, "Time in seconds"), ``mops_total`` (Mop/s)
and ``processes`` / ``threads`` (the report's "Total processes" / "Total
threads"; one other than the run's ranks / threads is an error). A run whose
``Verification`` is not SUCCESSFUL, or whose report names another benchmark or
class than asked for, is a failed run.
"""

from __future__ import annotations

import re
import shlex

from ..errors import BenchmarkError, ConfigError, tail
from .base import Measurement, Workload, run_checked
from .mpi import launch, remove_launch_dir
from .params import NAME, PATH, THREADS, TIMEOUT, Int, Str
from .scaling import resolve_threads
from .template import fill

EXPERIMENTAL = True

_TIME = re.compile(r"^real\s+(?:([0-9]+)m)?([0-9]+(?:\.[0-9]+)?)s\s*$", re.MULTILINE)
_ROI = re.compile(r"Total time spent in ROI:\s*([0-9]+(?:\.[0-9]+)?)s")
_THREADS = re.compile(r"Number of threads:\s*([0-9]+)")


def _require_path(instance, path: str, what: str, hint: str) -> None:
    res = instance.exec(["test", "-e", path], check=False, timeout=30)
    if not res.ok:
        raise BenchmarkError(
            f"{what} not found at {path!r} in {instance.name}. labkit does not download or build "
            f"it: install it yourself and pass install_path ({hint}). This runner is experimental."
        )


def _count(name: str, found: int, wanted: int | None, command, text: str) -> None:
    if wanted is not None and found != wanted:
        raise BenchmarkError(
            f"the report says {found} {name}, the run asked for {wanted}: "
            "not the configuration the run records",
            command,
            tail(text),
        )


def _hooks_rows(text: str, command, instance: int, threads: int | None) -> list[Measurement]:
    rows = []
    roi = _ROI.search(text)
    if roi:
        rows.append(Measurement("roi_time_s", float(roi.group(1)), "s", instance))
    m = _THREADS.search(text)
    if m:
        _count("threads", int(m.group(1)), threads, command, text)
        rows.append(Measurement("threads", int(m.group(1)), "count", instance))
    return rows


def parse_parsec(text: str, command=None, instance: int = 0, threads: int | None = None) -> list[Measurement]:
    """Rows from ``parsecmgmt -a run`` output: ``wall_time_s`` (its ``real`` time), and
    ``roi_time_s`` / ``threads`` when the benchmark printed them (see the module docstring).
    BenchmarkError when it is not parsecmgmt output, is truncated, or ran another thread
    count than ``threads``."""
    text = text or ""
    if "[PARSEC]" not in text:
        raise BenchmarkError("not parsecmgmt output (no [PARSEC] lines)", command, tail(text))
    if "End of output" not in text:
        raise BenchmarkError("PARSEC output is truncated (no 'End of output' marker)", command, tail(text))
    m = _TIME.search(text)
    if not m:
        raise BenchmarkError("PARSEC output has no 'real' time line", command, tail(text))
    rows = [Measurement("wall_time_s", int(m.group(1) or 0) * 60 + float(m.group(2)), "s", instance)]
    return rows + _hooks_rows(text, command, instance, threads)


def parse_parsec_hooks(
    text: str, command=None, instance: int = 0, threads: int | None = None
) -> list[Measurement]:
    """Rows from the output of one PARSEC hooks build run directly: ``roi_time_s`` and
    ``threads`` when printed. BenchmarkError when there are no hooks lines (not a
    ``gcc-hooks`` build), no "[HOOKS] Terminating" (the run did not finish) or no ROI time
    (hooks built without timing), or another thread count than ``threads``."""
    text = text or ""
    if "[HOOKS]" not in text:
        raise BenchmarkError(
            "no [HOOKS] lines: a PARSEC binary run directly must be a hooks build "
            "(parsecmgmt -a build -c gcc-hooks)",
            command,
            tail(text),
        )
    if "[HOOKS] Terminating" not in text:
        raise BenchmarkError("PARSEC output is truncated (no '[HOOKS] Terminating')", command, tail(text))
    rows = _hooks_rows(text, command, instance, threads)
    if not rows or rows[0].metric != "roi_time_s":
        raise BenchmarkError(
            "PARSEC hooks output has no 'Total time spent in ROI' line (hooks built without ENABLE_TIMING?)",
            command,
            tail(text),
        )
    return rows


def parse_parsec_version(text: str) -> str:
    m = re.search(r"([0-9]+\.[0-9]+(?:[-.][0-9A-Za-z-]+)*)", text or "")
    return m.group(1) if m else "unknown"


def _npb_field(name: str, text: str, command) -> str:
    m = re.search(rf"^\s*{re.escape(name)}\s*=\s*(.+?)\s*$", text, re.MULTILINE)
    if not m:
        raise BenchmarkError(f"NPB output has no '{name}' line (truncated?)", command, tail(text))
    return m.group(1)


def parse_npb(text: str, command=None, instance: int = 0) -> tuple[list[Measurement], dict]:
    """(rows, info) from an NPB benchmark's report.

    rows: ``time_s`` and ``mops_total``; info: benchmark, class, version,
    threads/processes when printed. Raises BenchmarkError when the report is
    missing or truncated, or when verification did not succeed.
    """
    text = text or ""
    done = re.search(r"^\s*([A-Z]+(?:-MZ)?) Benchmark Completed", text, re.MULTILINE)
    if not done:
        raise BenchmarkError("NPB output has no 'Benchmark Completed' report", command, tail(text))
    try:
        seconds = float(_npb_field("Time in seconds", text, command))
        mops = float(_npb_field("Mop/s total", text, command))
    except ValueError as exc:
        raise BenchmarkError(f"NPB report has a non-numeric value ({exc})", command, tail(text)) from exc
    verification = _npb_field("Verification", text, command)
    if verification != "SUCCESSFUL":
        raise BenchmarkError(
            f"NPB verification {verification}: wrong result, not a measurement", command, tail(text)
        )
    info = {"benchmark": done.group(1), "class": _npb_field("Class", text, command)}
    v = re.search(r"^\s*Version\s*=\s*(\S+)", text, re.MULTILINE)
    if v:
        info["version"] = v.group(1)
    for key, label in (("threads", "Total threads"), ("processes", "Total processes")):
        m = re.search(rf"^\s*{label}\s*=\s*([0-9]+)", text, re.MULTILINE)
        if m:
            info[key] = int(m.group(1))
    return (
        [Measurement("time_s", seconds, "s", instance), Measurement("mops_total", mops, "Mop/s", instance)],
        info,
    )


def _expand(template: str, threads: int) -> list[str]:
    """``template`` with ``{threads}`` replaced (:func:`~.template.fill`), split like a shell
    would (no shell runs it)."""
    return shlex.split(fill(template, {"threads": threads}))


class Parsec(Workload):
    """EXPERIMENTAL. One PARSEC benchmark via ``parsecmgmt`` or one built binary; you bring it.

    Parameters: ``install_path`` (the PARSEC root inside the instance, holding
    ``bin/parsecmgmt``), ``package`` (``blackscholes``), ``input`` (``simsmall``;
    ``native`` is what study 000 used), ``config`` (parsecmgmt ``-c``, default
    ``gcc``), or instead ``binary`` (one benchmark executable, a hooks build, run
    directly) with ``args`` (its arguments; ``{threads}`` is the run's threads);
    ``threads`` (None = vCPUs), ``timeout_s`` (3600). One of ``install_path`` and
    ``binary`` is required. Rows: see the module docstring.
    """

    name = "parsec"
    response = "wall_time_s"
    timed_metrics = ("roi_time_s", "wall_time_s")
    length_param = "input"
    experimental = True
    defaults = {
        "install_path": None,
        "package": "blackscholes",
        "input": "simsmall",
        "threads": None,
        "config": "gcc",
        "binary": None,
        "args": "",
        "timeout_s": 3600,
    }
    schema = {
        "install_path": PATH,
        "package": NAME,
        "input": NAME,
        "threads": THREADS,
        "config": NAME,
        "binary": PATH,
        "args": Str(),
        "timeout_s": TIMEOUT,
    }
    min_memory_mb = 256

    def __init__(self, **params):
        super().__init__(**params)
        if not self.params["install_path"] and not self.params["binary"]:
            raise ConfigError(
                "parsec (experimental): parameter 'install_path' (or 'binary') is required "
                "— labkit does not ship PARSEC; install PARSEC 3.0 in the instance (or mount "
                "it) and pass its root, or one built benchmark binary"
            )

    def _mgmt(self, params) -> str:
        return f"{params['install_path'].rstrip('/')}/bin/parsecmgmt"

    def prepare(self, instance) -> None:
        if self.params["binary"]:
            _require_path(
                instance,
                self.params["binary"],
                "PARSEC benchmark binary",
                "binary: e.g. <parsec>/pkgs/apps/swaptions/inst/amd64-linux.gcc-hooks/bin/swaptions",
            )
        else:
            _require_path(
                instance,
                self._mgmt(self.params),
                "PARSEC's parsecmgmt",
                "the directory holding bin/parsecmgmt, e.g. /opt/parsec-3.0",
            )

    def run(self, instance, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        threads = resolve_threads(params, "parsec")
        if params["binary"]:
            argv = [params["binary"], *_expand(params["args"], threads)]
            res = run_checked(instance, argv, timeout=params.get("timeout_s"))
            rows = parse_parsec_hooks(res.stdout, argv, instance.index, threads)
            return [Measurement("wall_time_s", res.duration_s, "s", instance.index), *rows]
        argv = [
            self._mgmt(params),
            "-a",
            "run",
            "-p",
            str(params["package"]),
            "-i",
            str(params["input"]),
            "-n",
            str(threads),
            "-c",
            str(params["config"]),
        ]
        res = run_checked(instance, argv, timeout=params.get("timeout_s"))
        return parse_parsec(res.stdout + "\n" + res.stderr, argv, instance.index, threads)

    def version(self, instance) -> dict:
        if not self.params["install_path"]:
            return {
                "parsec": "unknown (a binary run directly)",
                "parsec_binary": self.params["binary"],
                "experimental": True,
            }
        root = shlex.quote(self.params["install_path"].rstrip("/"))
        res = instance.exec(
            ["sh", "-c", f"cat {root}/version 2>/dev/null || echo unknown"], check=False, timeout=30
        )
        return {
            "parsec": parse_parsec_version(res.stdout),
            "parsec_install": self.params["install_path"],
            "experimental": True,
        }


class Npb(Workload):
    """EXPERIMENTAL. One NAS Parallel Benchmark binary; you bring the built suite.

    Parameters: ``install_path`` (required: the NPB directory inside the
    instance that holds ``bin/``, e.g. ``/opt/NPB3.4.2/NPB3.4-OMP``),
    ``benchmark`` (``ep``; bt, cg, ft, is, lu, mg, sp...), ``klass`` (problem
    class, ``S``; ``class`` is a Python keyword), ``threads`` (None = vCPUs;
    sets OMP_NUM_THREADS, or ``{threads}`` in ``mpirun``), ``ranks`` (None: run
    in each instance; a number: that many MPI ranks across the run's instances,
    network private, mpirun on the host), ``mpirun`` (None, or a launcher prefix
    inside each instance such as ``"mpirun -np {threads}"``), ``binary`` (None =
    ``bin/<benchmark>.<klass>.x``), ``args`` (arguments to the binary; NPB's take
    none), ``timeout_s`` (3600). Rows: see the module docstring.
    """

    name = "npb"
    response = "time_s"
    timed_metrics = ("time_s",)
    length_param = "klass"
    experimental = True
    defaults = {
        "install_path": None,
        "benchmark": "ep",
        "klass": "S",
        "threads": None,
        "ranks": None,
        "mpirun": None,
        "binary": None,
        "args": "",
        "timeout_s": 3600,
    }
    schema = {
        "install_path": PATH,
        "benchmark": Str(pattern=r"[A-Za-z]{2}"),
        "klass": Str(pattern=r"[SWABCDEFswabcdef]"),
        "threads": THREADS,
        "ranks": Int(1, 4096, none=True),
        "mpirun": PATH,
        "binary": PATH,
        "args": Str(),
        "timeout_s": TIMEOUT,
    }
    min_memory_mb = 64

    def __init__(self, **params):
        super().__init__(**params)
        if not self.params["install_path"]:
            raise ConfigError(
                "npb (experimental): parameter 'install_path' is required — labkit does "
                "not ship the NAS Parallel Benchmarks; build them in the instance and "
                "pass the directory holding bin/"
            )
        self._seen_version: str | None = None

    def spans(self, params: dict) -> bool:
        """Across the run's instances when ``ranks`` is set."""
        return {**self.params, **params}.get("ranks") is not None

    def binary(self, params) -> str:
        if params.get("binary"):
            return params["binary"]
        bench = str(params["benchmark"]).lower()
        klass = str(params["klass"]).upper()
        return f"{params['install_path'].rstrip('/')}/bin/{bench}.{klass}.x"

    def prepare(self, instance) -> None:
        _require_path(
            instance,
            self.binary(self.params),
            "NPB binary",
            "the NPB directory whose bin/ holds <benchmark>.<class>.x; build it with "
            "'make <benchmark> CLASS=<class>'",
        )

    def _rows(self, text: str, argv, params, *, processes=None, threads=None) -> list[Measurement]:
        rows, info = parse_npb(text, argv, 0)
        if not params.get("binary"):
            bench, klass = str(params["benchmark"]).upper(), str(params["klass"]).upper()
            if info["benchmark"].split("-")[0] != bench or info["class"] != klass:
                raise BenchmarkError(
                    f"the report is of {info['benchmark']} class {info['class']}, the run "
                    f"asked for {bench} class {klass}",
                    argv,
                    tail(text),
                )
        for key, wanted in (("processes", processes), ("threads", threads)):
            if key in info:
                _count(key, info[key], wanted, argv, text)
                rows.append(Measurement(key, info[key], "count", 0))
        self._seen_version = info.get("version", self._seen_version)
        return rows

    def run(self, instance, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        threads = resolve_threads(params, "npb")
        argv = [self.binary(params), *shlex.split(params["args"])]
        if params.get("mpirun"):
            argv = shlex.split(fill(params["mpirun"], {"threads": threads, "vcpus": params["vcpus"]})) + argv
        res = run_checked(
            instance, argv, timeout=params.get("timeout_s"), env={"OMP_NUM_THREADS": str(threads)}
        )
        rows = self._rows(res.stdout, argv, params, threads=None if params.get("mpirun") else threads)
        return [Measurement(r.metric, r.value, r.unit, instance.index) for r in rows]

    def run_group(self, instances, params: dict) -> list[Measurement]:
        """``ranks`` MPI ranks of the binary across ``instances``; rows for instance 0."""
        params = {**self.params, **params}
        argv = [self.binary(params), *shlex.split(params["args"])]
        res, wdir, _took = launch(instances, argv, ranks=params["ranks"], timeout=params.get("timeout_s"))
        remove_launch_dir(instances, wdir)
        return self._rows(res.stdout, argv, params, processes=params["ranks"])

    def version(self, instance) -> dict:
        found = self._seen_version
        if found is None:
            m = re.search(r"NPB([0-9]+\.[0-9]+(?:\.[0-9]+)?)", self.params["install_path"])
            found = m.group(1) if m else "unknown (printed in each run's report)"
        return {"npb": found, "npb_install": self.params["install_path"], "experimental": True}


# -- redis-benchmark (read only: labkit does not run Redis) -------------------------------------
#: the columns of ``redis-benchmark --csv`` (Redis >= 6.2); before, each line held test and rps only
REDIS_COLUMNS = (
    "test",
    "rps",
    "avg_latency_ms",
    "min_latency_ms",
    "p50_latency_ms",
    "p95_latency_ms",
    "p99_latency_ms",
    "max_latency_ms",
)


def redis_metric(test: str) -> str:
    """A metric prefix from a redis-benchmark test name (``LRANGE_100 (first 100 elements)`` ->
    ``lrange_100``)."""
    head = test.split("(")[0].strip().lower()
    return re.sub(r"[^a-z0-9]+", "_", head).strip("_") or "test"


def parse_redis_csv(text: str, command=None, instance: int = 0) -> list[Measurement]:
    """Rows from one ``redis-benchmark --csv`` report: per test ``<test>_rps`` (requests/s) and,
    when the header names them (Redis >= 6.2), ``<test>_<avg|min|p50|p95|p99|max>_latency_ms``
    (ms). BenchmarkError naming the line for a row that is not ``"TEST","number",...``, a row
    shorter than the header, or a report with no row."""
    import csv
    import io

    rows: list[Measurement] = []
    header: list[str] | None = None
    seen: set[str] = set()
    for n, rec in enumerate(csv.reader(io.StringIO(text or "")), 1):
        if not rec or not "".join(rec).strip():
            continue
        if rec[0].strip().lower() == "test":
            header = [c.strip() for c in rec]
            bad = [c for c in header if c not in REDIS_COLUMNS]
            if bad:
                raise BenchmarkError(
                    f"redis-benchmark CSV line {n}: unknown column {bad[0]!r} (expected "
                    f"{', '.join(REDIS_COLUMNS)})",
                    command,
                    tail(text),
                )
            continue
        cols = header or list(REDIS_COLUMNS[:2])
        if len(rec) < len(cols):
            raise BenchmarkError(
                f"redis-benchmark CSV line {n}: {len(rec)} field(s), expected {len(cols)} "
                f"({', '.join(cols)}): truncated?",
                command,
                tail(text),
            )
        name = redis_metric(rec[0])
        if name in seen:
            raise BenchmarkError(
                f"redis-benchmark CSV line {n}: test {rec[0]!r} twice in one report", command, tail(text)
            )
        seen.add(name)
        for col, value in zip(cols[1:], rec[1:]):
            try:
                number = float(value)
            except ValueError:
                raise BenchmarkError(
                    f"redis-benchmark CSV line {n}: {col} = {value!r} is not a number", command, tail(text)
                ) from None
            if col == "rps":
                rows.append(Measurement(f"{name}_rps", number, "req/s", instance))
            else:
                rows.append(Measurement(f"{name}_{col}", number, "ms", instance))
    if not rows:
        raise BenchmarkError(
            'redis-benchmark CSV has no result row (\'"TEST","rps",...\')', command, tail(text)
        )
    return rows
