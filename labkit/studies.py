"""Ready-made designs of the seed studies, with levels scaled to the host they run on."""
from __future__ import annotations

from .design import Design
from .errors import ConfigError


def affinity_levels(host_cpus: int, host_memory_mb: int, *, vcpus=None, memory_mb=None,
                    affinity=None, count=None) -> dict:
    """Levels of study 002's 2^4 design (vCPU, memory, affinity, VM count) for this host.

    The paper used 2/4 vCPUs on 4-core hosts, 3.5/7 GB of 16 GB, affinity yes/no
    and 2/4 VMs. Defaults here keep the same ratios on any host: vCPUs
    half/all of the host's CPUs, memory 256/512 MB (N-queens needs little;
    capped to a quarter of the host), 1/2 instances.
    """
    if host_cpus < 1:
        raise ConfigError(f"host_cpus must be >= 1, got {host_cpus}")
    levels = {
        "vcpus": list(vcpus) if vcpus else [max(1, host_cpus // 2), max(2, host_cpus)],
        "memory_mb": list(memory_mb) if memory_mb else [256, 512],
        "affinity": list(affinity) if affinity else ["floating", "pinned"],
        "count": list(count) if count else [1, 2],
    }
    cap = max(64, host_memory_mb // 4)
    if not memory_mb and max(levels["memory_mb"]) > cap:
        levels["memory_mb"] = [cap // 2, cap]
    return levels


def affinity_design(host_cpus: int, host_memory_mb: int, *, replications: int = 3, seed: int = 2017,
                    **levels) -> Design:
    """The 2^4 factorial of study 002 as a :class:`Design` (see :func:`affinity_levels`)."""
    return Design.from_dict({
        "name": "affinity",
        "description": "2^4 factorial after Leite et al. (002): vCPU x memory x affinity x instances, N-queens",
        "factors": affinity_levels(host_cpus, host_memory_mb, **levels),
        "replications": replications, "seed": seed})
