"""MPI programs across a run's instances (Debian's ``openmpi-bin``), and HPCC.

``mpirun`` runs on this host, the host end of the run's private network; it starts
one ``orted`` per instance through a launch agent that labkit writes (a small
script mapping ``inst<i>``/its address to the backend's "run this inside instance
i" command: ``lkns enter`` (cgroup, namespaces, no capabilities) on ``local``, ``docker exec -i``, ``lxc
exec``), so containers need no sshd. Its out-of-band and MPI traffic is limited
to the run's subnet (``oob_tcp_if_include``, ``btl_tcp_if_include``; ``btl
tcp,self``). OpenMPI must be the same version on the host and in the instances
(the ``local`` backend's instances use the host's; containers need an image with
``openmpi-bin`` and ``hpcc``: the ``mpi`` image variant, ``labkit images build --profile
mpi``, used with the backend option ``image=labkit/debian:12-mpi`` (Docker) or
``image=labkit-debian-12-mpi`` (LXD)).

* :class:`Mpi` (``mpi``): any MPI program; ``program`` (a command line, split
  like a shell would, no shell run), ``ranks`` (None: one per instance),
  ``parser`` (``none``: only ``wall_time_s``; ``hpcc``; or ``module:function``
  taking the program's stdout and returning Measurement rows), ``timeout_s``.
* :class:`Hpcc` (``hpcc``): the HPC Challenge suite (Debian ``hpcc``), seed
  000's LINPACK and seed 003's ping-pong: ``n`` (HPL problem size, 1000),
  ``ranks``. Metrics: ``hpl_gflops`` (GFLOP/s), ``star_stream_triad_gb_per_s``
  and ``single_stream_triad_gb_per_s`` (GB/s), ``pingpong_latency_us`` (avg,
  µs), ``pingpong_bandwidth_gb_per_s`` (avg, GB/s), ``random_ring_latency_us``
  (µs), ``random_ring_bandwidth_gb_per_s`` (GB/s), ``wall_time_s``. A summary
  without ``Success=1`` is a failed run. Its run length is HPL's own seconds
  (:func:`hpl_seconds`), which grow as ``n``³; HPCC sizes its RandomAccess, STREAM
  and FFT tests from the memory of the HPL problem (``n``² · 8 bytes per process),
  so a larger ``n`` lengthens the whole suite too: :mod:`labkit.studies.hpl_length`
  projects what a campaign would take at the ``n`` that times HPL long enough.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import secrets
import shlex
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..backends.base import ExecResult
from ..errors import BenchmarkError, ConfigError, tail
from .base import Measurement, Workload, require_tool
from .params import TIMEOUT, Int, Str

if TYPE_CHECKING:
    from ..backends.base import Instance
    from ..backends.private_network import Network

log = logging.getLogger("labkit.mpi")
#: OpenMPI's words when a daemon died before it reported (help-errmgr-base.txt)
DAEMON_FAILED = "unable to reliably start one or more daemons"

#: summary keys of hpccoutf.txt -> (metric, unit, factor)
HPCC_METRICS = {
    "HPL_Tflops": ("hpl_gflops", "GFLOP/s", 1000.0),
    "StarSTREAM_Triad": ("star_stream_triad_gb_per_s", "GB/s", 1.0),
    "SingleSTREAM_Triad": ("single_stream_triad_gb_per_s", "GB/s", 1.0),
    "AvgPingPongLatency_usec": ("pingpong_latency_us", "us", 1.0),
    "AvgPingPongBandwidth_GBytes": ("pingpong_bandwidth_gb_per_s", "GB/s", 1.0),
    "RandomlyOrderedRingLatency_usec": ("random_ring_latency_us", "us", 1.0),
    "RandomlyOrderedRingBandwidth_GBytes": ("random_ring_bandwidth_gb_per_s", "GB/s", 1.0),
}
#: RandomAccess (GUPS) keys of the summary, read when present (a run may skip RandomAccess)
HPCC_GUPS = {
    "MPIRandomAccess_GUPs": ("mpi_random_access_gups", "GUP/s", 1.0),
    "StarRandomAccess_GUPs": ("star_random_access_gups", "GUP/s", 1.0),
    "SingleRandomAccess_GUPs": ("single_random_access_gups", "GUP/s", 1.0),
}
_HPCC_INPUT = """HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
8            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
{n}         Ns
1            # of NBs
80           NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
{p}            Ps
{q}            Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
##### This line (no. 32) is ignored (it serves as a separator). ######
0                      		Number of additional problem sizes for PTRANS
1200 10000 30000        	values of N
0                       	number of additional blocking sizes for PTRANS
40 9 8 13 13 20 16 32 64       	values of NB
"""


def hpl_seconds(metrics: dict[str, float], params: dict) -> float | None:
    """The seconds HPL itself computed in a run: its operation count ``2/3 N^3 + 3/2 N^2`` (the one
    HPL divides by its time to report Gflops: ``HPL_pdtest.c`` of HPL 2.3, netlib.org/benchmark/hpl)
    over the run's ``hpl_gflops``; None without both. ``hpcc`` also runs DGEMM, STREAM, PTRANS,
    RandomAccess and FFT, so its process time is not HPL's."""
    n, gflops = params.get("n"), metrics.get("hpl_gflops")
    if (
        isinstance(n, bool)
        or not isinstance(n, (int, float))
        or not isinstance(gflops, (int, float))
        or not gflops > 0
    ):
        return None
    return (2 / 3 * n**3 + 3 / 2 * n**2) / (gflops * 1e9)


def hpcc_input(n: int, ranks: int) -> str:
    """An ``hpccinf.txt`` for HPL size ``n`` on a P x Q grid of ``ranks`` (P <= Q, as square as possible)."""
    p = max(d for d in range(1, int(ranks**0.5) + 1) if ranks % d == 0)
    return _HPCC_INPUT.format(n=n, p=p, q=ranks // p)


def parse_hpcc(text: str, command: str | Sequence[str] | None = None, instance: int = 0) -> list[Measurement]:
    """Rows from the summary section of ``hpccoutf.txt`` (see the module docstring)."""
    m = re.search(r"Begin of Summary section\.(.*?)End of Summary section\.", text or "", re.S)
    if not m:
        raise BenchmarkError("hpcc output has no summary section (truncated?)", command, tail(text))
    summary = dict(re.findall(r"^(\w+)=(\S+)$", m.group(1), re.M))
    if summary.get("Success") != "1":
        raise BenchmarkError("hpcc reports Success != 1 (a failed verification)", command, tail(text))
    rows = []
    for key, (metric, unit, factor) in HPCC_METRICS.items():
        if key not in summary:
            raise BenchmarkError(f"hpcc summary lacks {key}", command, tail(text))
        try:
            rows.append(Measurement(metric, float(summary[key]) * factor, unit, instance))
        except ValueError as exc:
            raise BenchmarkError(
                f"hpcc summary {key}={summary[key]!r} is not a number", command, tail(text)
            ) from exc
    for key, (metric, unit, factor) in HPCC_GUPS.items():
        if key in summary:
            try:
                rows.append(Measurement(metric, float(summary[key]) * factor, unit, instance))
            except ValueError as exc:
                raise BenchmarkError(
                    f"hpcc summary {key}={summary[key]!r} is not a number", command, tail(text)
                ) from exc
    return rows


@runtime_checkable
class LaunchTarget(Protocol):
    """An instance MPI can start ranks in: its backend gives it ``host_command`` (see the
    module docstring)."""

    index: int
    address: str | None

    def host_command(self, argv: list[str]) -> list[str]: ...


def network_of(instances: Sequence[Instance]) -> Network:
    """The private network the ``instances`` are on; ConfigError when they are on none."""
    network = instances[0].network if instances else None
    if network is None:
        raise ConfigError("MPI across instances needs network: private")
    return network


#: what runs the orted's command line in an instance: $0 = the instance's own OpenMPI session
#: root (made first), $1 = the command line
_INSIDE = 'mkdir -p "$0" && export OMPI_MCA_orte_tmpdir_base="$0" && eval "$1"'


def agent_script(instances: Sequence[LaunchTarget], wdir: str) -> str:
    """The launch agent: ``agent <inst name or address> <command...>`` runs the command (a shell
    command line, as OpenMPI writes it for a remote shell) inside that instance.

    Each instance's orted (and its ranks) keeps its session files under ``<wdir>/ompi<i>``
    (``orte_tmpdir_base``), not in the shared ``/tmp/ompi.<hostname>.<uid>``: ``local``
    instances (and ``ssh`` instances on one machine) share this host's /tmp and hostname, so
    their daemons and mpirun's would otherwise share one session tree, which OpenMPI assumes
    belongs to one daemon per node."""
    lines = [
        "#!/bin/sh",
        "# labkit MPI launch agent: $1 = instance, the rest = a shell command",
        # q: one word quoted for a remote shell (ssh hands its last word to the far side's shell)
        r"""q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }""",
        "h=$1; shift",
        'case "$h" in',
    ]
    for inst in instances:
        inside = shlex.join(inst.host_command(["sh", "-c", _INSIDE, f"{wdir}/ompi{inst.index}"]))
        word = '"$(q "$*")"' if getattr(inst, "remote_shell", False) else '"$*"'
        lines.append(f"  {inst.address}|inst{inst.index}) exec {inside} {word} ;;")
    lines += ["esac", 'echo "labkit MPI agent: unknown instance $h" >&2', "exit 1"]
    return "\n".join(lines) + "\n"


#: seconds for the ranks to start once every orted has reported (OpenMPI's
#: ``orte_startup_timeout``; it does not cover the daemons' own start, see mpirun_argv)
STARTUP_TIMEOUT_S = 120


def mpirun_argv(
    instances: Sequence[Instance], agent: str, ranks: int, wdir: str, program: list[str]
) -> list[str]:
    """``mpirun`` on the host for ``ranks`` ranks spread over ``instances`` (round robin slots),
    launched by ``agent``, its traffic held to the run's subnet (the ranks' own traffic to the
    data subnet when the network bonds NICs: ``nics`` > 1).

    The orteds stay attached to their launch agent (``orte_leave_session_attached``): by
    default a daemon started without tree spawn daemonizes, its agent returns 0 at once and
    mpirun then waits for a callback that, if the daemon dies first, never comes (no
    timeout covers it: a CI run and a campaign here hung 600 s in that state). Attached, a
    daemon that dies ends its agent with its status, mpirun fails the launch at once and
    the daemon's stderr is in mpirun's output.

    Idle ranks yield the CPU (``mpi_yield_when_idle``). Each instance looks like its own node
    with free slots, so OpenMPI would otherwise spin in its receive loop; instances that share
    a machine's cores (every backend here, and VMs on one host) then wait for a scheduler tick
    to hand the CPU to the peer, daemon or kernel that delivers the message: an 8-byte
    ping-pong between two network namespaces over one veth measured 4.0 ms one way on the
    2-core machine (one 250 Hz tick), 23 us yielding. On dedicated hosts a yield with nothing
    else to run returns at once."""
    network = network_of(instances)
    subnet = network.subnet  # mpirun (on the host) <-> orteds
    peers = network.peer_subnet  # rank <-> rank: the bonded NICs, if any
    slots = [
        ranks // len(instances) + (1 if i < ranks % len(instances) else 0) for i in range(len(instances))
    ]
    hosts = ",".join(f"{inst.address}:{s}" for inst, s in zip(instances, slots) if s)
    return [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        str(ranks),
        "--host",
        hosts,
        # "sh agent": the orteds check that the agent's first word exists in their instance too
        "--mca",
        "plm_rsh_agent",
        f"sh {agent}",
        "--mca",
        "plm_rsh_no_tree_spawn",
        "1",
        "--mca",
        "orte_leave_session_attached",
        "1",
        "--mca",
        "mpi_yield_when_idle",
        "1",
        "--mca",
        "oob_tcp_if_include",
        subnet,
        "--mca",
        "btl",
        "tcp,self",
        "--mca",
        "btl_tcp_if_include",
        peers,
        "--mca",
        "orte_startup_timeout",
        str(STARTUP_TIMEOUT_S),
        "--wdir",
        wdir,
        *program,
    ]


def new_wdir() -> str:
    """A new work directory name for :func:`launch`: ``/tmp/labkit-mpi-<8 random hex>``."""
    return f"/tmp/labkit-mpi-{secrets.token_hex(4)}"


def launch(
    instances: Sequence[Instance],
    program: list[str],
    *,
    ranks: int,
    timeout: float | None,
    files: dict | None = None,
    binaries: dict | None = None,
    wdir: str | None = None,
) -> tuple[ExecResult, str, float]:
    """Run ``program`` as ``ranks`` MPI ranks over ``instances`` (on a private network);
    ``files`` (name -> text) are written and ``binaries`` (name -> path on this host) copied
    (mode 0755) into the ranks' work directory in every instance first. ``wdir``: that
    directory (default: a new ``/tmp/labkit-mpi-<random>``). Returns (ExecResult of mpirun, work
    directory, seconds)."""
    from ..backends.host_end import HostEnd

    network = network_of(instances)
    targets = [i for i in instances if isinstance(i, LaunchTarget)]
    if len(targets) < len(instances):
        raise ConfigError(f"the {instances[0].backend.name} backend cannot start MPI ranks in its instances")
    if shutil.which("mpirun") is None:
        raise BenchmarkError("mpirun is not installed on this host (apt-get install openmpi-bin)")
    wdir = wdir or new_wdir()
    for inst in instances:
        inst.exec(["mkdir", "-p", wdir], timeout=30)
        for name, local in (binaries or {}).items():
            inst.put(local, f"{wdir}/{name}", 0o755)
        for name, text in (files or {}).items():
            with tempfile.NamedTemporaryFile("w", delete=False) as tmp:
                tmp.write(text)
            try:
                inst.put(tmp.name, f"{wdir}/{name}", 0o644)
            finally:
                os.unlink(tmp.name)
    host = network.backend.host_end(network)
    if not isinstance(host, HostEnd):
        host.destroy()
        raise ConfigError(
            f"MPI over network {network.name}: mpirun runs on this machine, which is not "
            f"on that network (its host is the {network.backend.name} backend's host); "
            "run MPI on a backend whose instances are on this machine"
        )
    try:
        agent = os.path.join(host.workdir, "agent")
        with open(agent, "w") as f:
            f.write(agent_script(targets, wdir))
        os.chmod(agent, 0o700)
        argv = mpirun_argv(instances, agent, ranks, wdir, program)
        t0 = t = time.perf_counter()
        res = host.exec(argv, timeout=timeout, check=False)
        if not res.ok and DAEMON_FAILED in res.stdout + res.stderr:
            # an orted died at start: no rank ran, so the job is launched once more; a second
            # failure is the error. (Local instances that shared one session tree lost a daemon
            # in 18 of 200 launches, exit 139; with a session root per instance, 0 of 200.)
            log.warning("mpirun: a daemon died at start (exit %s); launching once more", res.exit_code)
            t = time.perf_counter()
            res = host.exec(
                argv, timeout=None if timeout is None else max(1.0, timeout - (t - t0)), check=False
            )
        took = time.perf_counter() - t
    finally:
        host.destroy()
    if not res.ok:
        raise BenchmarkError(
            f"mpirun failed (exit {res.exit_code})", argv, tail(res.stdout + "\n" + res.stderr)
        )
    return res, wdir, took


def remove_launch_dir(instances: Sequence[Instance], wdir: str) -> None:
    """Remove a launch's work dir (``wdir``, made by :func:`launch`) from every instance."""
    for inst in instances:
        inst.exec(["rm", "-rf", wdir], check=False, timeout=30)


def _ranks(params, instances) -> int:
    return params.get("ranks") or len(instances)


def _hook(spec: str):
    if spec == "none":
        return None
    if spec == "hpcc":
        return parse_hpcc
    module, _, fn = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), fn)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"mpi parser {spec!r}: cannot import {fn!r} from {module!r} ({exc})") from exc


class MpiBase(Workload):
    """What every workload that runs one MPI job across a run's instances shares: it spans the
    instances, needs ``orted`` (openmpi-bin) in each, and reports OpenMPI's version."""

    response = "wall_time_s"
    min_memory_mb = 128

    def spans(self, params: dict) -> bool:
        return True

    def prepare(self, instance) -> None:
        require_tool(instance, "orted", "openmpi-bin")

    def run(self, instance, params):
        raise ConfigError(f"workload {self.name!r} runs across the run's instances (network: private)")

    def version(self, instance) -> dict:
        res = instance.exec(["sh", "-c", "mpirun --version 2>/dev/null | head -1"], check=False, timeout=30)
        m = re.search(r"([0-9]+\.[0-9]+(?:\.[0-9]+)?)", res.stdout)
        return {"openmpi": m.group(1) if m else None}


class Mpi(MpiBase):
    """Any MPI program across the run's instances; see the module docstring."""

    name = "mpi"
    timed_metrics = ("wall_time_s",)
    length_param = None
    defaults = {"program": "", "ranks": None, "parser": "none", "timeout_s": 600}
    schema = {
        "program": Str(),
        "ranks": Int(1, 4096, none=True),
        "parser": Str(pattern=r"none|hpcc|[A-Za-z_][\w.]*:[A-Za-z_]\w*"),
        "timeout_s": TIMEOUT,
    }

    def __init__(self, **params):
        super().__init__(**params)
        _hook(self.params["parser"])  # fail now on a hook that cannot be imported

    def run_group(self, instances, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        program = shlex.split(params["program"])
        if not program:
            raise ConfigError("workload 'mpi': parameter 'program' (the MPI command line) is required")
        res, wdir, took = launch(
            instances, program, ranks=_ranks(params, instances), timeout=params["timeout_s"]
        )
        remove_launch_dir(instances, wdir)
        hook = _hook(params["parser"])
        rows = [Measurement("wall_time_s", took, "s", 0)]
        return rows + (list(hook(res.stdout)) if hook else [])


class Hpcc(MpiBase):
    """HPC Challenge across the run's instances; see the module docstring."""

    name = "hpcc"
    response = "hpl_gflops"
    timed_metrics = ("wall_time_s",)
    length_param = "n"

    @classmethod
    def measured_seconds(cls, metrics: dict[str, float], params: dict) -> float | None:
        """HPL's own seconds (:func:`hpl_seconds`), not the whole HPCC suite's."""
        return hpl_seconds(metrics, params)

    defaults = {"n": 1000, "ranks": None, "timeout_s": 1800}
    schema = {"n": Int(100, 200_000), "ranks": Int(1, 4096, none=True), "timeout_s": TIMEOUT}

    def prepare(self, instance) -> None:
        super().prepare(instance)
        require_tool(instance, "hpcc", "hpcc")

    def run_group(self, instances, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        ranks = _ranks(params, instances)
        _, wdir, took = launch(
            instances,
            ["hpcc"],
            ranks=ranks,
            timeout=params["timeout_s"],
            files={"hpccinf.txt": hpcc_input(params["n"], ranks)},
        )
        try:
            out = instances[0].exec(["cat", f"{wdir}/hpccoutf.txt"], timeout=30).stdout
        finally:
            remove_launch_dir(instances, wdir)
        return parse_hpcc(out, ["hpcc"], 0) + [Measurement("wall_time_s", took, "s", 0)]
