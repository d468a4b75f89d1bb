"""The claims of seed 003's notebooks (the interconnect study) beside the thesis's: notebook 05a's
stated gains recomputed from its own Table 5.1 (:func:`public_cloud_claims`), notebook 05b's
ping-pong and NIC-aggregation percentages beside ours (:func:`interconnect_claims`). The claims of
the other notebooks and the helpers shared with them: :mod:`labkit.studies.verdicts`.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..errors import StoreError
from ..report.claim_compute import measured_claim
from ..report.claims import Claim, Derived, Measured, quote
from .verdicts import reference_dir


# -- notebook 05a (seed 003, public cloud) ---------------------------------------------------------
def public_cloud_claims(check: pd.DataFrame, *, ci_z: float = 3.0) -> list[Claim]:
    """Notebook 05a's claims: each gain the thesis states in words (section 5.2.2) beside the
    same gain recomputed from its Table 5.1 (``check``: :func:`labkit.studies.public_cloud.stated_gains`)."""
    ref = reference_dir()
    out = []
    for r in check.itertuples():
        q = quote(
            ref / "interconnect_gains.csv",
            {"app": r.app, "faster": r.faster, "slower": r.slower},
            "stated_pct",
            where="section 5.2.2",
        )
        out.append(
            Claim(
                f"003a.{r.app}.{r.faster}.{r.slower}",
                f"{r.app}: {r.faster} over {r.slower}",
                r.computed_pct,
                "%",
                Derived(
                    ("interconnect_table_5_1.csv",),
                    "gain_pct",
                    {"app": r.app, "faster": r.faster, "slower": r.slower},
                    ci_z,
                ),
                low=r.ci_low,
                high=r.ci_high,
                n=30,
                paper=q,
                note="recomputed from the thesis's own Table 5.1 (30 runs per mean)",
            )
        )
    return out


# -- notebook 05b (seed 003, private cloud) --------------------------------------------------------
def interconnect_claims(data_dir: str | Path, campaign_id: str, *, alpha: float = 0.05) -> list[Claim]:
    """Notebook 05b's claims: the thesis's ping-pong percentages (section 5.2.1) beside our
    slower link class against the faster one, and its Round-Robin aggregation gains (section
    5.3.1) beside our PingPong bandwidth with 1 NIC against k bonded NICs, where the campaign has
    those factors. Never scored: shaped veth or tap links and TCG guests are not InfiniBand or
    Gigabit NICs between hosts."""
    from ..store import load_results

    ref = reference_dir()
    try:
        tidy = load_results(data_dir, campaign_id)
    except StoreError:
        return []
    out: list[Claim] = []
    why = (
        "rate classes shaped by tc on veth pairs or taps on one host; the thesis: InfiniBand and Ethernet "
        "NICs between Azure instances"
    )
    if "link" in tidy.columns:
        pp = pd.read_csv(ref / "interconnect_pingpong.csv", comment="#", dtype=str, keep_default_na=False)
        links = set(tidy.link.astype(str))
        for i, r in enumerate(pp.to_dict("records")):
            q = quote(
                ref / "interconnect_pingpong.csv", {"claim": r["claim"]}, "stated_pct", where="section 5.2.1"
            )
            if not r["metric"] or not {r["platform"], r["baseline"]} <= links:
                out.append(
                    Claim(
                        f"003b.pp.{i}",
                        r["claim"],
                        math.nan,
                        "%",
                        q,
                        paper=q,
                        comparable=False,
                        why=why,
                        note="no comparable metric here"
                        if not r["metric"]
                        else "link class not in the campaign",
                    )
                )
                continue
            sel = {"link": r["platform"]}
            base = {"link": r["baseline"]}
            if "neighbours" in tidy.columns:
                sel["neighbours"] = base["neighbours"] = r["level"]
            out.append(
                measured_claim(
                    f"003b.pp.{i}",
                    r["claim"],
                    Measured(
                        (campaign_id,),
                        r["metric"],
                        "slowdown_pct",
                        select=sel,
                        baseline=base,
                        lower_is_better=r["metric"] == "pingpong_latency_us",
                    ),
                    data_dir,
                    unit="%",
                    alpha=alpha,
                    tidy=tidy,
                    paper=q,
                    comparable=False,
                    why=why,
                )
            )
    if "nics" in tidy.columns:
        agg = pd.read_csv(ref / "interconnect_aggregation.csv", comment="#", dtype=str, keep_default_na=False)
        nics = set(tidy.nics.astype(str))
        for i, r in enumerate(agg.to_dict("records")):
            q = quote(
                ref / "interconnect_aggregation.csv",
                {"claim": r["claim"]},
                "stated_pct",
                where="section 5.3.1",
            )
            if not {r["platform"], r["baseline"]} <= nics or r["level"] not in set(
                tidy.neighbours.astype(str)
            ):
                continue
            out.append(
                measured_claim(
                    f"003b.agg.{i}",
                    f"{r['claim']} (ours: PingPong bandwidth, 1 NIC against {r['baseline']})",
                    Measured(
                        (campaign_id,),
                        r["metric"],
                        "slowdown_pct",
                        select={"nics": r["platform"], "neighbours": r["level"]},
                        baseline={"nics": r["baseline"], "neighbours": r["level"]},
                    ),
                    data_dir,
                    unit="%",
                    alpha=alpha,
                    tidy=tidy,
                    paper=q,
                    comparable=False,
                    why="bonded virtio NICs of QEMU TCG guests on one host, HPCC PingPong; the thesis: NPB in LXD "
                    "on 4 hosts with Gigabit NICs",
                )
            )
    return out


__all__ = ["interconnect_claims", "public_cloud_claims"]
