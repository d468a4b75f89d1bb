"""Designs, mappings and analyses of seed studies 000, 001 and 003 (notebooks 03, 04, 05a, 05b).

* :func:`read_reference`: a published-numbers CSV of ``data/reference/`` with its citation
  (the ``#`` lines at its top name the seed file, table or figure and page).
* Seed 003 (public cloud, notebook 05a): its analyses of the thesis's tables are in
  :mod:`labkit.studies.public_cloud`.
* Seed 000 (notebook 03): :data:`SCENARIOS` and :func:`scenario_settings` (dedicated, shared and
  overcommitted deployments as vCPUs and co-located instances on this host).
* :class:`LabelledDesign` (:mod:`labkit.studies.labelled`): a design with *label factors*
  (``scenario``, ``neighbours``) whose levels stand for settings of other factors (vcpus,
  count ...), so that a study's own factor is randomized in one plan and analysed by its own name.
* :func:`SeedCampaign`: a campaign with the studies' run hooks (:mod:`labkit.run.hooks`):
  :class:`KsmSwitch` (:mod:`labkit.studies.ksm`) records the host's KSM state with every run and
  switches it per run as a ``ksm`` factor (seed 000 credits KSM for several results);
  :class:`Neighbours` runs ``neighbours`` = k noisy neighbours (seed 003's 0, 1 or 3) where the
  plain campaign runs one.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.instance import InstanceSpec
from ..errors import ConfigError
from ..run.campaign import Campaign
from ..run.hooks import RunContext, RunHook, check_hooks
from ..store import Store

# re-exported from the modules they moved to: ``from labkit.studies.seeds import KsmSwitch`` still works
from .ksm import (  # noqa: F401
    KSM,
    KSM_LEVELS,
    KSM_SCAN,
    KsmSwitch,
    check_ksm_levels,
    check_ksm_scan,
    ksm_check_statement,
    ksm_state,
    run_ksm,
    set_ksm,
)
from .labelled import MAPPABLE, LabelledDesign  # noqa: F401

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


# -- published numbers ------------------------------------------------------------------------
def read_reference(path: str | Path, columns: Iterable[str]) -> tuple[pd.DataFrame, str]:
    """``(table, citation)`` of a reference CSV: the table (``#`` lines skipped) and its
    citation (the ``#`` lines at the top, joined). ConfigError when the file has no citation
    or lacks one of ``columns``."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"reference file {path} not found")
    with path.open(encoding="utf-8") as f:
        head = []
        for line in f:
            if not line.startswith("#"):
                break
            head.append(line[1:].strip())
    if not head:
        raise ConfigError(
            f"{path}: no citation: start the file with '# ' lines naming the seed file, "
            "table or figure and page"
        )
    table = pd.read_csv(path, comment="#")
    missing = sorted(set(columns) - set(table.columns))
    if missing:
        raise ConfigError(f"{path}: columns {missing} missing (has {list(table.columns)})")
    return table, " ".join(head)


# -- seed 000: deployment scenarios -----------------------------------------------------------
#: What each scenario of seed 000 means (section 2.5, Figure 2.1, and section 3.1): the
#: ratio of vCPUs given to instances to the host's CPUs, and how many instances run the
#: benchmark at the same time on one host.
SCENARIOS = {
    "dedicated": {
        "vcpu_per_cpu": 1.0,
        "instances": 1,
        "paper": "1 VM using all of the host (8 vCPUs on 8 cores), alone on it",
    },
    "shared": {
        "vcpu_per_cpu": 1.0,
        "instances": 2,
        "paper": "instances that split the host: 2 x 4 vCPUs (3.1) or 4 x 2 vCPUs (2.5), "
        "all running a benchmark at once",
    },
    "overcommitted": {
        "vcpu_per_cpu": 1.5,
        "instances": 3,
        "paper": "more processes than the host's CPUs (3.2.3): LINPACK with 6 threads at "
        "once; the 1.5 vCPUs per CPU here is labkit's choice, not the report's",
    },
}


def scenario_settings(scenario: str, host_cpus: int) -> dict:
    """Host-factor settings of seed 000's ``scenario`` on a host with ``host_cpus`` CPUs.

    dedicated: 1 instance with every CPU; shared: 2 instances with half the CPUs each (at
    least 1); overcommitted: the shared instance size, as many instances as make 1.5 vCPUs
    per CPU (at least 3): labkit's own choice (the report, section 3.2.3, ran LINPACK with 6
    threads at once and gives no ratio). Returns ``{"vcpus": .., "count": ..}``.
    """
    if scenario not in SCENARIOS:
        raise ConfigError(f"scenario {scenario!r}: use one of {', '.join(SCENARIOS)}")
    if isinstance(host_cpus, bool) or not isinstance(host_cpus, int) or host_cpus < 1:
        raise ConfigError(f"host_cpus must be a positive integer, got {host_cpus!r}")
    if scenario == "dedicated":
        return {"vcpus": host_cpus, "count": 1}
    half = max(1, host_cpus // 2)
    if scenario == "shared":
        return {"vcpus": half, "count": 2}
    return {"vcpus": half, "count": max(3, math.ceil(1.5 * host_cpus / half))}


def scenario_table(host_cpus: int, scenarios: dict = SCENARIOS) -> pd.DataFrame:
    """Seed 000's scenarios on this host: ``scenario``, ``vcpus``, ``count`` (instances at
    once), ``vcpus_total``, ``vcpu_per_cpu`` (here) and ``paper`` (what the report did)."""
    import pandas as pd

    rows = []
    for s in scenarios:
        st = scenario_settings(s, host_cpus)
        rows.append(
            {
                "scenario": s,
                **st,
                "vcpus_total": st["vcpus"] * st["count"],
                "vcpu_per_cpu": st["vcpus"] * st["count"] / host_cpus,
                "paper": SCENARIOS[s]["paper"],
            }
        )
    return pd.DataFrame(rows)


class Neighbours(RunHook):
    """A ``neighbours`` factor (0, 1, 3 ...: at most 16) as the number of noisy neighbours of kind
    ``kind`` (default ``cpu``; ``command`` for kind ``command``) started beside the run's
    instances, each with the run's instance size (:func:`labkit.run.noise.neighbours`)."""

    def __init__(self, kind: str = "cpu", command: str | None = None):
        from ..run.noise import KINDS

        if kind not in KINDS or kind == "none":
            raise ConfigError(
                f"noise_kind must be one of {', '.join(k for k in KINDS if k != 'none')}, got {kind!r}"
            )
        self.kind, self.command = kind, command

    def around_run(self, ctx: RunContext):
        if "neighbours" not in ctx.run.levels:
            return contextlib.nullcontext([])
        k = ctx.run.levels["neighbours"]
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 16:
            raise ConfigError(f"factor 'neighbours': level {k!r} must be an integer from 0 to 16")
        if k == 0:
            return contextlib.nullcontext([])
        from ..run.noise import neighbours

        ctx.metadata["noise"] = self.kind
        spec = ctx.spec
        return neighbours(
            ctx.backend,
            InstanceSpec(spec.vcpus, spec.memory_mb, spec.affinity, 1),
            self.kind,
            count=k,
            command=self.command,
            prefix=ctx.prefix + "noise",
        )


def SeedCampaign(
    *args: Any,
    noise_kind: str = "cpu",
    noise_command: str | None = None,  # noqa: N802
    ksm_root: Path = KSM,
    ksm_scan: dict | None = None,
    **kwargs: Any,
) -> Campaign:
    """A :class:`~labkit.run.campaign.Campaign` (same arguments) with the seed studies' hooks: KSM
    recorded with every run and switched for a ``ksm`` factor (:class:`KsmSwitch`), and a
    ``neighbours`` factor of ``noise_kind`` neighbours (:class:`Neighbours`); any ``hooks=``
    given come after them. KSM is host-wide: with a ``ksm`` factor the instances must run on
    this host (not on a testbed, ``ssh`` or a remote libvirt URI), and nothing else on it should
    depend on KSM meanwhile; ``ksm_scan`` sets ksmd's scan rate for the campaign (:class:`KsmSwitch`).

    KSM merges only memory marked mergeable: QEMU marks a VM's, a native process (the ``local``,
    ``docker`` and ``lxd`` backends) only what it marks itself. With a ``ksm`` factor the
    ``stream`` workload marks its arrays (``mergeable: true``, unless the parameters say
    otherwise); ``sysbench`` (a packaged binary) cannot mark its memory, so its KSM ``on`` runs
    are flagged ``treatment not applied`` by the campaign's treatment check
    (:mod:`labkit.run.treatments`) rather than read as "KSM makes no difference". Suspect runs
    run once more at the end (``quarantine``) unless the design or ``quarantine=False`` says not
    (:attr:`Design.quarantine_default <labkit.design.Design.quarantine_default>`)."""
    ksm = KsmSwitch(ksm_root, scan=ksm_scan)
    asked = kwargs.get("quarantine")
    c = Campaign(
        *args,
        hooks=[ksm, Neighbours(noise_kind, noise_command), *check_hooks(kwargs.pop("hooks", None))],
        **kwargs,
    )
    if asked is None:  # the seed notebooks' campaigns quarantine suspect runs unless the design says not
        c.quarantine = c.design.quarantine_default
    if "ksm" in c.design.factor_names:
        check_ksm_levels(next(f for f in c.design.factors if f.name == "ksm").levels)
        if not _runs_here(c):
            raise ConfigError(
                "factor 'ksm' switches KSM on this host: run the campaign on a local "
                "backend (local, docker, lxd, libvirt with a local URI), not on a "
                "testbed with other hosts or a remote host"
            )
        ksm.switch = True
        if c.workload.name == "stream" and "mergeable" not in (kwargs.get("workload_params") or {}):
            c.workload.params["mergeable"] = True  # a Bool parameter: KSM may merge the arrays
    return c


#: backends whose instances run on this machine when their options name no remote host
HERE_BACKENDS = ("local", "docker", "lxd", "libvirt")


def _remote_options(options: dict) -> bool:
    uri = str(options.get("uri") or "")
    base = str(options.get("base_url") or "")
    return "+ssh://" in uri or "+tcp://" in uri or "+tls://" in uri or base.startswith(("ssh://", "tcp://"))


def _runs_here(c: Campaign) -> bool:
    """Whether every instance of campaign ``c`` runs on this machine: its backend (or, with a
    ``platform`` factor, each platform of the testbed of this machine alone) is a local backend
    with no remote URI."""
    from ..run.platforms import design_platforms

    if c.testbed is None:
        return c.backend_name in HERE_BACKENDS and not _remote_options(c.backend_options)
    tb = c.testbed
    if tb.slurm is not None or any(h.remote for h in tb.hosts):
        return False
    for name in design_platforms(c.design) or [c.backend_name]:
        plat = tb.platform(name)
        if plat.backend not in HERE_BACKENDS or _remote_options(plat.options):
            return False
    return True


# -- seed 000: the benchmarks of notebook 03 ---------------------------------------------------
def deployment_benchmarks(
    *,
    linpack_n: int = 1000,
    cpu_time_s: float = 2,
    stream_array_mb: int | None = None,
    stream_ntimes: int = 5,
    iperf_duration_s: float = 2,
    scenarios: Sequence[str] = tuple(SCENARIOS),
    ksm_array_mb: int | None = None,
    ksm_ntimes: int | None = None,
) -> dict:
    """Benchmark name -> ``workload``, fixed ``params``, ``factor`` ("scenario"), the
    ``scenarios`` it runs in, whether it needs the run's private ``network`` and the ``metrics``
    analysed, for seed 000's fronts on labkit workloads: LINPACK (``linpack``: HPL of hpcc, one per
    instance; needs ``hpcc`` in the instance), CPU (``sysbench cpu``, where hpcc is missing), STREAM (``stream``) and a network test between two instances of the run (``iperf3``
    path ``instances``, in place of UPerf; only where a scenario has >= 2 instances). ``ksm``: the
    KSM campaign's STREAM, its arrays marked mergeable (``madvise(MADV_MERGEABLE)``: KSM merges
    no page of a native process otherwise), ``ksm_array_mb`` MiB per array and ``ksm_ntimes``
    passes (default: the STREAM benchmark's)."""
    scenarios = list(scenarios)
    return {
        "linpack": dict(
            workload="linpack",
            params={"n": linpack_n},
            factor="scenario",
            scenarios=scenarios,
            network=False,
            metrics=["hpl_gflops"],
        ),
        "cpu": dict(
            workload="sysbench",
            params={"test": "cpu", "time_s": cpu_time_s, "cpu_max_prime": 20000},
            factor="scenario",
            scenarios=scenarios,
            network=False,
            metrics=["events_per_s"],
        ),
        "stream": dict(
            workload="stream",
            params={"array_mb": stream_array_mb, "ntimes": stream_ntimes},
            factor="scenario",
            scenarios=scenarios,
            network=False,
            metrics=["triad_mb_per_s", "copy_mb_per_s"],
        ),
        "network": dict(
            workload="iperf3",
            params={"path": "instances", "protocol": "tcp", "duration_s": iperf_duration_s},
            factor="scenario",
            scenarios=[s for s in scenarios if s != "dedicated"],
            network=True,
            metrics=["tcp_mbit_per_s"],
        ),
        "ksm": dict(
            workload="stream",
            params={
                "array_mb": stream_array_mb if ksm_array_mb is None else ksm_array_mb,
                "ntimes": stream_ntimes if ksm_ntimes is None else ksm_ntimes,
                "mergeable": True,
                "ksm_settle_s": KSM_SETTLE_S,
            },
            factor="scenario",
            scenarios=scenarios,
            network=False,
            metrics=["triad_mb_per_s", "copy_mb_per_s"],
        ),
    }


#: the KSM campaign's STREAM waits up to this many seconds, before its timed passes, for KSM to merge
#: half its arrays' pages (the ``stream`` workload's ``ksm_settle_s``): ksmd merges only pages left
#: unchanged between two scans, and the timed passes rewrite every page, so without the wait "on"
#: runs merged nothing in some runs (issue 42)
KSM_SETTLE_S = 10

#: the benchmarks of :func:`deployment_benchmarks` whose workload takes a ``threads`` parameter
THREADED = ("linpack", "cpu", "stream")


def scenario_design(
    bench: dict,
    host_cpus: int,
    *,
    replications: int,
    seed: int,
    name: str,
    ksm: Sequence[str] | None = None,
    threads: Sequence[int] | None = None,
    platforms: Sequence[str] | None = None,
) -> LabelledDesign:
    """One campaign's design for a :func:`deployment_benchmarks` entry: factor ``scenario`` (its
    levels in random order, ``replications`` each), every level carrying its vCPUs and instance
    count on this host (:func:`scenario_settings`) and, for the network test, ``network: private``.
    ``ksm`` (e.g. ``["off", "on"]``): a ``ksm`` factor crossed with the scenarios, which
    :class:`SeedCampaign` applies to the host before each run. ``threads`` (e.g. ``[1, 2]``): the
    benchmark's threads per instance as a factor crossed with the scenarios (seed 000 ran up to 8
    threads, one per core/vCPU, section 3.1: ``data/reference/sweeps.csv``); a level above a
    scenario's vCPUs per instance oversubscribes that instance, which the report did only in
    its overcommitted scenario. Default: threads = each instance's vCPUs (the workloads' own).
    ``platforms`` (two or more, e.g. ``["local", "lxd", "libvirt"]``): a ``platform`` factor first,
    crossed with the others, so that every platform's runs are interleaved in one randomized plan
    (a campaign on a testbed of this machine alone, :mod:`labkit.run.platforms`); one platform is
    the campaign's backend, not a factor."""
    if len(bench["scenarios"]) < 2:
        raise ConfigError(f"{name}: needs at least 2 scenarios, got {bench['scenarios']}")
    extra = {"network": "private"} if bench.get("network") else {}
    labels = {"scenario": {s: {**scenario_settings(s, host_cpus), **extra} for s in bench["scenarios"]}}
    factors: dict[str, list] = {}
    if platforms is not None:
        if isinstance(platforms, str) or not platforms or len(set(platforms)) != len(platforms):
            raise ConfigError(
                f"{name}: platforms must be a list of distinct platform names, got {platforms!r}"
            )
        if len(platforms) > 1:
            factors["platform"] = list(platforms)
    factors["scenario"] = list(bench["scenarios"])
    if threads:
        if bench["workload"] not in ("linpack", "sysbench", "stream"):
            raise ConfigError(
                f"{name}: parameter threads_levels: workload {bench['workload']!r} takes no "
                f"threads (those that do: {', '.join(THREADED)})"
            )
        if len(threads) < 2:
            raise ConfigError(
                f"{name}: threads {list(threads)}: one level is not a sweep; set the "
                "workload's threads parameter instead"
            )
        factors["threads"] = list(threads)
    if ksm:
        factors["ksm"] = check_ksm_levels(ksm, "parameter ksm_levels")
        labels["ksm"] = {lv: {} for lv in factors["ksm"]}
    return LabelledDesign.with_labels(
        {"name": name, "factors": factors, "replications": replications, "seed": seed}, labels
    )


def campaign_platforms(data_dir: str | Path, campaign_id: str) -> list[str]:
    """The platforms a stored campaign ran on: its ``platform`` factor's levels, else its backend;
    empty when it is not stored or cannot be read."""
    from ..errors import StoreError

    path = Path(data_dir) / campaign_id / "store.sqlite"
    if not path.is_file():
        return []
    try:
        with Store(path, readonly=True) as st:
            meta = st.meta()
    except StoreError:
        return []
    levels = ((meta.get("design") or {}).get("factors") or {}).get("platform")
    if isinstance(levels, dict):
        levels = levels.get("levels")
    if isinstance(levels, list) and levels:
        return [str(v) for v in levels]
    return [str(meta["backend"])] if meta.get("backend") else []


def deployment_testbed(
    platforms: Sequence[str], backend_options: dict | None = None, *, variant: str | None = None
) -> dict | None:
    """The testbed of a notebook 03 campaign on this machine: each platform declared with its
    ``backend_options`` and, for a benchmark that needs an image variant (``variant``, e.g.
    ``study`` for LINPACK's hpcc), that variant's image (:func:`labkit.run.platforms.variant_image`)
    unless its options name an image. None when nothing needs declaring (the backends' defaults)."""
    from ..run.platforms import VARIANT_BUILD, variant_image

    options = backend_options or {}
    declared = {}
    for p in platforms:
        opts = dict(options.get(p) or {})
        if variant and p in VARIANT_BUILD and "image" not in opts:
            opts["image"] = variant_image(p, variant)
        if opts:
            declared[p] = {"backend": p, **opts}
    if not declared:
        return None
    return {
        "name": "this machine" + (f", {variant} images" if variant else ""),
        "hosts": [{"name": "controller"}],
        "platforms": declared,
    }


def headline_comparison(
    reference: pd.DataFrame,
    data: pd.DataFrame,
    *,
    names: dict,
    level_col: str = "scenario",
    lower_is_better: Iterable[str] = (),
    alpha: float = 0.05,
) -> pd.DataFrame:
    """The paper's headline percentages beside ours.

    ``reference`` rows: ``claim``, ``platform`` and ``baseline`` (backend names: local, lxd,
    libvirt), ``stated_pct`` (% slower than the baseline; negative: faster), ``benchmark``,
    ``metric`` and ``level_col`` (our comparable test, empty when we have none). ``data``: one row
    per run as :func:`labkit.store.results.load_campaigns` gives (``platform`` labelled through
    ``names``: backend -> label, ``benchmark``, ``metric``, ``level``, ``value``); metrics named in
    ``lower_is_better`` are times, the others throughputs.
    Returns ``reference`` plus ``ours_pct`` (100 (slowdown ratio - 1): % slower than the baseline),
    ``ci_low``/``ci_high`` (Fieller, in %) and ``n``/``n_base``; NaN where we have no comparable
    measurement (``note`` says why).
    """
    import numpy as np
    import pandas as pd

    from ..stats import overhead_ratios

    out = []
    for ref in reference.to_dict("records"):
        row = {
            **ref,
            "ours_pct": np.nan,
            "ci_low": np.nan,
            "ci_high": np.nan,
            "n": 0,
            "n_base": 0,
            "note": "",
        }
        bench = ref.get("benchmark")
        plat, base = names.get(ref["platform"]), names.get(ref["baseline"])
        if not isinstance(bench, str) or not bench:
            row["note"] = "no comparable labkit measurement"
        elif plat is None or base is None:
            row["note"] = "platform not measured here"
        else:
            sel = data[
                (data.benchmark == bench)
                & (data.metric == ref["metric"])
                & (data.level.astype(str) == str(ref[level_col]))
                & data.platform.astype(str).isin([plat, base])
            ].copy()
            sel["platform"] = sel.platform.astype(str)
            if sel.platform.nunique() < 2:
                row["note"] = "one of the two platforms has no successful run"
            else:
                o = overhead_ratios(
                    sel,
                    response="value",
                    baseline=base,
                    alpha=alpha,
                    lower_is_better=ref["metric"] in set(lower_is_better),
                ).iloc[0]
                row.update(
                    ours_pct=100 * (o.ratio - 1),
                    ci_low=100 * (o.ci_low - 1),
                    ci_high=100 * (o.ci_high - 1),
                    n=int(o.n),
                    n_base=int(o.n_base),
                    note=o.note,
                )
        out.append(row)
    return pd.DataFrame(out)


def paper_vs_labkit_figure(table: pd.DataFrame, *, title: str, label_col: str = "claim") -> Figure:
    """The paper's ``stated_pct`` (diamond) and ours (``ours_pct``, dot, with its CI
    ``ci_low``/``ci_high``) per row of ``table`` (from :func:`headline_comparison` or alike), on
    a log axis of the ratio 1 + pct/100 labelled in %, so that a 10x emulation slowdown and a
    3 % overhead share one readable axis; a CI that is unbounded or reaches far past the values
    ends in an arrowhead (:func:`labkit.report.small_n.draw_interval`), a row without a number
    says so ("paper: in words", "not measured here"), and a ``verdict`` column, when present,
    is added to each row's label. Returns the matplotlib Figure."""
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    from ..report.labels import colors
    from ..report.small_n import data_limits, draw_interval, log_ticks

    n = len(table)
    fig = Figure(figsize=(8.5, 0.6 * n + 1.8))  # not pyplot: shown once, where the notebook displays it
    ax = fig.subplots()
    y = np.arange(n)
    paper_c, ours_c = colors(["paper", "labkit"])

    def ratio(pct):
        return np.clip(1 + np.asarray(pct, float) / 100, 1e-3, None)

    stated, ours = ratio(table.stated_pct), ratio(table.ours_pct)
    lo, hi = ratio(table.ci_low), ratio(table.ci_high)
    shown = [v for v in (*stated, *ours) if np.isfinite(v)]
    near = [b for b in (*lo, *hi) if np.isfinite(b) and shown and min(shown) / 10 <= b <= max(shown) * 10]
    xlim = data_limits([*shown, *near], log=True, include=[1.0])
    ax.set_xscale("log")
    ax.set_xlim(*xlim)
    ax.plot(stated, y + 0.15, "D", color=paper_c, label="paper (as stated)", markersize=6)
    ax.plot(ours, y - 0.15, "o", color=ours_c, label="labkit, this host (95 % CI)", markersize=6)
    for i in range(n):
        if np.isfinite(ours[i]):
            draw_interval(ax, i - 0.15, lo[i], hi[i], orient="h", color=ours_c, limits=xlim)
        else:
            ax.text(1, i - 0.15, " not measured here", va="center", fontsize=7)
        if not np.isfinite(stated[i]):
            ax.text(1, i + 0.15, " paper: in words", va="center", fontsize=7)
    ax.axvline(1, color="grey", lw=0.8)
    labels = [str(s) for s in table[label_col]]
    if "verdict" in table.columns:
        labels = [f"{lab}\n[{v}]" if v else lab for lab, v in zip(labels, table.verdict.fillna(""))]
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_ylim(n - 0.5, -0.5)
    log_ticks(ax, "x")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: f"{100 * (x - 1):+.3g} %"))
    ax.set_xlabel("% slower than the baseline (negative: faster), log scale of the ratio")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig
