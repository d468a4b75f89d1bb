"""A real local campaign whose instances differ on purpose: a store with a large instance level.

:class:`CapPerBoot` is a run hook that, once per boot (``RunHook.instances_ready``), caps each of
the boot's instances at a CPU share drawn at random (seeded) from ``caps``: the CFS quota of its
cgroup is rewritten (v1 ``cpu.cfs_quota_us``, v2 ``cpu.max``), read back, and recorded in the
instance's metadata as ``test_cpu_cap`` (the share asked) and ``test_cpu_quota`` (what the
cgroup holds). :func:`capped_store` runs such a campaign with ``runs_per_instance`` k on the local
backend (root) and returns its store: runs of one boot share an instance and its cap, boots differ
by their caps, and the design's factor (``vcpus``: under a cap below one CPU, one thread or two get
the same CPU time) has no real effect. What the analysis must see: a large instance variance
component, and no effect of a factor constant within instances from run-to-run noise alone (the
statistics side's test, issue 32). The store's levels (instance, boot, run_seq) are checked in
tests/integration/test_levels_local.py; ``capped_levels_store`` (tests/integration/conftest.py)
gives it as a module-scoped fixture.
"""

from __future__ import annotations

import random
from pathlib import Path

from labkit.backends import cgroups
from labkit.run.campaign import Campaign
from labkit.run.hooks import RunContext, RunHook
from labkit.store import Store

#: the CPU shares a boot's instances are capped at (one drawn per boot)
CAPS = (0.2, 0.5, 1.0)


class CapPerBoot(RunHook):
    """Cap every instance of each boot at a CPU share drawn from ``caps`` (seeded by ``seed``); with
    ``balanced``, boot b of every configuration at ``caps[(b - 1) % len(caps)]`` instead, so that
    the caps are orthogonal to the design's factors (no factor's levels get the low caps by chance)."""

    def __init__(self, caps=CAPS, seed: int = 32, *, balanced: bool = False):
        self.caps = tuple(caps)
        self.rng = random.Random(seed)
        self.balanced = balanced

    def instances_ready(self, ctx: RunContext) -> None:
        cap = self.caps[(ctx.run.boot - 1) % len(self.caps)] if self.balanced else self.rng.choice(self.caps)
        driver = ctx.backend.driver
        for inst in ctx.instances:
            quota = int(cap * cgroups.PERIOD_US)
            if isinstance(driver, cgroups.CgroupV1):
                path, value = f"{driver.roots['cpu']}/{inst.name}/cpu.cfs_quota_us", str(quota)
            else:
                path, value = f"{driver.root}/{inst.name}/cpu.max", f"{quota} {cgroups.PERIOD_US}"
            cgroups.apply([cgroups.Op("write", path, value)])
            inst.metadata.update(test_cpu_cap=cap, test_cpu_quota=cgroups.read_local(path).strip())


def capped_store(
    data_dir: str | Path,
    campaign_id: str = "levels-capped",
    *,
    replications: int = 6,
    runs_per_instance: int = 3,
    caps=CAPS,
    board: int = 14,
    seed: int = 32,
    telemetry: float = 0.25,
) -> Store:
    """Run the capped campaign (see the module docstring) on the local backend into ``data_dir``
    and return its store (read-only): factor ``vcpus`` [1, 2] (floating), ``replications`` runs per
    configuration, ``runs_per_instance`` per boot, N-queens on a ``board`` board with 3 iterations."""
    design = {
        "name": "levels-capped",
        "factors": {"vcpus": [1, 2]},
        "replications": replications,
        "seed": seed,
        "runs_per_instance": runs_per_instance,
    }
    return Campaign(
        design,
        backend="local",
        workload="nqueens",
        workload_params={"board": board, "iterations": 3},
        campaign_id=campaign_id,
        data_dir=data_dir,
        progress=False,
        telemetry=telemetry,
        hooks=[CapPerBoot(caps, seed)],
        run_timeout=600,
    ).run()
