"""Registry of workloads; each module is imported when its workload is used."""

from __future__ import annotations

import importlib

from ..errors import ConfigError, did_you_mean
from .base import Measurement, Workload, require_tool, run_checked

REGISTRY = {
    "nqueens": ("labkit.workloads.nqueens", "NQueens"),
    "command": ("labkit.workloads.command", "Command"),
    "apache": ("labkit.workloads.apache", "Apache"),
    "sysbench": ("labkit.workloads.sysbench", "Sysbench"),
    "stream": ("labkit.workloads.stream", "Stream"),
    "fio": ("labkit.workloads.fio", "Fio"),
    "bonnie": ("labkit.workloads.bonnie", "Bonnie"),
    "oltp": ("labkit.workloads.oltp", "Oltp"),
    "iperf3": ("labkit.workloads.iperf3", "Iperf3"),
    "mpi": ("labkit.workloads.mpi", "Mpi"),
    "hpcc": ("labkit.workloads.mpi", "Hpcc"),
    "pingpong": ("labkit.workloads.pingpong", "PingPong"),
    "linpack": ("labkit.workloads.linpack", "Linpack"),
    "pipeline": ("labkit.workloads.pipeline", "Pipeline"),
    "parsec": ("labkit.workloads.external", "Parsec"),
    "npb": ("labkit.workloads.external", "Npb"),
}


def workload_class(name: object) -> type[Workload]:
    """The Workload class registered as ``name`` (ConfigError listing the names if unknown)."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise ConfigError(
            f"unknown workload {name!r}{did_you_mean(name, list(REGISTRY))}; "
            f"available: {', '.join(sorted(REGISTRY))}"
        )
    module, cls = REGISTRY[name]
    return getattr(importlib.import_module(module), cls)


def get_workload(name: str | Workload, **params: object) -> Workload:
    """Instantiate workload ``name`` with parameters (a Workload passes through)."""
    if isinstance(name, Workload):
        return name
    return workload_class(name)(**params)


__all__ = [
    "Measurement",
    "Workload",
    "REGISTRY",
    "get_workload",
    "workload_class",
    "require_tool",
    "run_checked",
]
