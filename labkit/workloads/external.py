"""PARSEC and the NAS Parallel Benchmarks: EXPERIMENTAL runners for binaries you bring.

labkit cannot download or build PARSEC 3.0 or NPB here, and does not ship
them. These runners take an ``install_path`` *inside the instance* where you
have already installed and built the suite (copy it into the image, or mount
it), run one benchmark, and parse its standard output. They are marked
experimental: their parsers are tested against the suites' documented output
formats, not against a run on every platform.

PARSEC (study 000 used blackscholes, freqmine, vips, swaptions, streamcluster
and raytrace with 1-8 threads)::

    Parsec(install_path="/opt/parsec-3.0", package="blackscholes", input="simsmall")
    # runs: <install_path>/bin/parsecmgmt -a run -p <package> -i <input> -n <threads>

Metrics: ``wall_time_s`` (the response: the ``real`` time parsecmgmt reports
for the benchmark) and, when the suite was built with hooks, ``roi_time_s``.

NPB (study 003 used BT, SP, FT, IS, LU, CG, EP, MG)::

    Npb(install_path="/opt/NPB3.4.2/NPB3.4-OMP", benchmark="ep", klass="S")
    # runs: <install_path>/bin/<benchmark>.<klass>.x with OMP_NUM_THREADS=<threads>
    Npb(install_path=..., benchmark="is", klass="A", mpirun="mpirun --allow-run-as-root -np {threads}")

Metrics: ``time_s`` (the response, "Time in seconds") and ``mops_total``
(Mop/s). A run whose ``Verification`` is not SUCCESSFUL is a failed run.
"""
from __future__ import annotations

import re
import shlex

from ..errors import BenchmarkError, ConfigError, tail
from .base import Measurement, Workload, run_checked
from .params import NAME, PATH, THREADS, TIMEOUT, Str
from .scaling import resolve_threads

EXPERIMENTAL = True

_TIME = re.compile(r"^real\s+(?:([0-9]+)m)?([0-9]+(?:\.[0-9]+)?)s\s*$", re.MULTILINE)
_ROI = re.compile(r"Total time spent in ROI:\s*([0-9]+(?:\.[0-9]+)?)s")


def _require_path(instance, path: str, what: str, hint: str) -> None:
    res = instance.exec(["test", "-e", path], check=False, timeout=30)
    if not res.ok:
        raise BenchmarkError(
            f"{what} not found at {path!r} in {instance.name}. labkit does not download or build "
            f"it: install it yourself and pass install_path ({hint}). This runner is experimental.")


def parse_parsec(text: str, command=None, instance: int = 0) -> list[Measurement]:
    """``wall_time_s`` (and ``roi_time_s`` if hooks printed it) from ``parsecmgmt -a run`` output."""
    text = text or ""
    if "[PARSEC]" not in text:
        raise BenchmarkError("not parsecmgmt output (no [PARSEC] lines)", command, tail(text))
    if "End of output" not in text:
        raise BenchmarkError("PARSEC output is truncated (no 'End of output' marker)", command,
                             tail(text))
    m = _TIME.search(text)
    if not m:
        raise BenchmarkError("PARSEC output has no 'real' time line", command, tail(text))
    rows = [Measurement("wall_time_s", int(m.group(1) or 0) * 60 + float(m.group(2)), "s", instance)]
    roi = _ROI.search(text)
    if roi:
        rows.append(Measurement("roi_time_s", float(roi.group(1)), "s", instance))
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
        raise BenchmarkError(f"NPB verification {verification}: wrong result, not a measurement",
                             command, tail(text))
    info = {"benchmark": done.group(1), "class": _npb_field("Class", text, command)}
    v = re.search(r"^\s*Version\s*=\s*(\S+)", text, re.MULTILINE)
    if v:
        info["version"] = v.group(1)
    for key, label in (("threads", "Total threads"), ("processes", "Total processes")):
        m = re.search(rf"^\s*{label}\s*=\s*([0-9]+)", text, re.MULTILINE)
        if m:
            info[key] = int(m.group(1))
    return ([Measurement("time_s", seconds, "s", instance),
             Measurement("mops_total", mops, "Mop/s", instance)], info)


class Parsec(Workload):
    """EXPERIMENTAL. One PARSEC benchmark via ``parsecmgmt``; you bring the built suite.

    Parameters: ``install_path`` (required: the PARSEC root inside the
    instance, holding ``bin/parsecmgmt``), ``package`` (``blackscholes``),
    ``input`` (``simsmall``; ``native`` is what study 000 used), ``threads``
    (None = vCPUs), ``config`` (parsecmgmt ``-c``, default ``gcc``),
    ``timeout_s`` (3600).
    """

    name = "parsec"
    response = "wall_time_s"
    experimental = True
    defaults = {"install_path": None, "package": "blackscholes", "input": "simsmall",
                "threads": None, "config": "gcc", "timeout_s": 3600}
    schema = {"install_path": PATH, "package": NAME, "input": NAME, "threads": THREADS, "config": NAME,
              "timeout_s": TIMEOUT}
    min_memory_mb = 256

    def __init__(self, **params):
        super().__init__(**params)
        if not self.params["install_path"]:
            raise ConfigError("parsec (experimental): parameter 'install_path' is required — labkit "
                              "does not ship PARSEC; install PARSEC 3.0 in the instance and pass its root")

    def _mgmt(self, params) -> str:
        return f"{params['install_path'].rstrip('/')}/bin/parsecmgmt"

    def prepare(self, instance) -> None:
        _require_path(instance, self._mgmt(self.params), "PARSEC's parsecmgmt",
                      "the directory holding bin/parsecmgmt, e.g. /opt/parsec-3.0")

    def run(self, instance, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        threads = resolve_threads(params, "parsec")
        argv = [self._mgmt(params), "-a", "run", "-p", str(params["package"]), "-i",
                str(params["input"]), "-n", str(threads), "-c", str(params["config"])]
        res = run_checked(instance, argv, timeout=params.get("timeout_s"))
        return parse_parsec(res.stdout + "\n" + res.stderr, argv, instance.index)

    def version(self, instance) -> dict:
        root = shlex.quote(self.params["install_path"].rstrip("/"))
        res = instance.exec(["sh", "-c", f"cat {root}/version 2>/dev/null || echo unknown"],
                            check=False, timeout=30)
        return {"parsec": parse_parsec_version(res.stdout), "parsec_install": self.params["install_path"],
                "experimental": True}


class Npb(Workload):
    """EXPERIMENTAL. One NAS Parallel Benchmark binary; you bring the built suite.

    Parameters: ``install_path`` (required: the NPB directory inside the
    instance that holds ``bin/``, e.g. ``/opt/NPB3.4.2/NPB3.4-OMP``),
    ``benchmark`` (``ep``; bt, cg, ft, is, lu, mg, sp...), ``klass`` (problem
    class, ``S``; ``class`` is a Python keyword), ``threads`` (None = vCPUs;
    sets OMP_NUM_THREADS, or ``{threads}`` in ``mpirun``), ``mpirun``
    (None, or a launcher prefix such as ``"mpirun -np {threads}"``),
    ``binary`` (None = ``bin/<benchmark>.<klass>.x``), ``timeout_s`` (3600).
    """

    name = "npb"
    response = "time_s"
    experimental = True
    defaults = {"install_path": None, "benchmark": "ep", "klass": "S", "threads": None,
                "mpirun": None, "binary": None, "timeout_s": 3600}
    schema = {"install_path": PATH, "benchmark": Str(pattern=r"[A-Za-z]{2}"),
              "klass": Str(pattern=r"[SWABCDEFswabcdef]"), "threads": THREADS, "mpirun": PATH,
              "binary": PATH, "timeout_s": TIMEOUT}
    min_memory_mb = 64

    def __init__(self, **params):
        super().__init__(**params)
        if not self.params["install_path"]:
            raise ConfigError("npb (experimental): parameter 'install_path' is required — labkit does "
                              "not ship the NAS Parallel Benchmarks; build them in the instance and "
                              "pass the directory holding bin/")
        self._seen_version: str | None = None

    def binary(self, params) -> str:
        if params.get("binary"):
            return params["binary"]
        bench = str(params["benchmark"]).lower()
        klass = str(params["klass"]).upper()
        return f"{params['install_path'].rstrip('/')}/bin/{bench}.{klass}.x"

    def prepare(self, instance) -> None:
        _require_path(instance, self.binary(self.params), "NPB binary",
                      "the NPB directory whose bin/ holds <benchmark>.<class>.x; build it with "
                      "'make <benchmark> CLASS=<class>'")

    def run(self, instance, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        threads = resolve_threads(params, "npb")
        argv = [self.binary(params)]
        if params.get("mpirun"):
            argv = shlex.split(str(params["mpirun"]).format(threads=threads, vcpus=params["vcpus"])) + argv
        res = run_checked(instance, argv, timeout=params.get("timeout_s"),
                          env={"OMP_NUM_THREADS": str(threads)})
        rows, info = parse_npb(res.stdout, argv, instance.index)
        self._seen_version = info.get("version", self._seen_version)
        return rows

    def version(self, instance) -> dict:
        found = self._seen_version
        if found is None:
            m = re.search(r"NPB([0-9]+\.[0-9]+(?:\.[0-9]+)?)", self.params["install_path"])
            found = m.group(1) if m else "unknown (printed in each run's report)"
        return {"npb": found, "npb_install": self.params["install_path"], "experimental": True}
