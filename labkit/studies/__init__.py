"""Ready-made designs of the seed studies, with levels scaled to the host they run on."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..design import Design
from ..errors import ConfigError
from ..store.results import load_campaigns

if TYPE_CHECKING:
    import pandas as pd


def affinity_levels(host_cpus: int, host_memory_mb: int, *, vcpus: Sequence[int] | None = None,
                    memory_mb: Sequence[int] | None = None, affinity: Sequence[str] | None = None,
                    count: Sequence[int] | None = None) -> dict[str, list]:
    """Levels of study 002's 2^4 design (vCPU, memory, affinity, VM count) for this host.

    The paper used 2/4 vCPUs on 4-core hosts, 3.5/7 GB of 16 GB, affinity yes/no
    and 2/4 VMs. Defaults here keep the same ratios on any host: vCPUs
    half/all of the host's CPUs, memory 256/512 MB (N-queens needs little;
    capped to a quarter of the host), 1/2 instances.
    """
    if host_cpus < 1:
        raise ConfigError(f"host_cpus must be >= 1, got {host_cpus}")
    levels: dict[str, list] = {
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
                    platforms: Sequence[str] | None = None, workload: str = "N-queens",
                    **levels: Sequence | None) -> Design:
    """The 2^4 factorial of study 002 as a :class:`Design` (see :func:`affinity_levels`); with two
    or more ``platforms``, a ``platform`` factor first (platform x 2^4, one randomized plan).
    ``workload`` names the benchmark in the description (N-queens, Apache)."""
    factors = affinity_levels(host_cpus, host_memory_mb, **levels)
    if platforms is not None and len(platforms) > 1:
        factors = {"platform": list(platforms), **factors}
    return Design.from_dict({
        "name": "affinity",
        "description": "2^4 factorial after Leite et al. (002): vCPU x memory x affinity x instances, "
                       + workload
                       + (", on every platform" if "platform" in factors else ""),
        "factors": factors, "replications": replications, "seed": seed})


# -- study 002: the paper's published allocation of variation -----------------------------
AFFINITY_PAPER_TERMS = {"vCPU": "vcpus", "memory": "memory_mb", "affinity": "affinity", "VMs": "count"}


def affinity_reference(path: str | Path, *, workload: str = "N-queens") -> pd.DataFrame:
    """Seed 002's Tables 5-8 (``data/reference/affinity_influence.csv``) in our term names.

    Returns ``source`` ("Leite et al., Xen" / "... KVM"; the seed file gives no year), ``term`` (e.g.
    "vcpus:count", its factors in the design's order vcpus, memory_mb, affinity, count, as
    :func:`labkit.stats.factorial_effects` names them) and ``pct_variation``, ready for :func:`labkit.report.conclusions`.
    The paper lists only the terms it found influential; the others are absent.
    """
    import pandas as pd
    ref = pd.read_csv(path, comment="#")
    missing = {"hypervisor", "workload", "term", "pct_variation"} - set(ref.columns)
    if missing:
        raise ConfigError(f"{path}: columns {sorted(missing)} missing")
    ref = ref[ref.workload == workload]
    if ref.empty:
        raise ConfigError(f"{path}: no rows for workload {workload!r}")

    order = list(AFFINITY_PAPER_TERMS.values())   # our factor order, the order of effect terms

    def ours(term):   # the paper writes "VMs:affinity"; our effects table says "affinity:count"
        try:
            return ":".join(sorted((AFFINITY_PAPER_TERMS[p] for p in term.split(":")), key=order.index))
        except KeyError as exc:
            raise ConfigError(f"{path}: unknown term {term!r}; known {list(AFFINITY_PAPER_TERMS)}") from exc
    return pd.DataFrame({"source": "Leite et al., " + ref.hypervisor,
                         "term": ref.term.map(ours), "pct_variation": ref.pct_variation.astype(float)})


# -- study 004: the overhead benchmarks of notebook 02 ---------------------------------------
OVERHEAD_LOWER_IS_BETTER = frozenset({"time_per_request_ms", "latency_avg_ms", "latency_p95_ms"})
#: the image variant (``labkit images build --profile study``) that carries bonnie++ and MariaDB
#: for the container platforms; the set-up builds it for docker and lxd
OVERHEAD_VARIANT = "study"


def overhead_benchmarks(*, vcpus: int = 2, cpu_time_s: float = 2, cpu_max_prime: int = 20000,
                        stream_array_mb: int | None = None, stream_ntimes: int = 5, fio_size_mb: int = 64,
                        fio_runtime_s: float = 1, fio_patterns: str = "randread,randwrite",
                        fio_block_sizes: Sequence[str] = ("4k", "64k"), iperf_duration_s: float = 2,
                        iperf_udp_bandwidth: str = "1G", apache_requests: int | None = None,
                        apache_concurrency_levels: Sequence[int] = (10, 50),
                        iperf_paths: Sequence[str] = ("to_host", "from_host"),
                        bonnie_size_mb: int = 512, bonnie_direct: bool = True,
                        bonnie_files: Sequence[int] | None = None, bonnie_concurrency: int = 1,
                        stream_threads: Sequence[int] | None = None, oltp_table_size: int = 10000,
                        oltp_time_s: float = 5, oltp_threads: Sequence[int] = (1,)) -> dict:
    """Benchmark name -> ``workload``, fixed ``params``, second ``factor`` and its ``levels``,
    and the ``metrics`` analysed, for study 004's fronts (cpu, memory, disk, network,
    application; ``bonnie`` and ``oltp`` are the paper's own disk and application tools) on
    labkit workloads; ``count`` (instances per run, default 1) and ``variant`` (the image
    variant the container platforms need, default none) where they matter. The network paths
    (``to_host``, ``from_host``) and ``oltp`` (MariaDB in inst0, sysbench in inst1) run over
    the run's private network (``network: private``, the default of a workload across it).

    Seed 004's sweeps (``data/reference/sweeps.csv``, :func:`labkit.studies.sweeps.sweep_levels`):
    ``stream_threads`` (default: :func:`labkit.design.levels.thread_levels` of ``vcpus``; the
    seed gives no levels, Figure 7.3) are the memory benchmark's ``threads`` levels;
    ``bonnie_files`` (e.g. the seed's 25, 50, 100; default None: no file-creation tests, one
    ``size_mb`` level) makes the number of files bonnie's factor, with the file-creation rates
    among its metrics; ``bonnie_concurrency`` (the seed's 4 processes) copies at once."""
    from ..design.levels import thread_levels
    threads = thread_levels(vcpus) if vcpus > 1 else [1, 2]
    stream_levels = list(stream_threads) if stream_threads else threads
    patterns = [p.strip() for p in fio_patterns.split(",") if p.strip()]
    bonnie_params: dict = {"direct": bool(bonnie_direct)}
    if int(bonnie_concurrency) != 1:
        bonnie_params["concurrency"] = int(bonnie_concurrency)
    bonnie_metrics = ["write_kib_per_s", "rewrite_kib_per_s", "read_kib_per_s", "seeks_per_s"]
    if bonnie_files:
        bonnie_params["size_mb"] = int(bonnie_size_mb)
        bonnie = dict(factor="files", levels=[int(f) for f in bonnie_files],
                      metrics=bonnie_metrics + ["create_per_s", "random_create_per_s"])
    else:
        bonnie = dict(factor="size_mb", levels=[int(bonnie_size_mb)], metrics=bonnie_metrics)
    return {
        "cpu": dict(workload="sysbench",
                    params={"test": "cpu", "time_s": cpu_time_s, "cpu_max_prime": cpu_max_prime},
                    factor="threads", levels=threads, metrics=["events_per_s"]),
        "memory": dict(workload="stream", params={"array_mb": stream_array_mb, "ntimes": stream_ntimes},
                       factor="threads", levels=stream_levels,
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
        # 004's Figures 7.4-7.5: Bonnie++ block throughput (O_DIRECT by default: the disk, not the
        # cache) and seeks; the number of files as the factor when bonnie_files is given
        "bonnie": dict(workload="bonnie", params=bonnie_params, variant=OVERHEAD_VARIANT, **bonnie),
        # 004's Figure 7.6: sysbench OLTP against MySQL (here MariaDB, Debian 12's MySQL)
        "oltp": dict(workload="oltp", params={"table_size": int(oltp_table_size), "time_s": oltp_time_s},
                     factor="threads", levels=list(oltp_threads), count=2, variant=OVERHEAD_VARIANT,
                     metrics=["transactions_per_s", "latency_avg_ms", "latency_p95_ms"]),
    }


def overhead_testbed(spec: dict, platforms: Iterable[str],
                     check: Callable[[str, str], None] | None = None) -> tuple[dict | None, dict[str, str]]:
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
            skipped[p] = (f"{spec['workload']} needs the {image} image: labkit images build {VARIANT_BUILD[p]} "
                          f"--profile {variant} ({str(exc).splitlines()[0][:120]})")
            continue
        declared[p] = {"backend": p, "image": image}
    testbed = {"name": f"this machine, {variant} images", "hosts": [{"name": "controller"}],
               "platforms": declared} if declared else None
    return testbed, skipped


def overhead_design(bench: str, spec: dict, platforms: Sequence[str], *, replications: int,
                    seed: int) -> tuple[dict, dict]:
    """One benchmark of notebook 02 as ``(design, workload_params)``: ``platform`` x its second
    factor, ``replications`` each, every platform in one randomized plan (with one platform, no
    ``platform`` factor: the campaign's backend). A second factor with one level is not a
    factor: it goes into the workload's parameters instead."""
    if not platforms:
        raise ConfigError(f"overhead_design({bench!r}): no platform to run")
    factors: dict[str, list] = {"platform": list(platforms)} if len(platforms) > 1 else {}   # one platform: its backend
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


def platform_design(name: str, platforms: Sequence[str], factors: dict[str, Sequence], *, replications: int,
                    seed: int, description: str = "") -> tuple[dict, dict]:
    """A design running every platform in one randomized plan, as ``(design, fixed)``:
    ``platform`` first (only with two or more platforms: one platform is the campaign's backend),
    then each of ``factors`` with two or more levels; a factor with one level is no factor, it
    goes into ``fixed`` (the workload's parameters) instead. ConfigError when no platform is
    given, one is given twice, a factor has no level or nothing varies."""
    names = [str(p) for p in platforms]
    if not names:
        raise ConfigError(f"platform_design({name!r}): no platform to run")
    if len(set(names)) != len(names):
        raise ConfigError(f"platform_design({name!r}): platforms {names} name one twice")
    out: dict[str, list] = {"platform": names} if len(names) > 1 else {}
    fixed: dict = {}
    for key, values in factors.items():
        levels = list(values)
        if not levels:
            raise ConfigError(f"platform_design({name!r}): factor {key!r} needs at least one level")
        if len(levels) > 1:
            out[key] = levels
        else:
            fixed[key] = levels[0]
    if not out:
        raise ConfigError(f"platform_design({name!r}): one platform {names} and one level of every factor: "
                          "nothing varies")
    design = {"name": name, "factors": out, "replications": replications, "seed": seed}
    if description:
        design["description"] = description
    return design, fixed


def untimed_share(tidy: pd.DataFrame, by: Sequence[str], *, response: str = "wall_time_s",
                  stage_prefix: str = "stage_") -> pd.DataFrame:
    """How much of each run lies outside its timed stages, per group of ``by`` (e.g. platform and
    app): ``tidy`` is :func:`labkit.store.load_results`'s long table; a run's ``outside_s`` is
    its ``response`` less the sum of its ``<stage_prefix>*`` metrics (each the mean over the
    run's instances), counted over successful runs only. Returns ``by``, ``runs``, ``wall_s``,
    ``stages_s``, ``outside_s`` (means over the group's runs) and ``outside_pct`` (100 x
    outside_s / wall_s). ConfigError when a column is missing or no run has both the response
    and a stage."""
    import pandas as pd
    keys = list(by)
    missing = [c for c in ("run_id", "status", "metric", "value", *keys) if c not in tidy.columns]
    if missing:
        raise ConfigError(f"untimed_share: the results have no column {', '.join(missing)}")
    ok = tidy[tidy["status"] == "ok"]
    wide = ok.pivot_table(index=["run_id", *keys], columns="metric", values="value", aggfunc="mean",
                          observed=True)
    stages = [m for m in wide.columns if str(m).startswith(stage_prefix)]
    if response not in wide.columns or not stages:
        raise ConfigError(f"untimed_share: no run reports {response!r} and {stage_prefix}* metrics")
    wide = wide[wide[response].notna() & wide[stages].notna().any(axis=1)]
    runs = pd.DataFrame({"wall_s": wide[response], "stages_s": wide[stages].sum(axis=1)})
    runs["outside_s"] = runs["wall_s"] - runs["stages_s"]
    out = runs.groupby(level=keys, observed=True, sort=False).agg(
        runs=("wall_s", "size"), wall_s=("wall_s", "mean"), stages_s=("stages_s", "mean"),
        outside_s=("outside_s", "mean")).reset_index()
    if out.empty:
        raise ConfigError(f"untimed_share: no successful run reports {response!r} and {stage_prefix}* metrics")
    out["outside_pct"] = 100 * out["outside_s"] / out["wall_s"]
    return out


def with_stages_total(tidy: pd.DataFrame, *, metric: str = "stages_s", stage_prefix: str = "stage_") -> pd.DataFrame:
    """``tidy`` (:func:`labkit.store.load_results`'s long table) plus a ``metric`` row, the sum of
    its ``<stage_prefix>*_s`` values, for each run instance that reports stage times but no
    ``metric``: the pipeline workload's timed work (``stages_s``) for campaigns stored before it
    reported it (its stages run back to back, so their sum is the time from the first stage's
    start to the last's end, up to rounding). Rows it adds copy the instance's first stage row
    (its run's columns). ConfigError when a column is missing."""
    import pandas as pd
    missing = [c for c in ("run_id", "metric", "value") if c not in tidy.columns]
    if missing:
        raise ConfigError(f"with_stages_total: the results have no column {', '.join(missing)}")
    keys = [c for c in ("campaign", "run_id", "instance") if c in tidy.columns]
    names = tidy["metric"].astype(str)
    stages = tidy[names.str.startswith(stage_prefix) & names.str.endswith("_s") & (names != metric)]
    if stages.empty:
        return tidy
    have = tidy.loc[names == metric, keys].drop_duplicates()
    todo = stages.merge(have, on=keys, how="left", indicator=True)
    todo = todo[todo["_merge"] == "left_only"].drop(columns="_merge")
    if todo.empty:
        return tidy
    grouped = todo.groupby(keys, sort=False, dropna=False)
    added = grouped.head(1).assign(metric=metric).drop(columns="value")
    added = added.merge(grouped["value"].sum(min_count=1).rename("value").reset_index(), on=keys, how="left")
    return pd.concat([tidy, added[tidy.columns]], ignore_index=True)


#: notebook 02's name for the one multi-campaign loader, :func:`labkit.store.results.load_campaigns`
#: (there keyed by benchmark: each campaign's ``platform`` factor labels its rows)
load_platform_campaigns = load_campaigns


def affinity_best_times(runs: pd.DataFrame, response: str = "wall_time_s", *,
                        by: Sequence[str] = ("count", "vcpus"), higher_is_better: bool = False) -> pd.DataFrame:
    """Study 002's Table 3 on our runs: per ``by`` group (and ``platform`` when present), the
    affinity level with the better mean ``response`` (the lower, or the higher with
    ``higher_is_better``, e.g. requests/s) and how much worse the other level is.

    Returns one row per group: the ``by`` (and ``platform``) columns, ``best_affinity``,
    ``best_time_s`` (its mean), ``other_time_s`` and ``difference_pct`` =
    100 (other - best) / best, as the paper computed it (Table 3 prints the best time, 134.78 s, and
    the difference, 27.89 %; the other time is not printed).
    With ``higher_is_better`` the mean columns are ``best_mean`` and ``other_mean`` (units of
    ``response``) and ``difference_pct`` = 100 (best - other) / best, how much lower the other is.
    """
    import pandas as pd
    keys = (["platform"] if "platform" in runs.columns else []) + list(by)
    best_col, other_col = ("best_mean", "other_mean") if higher_is_better else ("best_time_s", "other_time_s")
    means = runs.groupby([*keys, "affinity"], observed=True)[response].mean().reset_index()
    rows = []
    for key, grp in means.groupby(keys, observed=True):
        if len(grp) != 2:
            continue
        grp = grp.sort_values(response, ascending=not higher_is_better)
        best, other = grp.iloc[0], grp.iloc[1]
        rows.append({**dict(zip(keys, key)), "best_affinity": best.affinity, best_col: best[response],
                     other_col: other[response],
                     "difference_pct": 100 * abs(other[response] - best[response]) / best[response]})
    return pd.DataFrame(rows, columns=[*keys, "best_affinity", best_col, other_col, "difference_pct"])


def affinity_count_differences(runs: pd.DataFrame, response: str = "wall_time_s", *,
                               column: str = "difference_s") -> pd.DataFrame:
    """Study 002's Table 4 on our runs: the change of mean ``response`` from the fewest to the
    most instances, per ``vcpus`` and ``affinity`` (and ``platform`` when present).

    Returns ``vcpus``, ``affinity`` (and ``platform``), ``counts`` ("1 x 2"), ``difference_s``
    (mean at most - mean at fewest; named ``column``, e.g. ``difference`` for a response that
    is not in seconds) and ``difference_pct`` (100 difference / mean at fewest, as the paper:
    11.65 s on 134.78 s -> 8.64 %; for Apache (Figure 3's text) a drop in requests/s is negative).
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
                     column: hi[response] - lo[response],
                     "difference_pct": 100 * (hi[response] - lo[response]) / lo[response]})
    return pd.DataFrame(rows, columns=[*keys, "counts", column, "difference_pct"])


# -- study 002: notebook 01's two workloads (N-queens, Apache + ab) ---------------------------
AFFINITY_WORKLOADS = ("nqueens", "apache")


def affinity_workload(workload: str = "nqueens", *, board_size: int = 15, requests: int = 8000,
                      concurrency: int = 100) -> dict:
    """Notebook 01's workload as a dict: ``workload`` (labkit workload name), ``params`` (its
    parameters), ``response`` (the metric analysed), ``higher_is_better``, ``better`` (the
    words, "higher is better" / "lower is better"), ``paper`` (its name in the paper's tables,
    for :func:`affinity_reference`), ``stem`` (campaign id stem, see :func:`affinity_campaign_id`)
    and ``what`` (one sentence for the notebook).

    ``apache`` is the paper's form (1,000,000 requests, 100 concurrent, the load generator
    outside the VMs): ``path: from_host``, httpd in every instance, one ab per instance on the
    host at once. ``requests`` and ``concurrency`` (ab -n, -c per instance) are the same in
    every configuration, as in the paper (100 concurrent): scaling them with the vCPUs (the
    workload's own default, :func:`labkit.workloads.apache.scaled`) would confound the load
    with the vCPU factor. 8000 requests last 1-3 s here (the paper: 1,000,000).
    """
    if workload == "nqueens":
        return {"workload": "nqueens", "params": {"board": board_size}, "response": "wall_time_s",
                "higher_is_better": False, "better": "lower is better", "paper": "N-queens",
                "stem": "affinity",
                "what": f"N-queens (board {board_size}) in every instance at once, threads = vCPUs; "
                        "the response is the mean wall time over the instances"}
    if workload == "apache":
        return {"workload": "apache",
                "params": {"path": "from_host", "requests": requests, "concurrency": concurrency},
                "response": "requests_per_s", "higher_is_better": True, "better": "higher is better",
                "paper": "Apache", "stem": "affinity-apache",
                "what": "httpd serving a static page in every instance, one ab per instance on the host "
                        "(outside the instances' CPU and memory limits) started together over the run's "
                        "private network; the response is the mean requests/s over the instances"}
    raise ConfigError(f"parameter workload={workload!r}: use one of {', '.join(AFFINITY_WORKLOADS)}")


def affinity_campaign_id(workload: str, platforms: Iterable[str], mode: str) -> str:
    """Notebook 01's default campaign id: ``<stem>-<backend>`` (``<stem>-<p1>-<p2>`` with two
    platforms, e.g. ``affinity-lxd-libvirt``) in view mode, the same + ``-new`` in run mode;
    ``stem`` from :func:`affinity_workload` (``affinity``, ``affinity-apache``). The local+lxd
    pair keeps the id it was committed under, ``<stem>-platforms`` (its instances are named
    after it in the committed store)."""
    names = list(platforms)
    stem = affinity_workload(workload)["stem"]
    cid = (f"{stem}-platforms" if names == ["local", "lxd"] else f"{stem}-" + "-".join(names))
    return cid if mode == "view" else f"{cid}-new"


def affinity_better_level(runs: pd.DataFrame, response: str, *, higher_is_better: bool, factor: str = "affinity",
                          effects: pd.DataFrame | None = None, alpha: float = 0.05) -> str:
    """One sentence: which level of ``factor`` has the better overall mean ``response``, with
    both means and the direction that counts as better (e.g. "requests/s: higher is better").

    A level is named better only when the factor's difference is significant after the family
    correction (docs/conclusions.md: Holm over the terms of the analysis): the factor's main term
    of ``effects`` (the notebook's factorial effects table), or, without it, of a main-effects
    ANOVA of ``runs`` on ``factor`` and the other design columns that vary (vcpus, memory_mb,
    count, platform). Otherwise the sentence says that no level is better and why, with the
    adjusted p-value and the rules; without a test of the factor (an unreplicated design), that no
    level is named and why."""
    from ..report.decisions import Policy, decide_terms
    from ..report.labels import label
    from ..stats import anova
    means = runs.groupby(factor, observed=True)[response].mean()
    if len(means) < 2:
        raise ConfigError(f"affinity_better_level: {factor!r} has {len(means)} level(s) in the runs")
    if effects is None:
        others = [c for c in ("platform", "vcpus", "memory_mb", "count")
                  if c in runs.columns and c != factor and runs[c].nunique() > 1]
        table = anova(runs, response=response, factors=[factor, *others], interactions=False)
        effects = table.assign(pct_variation=100 * table["eta_sq"], effect=float("nan"))
    decided = decide_terms(effects, Policy(alpha=alpha), runs=runs, response=response)
    row = decided.loc[decided["term"] == factor]
    best = means.idxmax() if higher_is_better else means.idxmin()
    parts = ", ".join(f"{lv} {m:.4g}" for lv, m in means.items())
    head = f"{label(response)}, {'higher' if higher_is_better else 'lower'} is better: "
    if row.empty or not float(row["p_adjusted"].iloc[0]) >= 0:   # unreplicated: Lenth's margins, no p-value
        return (head + f"no {label(factor)} level is named better: the analysis gives no test of it (means: "
                f"{parts}; an unreplicated design has Lenth's margins, not p-values: replicate to decide).")
    p_adj = float(row["p_adjusted"].iloc[0])
    rules = decided.attrs["rules"]
    if p_adj < alpha:
        return (head + f"the better {label(factor)} level overall is {best} (means: {parts}; "
                f"significant after the correction: {rules}, adjusted p = {p_adj:.2g}).")
    return (head + f"no {label(factor)} level is better overall: the means ({parts}) do not differ "
            f"significantly after the correction ({rules}, adjusted p = {p_adj:.2g}).")


def overhead_paper_claims(path: str | Path, data: pd.DataFrame, benchmarks: dict, *, names: dict,
                          alpha: float = 0.05) -> pd.DataFrame:
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
    out = headline_comparison(ref, data, names=names, level_col="level",
                              lower_is_better=OVERHEAD_LOWER_IS_BETTER, alpha=alpha)
    for i, row in out.iterrows():
        if np.isfinite(row.ours_pct) or row.note == "platform not measured here":
            continue
        runs = data[data.benchmark == row.benchmark]
        if not (runs.platform.astype(str) == names.get(row.platform)).any():
            out.at[i, "note"] = f"{row.benchmark} did not run on {row.platform}"
            continue
        untimed = [p for p in (row.platform, row.baseline)
                   if not ((runs.platform.astype(str) == names.get(p)) & (runs.metric == row.metric)).any()]
        if untimed:
            out.at[i, "note"] = (f"{row.metric}: not timed here on {', '.join(untimed)} "
                                 "(bonnie++ printed +++++: too fast)")
    out["verdict"] = ""
    known = out.stated_pct.notna() & out.ci_low.notna() & out.ci_high.notna()
    out.loc[known, "verdict"] = np.select(
        [out.ci_high[known] < out.stated_pct[known], out.ci_low[known] > out.stated_pct[known]],
        ["ours lower", "ours higher"], "inside our CI")
    return out
