"""Notebook 05a (seed 003, public cloud): analysis of the published Table 5.1 and Table 4.1.

Expected statements are the thesis's own (Maliszewski 2021, seed 003_5a06cf9dbf3f41b6.txt,
section 5.2.3, p. 58): F8 most cost-efficient for eight applications, EP on A10, largest
F8 margins for MG, IS and CG. No campaign: view mode is the only mode.
"""
import math

import pandas as pd

from .conftest import REPO, images, markdown_outputs, outputs_text

MIMETYPE = "application/vnd.labkit.claims+json"

NB = "05a_interconnect_public_cloud.ipynb"


def test_view_checks_the_thesis_conclusions(run_notebook, tmp_path):
    nb = run_notebook(NB, mode="view")
    md = markdown_outputs(nb)
    assert "agrees with the thesis for 9 of 9 applications" in md
    assert "F8 for ALYA, BT, CG, FT, IS, LU, MG, SP" in md and "EP on A10" in md
    assert "the top three are MG, IS, CG" in md
    assert "All 17 gains stated in words match Table 5.1" in md
    # issue 42: "significant" is decided, not written: Welch's test of each gain from Table 5.1 (means of
    # 30 runs, 99.7 % half-widths = 3 standard errors, section 4.2.1), Holm over the 17 (statsmodels)
    from scipy import stats as sps
    from statsmodels.stats.multitest import multipletests

    ref = REPO / "data" / "reference"
    t = pd.read_csv(ref / "interconnect_table_5_1.csv", comment="#").set_index(["app", "instance"])
    g = pd.read_csv(ref / "interconnect_gains.csv", comment="#")
    sd = t.ci_s / 3 * math.sqrt(30)
    p = [sps.ttest_ind_from_stats(t.mean_s[(r.app, r.slower)], sd[(r.app, r.slower)], 30,
                                  t.mean_s[(r.app, r.faster)], sd[(r.app, r.faster)], 30, equal_var=False).pvalue
         for r in g.itertuples()]
    sig = int(multipletests(p, alpha=0.05, method="holm")[0].sum())
    ep = t.xs("EP", level="app").mean_s
    assert f"differs by up to {100 * (ep.max() / ep.min() - 1):.0f} % between types" in md
    assert (f"{sig} of {len(g)} gains are significant after Holm's correction over the {len(g)} Welch tests "
            f"(the largest p {max(p):.1g})") in md
    text = outputs_text(nb)
    assert "Table 5.1 (p. 57)" in text and "Table 4.1 (p. 46)" in text   # citations printed
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"05a_performance_cost.png", "05a_paper_vs_labkit.svg"} <= figs
    assert images(nb) == 2


def test_gaps_within_the_printed_precision_are_no_gaps(run_notebook):
    """Issue 42: 28 % printed against 28.6 % recomputed is not "same direction, different size".
    Each stated gain's paper value carries its precision, half its last printed digit (read by
    claims.quote from the reference file's text: "28" -> 0.5, "74.3" -> 0.05), and every one of
    the 17 gains, which the notebook's text says all match Table 5.1, is "reproduced"."""
    nb = run_notebook(NB, mode="view")
    claims = [c for cell in nb.cells for o in cell.get("outputs", []) if MIMETYPE in o.get("data", {})
              for c in o["data"][MIMETYPE]]
    printed = pd.read_csv(REPO / "data" / "reference" / "interconnect_gains.csv", comment="#", dtype=str)
    assert len(claims) == len(printed) == 17
    for r in printed.itertuples():
        c = next(x for x in claims if x["key"] == f"003a.{r.app}.{r.faster}.{r.slower}")
        decimals = len(r.stated_pct.split(".")[1]) if "." in r.stated_pct else 0
        half = 0.5 * 10 ** -decimals
        assert math.isclose(c["paper"]["precision"], half), (c["key"], r.stated_pct)
        assert c["verdict"] == "reproduced", (c["key"], c["value"], c["low"], c["high"], r.stated_pct)
    # the three the reviewers listed: the printed value is outside our 95 % interval, inside its precision
    for key in ("003a.IS.F8.DS4_v2", "003a.FT.F8.A10", "003a.EP.DS4_v2.A10"):
        c = next(x for x in claims if x["key"] == key)
        p, prec = c["paper"]["value"], c["paper"]["precision"]
        assert not c["low"] <= p <= c["high"] and c["low"] <= p + prec and p - prec <= c["high"], c
