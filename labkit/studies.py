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


# -- study 002: the paper's published allocation of variation -----------------------------
AFFINITY_PAPER_TERMS = {"vCPU": "vcpus", "memory": "memory_mb", "affinity": "affinity", "VMs": "count"}


def affinity_reference(path, *, workload: str = "N-queens"):
    """Seed 002's Tables 5-8 (``data/reference/affinity_influence.csv``) in our term names.

    Returns ``source`` ("Leite et al. 2017, Xen" / "... KVM"), ``term`` (e.g.
    "vcpus:count") and ``pct_variation``, ready for :func:`labkit.report.conclusions`.
    The paper lists only the terms it found influential; the others are absent.
    """
    import pandas as pd
    ref = pd.read_csv(path)
    missing = {"hypervisor", "workload", "term", "pct_variation"} - set(ref.columns)
    if missing:
        raise ConfigError(f"{path}: columns {sorted(missing)} missing")
    ref = ref[ref.workload == workload]
    if ref.empty:
        raise ConfigError(f"{path}: no rows for workload {workload!r}")

    def ours(term):
        try:
            return ":".join(AFFINITY_PAPER_TERMS[p] for p in term.split(":"))
        except KeyError as exc:
            raise ConfigError(f"{path}: unknown term {term!r}; known {list(AFFINITY_PAPER_TERMS)}") from exc
    return pd.DataFrame({"source": "Leite et al. 2017, " + ref.hypervisor,
                         "term": ref.term.map(ours), "pct_variation": ref.pct_variation.astype(float)})


# -- study 004: the overhead benchmarks of notebook 02 ---------------------------------------
OVERHEAD_LOWER_IS_BETTER = frozenset({"time_per_request_ms"})


def overhead_benchmarks(*, vcpus: int = 2, cpu_time_s: float = 2, cpu_max_prime: int = 20000,
                        stream_array_mb=None, stream_ntimes: int = 5, fio_size_mb: int = 64,
                        fio_runtime_s: float = 1, fio_patterns: str = "randread,randwrite",
                        fio_block_sizes=("4k", "64k"), iperf_duration_s: float = 2,
                        iperf_udp_bandwidth: str = "1G", apache_requests=None,
                        apache_concurrency_levels=(10, 50)) -> dict:
    """Benchmark name -> ``workload``, fixed ``params``, second ``factor`` and its ``levels``,
    and the ``metrics`` analysed, for study 004's fronts (cpu, memory, disk, network,
    application) on labkit workloads."""
    from .workloads.scaling import thread_levels
    threads = thread_levels(vcpus) if vcpus > 1 else [1, 2]
    patterns = [p.strip() for p in fio_patterns.split(",") if p.strip()]
    return {
        "cpu": dict(workload="sysbench",
                    params={"test": "cpu", "time_s": cpu_time_s, "cpu_max_prime": cpu_max_prime},
                    factor="threads", levels=threads, metrics=["events_per_s"]),
        "memory": dict(workload="stream", params={"array_mb": stream_array_mb, "ntimes": stream_ntimes},
                       factor="threads", levels=threads,
                       metrics=["copy_mb_per_s", "scale_mb_per_s", "add_mb_per_s", "triad_mb_per_s"]),
        "disk": dict(workload="fio",
                     params={"size_mb": fio_size_mb, "runtime_s": fio_runtime_s, "patterns": fio_patterns},
                     factor="bs", levels=list(fio_block_sizes), metrics=[f"{p}_iops" for p in patterns]),
        "network": dict(workload="iperf3",
                        params={"duration_s": iperf_duration_s, "udp_bandwidth": iperf_udp_bandwidth},
                        factor="protocol", levels=["tcp", "udp"],
                        metrics=["tcp_mbit_per_s", "udp_mbit_per_s"]),
        "application": dict(workload="apache", params={"requests": apache_requests},
                            factor="concurrency", levels=list(apache_concurrency_levels),
                            metrics=["requests_per_s", "time_per_request_ms"]),
    }
