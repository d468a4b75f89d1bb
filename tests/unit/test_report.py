"""labkit.report: conclusions written from the statistics, on data whose answer is known by
construction, the bootstrap CIs of the shares of variation, and the one-file HTML report."""

import numpy as np
import pandas as pd
import pytest

from labkit import stats
from labkit.errors import ConfigError
from labkit.report import Conclusions, conclusions, html_report, variation_ci
from labkit.report.decisions import Policy


def design(effect_a=2.0, effect_b=0.0, sd=0.1, r=4, seed=1):
    """y = 10 + (effect_a/2)·A + (effect_b/2)·B + N(0, sd²), A and B coded -1/+1."""
    rng = np.random.default_rng(seed)
    rows = [
        {"A": a, "B": b, "y": 10 + effect_a / 2 * a + effect_b / 2 * b + rng.normal(0, sd)}
        for a in (-1, 1)
        for b in (-1, 1)
        for _ in range(r)
    ]
    return pd.DataFrame(rows)


def analyse(data):
    eff = stats.factorial_effects(data, factors=["A", "B"], response="y")
    return eff, stats.factorial_diagnostics(data, factors=["A", "B"], response="y")


def test_the_factor_with_an_effect_is_the_answer():
    eff, diag = analyse(design())
    c = conclusions(eff, diagnostics=diag, focus="B")
    assert isinstance(c, Conclusions) and c.significant == ["A"]
    # no practical threshold declared: a non-significant B is never said not to matter
    assert c.headline.startswith("Does B matter? Not resolved at this n")
    assert "no practical threshold declared: significance only" in c.headline
    assert any(
        s.startswith(("A: going from -1 to 1 raises y by 1.9", "A: going from -1 to 1 raises y by 2.0"))
        for s in c.findings
    )
    # 5 % of the mean (10): B's effect interval (about ±0.1) lies inside ±0.5: shown not to matter
    no = conclusions(eff, diagnostics=diag, focus="B", rules=Policy(practical=0.05))
    assert no.headline.startswith("Does B matter? No:") and no.answer == "No"
    yes = conclusions(eff, focus="A")
    assert yes.headline.startswith("Does A matter? Yes") and "A matters (Holm over 3 terms" in yes.headline
    assert "look normal" in c.assumptions[0]
    with pytest.raises(ConfigError, match="focus 'C'"):
        conclusions(eff, focus="C")


def test_significant_but_negligible_is_called_so():
    # B shifts y by 0.05 with almost no noise: detectable, but a tiny share next to A's 20
    eff, _ = analyse(design(effect_a=20.0, effect_b=0.05, sd=0.002))
    c = conclusions(eff, focus="B", rules=Policy(practical=0.01, practical_of="variation"))
    assert "B" in c.significant and c.headline.startswith("Does B matter? Negligible")
    assert "Negligible (significant after the correction but below the practical threshold" in str(c)


def test_failed_normality_is_reported_with_what_was_done():
    # every cell: three equal runs and one 8 units higher -> residuals -2, -2, -2, +6
    data = pd.DataFrame(
        [
            {"A": a, "B": b, "y": base + extra}
            for (a, b), base in zip([(-1, -1), (1, -1), (-1, 1), (1, 1)], (1, 2, 3, 4))
            for extra in (0, 0, 0, 8)
        ]
    )
    eff, diag = analyse(data)
    text = " ".join(conclusions(eff, diagnostics=diag).assumptions)
    assert "not normal" in text and "repeated on log(y)" in text


def test_comparison_with_a_reference():
    eff, _ = analyse(design())
    ref = pd.DataFrame({"source": ["paper", "paper"], "term": ["B", "A"], "pct_variation": [60.0, 30.0]})
    c = conclusions(eff, reference=ref, focus="B")
    assert "the largest term was B (60.0 %)" in c.reference[0]
    assert "a different one" in c.reference[0]
    assert "Reported there with >= 5 % but not significant here (after the correction): B" in c.reference[0]
    assert "Does B matter" in c.markdown() and "**" not in str(c)


def test_variation_ci_covers_the_share_known_by_construction():
    # A's share = SS_A / SST; with effect 2 and sd 0.5 over 16 runs the expected share is
    # 16·1² / (16·1² + 14·0.25) ≈ 0.82 (SS_A = N·(effect/2)², E[SSE] = (N - 4)·sd²)
    data = design(effect_a=2.0, sd=0.5, r=4, seed=5)
    eff, _ = analyse(data)
    ci = variation_ci(data, ["A", "B"], "y", n_boot=2000).set_index("term")
    point = eff.set_index("term")["pct_variation"]
    assert ci.loc["A", "pct_low"] < point["A"] < ci.loc["A", "pct_high"]
    assert ci.loc["A", "pct_low"] < 100 * 16 / (16 + 14 * 0.25) < ci.loc["A", "pct_high"]
    assert list(ci.index) == ["A", "B", "A:B", "error"]
    with pytest.raises(ConfigError, match="r >= 2"):
        variation_ci(design(r=1), ["A", "B"], "y")


def test_html_report_is_self_contained():
    import matplotlib

    matplotlib.use("Agg")
    from labkit.report import plots

    eff, diag = analyse(design())
    page = html_report(
        "t <1>",
        [
            ("Conclusions", conclusions(eff, diagnostics=diag)),
            ("Effects", eff),
            ("Pareto", plots.pareto(eff)),
            ("Note", "a < b"),
        ],
    )
    assert page.startswith("<!DOCTYPE html>") and "<title>t &lt;1&gt;</title>" in page
    assert 'src="data:image/png;base64,' in page and "a &lt; b" in page
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")


def test_terms_whose_shares_intervals_overlap_are_said_tied_not_one_largest():
    # A and B both shift y by 2 (equal shares by construction); C by 0: A and B's bootstrap
    # intervals overlap, so neither is "the largest term" (issue 42: vCPUs 34.2 % vs instances 34.1 %)
    rng = np.random.default_rng(3)
    data = pd.DataFrame(
        [
            {"A": a, "B": b, "y": 10 + a + b + rng.normal(0, 0.5)}
            for a in (-1, 1)
            for b in (-1, 1)
            for _ in range(6)
        ]
    )
    eff = stats.factorial_effects(data, factors=["A", "B"], response="y")
    ci = variation_ci(data, ["A", "B"], "y", n_boot=1000)
    ref = pd.DataFrame({"source": ["paper", "paper"], "term": ["A", "B"], "pct_variation": [60.0, 30.0]})
    c = conclusions(eff, reference=ref, variation=ci)
    assert "are tied (their intervals overlap: no largest term is resolved), A among them." in c.reference[0]
    assert "the same." not in c.reference[0]
    # one clearly larger term: named, no tie
    data2 = design(effect_a=4.0, effect_b=0.5, sd=0.1, r=6)
    eff2 = stats.factorial_effects(data2, factors=["A", "B"], response="y")
    c2 = conclusions(eff2, reference=ref, variation=variation_ci(data2, ["A", "B"], "y", n_boot=1000))
    assert (
        "here it is A" in c2.reference[0] and "the same." in c2.reference[0] and "tied" not in c2.reference[0]
    )
