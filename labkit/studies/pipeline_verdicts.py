"""Notebook 04's claims (seed 001, the pipeline study): Dedup's KVM-vs-LXC difference, LXC against
native per app and the disk-format claims, beside the paper's (:func:`pipeline_claims`), and the
platforms of the notebook's one randomized campaign (:func:`pipeline_platforms`). The claims of the
other notebooks and the helpers shared with them: :mod:`labkit.studies.verdicts`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from ..report.claim_compute import measured_claim
from ..report.claims import Claim, Measured, quote
from .verdicts import TCG_WHY, campaign_stored, emulated, reference_dir

#: notebook 04's stand-in workload and its platforms from separate campaigns, as a claim's ``why`` says them
PIPELINE_STAND_IN = "pipeline stand-in, not PARSEC"
NOT_TOGETHER = "platforms from separate campaigns: not randomized together"


def pipeline_platforms(data_dir: str | Path, campaign_prefix: str = "pipeline") -> list[str]:
    """The platforms of notebook 04's one randomized campaign ``campaign_prefix`` (its runs'
    ``platform`` levels, or its backend when it has no ``platform`` factor); [] when that
    campaign is not stored (the notebook then reads the old per-platform campaigns
    ``<campaign_prefix>-<platform>``)."""
    from ..store import Store

    if not campaign_stored(data_dir, campaign_prefix):
        return []
    with Store(Path(data_dir) / campaign_prefix / "store.sqlite", readonly=True) as st:
        runs, meta = st.runs(), st.meta()
    if "platform" in runs.columns and runs["platform"].notna().any():
        return [str(p) for p in pd.unique(runs["platform"].dropna())]
    return [str(meta.get("backend"))] if meta.get("backend") else []


def _pipeline_pair(
    data_dir: str | Path,
    campaign_prefix: str,
    platform: str,
    baseline: str,
    app: str,
    metric: str = "stages_s",
) -> tuple[Measured | None, bool]:
    """``(source, randomized)`` of ``platform`` against ``baseline`` for ``app`` on ``metric``: inside the one
    randomized campaign when it holds both, else across the old per-platform campaigns (not
    randomized together), else ``(None, True)``: not measured."""
    together = pipeline_platforms(data_dir, campaign_prefix)
    if {platform, baseline} <= set(together):
        return Measured(
            (campaign_prefix,),
            metric,
            "slowdown_pct",
            select={"platform": platform, "app": app},
            baseline={"platform": baseline, "app": app},
            lower_is_better=True,
        ), True
    a, b = f"{campaign_prefix}-{platform}", f"{campaign_prefix}-{baseline}"
    if not together and campaign_stored(data_dir, a) and campaign_stored(data_dir, b):
        return Measured(
            (a, b),
            metric,
            "slowdown_pct",
            select={"campaign": a, "app": app},
            baseline={"campaign": b, "app": app},
            lower_is_better=True,
        ), False
    return None, True


def pipeline_claims(
    data_dir: str | Path,
    campaign_prefix: str = "pipeline",
    *,
    disk_campaign: str | None = None,
    alpha: float = 0.05,
    equivalence: pd.DataFrame | None = None,
    margin: float | None = None,
) -> list[Claim]:
    """Notebook 04's claims, none scored (the workload is a stand-in, not PARSEC): Dedup's
    KVM-vs-LXC difference (the paper's 40.19 %) where KVM was measured, else not measured;
    seed 001's "LXC performs like native" per app (``pipeline_native.csv``); the disk-format
    claims in words (qcow2 vs raw). Platforms are compared inside the one randomized campaign
    ``campaign_prefix`` when it is stored (its ``platform`` factor), else across the old
    per-platform campaigns ``<campaign_prefix>-<platform>``, then labelled not randomized
    together (``Claim.randomized``). ``equivalence``: :func:`labkit.report.decisions.baseline_table`
    of lxd against local (``app`` and optionally ``threads`` columns) with its ``margin``: each
    LXC-vs-native claim's note states its equivalence verdicts. Each claim compares the metric its
    reference file names (``stages_s``: the timed stages, as PARSEC times its region of interest);
    a campaign stored before the workload reported ``stages_s`` gets the sum of its stage times
    (:func:`labkit.studies.with_stages_total`)."""
    from ..report.claim_compute import with_fixed_params
    from ..store import load_results
    from .stage_times import with_stages_total

    ref = reference_dir()
    out: list[Claim] = []
    tcg = emulated(data_dir, [campaign_prefix, f"{campaign_prefix}-libvirt"])

    def measured(key: str, what: str, src: Measured, **kwargs) -> Claim:
        keys = {**src.select, **(src.baseline or {})}
        tidy = pd.concat(
            [
                with_stages_total(with_fixed_params(load_results(data_dir, c), data_dir, c, keys))
                for c in src.campaigns
            ],
            ignore_index=True,
        )
        return measured_claim(key, what, src, data_dir, unit="%", alpha=alpha, tidy=tidy, **kwargs)

    def why(randomized: bool, platforms: Iterable[str]) -> str:
        return "; ".join(
            [PIPELINE_STAND_IN]
            + ([] if randomized else [NOT_TOGETHER])
            + ([TCG_WHY] if any(p in tcg for p in platforms) else [])
        )

    paper = quote(
        ref / "pipeline_kvm_lxc.csv", {"application": "Dedup"}, "stated_pct", where="abstract and section 4"
    )
    kvm_lxc = pd.read_csv(ref / "pipeline_kvm_lxc.csv", comment="#", dtype=str, keep_default_na=False)
    src, randomized = _pipeline_pair(
        data_dir,
        campaign_prefix,
        "libvirt",
        "lxd",
        "dedup",
        kvm_lxc.loc[kvm_lxc["application"] == "Dedup", "metric"].iloc[0],
    )
    if src is not None:
        out.append(
            measured(
                "001.dedup.kvm_lxc",
                "Dedup stand-in: KVM slower than LXC (mean over thread counts)",
                src,
                paper=paper,
                comparable=False,
                randomized=randomized,
                why=why(randomized, ["libvirt"]),
            )
        )
    else:
        out.append(
            Claim(
                "001.dedup.kvm_lxc",
                "Dedup: KVM slower than LXC (mean over thread counts)",
                math.nan,
                "%",
                paper,
                paper=paper,
                note="no KVM campaign is committed: the paper's headline question is not tested here",
            )
        )
    native = ref / "pipeline_native.csv"
    for r in pd.read_csv(native, comment="#", dtype=str, keep_default_na=False).to_dict("records"):
        src, randomized = _pipeline_pair(
            data_dir, campaign_prefix, r["platform"], r["baseline"], r["app"], r["metric"]
        )
        if src is None:
            continue
        note = ""
        if equivalence is not None and margin is not None and "app" in equivalence.columns:
            e = equivalence[equivalence["app"].astype(str) == r["app"]]
            cells = [
                (f"{t} thread{'s' if str(t) != '1' else ''}: " if "threads" in e.columns else "")
                + f"{x.verdict} (LXC/native {x.ratio:.2f}, {100 * (1 - 2 * alpha):g} % CI "
                f"{x.ratio_low:.2f} to {x.ratio_high:.2f})"
                for t, x in zip(e["threads"] if "threads" in e.columns else [None] * len(e), e.itertuples())
            ]
            if cells:
                note = (
                    f"equivalence within {100 * margin:g} % of native's mean (TOST, Holm over {len(equivalence)} "
                    f"comparisons): " + "; ".join(cells)
                )
        out.append(
            measured(
                f"001.{r['app']}.lxc_native",
                f"{r['app']} stand-in: LXC against native (the paper: {r['claim']})",
                src,
                comparable=False,
                randomized=randomized,
                why=why(randomized, [r["platform"]]),
                paper=quote(
                    native, {"application": r["application"]}, "stated_pct", where="section 4", direction=0
                ),
                note=note,
            )
        )
    disk = disk_campaign or f"{campaign_prefix}-disk-libvirt"
    if campaign_stored(data_dir, disk):
        emul = disk in emulated(data_dir, [disk])
        table = pd.read_csv(ref / "pipeline_disk_format.csv", comment="#", dtype=str, keep_default_na=False)
        for r in table.to_dict("records"):
            d = {"slower": 1, "no difference": 0}[r["stated_direction"]]
            q = quote(
                ref / "pipeline_disk_format.csv",
                {"application": r["application"]},
                "stated_pct",
                where="section 4",
                direction=d,
            )
            out.append(
                measured(
                    f"001.disk.{r['app']}",
                    f"{r['claim']}: qcow2 against raw",
                    Measured(
                        (disk,),
                        r["metric"],
                        "slowdown_pct",
                        select={"platform": r["platform"], "app": r["app"]},
                        baseline={"platform": r["baseline"], "app": r["app"]},
                        lower_is_better=True,
                    ),
                    paper=q,
                    comparable=False,
                    why="; ".join(([TCG_WHY] if emul else []) + [PIPELINE_STAND_IN]),
                    note="both formats under QEMU TCG: the format is compared on the emulator's I/O path"
                    if emul
                    else "both formats on one platform, in one randomized campaign",
                )
            )
    return out


__all__ = ["NOT_TOGETHER", "PIPELINE_STAND_IN", "pipeline_claims", "pipeline_platforms"]
