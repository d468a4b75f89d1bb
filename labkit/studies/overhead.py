"""Study 004 (virtualization overhead; notebook 02): its benchmarks on labkit workloads, where
each runs (image variants), its designs (platform x one factor), the multi-campaign loader by its
notebook name and the thesis's disk and application claims beside our measurements."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..store.results import load_campaigns

if TYPE_CHECKING:
    import pandas as pd


#: the metrics of :func:`overhead_benchmarks` where lower is better (times, latencies)
OVERHEAD_LOWER_IS_BETTER = frozenset({"time_per_request_ms", "latency_avg_ms", "latency_p95_ms"})
#: the image variant (``labkit images build --profile study``) that carries bonnie++ and MariaDB
#: for the container platforms; the set-up builds it for docker and lxd
OVERHEAD_VARIANT = "study"


def overhead_benchmarks(
    *,
    vcpus: int = 2,
    cpu_time_s: float = 2,
    cpu_max_prime: int = 20000,
    stream_array_mb: int | None = None,
    stream_ntimes: int = 50,
    fio_size_mb: int = 64,
    fio_runtime_s: float = 1,
    fio_patterns: str = "randread,randwrite",
    fio_block_sizes: Sequence[str] = ("4k", "64k"),
    iperf_duration_s: float = 2,
    iperf_udp_bandwidth: str = "1G",
    apache_requests: int | None = None,
    apache_concurrency_levels: Sequence[int] = (10, 50),
    iperf_paths: Sequence[str] = ("to_host", "from_host"),
    bonnie_size_mb: int = 512,
    bonnie_direct: bool = True,
    bonnie_files: Sequence[int] | None = None,
    bonnie_concurrency: int = 1,
    stream_threads: Sequence[int] | None = None,
    oltp_table_size: int = 10000,
    oltp_time_s: float = 5,
    oltp_threads: Sequence[int] = (1,),
) -> dict:
    """Benchmark name -> ``workload``, fixed ``params``, second ``factor`` and its ``levels``,
    and the ``metrics`` analysed, for study 004's fronts (cpu, memory, disk, network,
    application; ``bonnie`` and ``oltp`` are the paper's own disk and application tools) on
    labkit workloads; ``count`` (instances per run, default 1) and ``variant`` (the image
    variant the container platforms need, default none) where they matter. The network paths
    (``to_host``, ``from_host``) and ``oltp`` (MariaDB in inst0, sysbench in inst1) run over
    the run's private network (``network: private``, the default of a workload across it).

    Seed 004's sweeps (``data/reference/sweeps.csv``, :func:`labkit.studies.sweeps.sweep_levels`):
    ``stream_threads`` (default: :func:`labkit.design.host_scaling.thread_levels` of ``vcpus``; the
    seed gives no levels, Figure 7.3) are the memory benchmark's ``threads`` levels;
    ``bonnie_files`` (e.g. the seed's 25, 50, 100; default None: no file-creation tests, one
    ``size_mb`` level) makes the number of files bonnie's factor, with the file-creation rates
    among its metrics; ``bonnie_concurrency`` (the seed's 4 processes) copies at once."""
    from ..design.host_scaling import thread_levels

    threads = thread_levels(vcpus) if vcpus > 1 else [1, 2]
    stream_levels = list(stream_threads) if stream_threads else threads
    patterns = [p.strip() for p in fio_patterns.split(",") if p.strip()]
    bonnie_params: dict = {"direct": bool(bonnie_direct)}
    if int(bonnie_concurrency) != 1:
        bonnie_params["concurrency"] = int(bonnie_concurrency)
    bonnie_metrics = ["write_kib_per_s", "rewrite_kib_per_s", "read_kib_per_s", "seeks_per_s"]
    if bonnie_files:
        bonnie_params["size_mb"] = int(bonnie_size_mb)
        bonnie = dict(
            factor="files",
            levels=[int(f) for f in bonnie_files],
            metrics=bonnie_metrics + ["create_per_s", "random_create_per_s"],
        )
    else:
        bonnie = dict(factor="size_mb", levels=[int(bonnie_size_mb)], metrics=bonnie_metrics)
    return {
        "cpu": dict(
            workload="sysbench",
            params={"test": "cpu", "time_s": cpu_time_s, "cpu_max_prime": cpu_max_prime},
            factor="threads",
            levels=threads,
            metrics=["events_per_s"],
        ),
        "memory": dict(
            workload="stream",
            params={"array_mb": stream_array_mb, "ntimes": stream_ntimes},
            factor="threads",
            levels=stream_levels,
            metrics=["copy_mb_per_s", "scale_mb_per_s", "add_mb_per_s", "triad_mb_per_s"],
        ),
        "disk": dict(
            workload="fio",
            params={"size_mb": fio_size_mb, "runtime_s": fio_runtime_s, "patterns": fio_patterns},
            factor="bs",
            levels=list(fio_block_sizes),
            metrics=[f"{p}_iops" for p in patterns],
        ),
        # Table 7.2 of 004: iperf from the platform to the host, here over the run's private network
        "network": dict(
            workload="iperf3",
            params={"duration_s": iperf_duration_s, "udp_bandwidth": iperf_udp_bandwidth, "protocol": "both"},
            factor="path",
            levels=list(iperf_paths),
            metrics=["tcp_mbit_per_s", "udp_mbit_per_s"],
        ),
        "application": dict(
            workload="apache",
            params={"requests": apache_requests},
            factor="concurrency",
            levels=list(apache_concurrency_levels),
            metrics=["requests_per_s", "time_per_request_ms"],
        ),
        # 004's Figures 7.4-7.5: Bonnie++ block throughput (O_DIRECT by default: the disk, not the
        # cache) and seeks; the number of files as the factor when bonnie_files is given
        "bonnie": dict(workload="bonnie", params=bonnie_params, variant=OVERHEAD_VARIANT, **bonnie),
        # 004's Figure 7.6: sysbench OLTP against MySQL (here MariaDB, Debian 12's MySQL)
        "oltp": dict(
            workload="oltp",
            params={"table_size": int(oltp_table_size), "time_s": oltp_time_s},
            factor="threads",
            levels=list(oltp_threads),
            count=2,
            variant=OVERHEAD_VARIANT,
            metrics=["transactions_per_s", "latency_avg_ms", "latency_p95_ms"],
        ),
    }


def overhead_testbed(
    spec: dict, platforms: Iterable[str], check: Callable[[str, str], None] | None = None
) -> tuple[dict | None, dict[str, str]]:
    """Where a benchmark of :func:`overhead_benchmarks` runs: ``(testbed, skipped)``.

    ``testbed`` is None when no platform needs an image variant, else a testbed mapping for
    this machine that declares each platform with images (docker, lxd, libvirt) with ``image``
    set to the benchmark's ``variant``; ``skipped`` maps a platform to why it cannot run the
    benchmark (the variant is not built: the message says how to build it). ``check(backend,
    image)`` raises :class:`labkit.errors.BackendUnavailable` when the image is missing
    (default: the backend's own ``check()``)."""
    from ..errors import BackendUnavailable
    from ..run.platforms import VARIANT_BUILD, check_image, variant_image

    variant = spec.get("variant")
    if not variant:
        return None, {}
    check = check or check_image
    declared: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    for p in platforms:
        if p not in VARIANT_BUILD:
            continue
        image = variant_image(p, variant)
        try:
            check(p, image)
        except BackendUnavailable as exc:
            skipped[p] = (
                f"{spec['workload']} needs the {image} image: labkit images build {VARIANT_BUILD[p]} "
                f"--profile {variant} ({str(exc).splitlines()[0][:120]})"
            )
            continue
        declared[p] = {"backend": p, "image": image}
    testbed = (
        {"name": f"this machine, {variant} images", "hosts": [{"name": "controller"}], "platforms": declared}
        if declared
        else None
    )
    return testbed, skipped


def overhead_design(
    bench: str, spec: dict, platforms: Sequence[str], *, replications: int, seed: int
) -> tuple[dict, dict]:
    """One benchmark of notebook 02 as ``(design, workload_params)``: ``platform`` x its second
    factor, ``replications`` each, every platform in one randomized plan (with one platform, no
    ``platform`` factor: the campaign's backend). A second factor with one level is not a
    factor: it goes into the workload's parameters instead."""
    if not platforms:
        raise ConfigError(f"overhead_design({bench!r}): no platform to run")
    factors: dict[str, list] = (
        {"platform": list(platforms)} if len(platforms) > 1 else {}
    )  # one platform: its backend
    params = dict(spec["params"])
    if len(spec["levels"]) > 1:
        factors[spec["factor"]] = list(spec["levels"])
    else:
        params[spec["factor"]] = spec["levels"][0]
    if not factors:
        raise ConfigError(
            f"overhead_design({bench!r}): one platform {list(platforms)} and one level "
            f"of {spec['factor']}: nothing varies"
        )
    return (
        {"name": f"overhead_{bench}", "factors": factors, "replications": replications, "seed": seed},
        params,
    )


#: notebook 02's name for the one multi-campaign loader, :func:`labkit.store.results.load_campaigns`
#: (there keyed by benchmark: each campaign's ``platform`` factor labels its rows)
load_platform_campaigns = load_campaigns


def overhead_paper_claims(
    path: str | Path, data: pd.DataFrame, benchmarks: dict, *, names: dict, alpha: float = 0.05
) -> pd.DataFrame:
    """Seed 004's disk and application claims (``data/reference/overhead_disk_application.csv``)
    beside notebook 02's measurements.

    ``data``: :func:`labkit.store.results.load_campaigns`'s table with ``platform`` labelled through
    ``names`` (backend -> label); ``benchmarks``: :func:`overhead_benchmarks` (each claim is
    compared at its benchmark's first level). Returns the CSV's columns (``claim``, ``platform``,
    ``baseline``, ``benchmark``, ``metric``, ``source``), ``stated_below_pct`` (the thesis's
    "% below native", NaN for a ranking in words), ``stated_pct`` (the same as % slower:
    100 (1 / (1 - below) - 1), so that 20 % below is 25 % slower), ``level``, ``ours_pct``
    (100 (slowdown ratio - 1)), ``ci_low``/``ci_high`` (Fieller, %), ``n``/``n_base``,
    ``verdict`` (where the thesis gives a number: ``inside our CI``, ``ours lower`` or ``ours
    higher`` (our CI entirely below / above it); empty otherwise) and ``note`` (why ours is
    NaN: the benchmark did not run on that platform, or bonnie++ timed none of that metric here)."""
    import numpy as np
    import pandas as pd

    from .seeds import headline_comparison

    ref = pd.read_csv(path, comment="#")
    missing = {"claim", "platform", "baseline", "stated_pct", "benchmark", "metric"} - set(ref.columns)
    if missing:
        raise ConfigError(f"{path}: missing column(s) {sorted(missing)}")
    unknown = sorted(set(ref.benchmark) - set(benchmarks))
    if unknown:
        raise ConfigError(f"{path}: benchmark(s) {unknown} not among {list(benchmarks)}")
    ref = ref.rename(columns={"stated_pct": "stated_below_pct"})
    below = ref.stated_below_pct.astype(float)
    ref["stated_pct"] = 100 * (1 / (1 - below / 100) - 1)
    ref["level"] = [str(benchmarks[b]["levels"][0]) for b in ref.benchmark]
    out = headline_comparison(
        ref, data, names=names, level_col="level", lower_is_better=OVERHEAD_LOWER_IS_BETTER, alpha=alpha
    )
    for i, row in out.iterrows():
        if np.isfinite(row.ours_pct) or row.note == "platform not measured here":
            continue
        runs = data[data.benchmark == row.benchmark]
        if not (runs.platform.astype(str) == names.get(row.platform)).any():
            out.at[i, "note"] = f"{row.benchmark} did not run on {row.platform}"
            continue
        untimed = [
            p
            for p in (row.platform, row.baseline)
            if not ((runs.platform.astype(str) == names.get(p)) & (runs.metric == row.metric)).any()
        ]
        if untimed:
            out.at[i, "note"] = (
                f"{row.metric}: not timed here on {', '.join(untimed)} (bonnie++ printed +++++: too fast)"
            )
    out["verdict"] = ""
    known = out.stated_pct.notna() & out.ci_low.notna() & out.ci_high.notna()
    out.loc[known, "verdict"] = np.select(
        [out.ci_high[known] < out.stated_pct[known], out.ci_low[known] > out.stated_pct[known]],
        ["ours lower", "ours higher"],
        "inside our CI",
    )
    return out
