"""labkit.stats.anova / oneway_anova / tukey_hsd (statsmodels underneath)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import anova, factorial_effects, oneway_anova, tukey_hsd

from .test_stats_factorial import long_frame
from .test_stats_vectors import printed, sv  # noqa: F401  (sv is a fixture)


def plant_growth(sv):
    groups = {"ctrl": sv.PG_CTRL, "trt1": sv.PG_TRT1, "trt2": sv.PG_TRT2}
    return pd.DataFrame([{"group": g, "weight": w} for g, ws in groups.items() for w in ws])


def test_oneway_plant_growth(sv):
    # R: anova(lm(weight ~ group, data = PlantGrowth))
    t = oneway_anova(plant_growth(sv), response="weight", factor="group").set_index("term")
    assert list(t.index) == ["group", "error"]
    assert t.loc["group", "ss"] == printed(sv.ONEWAY["ss_between"])
    assert t.loc["error", "ss"] == printed(sv.ONEWAY["ss_within"])
    assert (t.loc["group", "df"], t.loc["error", "df"]) == sv.ONEWAY["df"]
    assert t.loc["group", "F"] == printed(sv.ONEWAY["F"])
    assert t.loc["group", "p"] == printed(sv.ONEWAY["p"])
    sst = sv.ONEWAY["ss_between"] + sv.ONEWAY["ss_within"]
    assert t.loc["group", "eta_sq"] == pytest.approx(sv.ONEWAY["ss_between"] / sst, abs=1e-3)


def test_tukey_plant_growth_matches_scipy(sv):
    # scipy.stats.tukey_hsd(ctrl, trt1, trt2), R: TukeyHSD(aov(weight ~ group, PlantGrowth))
    t = tukey_hsd(plant_growth(sv), response="weight", factor="group")
    assert list(t.columns) == ["group_a", "group_b", "diff", "ci_low", "ci_high", "p_adj", "reject"]
    ref = sps.tukey_hsd(sv.PG_CTRL, sv.PG_TRT1, sv.PG_TRT2)
    ci = ref.confidence_interval(0.95)
    idx = {"ctrl": 0, "trt1": 1, "trt2": 2}
    for _, row in t.iterrows():
        i, j = idx[row["group_a"]], idx[row["group_b"]]
        # scipy's statistic[i, j] is mean_i - mean_j; R and labkit report mean_b - mean_a
        assert row["diff"] == pytest.approx(-ref.statistic[i, j])
        assert row["p_adj"] == pytest.approx(ref.pvalue[i, j], abs=1e-3)
        assert row["ci_low"] == pytest.approx(-ci.high[i, j], abs=1e-4)
        assert row["ci_high"] == pytest.approx(-ci.low[i, j], abs=1e-4)
    assert t["reject"].tolist() == [False, False, True]


def test_two_way_anova_of_jain_22r3(sv):
    # R: anova(lm(y ~ A*B)) on Jain's Ex. 18.1 data; every type agrees when balanced
    data = long_frame(sv.JAIN_22R3["y"], ["A", "B"])
    for typ in (1, 2, 3):
        t = anova(data, response="y", factors=["A", "B"], typ=typ).set_index("term")
        assert list(t.index) == ["A", "B", "A:B", "error"]
        for name, f in sv.JAIN_22R3["F"].items():
            term = {"AB": "A:B"}.get(name, name)
            assert t.loc[term, "F"] == printed(f)
            assert t.loc[term, "p"] == printed(sv.JAIN_22R3["p"][name])
        assert t.loc["error", "ss"] == printed(sv.JAIN_22R3["sse"])
        assert t["eta_sq"].sum() == pytest.approx(1)


def test_three_factor_multilevel_anova_montgomery_soft_drink_bottling():
    # Montgomery, Design and Analysis of Experiments, Example 5.3 (soft drink bottling): the data
    # (fill-height deviation; carbonation 10/12/14 %, pressure 25/30 psi, line speed
    # 200/250 bpm, 2 replicates) and its ANOVA table (SS, F; SSE 8.500 on 12 df).
    # Balanced and complete: labkit computes it from the cell means, without OLS.
    y = {
        (10, 25, 200): (-3, -1),
        (10, 25, 250): (-1, 0),
        (10, 30, 200): (-1, 0),
        (10, 30, 250): (1, 1),
        (12, 25, 200): (0, 1),
        (12, 25, 250): (2, 1),
        (12, 30, 200): (2, 3),
        (12, 30, 250): (6, 5),
        (14, 25, 200): (5, 4),
        (14, 25, 250): (7, 6),
        (14, 30, 200): (7, 9),
        (14, 30, 250): (10, 11),
    }
    data = pd.DataFrame(
        [(a, b, c, v) for (a, b, c), vs in y.items() for v in vs],
        columns=["carbonation", "pressure", "speed", "fill"],
    )
    data = data.sample(frac=1, random_state=1)  # run order must not matter
    t = anova(data, response="fill", factors=["carbonation", "pressure", "speed"]).set_index("term")
    table = {
        "carbonation": (2, 252.750, 178.412),
        "pressure": (1, 45.375, 64.059),
        "speed": (1, 22.042, 31.118),
        "carbonation:pressure": (2, 5.250, 3.706),
        "carbonation:speed": (2, 0.583, 0.412),
        "pressure:speed": (1, 1.042, 1.471),
        "carbonation:pressure:speed": (2, 1.083, 0.765),
    }
    assert list(t.index) == [*table, "error"]
    for term, (df, ss, f) in table.items():
        assert t.loc[term, "df"] == df
        assert t.loc[term, "ss"] == pytest.approx(ss, abs=6e-4)
        assert t.loc[term, "F"] == pytest.approx(f, abs=6e-4)
    assert (t.loc["error", "df"], t.loc["error", "ss"]) == (12, pytest.approx(8.500, abs=6e-4))


def test_anova_handles_multilevel_unbalanced_data_and_odd_names():
    rng = np.random.default_rng(3)
    data = pd.DataFrame({"host type": np.repeat(["kvm", "xen", "lxc"], 8), "vcpus": np.tile([1, 2, 4, 8], 6)})
    data["req/s"] = rng.normal(100, 5, len(data)) + data["vcpus"] * 3
    data = data.iloc[:-1]
    t = anova(data, response="req/s", factors=["host type", "vcpus"], interactions=False)
    assert t["term"].tolist() == ["host type", "vcpus", "error"]
    assert t.loc[1, "df"] == 3 and t.loc[2, "df"] == len(data) - 1 - 2 - 3
    with pytest.raises(ConfigError, match="anova"):
        factorial_effects(data, factors=["host type", "vcpus"], response="req/s")


def test_anova_errors(sv):
    data = long_frame(sv.JAIN_22["y"], ["A", "B"])
    with pytest.raises(ConfigError, match="no residual degrees of freedom"):
        anova(data, response="y", factors=["A", "B"])
    with pytest.raises(ConfigError, match="typ must be 1, 2 or 3"):
        anova(data, response="y", factors=["A"], typ=4)
    with pytest.raises(ConfigError, match="'A' has 1 level"):
        anova(data[data.A == 1], response="y", factors=["A", "B"], interactions=False)
    with pytest.raises(ConfigError, match="factors: no column 'C'"):
        anova(data, response="y", factors=["C"])


def test_a_large_constant_part_costs_no_accuracy(sv):
    # issue 17: PlantGrowth in hundredths (integers) plus 1e12 is exactly representable,
    # so the F of R's anova(lm(weight ~ group, PlantGrowth)) must come back exactly
    data = plant_growth(sv)
    base = oneway_anova(data, response="weight", factor="group").loc[0, "F"]
    shifted = data.assign(weight=np.round(data["weight"] * 100) + 1e12)
    for t in (
        oneway_anova(shifted, response="weight", factor="group"),
        anova(shifted, response="weight", factors=["group"]),
    ):
        assert t.loc[0, "F"] == printed(sv.ONEWAY["F"])
        assert t.loc[0, "F"] == pytest.approx(base, rel=1e-12)
        assert t.loc[0, "p"] == printed(sv.ONEWAY["p"])
    # two-way: Jain's Ex. 18.1 data + 1e12 keeps its SSE and F (printed in the book)
    data = long_frame(sv.JAIN_22R3["y"], ["A", "B"])
    t = anova(data.assign(y=data["y"] + 1e12), response="y", factors=["A", "B"]).set_index("term")
    assert t.loc["error", "ss"] == pytest.approx(sv.JAIN_22R3["sse"], rel=1e-12)
    assert t.loc["A", "F"] == printed(sv.JAIN_22R3["F"]["A"])


def test_a_constant_response_gives_nan_and_a_note():
    data = pd.DataFrame({"g": list("aabbcc"), "y": [0.1] * 6})
    for t in (oneway_anova(data, response="y", factor="g"), anova(data, response="y", factors=["g"])):
        assert np.isnan(t.loc[0, "F"]) and np.isnan(t.loc[0, "p"])
        assert np.isnan(t.loc[0, "eta_sq"])
        assert t.loc[0, "ss"] == 0 and t.loc[1, "ss"] == 0
        assert "constant" in t.attrs["note"]


def test_groups_without_spread_give_nan_f_and_a_note():
    # every group constant, the groups different: SSE = 0, F undefined
    data = pd.DataFrame({"g": list("aabbcc"), "y": [0.1, 0.1, 0.3, 0.3, 0.7, 0.7]})
    t = oneway_anova(data, response="y", factor="g")
    assert t.loc[1, "ss"] == 0 and t.loc[0, "ss"] > 0
    assert np.isnan(t.loc[0, "F"]) and np.isnan(t.loc[0, "p"])
    assert t.loc[0, "eta_sq"] == pytest.approx(1)
    assert "residuals are zero" in t.attrs["note"]
    two = pd.DataFrame({"A": [0, 0, 1, 1] * 2, "B": [0, 1] * 4, "y": [0.1, 0.2, 0.4, 0.8] * 2})
    t = anova(two, response="y", factors=["A", "B"])
    assert t["F"].isna().all() and "residuals are zero" in t.attrs["note"]
    assert t.loc[t.term == "error", "ss"].iloc[0] == 0


def test_a_normal_table_has_an_empty_note(sv):
    assert oneway_anova(plant_growth(sv), response="weight", factor="group").attrs["note"] == ""
