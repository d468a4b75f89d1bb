"""The simulated runs bench_scale.py and bench_record.py write through the store's write path: a
2^4 design, 3 metrics and 200 telemetry rows per run (10 s at 1 Hz, 20 metrics), as issue 45
measured."""

from __future__ import annotations

from typing import Any

METRICS = ("wall_time_s", "throughput", "latency_ms")
TELEMETRY = tuple(f"host_m{j:02d}" for j in range(20))
#: one run's telemetry rows (t, metric, value)
SAMPLES = [(float(t), m, float(t * j)) for t in range(10) for j, m in enumerate(TELEMETRY)]


def plan(name: str, runs: int) -> tuple[Any, list]:
    """The 2^4 design (named ``name``) replicated to at least ``runs`` runs, and its first ``runs`` runs."""
    import math

    from labkit.design import Design

    design = Design.from_dict(
        {
            "name": name,
            "factors": {
                "vcpus": [1, 2],
                "memory_mb": [512, 1024],
                "affinity": ["pinned", "floating"],
                "count": [1, 2],
            },
            "replications": math.ceil(runs / 16),
            "seed": 1,
        }
    )
    return design, design.plan()[:runs]


def result(r: Any, cid: str) -> dict:
    """What Store.record_run / GroupCommit.add take for the simulated run ``r`` of campaign ``cid``."""
    from labkit.store import now_iso
    from labkit.workloads.base import Measurement

    base = 10.0 + r.levels["vcpus"] + 0.001 * r.order
    return dict(
        status="ok",
        started=now_iso(),
        duration_s=10.0,
        measurements=[Measurement(m, base * (k + 1), "s") for k, m in enumerate(METRICS)],
        metadata={
            "spec": {"vcpus": r.levels["vcpus"], "memory_mb": r.levels["memory_mb"]},
            "host": "h1",
            "platform": "sim",
            "backend": "sim",
            "run_seq": r.order + 1,
            "boot_group": r.boot_group,
            "boot_position": 1,
            "instances": [{"name": f"labkit-{cid}--{r.order:013d}", "index": 0, "cpus": [0], "boot": 1}],
            "versions": {"sim": "1.0"},
            "telemetry": {"host": "sampled", "samples": 200},
        },
        samples=SAMPLES,
    )
