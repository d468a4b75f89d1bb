"""LINPACK (HPL) in each instance on its own, as seed 000 ran it: one execution per instance,
all of a run's instances at the same time (its "4 simultaneous executions" in the shared scenario).

It runs Debian's ``hpcc`` as a single MPI process (OpenMPI singleton, no ``mpirun``) with a
1 x 1 grid, so nothing crosses instances; for one HPL *across* instances use the ``hpcc``
workload. HPL's BLAS uses ``threads`` threads (None: the instance's vCPUs; set through
``OMP_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS``).

Parameters: ``n`` (HPL problem size, default 1000), ``threads``, ``timeout_s``.
Metrics (per instance): ``hpl_gflops`` (response, GFLOP/s), ``single_stream_triad_gb_per_s``
(GB/s) and ``wall_time_s``.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from .base import Measurement, Workload, require_tool, run_checked
from .mpi import hpcc_input, hpl_seconds, parse_hpcc
from .params import THREADS, TIMEOUT, Int

if TYPE_CHECKING:
    from ..backends.base import Instance

KEEP = ("hpl_gflops", "single_stream_triad_gb_per_s")


class Linpack(Workload):
    name = "linpack"
    response = "hpl_gflops"
    timed_metrics = ("wall_time_s",)
    length_param = "n"
    defaults = {"n": 1000, "threads": None, "timeout_s": 1800}
    schema = {"n": Int(100, 200_000), "threads": THREADS, "timeout_s": TIMEOUT}
    min_memory_mb = 64

    @classmethod
    def measured_seconds(cls, metrics: dict[str, float], params: dict) -> float | None:
        """HPL's own seconds (:func:`labkit.workloads.mpi.hpl_seconds`): ``wall_time_s`` is the whole
        HPCC suite's process, of which HPL at n=500 was 0.017 s of 0.42 s in a native run here (2026-11)."""
        return hpl_seconds(metrics, params)

    def prepare(self, instance: Instance) -> None:
        require_tool(instance, "hpcc", "hpcc")

    def run(self, instance: Instance, params: dict) -> list[Measurement]:
        threads = params.get("threads") or params["vcpus"]
        wdir = f"{instance.workdir}/labkit-linpack"
        script = (
            f"rm -rf {shlex.quote(wdir)} && mkdir -p {shlex.quote(wdir)} && cd {shlex.quote(wdir)} && "
            f"printf '%s' {shlex.quote(hpcc_input(params['n'], 1))} > hpccinf.txt && "
            "hpcc >/dev/null && cat hpccoutf.txt"
        )
        env = {
            "OMP_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "OMPI_ALLOW_RUN_AS_ROOT": 1,
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": 1,
            "OMPI_MCA_btl": "self",
        }
        res = run_checked(instance, ["sh", "-c", script], timeout=params.get("timeout_s"), env=env)
        instance.exec(["rm", "-rf", wdir], check=False, timeout=30)
        rows = [m for m in parse_hpcc(res.stdout, script, instance.index) if m.metric in KEEP]
        return rows + [Measurement("wall_time_s", res.duration_s, "s", instance.index)]

    def version(self, instance: Instance) -> dict:
        res = instance.exec(
            ["sh", "-c", "dpkg-query -W -f '${Version}' hpcc 2>/dev/null"], check=False, timeout=30
        )
        return {"hpcc": res.stdout.strip() or "unknown"}
