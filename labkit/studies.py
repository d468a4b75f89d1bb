"""Ready-made designs of the seed studies, with levels scaled to the host they run on."""
from __future__ import annotations

from pathlib import Path

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
                    platforms=None, **levels) -> Design:
    """The 2^4 factorial of study 002 as a :class:`Design` (see :func:`affinity_levels`); with two
    or more ``platforms``, a ``platform`` factor first (platform x 2^4, one randomized plan)."""
    factors = affinity_levels(host_cpus, host_memory_mb, **levels)
    if platforms is not None and len(platforms) > 1:
        factors = {"platform": list(platforms), **factors}
    return Design.from_dict({
        "name": "affinity",
        "description": "2^4 factorial after Leite et al. (002): vCPU x memory x affinity x instances, N-queens"
                       + (", on every platform" if "platform" in factors else ""),
        "factors": factors, "replications": replications, "seed": seed})


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
                        apache_concurrency_levels=(10, 50), iperf_paths=("to_host", "from_host")) -> dict:
    """Benchmark name -> ``workload``, fixed ``params``, second ``factor`` and its ``levels``,
    and the ``metrics`` analysed, for study 004's fronts (cpu, memory, disk, network,
    application) on labkit workloads. The network paths (``to_host``, ``from_host``) run over
    the run's private network (``network: private``, the default of a workload across it)."""
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
        # Table 7.2 of 004: iperf from the platform to the host, here over the run's private network
        "network": dict(workload="iperf3",
                        params={"duration_s": iperf_duration_s, "udp_bandwidth": iperf_udp_bandwidth,
                                "protocol": "both"},
                        factor="path", levels=list(iperf_paths),
                        metrics=["tcp_mbit_per_s", "udp_mbit_per_s"]),
        "application": dict(workload="apache", params={"requests": apache_requests},
                            factor="concurrency", levels=list(apache_concurrency_levels),
                            metrics=["requests_per_s", "time_per_request_ms"]),
    }


def overhead_design(bench: str, spec: dict, platforms, *, replications: int, seed: int):
    """One benchmark of notebook 02 as ``(design, workload_params)``: ``platform`` x its second
    factor, ``replications`` each, every platform in one randomized plan (with one platform, no
    ``platform`` factor: the campaign's backend). A second factor with one level is not a
    factor: it goes into the workload's parameters instead."""
    if not platforms:
        raise ConfigError(f"overhead_design({bench!r}): no platform to run")
    factors = {"platform": list(platforms)} if len(platforms) > 1 else {}   # one platform: its backend
    params = dict(spec["params"])
    if len(spec["levels"]) > 1:
        factors[spec["factor"]] = list(spec["levels"])
    else:
        params[spec["factor"]] = spec["levels"][0]
    if not factors:
        raise ConfigError(f"overhead_design({bench!r}): one platform {list(platforms)} and one level "
                          f"of {spec['factor']}: nothing varies")
    return ({"name": f"overhead_{bench}", "factors": factors, "replications": replications, "seed": seed},
            params)


def load_platform_campaigns(data_dir, campaigns: dict, benchmarks: dict):
    """Notebook 02's results: one multi-platform campaign per benchmark, as one long table.

    ``campaigns`` maps benchmark -> campaign id (each with a ``platform`` factor);
    ``benchmarks`` is :func:`overhead_benchmarks`. Returns ``(data, failures, facts)``: ``data`` has ``platform``, ``benchmark``,
    ``metric``, ``factor``, ``level`` (str), ``run_id``, ``value``, ``test``; ``failures``
    one row per platform and benchmark with failed runs or no results (``platform``,
    ``benchmark``, ``runs_failed``, ``note``); ``facts`` maps platform -> ``versions`` (per
    benchmark), ``domain_types`` (libvirt domain types its runs recorded) and ``fingerprints``.
    """
    import pandas as pd

    from .errors import StoreError
    from .results import responses
    from .store import Store, load_results
    frames, failures, facts = [], [], {}
    for bench, cid in campaigns.items():
        b = benchmarks[bench]
        try:
            tidy = load_results(data_dir, cid)
            with Store(Path(data_dir) / cid / "store.sqlite", readonly=True) as st:
                runs, fps, st_meta = st.runs(), st.fingerprints(), st.meta()
        except StoreError as exc:
            failures.append({"platform": None, "benchmark": bench, "runs_failed": None,
                             "note": str(exc).splitlines()[0]})
            continue
        if "platform" not in tidy.columns:      # a one-platform campaign: its backend
            tidy["platform"] = runs["platform"] = st_meta.get("backend")
        for platform, bad in tidy.loc[tidy.status != "ok"].drop_duplicates("run_id").groupby("platform"):
            failures.append({"platform": platform, "benchmark": bench, "runs_failed": len(bad),
                             "note": str(bad.error.iloc[0]).splitlines()[0][:160]})
        for metric in b["metrics"]:
            if not ((tidy.metric == metric) & (tidy.status == "ok")).any():
                continue
            varied = b["factor"] in tidy.columns    # a one-level factor ran as a workload parameter
            r = responses(tidy, metric, ["platform", b["factor"]] if varied else ["platform"])
            level = r[b["factor"]].astype(str) if varied else str(b["levels"][0])
            frames.append(pd.DataFrame({"platform": r["platform"], "benchmark": bench, "metric": metric,
                                        "factor": b["factor"], "level": level,
                                        "run_id": r["run_id"], "value": r[metric]}))
        for platform, grp in runs.groupby("platform"):
            f = facts.setdefault(platform, {"versions": {}, "domain_types": set(), "fingerprints": {}})
            versions = next((m["versions"] for m in grp.metadata if m.get("versions")), {})
            if versions:
                f["versions"][bench] = versions
            f["domain_types"] |= {i.get("domain_type") for m in grp.metadata
                                  for i in m.get("instances", [])} - {None}
            f["fingerprints"].update({k: v for k, v in fps.items() if k in set(grp.fingerprint_id)})
    cols = ["platform", "benchmark", "metric", "factor", "level", "run_id", "value"]
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)
    data["test"] = data.benchmark + " " + data.metric + " " + data.factor + "=" + data.level
    return data, pd.DataFrame(failures, columns=["platform", "benchmark", "runs_failed", "note"]), facts


def affinity_best_times(runs, response: str = "wall_time_s", *, by=("count", "vcpus")):
    """Study 002's Table 3 on our runs: per ``by`` group (and ``platform`` when present), the
    affinity level with the lower mean ``response`` and how much worse the other level is.

    Returns one row per group: the ``by`` (and ``platform``) columns, ``best_affinity``,
    ``best_time_s`` (its mean), ``other_time_s`` and ``difference_pct`` =
    100 (other - best) / best, as the paper computed it (Table 3: 172.37 s vs 134.78 s -> 27.89 %).
    """
    import pandas as pd
    keys = (["platform"] if "platform" in runs.columns else []) + list(by)
    means = runs.groupby([*keys, "affinity"], observed=True)[response].mean().reset_index()
    rows = []
    for key, grp in means.groupby(keys, observed=True):
        if len(grp) != 2:
            continue
        grp = grp.sort_values(response)
        best, other = grp.iloc[0], grp.iloc[1]
        rows.append({**dict(zip(keys, key)), "best_affinity": best.affinity, "best_time_s": best[response],
                     "other_time_s": other[response],
                     "difference_pct": 100 * (other[response] - best[response]) / best[response]})
    return pd.DataFrame(rows, columns=[*keys, "best_affinity", "best_time_s", "other_time_s", "difference_pct"])


def affinity_count_differences(runs, response: str = "wall_time_s"):
    """Study 002's Table 4 on our runs: the change of mean ``response`` from the fewest to the
    most instances, per ``vcpus`` and ``affinity`` (and ``platform`` when present).

    Returns ``vcpus``, ``affinity`` (and ``platform``), ``counts`` ("1 x 2"), ``difference_s``
    (mean at most - mean at fewest) and ``difference_pct`` (100 difference / mean at fewest, as
    the paper: 11.65 s on 134.78 s -> 8.64 %).
    """
    import pandas as pd
    keys = (["platform"] if "platform" in runs.columns else []) + ["vcpus", "affinity"]
    means = runs.groupby([*keys, "count"], observed=True)[response].mean().reset_index()
    rows = []
    for key, grp in means.groupby(keys, observed=True):
        grp = grp.sort_values("count")
        if len(grp) < 2:
            continue
        lo, hi = grp.iloc[0], grp.iloc[-1]
        rows.append({**dict(zip(keys, key)), "counts": f"{lo['count']} x {hi['count']}",
                     "difference_s": hi[response] - lo[response],
                     "difference_pct": 100 * (hi[response] - lo[response]) / lo[response]})
    return pd.DataFrame(rows, columns=[*keys, "counts", "difference_s", "difference_pct"])
