"""The seed notebooks' claims: every number they state, built from the stores and the papers'
reference rows (:mod:`labkit.report.claims`), with the verdict of ours beside the paper's.

One function per notebook returns its claims (notebook 04's: :mod:`labkit.studies.pipeline_verdicts`;
05a's and 05b's: :mod:`labkit.studies.interconnect_verdicts`); :func:`runs_statement` says how many
runs per configuration a campaign has against the replication target, :func:`emulated` which
platforms ran as QEMU TCG (never scored against a paper's KVM) and :func:`campaign_stored` whether a
campaign is stored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from ..core import paths
from ..errors import ConfigError
from ..report.claim_compute import measured_claim
from ..report.claims import Claim, Measured, quote
from ..report.validity import rule

#: the replication target the committed campaigns are re-run to (README "Enough runs")
TARGET_HALF_WIDTH_PCT = 5.0
MIN_RUNS = 5
TCG_WHY = "QEMU TCG here (emulation, no KVM on this machine), KVM in the paper"


def reference_dir() -> Path:
    """The papers' tables (:func:`labkit.core.paths.reference_dir`: the copy that ships with labkit)."""
    return paths.reference_dir()


def campaign_stored(data_dir: str | Path, cid: str) -> bool:
    """Whether campaign ``cid`` has a store under ``data_dir``."""
    return (Path(data_dir) / cid / "store.sqlite").is_file()


def emulated(data_dir: str | Path, campaigns: Iterable[str]) -> set[str]:
    """Platforms (the ``platform`` of each run, else the campaign's backend) whose libvirt guests
    ran as QEMU TCG in any of ``campaigns``, and those campaign ids themselves."""
    from ..store import Store

    out: set[str] = set()
    for cid in campaigns:
        if not campaign_stored(data_dir, cid):
            continue
        with Store(Path(data_dir) / cid / "store.sqlite", readonly=True) as st:
            runs, meta = st.runs(), st.meta()
        for r in runs.itertuples():
            md = r.metadata if isinstance(r.metadata, dict) else {}
            if any(i.get("domain_type") == "qemu" for i in md.get("instances", [])):
                out.add(str(getattr(r, "platform", None) or meta.get("backend")))
                out.add(cid)
    return out


def _half_widths(store, response: str | None) -> list[float]:
    """Per configuration with >= 2 successful runs: the 95 % t half-width of the mean of
    ``response`` (each run: the mean over its instances) relative to the mean, in %
    (:func:`labkit.stats.summarize`)."""
    from ..stats import summarize

    if not response:
        return []
    tidy = store.tidy()
    ok = tidy[(tidy.status == "ok") & (tidy.metric == response)]
    if ok.empty:
        return []
    per_run = ok.groupby(["config", "run_id"], as_index=False).value.mean()
    s = summarize(per_run, by="config", response="value")
    s = s[(s.n >= 2) & (s["mean"] != 0) & s["mean"].map(math.isfinite)]
    return list(100 * (s.ci_high - s["mean"]) / s["mean"].abs())


def runs_statement(data_dir: str | Path, campaigns: Sequence[str]) -> str:
    """The fewest and most successful runs per configuration over ``campaigns`` and whether that
    meets :data:`MIN_RUNS`; if not, why they were not re-run with the others: the runs still
    missing and the time they would take at the campaigns' median run (``duration_s``, the
    instances' start and stop included), and that the intervals are wide. Then how many
    configurations' means reach the target (95 % CI within ±:data:`TARGET_HALF_WIDTH_PCT` % of
    the mean, each campaign's response) and the widest interval obtained."""
    from ..store import Store

    counts: list[int] = []
    halves: list[float] = []
    durations: list[float] = []
    for cid in campaigns:
        if not campaign_stored(data_dir, cid):
            continue
        with Store(Path(data_dir) / cid / "store.sqlite", readonly=True) as st:
            runs = st.runs()
            ok = runs[runs.status == "ok"]
            if ok.empty:
                continue
            counts += list(ok.groupby("config").size())
            durations += [float(d) for d in ok.duration_s if math.isfinite(d)]
            halves += _half_widths(st, (st.meta().get("workload") or {}).get("response"))
    if not counts:
        return "No successful run is stored for these campaigns."
    lo, hi = min(counts), max(counts)
    spread = f"{lo}" if lo == hi else f"{lo} to {hi}"
    if lo >= MIN_RUNS:
        out = f"Runs per configuration: {spread} (at least {MIN_RUNS})."
    else:
        missing = sum(max(0, MIN_RUNS - n) for n in counts)
        cost = ""
        if durations:
            median = float(pd.Series(durations).median())
            cost = (
                f": the {missing} runs still missing would take about {_span(missing * median)} at their "
                f"median of {_span(median)} a run (instances started and stopped included)"
            )
        out = (
            f"Runs per configuration: {spread}, fewer than {MIN_RUNS}: not re-run with the others (each "
            f"configuration's mean to ±{TARGET_HALF_WIDTH_PCT:g} % at 95 %, at least {MIN_RUNS} runs)"
            f"{cost}. The intervals below are the ones these runs give, wide or unbounded."
        )
    if halves:
        reached = sum(h <= TARGET_HALF_WIDTH_PCT for h in halves)
        widest = f"±{max(halves):.3g} %"
        target = f"within ±{TARGET_HALF_WIDTH_PCT:g} % at 95 %"
        if reached == len(halves):
            out += f" Every configuration's mean is {target} (the target; widest {widest})."
        elif reached == 0:
            out += f" No configuration's mean is {target}: the target is not reached (widest {widest})."
        else:
            out += (
                f" The mean is {target} for {reached} of {len(halves)} configurations; the target is "
                f"not reached in the others (widest {widest})."
            )
    return out


def _span(seconds: float) -> str:
    """``seconds`` in words: "40 s", "4.6 min", "1.5 h"."""
    if seconds < 90:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.2g} min" if seconds < 600 else f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.2g} h"


# -- notebook 02 (seed 004) ------------------------------------------------------------------------
#: the thesis's platforms (Table 6.1) -> labkit backends
PAPER_PLATFORMS_004 = {"Native": "local", "Native+Docker": "docker", "Native+LXC": "lxd", "KVM+VM": "libvirt"}
DIRECTION_004 = {  # the claims in words of overhead_disk_application.csv: the platform's change vs native
    "Docker: worst disk throughput of all platforms (AUFS copy-up)": -1,
    "KVM: disk throughput close to native": 0,
    "Docker: good random-seek rate": 0,
    "KVM: poor random-seek rate (virtio-blk)": -1,
    "LXC: poor application (MySQL) performance": -1,
    "Docker: best virtualized application performance": 1,
    "Docker: application performance far from native": -1,
}


def _unmeasured_note(data_dir: str | Path, campaign: str, metric: str, platforms: Sequence[str]) -> str:
    """Why a notebook 02 comparison has no value of ours: a platform the campaign did not run
    (a one-platform run has no comparison), else the metric bonnie++ did not time."""
    from .seeds import campaign_platforms

    ran = campaign_platforms(data_dir, campaign)
    absent = [p for p in platforms if p not in ran]
    if absent:
        return f"platform not measured here: {campaign} ran on {', '.join(ran) or 'none'}, not {', '.join(absent)}"
    return f"{metric} not timed here on {platforms[0]} or native (bonnie++ printed +++++: too fast)"


def overhead_claims(
    data_dir: str | Path, campaign_prefix: str = "overhead", *, alpha: float = 0.05, udp_loss_pct: float = 5.0
) -> list[Claim]:
    """Notebook 02's claims: the thesis's disk and application claims (section 7.3, 7.5,
    chapter 8) as the change of each platform's mean against native (``change_pct``: -20 is
    "20 % below native"), Table 7.2's UDP throughput beside ours after leaving out the runs that
    lost more than ``udp_loss_pct`` % of their datagrams, and the means the conclusions state."""
    ref = reference_dir()
    tcg = emulated(data_dir, [f"{campaign_prefix}-{b}" for b in ("cpu", "bonnie", "oltp", "network")])
    out: list[Claim] = []
    table = pd.read_csv(ref / "overhead_disk_application.csv", comment="#", dtype=str, keep_default_na=False)
    for i, r in enumerate(table.to_dict("records")):
        cid = f"{campaign_prefix}-{r['benchmark']}"
        if not campaign_stored(data_dir, cid):
            continue
        stated = r["stated_pct"].strip()
        paper = quote(
            ref / "overhead_disk_application.csv",
            {"claim": r["claim"]},
            "stated_pct",
            where=r["source"],
            scale=-1.0,
            direction=None if stated else DIRECTION_004[r["claim"]],
        )
        if r.get("kind") == "rank":  # a ranking, judged as one (labkit.report.claims.rank_verdict)
            levels = tuple(r["levels"].split())
            paper = quote(
                ref / "overhead_disk_application.csv",
                {"claim": r["claim"]},
                "stated_pct",
                where=r["source"],
                direction=DIRECTION_004[r["claim"]],
            )
            try:
                c = measured_claim(
                    f"004.{i}",
                    f"{r['claim']} ({r['metric']}, rank among {', '.join(levels)}; 1 = best)",
                    Measured((cid,), r["metric"], "rank", select={"platform": r["platform"]}, levels=levels),
                    data_dir,
                    unit="rank",
                    alpha=alpha,
                    paper=paper,
                    note="libvirt (QEMU TCG here) and VirtualBox left out of the ranking",
                )
            except ConfigError:
                continue
            out.append(c)
            continue
        src = Measured(
            (cid,),
            r["metric"],
            "change_pct",
            select={"platform": r["platform"]},
            baseline={"platform": r["baseline"]},
        )
        try:
            c = measured_claim(
                f"004.{i}",
                f"{r['claim']} ({r['metric']}, change against native)",
                src,
                data_dir,
                unit="%",
                alpha=alpha,
                paper=paper,
                comparable=r["platform"] not in tcg,
                why=TCG_WHY if r["platform"] in tcg else "",
            )
        except ConfigError:
            continue
        if not c.measured:
            c.note = _unmeasured_note(data_dir, cid, r["metric"], (r["platform"], r["baseline"]))
        out.append(c)
    # Table 7.2: UDP platform -> host; runs above the loss threshold are not measurements of the path
    net = f"{campaign_prefix}-network"
    if campaign_stored(data_dir, net):
        thr = rule("udp_loss", udp_loss_pct)
        for name, backend in PAPER_PLATFORMS_004.items():
            paper = quote(
                ref / "iperf_udp.csv", {"platform": name}, "udp_mbps", where="Table 7.2, p. 46", unit="Mbit/s"
            )
            src = Measured(
                (net,),
                "udp_mbit_per_s",
                "mean",
                select={"platform": backend, "path": "to_host"},
                exclude="udp_loss",
            )
            c = measured_claim(
                f"004.udp.{backend}",
                f"UDP throughput {backend} -> host (iperf3, Table 7.2)",
                src,
                data_dir,
                unit="Mbit/s",
                alpha=alpha,
                paper=paper,
                comparable=False,
                why="absolute rates of another machine (the thesis: a Core i7 with 8 GB; ours: a "
                "shared 2-core VM over a veth or bridge)",
                note=f"runs losing more than {thr.threshold:g} % of their datagrams are left out",
            )
            if c.n == 0 and c.excluded == 0:
                c.note = f"no UDP run of {backend} is stored"
            out.append(c)
    # the means the conclusions state
    for bench, metric in (("bonnie", "write_kib_per_s"), ("oltp", "transactions_per_s")):
        cid = f"{campaign_prefix}-{bench}"
        if not campaign_stored(data_dir, cid):
            continue
        for plat in ("local", "docker", "lxd", "libvirt"):
            try:
                c = measured_claim(
                    f"004.mean.{bench}.{plat}",
                    f"{bench} {metric} on {plat}" + (" (QEMU TCG)" if plat in tcg else ""),
                    Measured((cid,), metric, "mean", select={"platform": plat}),
                    data_dir,
                    unit={"write_kib_per_s": "KiB/s", "transactions_per_s": "transactions/s"}[metric],
                    alpha=alpha,
                )
            except ConfigError:  # a column the claim selects on is missing: no per-platform mean
                break
            if c.n:
                out.append(c)
    return out


# -- notebook 03 (seed 000) ------------------------------------------------------------------------
def deployment_claims(
    data_dir: str | Path,
    campaign_prefix: str = "deployments",
    *,
    platforms: Sequence[str] = ("local", "lxd", "libvirt"),
    alpha: float = 0.05,
) -> list[Claim]:
    """Notebook 03's claims: the report's headline percentages (section 4) beside our slowdown of
    the nearest test (sysbench cpu for Blackscholes) in the same scenario, platform against native.

    Ours comes from the benchmark's combined campaign (``campaign_prefix``-<benchmark>, a
    ``platform`` factor: the platforms randomized together) when it holds both platforms, else from
    the earlier layout's per-platform campaigns (``campaign_prefix``-<benchmark>-<platform>), then
    labelled ``not randomized together`` and never scored."""
    from ..studies.seeds import campaign_platforms

    ref = reference_dir() / "deployments_headlines.csv"
    table = pd.read_csv(ref, comment="#", dtype=str, keep_default_na=False)
    where = "section 4 (Conclusao, pp. 17-18)"
    benches = ("cpu", "linpack", "stream", "network")
    cids = [f"{campaign_prefix}-{b}" for b in benches] + [
        f"{campaign_prefix}-{b}-{p}" for b in benches for p in platforms
    ]
    tcg = emulated(data_dir, cids)
    out = []
    for i, r in enumerate(table.to_dict("records")):
        paper = quote(ref, {"claim": r["claim"]}, "stated_pct", where=where)
        together = f"{campaign_prefix}-{r['benchmark']}"
        a, b = (
            f"{campaign_prefix}-{r['benchmark']}-{r['platform']}",
            f"{campaign_prefix}-{r['benchmark']}-{r['baseline']}",
        )
        joint = bool(r["benchmark"]) and {r["platform"], r["baseline"]} <= set(
            campaign_platforms(data_dir, together)
        )
        if not r["benchmark"] or not (
            joint or (campaign_stored(data_dir, a) and campaign_stored(data_dir, b))
        ):
            out.append(
                Claim(
                    f"000.{i}",
                    r["claim"],
                    math.nan,
                    "%",
                    paper,
                    paper=paper,
                    note=f"not measured: {r['application']} (PARSEC) is not bundled and nothing stands in "
                    "for it here"
                    if not r["benchmark"]
                    else "platform not measured here",
                )
            )
            continue
        emul = r["platform"] in tcg or (not joint and a in tcg)
        # a stand-in workload (sysbench cpu for PARSEC Blackscholes) is not comparable, as a stand-in platform is
        why = "; ".join(
            x
            for x in (
                f"sysbench {r['benchmark']}, not PARSEC {r['application']}"
                if r["application"] and r["benchmark"] == "cpu"
                else "",
                TCG_WHY if emul else "",
            )
            if x
        )
        what = f"{r['claim']} (ours: {r['benchmark']} {r['metric']}, {r['scenario']})"
        if joint:  # one campaign, the platforms randomized together
            src = Measured(
                (together,),
                r["metric"],
                "slowdown_pct",
                select={"platform": r["platform"], "scenario": r["scenario"]},
                baseline={"platform": r["baseline"], "scenario": r["scenario"]},
            )
            out.append(
                measured_claim(
                    f"000.{i}",
                    what,
                    src,
                    data_dir,
                    unit="%",
                    alpha=alpha,
                    paper=paper,
                    comparable=not why,
                    why=why,
                )
            )
            continue
        separate = f"not randomized together: {a} and {b} are separate campaigns, run at other times"
        src = Measured(
            (a, b),
            r["metric"],
            "slowdown_pct",
            select={"campaign": a, "scenario": r["scenario"]},
            baseline={"campaign": b, "scenario": r["scenario"]},
        )
        out.append(
            measured_claim(
                f"000.{i}",
                what,
                src,
                data_dir,
                unit="%",
                alpha=alpha,
                paper=paper,
                comparable=not why,
                why="; ".join(x for x in (why, separate) if x),
                randomized=False,
                note=separate,
            )
        )
    return out


def claims_by_key(claims: Sequence[Claim]) -> Mapping[str, Claim]:
    return {c.key: c for c in claims}


__all__ = [
    "MIN_RUNS",
    "TARGET_HALF_WIDTH_PCT",
    "TCG_WHY",
    "affinity_claims",
    "campaign_stored",
    "claims_by_key",
    "deployment_claims",
    "emulated",
    "overhead_claims",
    "reference_dir",
    "runs_statement",
]


# -- notebook 01 (seed 002) ------------------------------------------------------------------------
TABLES_002 = {
    ("Xen", "N-queens"): "Table 5 (Xen, N-queens)",
    ("Xen", "Apache"): "Table 6 (Xen, Apache)",
    ("KVM", "N-queens"): "Table 7 (KVM, N-queens)",
    ("KVM", "Apache"): "Table 8 (KVM, Apache)",
}


def affinity_claims(
    data_dir: str | Path,
    campaign_id: str,
    factors: Sequence[str],
    *,
    workload: str = "N-queens",
    response: str = "wall_time_s",
    platform_words: str = "cgroup instances on this host",
) -> list[Claim]:
    """Notebook 01's claims: the share of the variation of every term with affinity that Leite
    et al. list (Tables 5-8) beside the same term's share here; never scored (no Xen or KVM
    here: ``platform_words`` says what ran)."""
    from .affinity import AFFINITY_PAPER_TERMS

    path = reference_dir() / "affinity_influence.csv"
    table = pd.read_csv(path, comment="#", dtype=str, keep_default_na=False)
    order = [f for f in AFFINITY_PAPER_TERMS.values()]
    out = []
    for r in table[table.workload == workload].to_dict("records"):
        if "affinity" not in r["term"].split(":"):
            continue
        ours = ":".join(sorted((AFFINITY_PAPER_TERMS[t] for t in r["term"].split(":")), key=order.index))
        ours_terms: tuple[str, ...] = (ours,)
        q = quote(
            path,
            {"hypervisor": r["hypervisor"], "workload": workload, "term": r["term"]},
            "pct_variation",
            where=TABLES_002[(r["hypervisor"], workload)],
        )
        out.append(
            measured_claim(
                f"002.{r['hypervisor']}.{ours}",
                f"share of the variation of {ours} ({workload}, {r['hypervisor']} there)",
                Measured((campaign_id,), response, "share", factors=tuple(factors), terms=ours_terms),
                data_dir,
                unit="%",
                paper=q,
                comparable=False,
                why=f"no {r['hypervisor']} here: {platform_words}",
            )
        )
    return out
