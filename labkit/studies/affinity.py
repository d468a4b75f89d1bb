"""Study 002 (Leite et al., CPU affinity; notebook 01): its 2^4 design scaled to this host, the
paper's published allocation of variation in our term names, its two workloads (N-queens, Apache
with ab) and its tables (best affinity per group, the change with the instance count) on our runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..design import Design
from ..errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd


def affinity_levels(
    host_cpus: int,
    host_memory_mb: int,
    *,
    vcpus: Sequence[int] | None = None,
    memory_mb: Sequence[int] | None = None,
    affinity: Sequence[str] | None = None,
    count: Sequence[int] | None = None,
) -> dict[str, list]:
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


def affinity_design(
    host_cpus: int,
    host_memory_mb: int,
    *,
    replications: int = 3,
    seed: int = 2017,
    platforms: Sequence[str] | None = None,
    workload: str = "N-queens",
    **levels: Sequence | None,
) -> Design:
    """The 2^4 factorial of study 002 as a :class:`Design` (see :func:`affinity_levels`); with two
    or more ``platforms``, a ``platform`` factor first (platform x 2^4, one randomized plan).
    ``workload`` names the benchmark in the description (N-queens, Apache)."""
    factors = affinity_levels(host_cpus, host_memory_mb, **levels)
    if platforms is not None and len(platforms) > 1:
        factors = {"platform": list(platforms), **factors}
    return Design.from_dict(
        {
            "name": "affinity",
            "description": "2^4 factorial after Leite et al. (002): vCPU x memory x affinity x instances, "
            + workload
            + (", on every platform" if "platform" in factors else ""),
            "factors": factors,
            "replications": replications,
            "seed": seed,
        }
    )


# -- the paper's published allocation of variation ---------------------------------------
#: the paper's factor names -> ours (the design's factors, in its order)
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

    order = list(AFFINITY_PAPER_TERMS.values())  # our factor order, the order of effect terms

    def ours(term):  # the paper writes "VMs:affinity"; our effects table says "affinity:count"
        try:
            return ":".join(sorted((AFFINITY_PAPER_TERMS[p] for p in term.split(":")), key=order.index))
        except KeyError as exc:
            raise ConfigError(f"{path}: unknown term {term!r}; known {list(AFFINITY_PAPER_TERMS)}") from exc

    return pd.DataFrame(
        {
            "source": "Leite et al., " + ref.hypervisor,
            "term": ref.term.map(ours),
            "pct_variation": ref.pct_variation.astype(float),
        }
    )


def affinity_best_times(
    runs: pd.DataFrame,
    response: str = "wall_time_s",
    *,
    by: Sequence[str] = ("count", "vcpus"),
    higher_is_better: bool = False,
) -> pd.DataFrame:
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
        rows.append(
            {
                **dict(zip(keys, key)),
                "best_affinity": best.affinity,
                best_col: best[response],
                other_col: other[response],
                "difference_pct": 100 * abs(other[response] - best[response]) / best[response],
            }
        )
    return pd.DataFrame(rows, columns=[*keys, "best_affinity", best_col, other_col, "difference_pct"])


def affinity_count_differences(
    runs: pd.DataFrame, response: str = "wall_time_s", *, column: str = "difference_s"
) -> pd.DataFrame:
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
        rows.append(
            {
                **dict(zip(keys, key)),
                "counts": f"{lo['count']} x {hi['count']}",
                column: hi[response] - lo[response],
                "difference_pct": 100 * (hi[response] - lo[response]) / lo[response],
            }
        )
    return pd.DataFrame(rows, columns=[*keys, "counts", column, "difference_pct"])


# -- notebook 01's two workloads (N-queens, Apache + ab) ----------------------------------------
#: the workloads :func:`affinity_workload` knows
AFFINITY_WORKLOADS = ("nqueens", "apache")


def affinity_workload(
    workload: str = "nqueens", *, board_size: int = 16, requests: int = 16000, concurrency: int = 100
) -> dict:
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
    with the vCPU factor. 16000 requests last about 1.5-5 s here (8000 took 0.77-3.4 s: some runs
    under the 1-s minimum of measured work; the paper: 1,000,000). Board 16 takes 3.6 s with two
    threads here (15 took 0.53 s).
    """
    if workload == "nqueens":
        return {
            "workload": "nqueens",
            "params": {"board": board_size},
            "response": "wall_time_s",
            "higher_is_better": False,
            "better": "lower is better",
            "paper": "N-queens",
            "stem": "affinity",
            "what": f"N-queens (board {board_size}) in every instance at once, threads = vCPUs; "
            "the response is the mean wall time over the instances",
        }
    if workload == "apache":
        return {
            "workload": "apache",
            "params": {"path": "from_host", "requests": requests, "concurrency": concurrency},
            "response": "requests_per_s",
            "higher_is_better": True,
            "better": "higher is better",
            "paper": "Apache",
            "stem": "affinity-apache",
            "what": "httpd serving a static page in every instance, one ab per instance on the host "
            "(outside the instances' CPU and memory limits) started together over the run's "
            "private network; the response is the mean requests/s over the instances",
        }
    raise ConfigError(f"parameter workload={workload!r}: use one of {', '.join(AFFINITY_WORKLOADS)}")


def affinity_campaign_id(workload: str, platforms: Iterable[str], mode: str) -> str:
    """Notebook 01's default campaign id: ``<stem>-<backend>`` (``<stem>-<p1>-<p2>`` with two
    platforms, e.g. ``affinity-lxd-libvirt``) in view mode, the same + ``-new`` in run mode;
    ``stem`` from :func:`affinity_workload` (``affinity``, ``affinity-apache``). The local+lxd
    pair keeps the id it was committed under, ``<stem>-platforms`` (its instances are named
    after it in the committed store)."""
    names = list(platforms)
    stem = affinity_workload(workload)["stem"]
    cid = f"{stem}-platforms" if names == ["local", "lxd"] else f"{stem}-" + "-".join(names)
    return cid if mode == "view" else f"{cid}-new"


def affinity_better_level(
    runs: pd.DataFrame,
    response: str,
    *,
    higher_is_better: bool,
    factor: str = "affinity",
    effects: pd.DataFrame | None = None,
    alpha: float = 0.05,
) -> str:
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
        others = [
            c
            for c in ("platform", "vcpus", "memory_mb", "count")
            if c in runs.columns and c != factor and runs[c].nunique() > 1
        ]
        table = anova(runs, response=response, factors=[factor, *others], interactions=False)
        effects = table.assign(pct_variation=100 * table["eta_sq"], effect=float("nan"))
    decided = decide_terms(effects, Policy(alpha=alpha), runs=runs, response=response)
    row = decided.loc[decided["term"] == factor]
    best = means.idxmax() if higher_is_better else means.idxmin()
    parts = ", ".join(f"{lv} {m:.4g}" for lv, m in means.items())
    head = f"{label(response)}, {'higher' if higher_is_better else 'lower'} is better: "
    if row.empty or not float(row["p_adjusted"].iloc[0]) >= 0:  # unreplicated: Lenth's margins, no p-value
        return (
            head + f"no {label(factor)} level is named better: the analysis gives no test of it (means: "
            f"{parts}; an unreplicated design has Lenth's margins, not p-values: replicate to decide)."
        )
    p_adj = float(row["p_adjusted"].iloc[0])
    rules = decided.attrs["rules"]
    if p_adj < alpha:
        return (
            head + f"the better {label(factor)} level overall is {best} (means: {parts}; "
            f"significant after the correction: {rules}, adjusted p = {p_adj:.2g})."
        )
    return (
        head + f"no {label(factor)} level is better overall: the means ({parts}) do not differ "
        f"significantly after the correction ({rules}, adjusted p = {p_adj:.2g})."
    )
