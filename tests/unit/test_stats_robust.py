"""Alternatives when ANOVA's assumptions fail, against published values.

Sources are named at each test: R documentation examples (stats::oneway.test,
stats::wilcox.test, stats::kruskal.test, car::leveneTest,
lawstat::brunner.munzel.test, effectsize::cohens_d), Box & Cox (1964),
Benjamini & Hochberg (1995), Wobbrock et al. (2011). Where no published value
exists the test says which independent implementation it checks against.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import (
    adjust_p,
    art_aligned,
    art_anova,
    boxcox,
    boxcox_transform,
    brunner_munzel,
    compare_groups,
    correct,
    dunn,
    effect_sizes,
    games_howell,
    hedges_g,
    kruskal,
    levene,
    mann_whitney,
    oneway_anova,
    ttest_by,
    welch_anova,
)

from .test_stats_anova import plant_growth
from .test_stats_vectors import printed, sv  # noqa: F401  (sv is a fixture)

POISONS = Path(__file__).resolve().parents[1] / "vectors" / "poisons.csv"


def two(a, b, names=("a", "b")):
    return pd.DataFrame({"g": [names[0]] * len(a) + [names[1]] * len(b), "y": list(a) + list(b)})


def sleep(sv):
    return two(sv.SLEEP_G1, sv.SLEEP_G2, (1, 2))


def test_brown_forsythe_plant_growth(sv):
    # R: car::leveneTest(weight ~ group, data = PlantGrowth)  (center = median)
    #    group  2  1.1192  0.3412 ; 27 residual df
    t = levene(plant_growth(sv), response="weight", factor="group").iloc[0]
    assert t["test"] == "brown-forsythe"
    assert t["W"] == printed(1.1192) and t["p"] == printed(0.3412)
    assert (t["df1"], t["df2"]) == (2, 27) and t["equal_var"]
    # Levene's original (center = mean): scipy.stats.levene(center="mean") is the
    # independent implementation here
    ref = sps.levene(sv.PG_CTRL, sv.PG_TRT1, sv.PG_TRT2, center="mean")
    assert levene(plant_growth(sv), response="weight", factor="group", center="mean").loc[
        0, "W"
    ] == pytest.approx(ref.statistic)


def test_welch_anova_plant_growth_and_sleep(sv):
    # R: oneway.test(weight ~ group, data = PlantGrowth)
    #    F = 5.181, num df = 2.000, denom df = 17.128, p-value = 0.01739
    t = welch_anova(plant_growth(sv), response="weight", factor="group").iloc[0]
    assert t["F"] == printed(5.181) and t["df2"] == printed(17.128)
    assert t["df1"] == 2 and t["p"] == printed(0.01739)
    # R's own example, oneway.test(extra ~ group, data = sleep): Welch's t squared
    # (t.test: t = -1.8608, df = 17.776, p = 0.07939)
    t = welch_anova(sleep(sv), response="y", factor="g").iloc[0]
    assert t["F"] == pytest.approx(sv.WELCH["t"] ** 2, abs=5e-4)
    assert t["df2"] == printed(sv.WELCH["df"]) and t["p"] == printed(sv.WELCH["p"])


def test_welch_anova_degenerate_group_is_nan_with_note():
    t = welch_anova(pd.DataFrame({"g": list("aabbcc"), "y": [1, 2, 3, 3, 4, 6.0]}), response="y", factor="g")
    assert np.isnan(t.loc[0, "F"]) and "zero variance" in t.loc[0, "note"]


def test_games_howell_with_two_groups_is_welch(sv):
    # With k = 2 the studentized range q = sqrt(2)|t|, so Games-Howell is Welch's
    # t-test: R t.test(extra ~ group, data = sleep) prints t = -1.8608, df = 17.776,
    # p = 0.07939, 95% CI (-3.3654832, 0.2054832) for mean1 - mean2.
    t = games_howell(sleep(sv), response="y", factor="g").iloc[0]
    assert t["diff"] == pytest.approx(1.58)  # mean2 - mean1
    assert t["df"] == printed(sv.WELCH["df"]) and t["p_adj"] == printed(sv.WELCH["p"])
    assert (-t["ci_high"], -t["ci_low"]) == printed(sv.WELCH["ci95"])


def test_games_howell_three_groups_is_simultaneous(sv):
    # No published Games-Howell table for PlantGrowth was at hand: checked against
    # the definition (Games & Howell 1976) with scipy.stats.studentized_range, and
    # against Tukey's HSD, which it must resemble when variances are similar.
    t = games_howell(plant_growth(sv), response="weight", factor="group")
    assert list(t[["group_a", "group_b"]].itertuples(index=False, name=None)) == [
        ("ctrl", "trt1"),
        ("ctrl", "trt2"),
        ("trt1", "trt2"),
    ]
    a, b = np.var(sv.PG_TRT1, ddof=1) / 10, np.var(sv.PG_TRT2, ddof=1) / 10
    q = abs(np.mean(sv.PG_TRT2) - np.mean(sv.PG_TRT1)) / np.sqrt(a + b) * np.sqrt(2)
    df = (a + b) ** 2 / (a * a / 9 + b * b / 9)
    assert t.loc[2, "p_adj"] == pytest.approx(sps.studentized_range.sf(q, 3, df))
    assert t["reject"].tolist() == [False, False, True]  # as TukeyHSD: only trt2-trt1


def test_mann_whitney_r_documentation_example():
    # R ?wilcox.test (Hollander & Wolfe 1973, p. 69): depression scale after therapy
    # wilcox.test(x, y, alternative = "g")  ->  W = 35, p-value = 0.1272
    x = [0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46]
    y = [1.15, 0.88, 0.90, 0.74, 1.21]
    t = mann_whitney(two(x, y), response="y", factor="g", alternative="greater").iloc[0]
    assert t["U"] == 35 and t["p"] == printed(0.1272)
    assert t["prob_superiority"] == pytest.approx(35 / 50)


def test_brunner_munzel_lawstat_example():
    # R lawstat::brunner.munzel.test example (Hollander & Wolfe, pain scores):
    # Brunner-Munzel Test Statistic = 3.1375, df = 17.683, p-value = 0.005786,
    # P(X<Y)+.5*P(X=Y) = 0.788961
    x = [1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 1, 1]
    y = [3, 3, 4, 3, 1, 2, 3, 1, 1, 5, 4]
    t = brunner_munzel(two(x, y), response="y", factor="g").iloc[0]
    assert t["W"] == printed(3.1375) and t["p"] == printed(0.005786)
    assert t["estimate"] == printed(0.788961)
    with pytest.raises(ConfigError, match="exactly 2"):
        brunner_munzel(pd.DataFrame({"g": list("abc"), "y": [1.0, 2, 3]}), response="y", factor="g")


def hw_three():
    # R ?kruskal.test (Hollander & Wolfe 1973, p. 116): mucociliary efficiency
    return pd.DataFrame(
        {
            "g": ["normal"] * 5 + ["copd"] * 4 + ["asbestosis"] * 5,
            "y": [2.9, 3.0, 2.5, 2.6, 3.2, 3.8, 2.7, 4.0, 2.4, 2.8, 3.4, 3.7, 2.2, 2.0],
        }
    )


def test_kruskal_r_documentation_example():
    # kruskal.test(list(x, y, z)) -> Kruskal-Wallis chi-squared = 0.77143, df = 2, p = 0.68
    t = kruskal(hw_three(), response="y", factor="g").iloc[0]
    assert t["H"] == printed(0.77143) and t["df"] == 2 and t["p"] == printed(0.68)


def test_dunn_pairs_and_holm():
    # No published Dunn table for these data: with two groups Dunn's z² equals the
    # Kruskal-Wallis H (both tie-corrected; Dunn 1964), checked with scipy.stats.kruskal;
    # the Holm step is R's p.adjust(method = "holm") = statsmodels multipletests.
    d = hw_three()
    t = dunn(d, response="y", factor="g")
    assert len(t) == 3 and set(t.columns) >= {"z", "p", "p_adj", "reject"}
    for _, row in t.iterrows():
        pair = d[d.g.isin([row["group_a"], row["group_b"]])]
        h = sps.kruskal(*[pair.loc[pair.g == g, "y"] for g in (row["group_a"], row["group_b"])])
        sub = dunn(pair, response="y", factor="g").iloc[0]
        assert sub["z"] ** 2 == pytest.approx(h.statistic)
    ps = sorted(t["p"])
    assert sorted(t["p_adj"]) == pytest.approx(
        np.minimum(1, np.maximum.accumulate([ps[0] * 3, ps[1] * 2, ps[2]]))
    )


def test_p_adjust_benjamini_hochberg_example():
    # Benjamini & Hochberg (1995), section 3.2: 15 p-values from a clinical trial;
    # at level 0.05 the FDR procedure rejects 4 hypotheses, Bonferroni 3. Holm, by its
    # definition, stops at the 4th (0.0095·12 > 0.05): 3 as well.
    p = [
        0.0001,
        0.0004,
        0.0019,
        0.0095,
        0.0201,
        0.0278,
        0.0298,
        0.0344,
        0.0459,
        0.3240,
        0.4262,
        0.5719,
        0.6528,
        0.7590,
        1.000,
    ]
    assert int((adjust_p(p, method="bh") < 0.05).sum()) == 4
    assert int((adjust_p(p, method="bonferroni") < 0.05).sum()) == 3
    assert int((adjust_p(p, method="holm") < 0.05).sum()) == 3
    # R ?p.adjust definition by hand: holm p_(i) = max_{j<=i} min(1, (m - j + 1) p_(j))
    assert adjust_p([0.01, 0.04, 0.03, np.nan], method="holm") == pytest.approx(
        [0.03, 0.06, 0.06, np.nan], nan_ok=True
    )
    with pytest.raises(ConfigError, match="method must be one of"):
        adjust_p(p, method="sidak")


def test_correct_a_family_of_per_configuration_ttests(sv):
    data = pd.concat([sleep(sv).assign(cfg=c) for c in ("x", "y", "z")])
    data.loc[data.cfg == "z", "y"] += np.where(data.loc[data.cfg == "z", "g"] == 1, 3.0, 0)
    t = correct(ttest_by(data, factor="g", response="y", by="cfg"))
    assert t.attrs["correction"]["family"] == 3
    assert t["p_adj"].tolist() == pytest.approx(adjust_p(t["p"], method="holm"))
    assert (t["p_adj"] >= t["p"]).all()


def test_hedges_g_mtcars():
    # R effectsize documentation: cohens_d(mpg ~ am, data = mtcars)
    #   Cohen's d = -1.48, 95% CI [-2.27, -0.67]; hedges_g(mpg ~ am, data = mtcars) -1.44
    auto = [
        21.4,
        18.7,
        18.1,
        14.3,
        24.4,
        22.8,
        19.2,
        17.8,
        16.4,
        17.3,
        15.2,
        10.4,
        10.4,
        14.7,
        21.5,
        15.5,
        15.2,
        13.3,
        19.2,
    ]
    manual = [21.0, 21.0, 22.8, 32.4, 30.4, 33.9, 27.3, 26.0, 30.4, 15.8, 19.7, 15.0, 21.4]
    t = hedges_g(auto, manual).iloc[0]
    assert t["d"] == printed(-1.48) and t["g"] == printed(-1.44)
    j = t["g"] / t["d"]
    assert t["ci_low"] / j == printed(-2.27) and t["ci_high"] / j == printed(-0.67)


def test_omega_and_partial_eta_squared_plant_growth(sv):
    # From R's anova(lm(weight ~ group, PlantGrowth)): SS 3.766 (df 2), 10.492 (df 27),
    # MSE 0.3886: omega² = (3.766 - 2·0.3886)/(14.258 + 0.3886) = 0.204 (Hays),
    # eta² = 3.766/14.258 = 0.264.
    e = effect_sizes(oneway_anova(plant_growth(sv), response="weight", factor="group")).iloc[0]
    assert e["omega_sq"] == printed(0.204) and e["eta_sq"] == printed(0.264)
    assert e["partial_omega_sq"] == pytest.approx(e["omega_sq"])  # one factor
    # CI of partial eta² by inverting the noncentral F (Steiger 2004): at the bounds
    # the observed F = 4.846 sits at the 97.5 % and 2.5 % points
    for bound, q in ((e["pes_ci_low"], 0.975), (e["pes_ci_high"], 0.025)):
        lam = bound * 27 / (1 - bound)
        assert sps.ncf.cdf(4.846, 2, 27, lam) == pytest.approx(q, abs=2e-3)
    assert e["pes_ci_low"] < e["partial_eta_sq"] < e["pes_ci_high"]


def poisons():
    return pd.read_csv(POISONS, comment="#")


def test_boxcox_poisons():
    # Box & Cox (1964), section 6: for the additive poison x treatment model the
    # maximum-likelihood lambda is about -0.75 and the approximate 95 % interval
    # excludes 1 (no transformation) and 0 (log) but contains -1: reciprocal
    # (the "rate of dying").
    t = boxcox(poisons(), response="time", factors=["poison", "treat"], interactions=False).iloc[0]
    assert t["lambda"] == pytest.approx(-0.75, abs=0.01)
    assert t["ci_low"] < -1 < t["ci_high"] < 0
    assert t["suggested"] == "reciprocal"
    assert boxcox_transform([1.0, np.e], lam=0) == pytest.approx([0, 1])
    with pytest.raises(ConfigError, match="positive"):
        boxcox(poisons().assign(time=0.0), response="time")


def test_art_alignment_is_correct_on_poisons():
    # Wobbrock et al. (2011), "Verifying correctness": every aligned column sums to 0,
    # and a full-factorial ANOVA of an aligned (unranked) column shows F = 0 for every
    # effect but its own (ARTool tests the same on Higgins1990Table1).
    p = poisons()
    aligned = art_aligned(p, response="time", factors=["poison", "treat"])
    assert list(aligned.columns) == ["poison", "treat", "poison:treat"]
    assert np.abs(aligned.sum()).max() < 1e-12
    t = art_anova(p, response="time", factors=["poison", "treat"])
    assert t.attrs["aligned_check"] < 1e-8
    assert t["term"].tolist() == ["poison", "treat", "poison:treat"]
    assert (t["df"].tolist(), t["df_error"].iloc[0]) == ([2, 3, 6], 36)
    # each row is the ANOVA of its own ranks (independent check with statsmodels)
    from statsmodels.formula.api import ols
    from statsmodels.stats.anova import anova_lm

    ranked = p.assign(r=sps.rankdata(aligned["poison:treat"]))
    ref = anova_lm(ols("r ~ C(poison, Sum) * C(treat, Sum)", ranked).fit(), typ=3)
    assert t.loc[2, "F"] == pytest.approx(ref.loc["C(poison, Sum):C(treat, Sum)", "F"])


def test_art_ranks_ties_of_exact_arithmetic_as_ties():
    # Aligned values equal in exact arithmetic must share a rank (Wobbrock et al. 2011,
    # step 3: average ranks for ties). On the poisons data the "poison" and "treat"
    # alignments have such ties, which float rounding splits; the reference here aligns
    # with exact rationals (independent of labkit), ranks, and fits statsmodels OLS +
    # anova_lm(typ=3) on those ranks.
    from fractions import Fraction

    from statsmodels.formula.api import ols
    from statsmodels.stats.anova import anova_lm

    p = poisons()
    y = [Fraction(str(x)) for x in p["time"]]

    def means(keys):
        tot: dict = {}
        for k, yi in zip(keys, y):
            s, c = tot.get(k, (0, 0))
            tot[k] = (s + yi, c + 1)
        return [tot[k][0] / tot[k][1] for k in keys]

    grand = sum(y) / len(y)
    cell = means(list(zip(p["poison"], p["treat"])))
    t = art_anova(p, response="time", factors=["poison", "treat"]).set_index("term")
    for term, factor in (("poison", "poison"), ("treat", "treat")):
        exact = [yi - c + m - grand for yi, c, m in zip(y, cell, means(list(p[factor])))]
        assert len(set(exact)) < len(exact)  # the data do have exact ties
        ranked = p.assign(r=sps.rankdata(np.array(exact, dtype=object)))
        ref = anova_lm(ols("r ~ C(poison, Sum) * C(treat, Sum)", ranked).fit(), typ=3)
        assert t.loc[term, "F"] == pytest.approx(ref.loc[f"C({term}, Sum)", "F"], rel=1e-9)


def test_compare_groups_picks_and_explains(sv):
    c = compare_groups(plant_growth(sv), response="weight", factor="group")
    assert c.test == "anova + tukey hsd" and "equal" in c.reason
    assert c.table.loc[0, "F"] == printed(sv.ONEWAY["F"]) and len(c.posthoc) == 3
    rng = np.random.default_rng(7)
    skewed = pd.DataFrame(
        {"g": np.repeat(["a", "b"], 30), "y": np.exp(rng.normal(0, 1.5, 60)) + np.repeat([0, 1], 30)}
    )
    c = compare_groups(skewed, response="y", factor="g")
    assert c.test in ("mann-whitney U", "brunner-munzel") and "not normal" in c.reason
    spread = pd.DataFrame(
        {
            "g": np.repeat(["a", "b", "c"], 15),
            "y": np.concatenate([rng.normal(10, 0.5, 15), rng.normal(10, 5, 15), rng.normal(12, 0.5, 15)]),
        }
    )
    c = compare_groups(spread, response="y", factor="g")
    assert c.test == "welch anova + games-howell" and "unequal" in c.reason
    assert str(c).startswith("welch anova")
