"""Shared by the backend benchmarks: one provision + exec `true` + teardown cycle through labkit."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.backends import teardown  # noqa: E402
from labkit.core.instance import InstanceSpec  # noqa: E402

SPEC = InstanceSpec(vcpus=1, memory_mb=128, affinity="floating", count=1)


def labkit_cycle(backend, spec: InstanceSpec = SPEC) -> float:
    """Seconds for provision + exec `true` + teardown of one instance."""
    t0 = time.perf_counter()
    insts = backend.provision(spec, prefix="labkit-bench")
    try:
        insts[0].exec(["true"])
    finally:
        teardown(insts)
    return time.perf_counter() - t0
