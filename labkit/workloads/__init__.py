"""Registry of workloads; each module is imported when its workload is used."""
from __future__ import annotations

import importlib

from ..errors import ConfigError
from .base import Measurement, Workload, require_tool, run_checked

REGISTRY = {
    "nqueens": ("labkit.workloads.nqueens", "NQueens"),
    "command": ("labkit.workloads.command", "Command"),
    "apache": ("labkit.workloads.apache", "Apache"),
    "sysbench": ("labkit.workloads.sysbench", "Sysbench"),
    "stream": ("labkit.workloads.stream", "Stream"),
    "fio": ("labkit.workloads.fio", "Fio"),
    "iperf3": ("labkit.workloads.iperf3", "Iperf3"),
    "parsec": ("labkit.workloads.external", "Parsec"),
    "npb": ("labkit.workloads.external", "Npb"),
}


def get_workload(name, **params) -> Workload:
    """Instantiate workload ``name`` with parameters (a Workload passes through)."""
    if isinstance(name, Workload):
        return name
    if name not in REGISTRY:
        raise ConfigError(f"unknown workload {name!r}; available: {', '.join(sorted(REGISTRY))}")
    module, cls = REGISTRY[name]
    return getattr(importlib.import_module(module), cls)(**params)


__all__ = ["Measurement", "Workload", "REGISTRY", "get_workload", "require_tool", "run_checked"]
