"""labkit.stats.factorial_effects / factorial_residuals against Jain (1991), ch. 17-18.

Expected values: tests/vectors/stats_vectors.py (JAIN_22, JAIN_23,
JAIN_22R3), i.e. Jain's Examples 17.1-17.3 and 18.1-18.4, recomputed there
with scipy/statsmodels.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from labkit.errors import ConfigError
from labkit.stats import factorial_effects, factorial_residuals, yates_terms

from .test_stats_vectors import printed, sv  # noqa: F401  (sv is a fixture)

JAIN_NAMES = {
    "I": "I",
    "A": "A",
    "B": "B",
    "AB": "A:B",
    "C": "C",
    "AC": "A:C",
    "BC": "B:C",
    "ABC": "A:B:C",
    "E": "error",
}


def long_frame(y, factors, levels=None, seed=0):
    """Long-format data from responses in standard order (first factor fastest).

    ``y[i]`` is a number or a list of replicates; rows come out shuffled so
    the analysis cannot depend on row order.
    """
    levels = levels or {f: (-1, 1) for f in factors}
    rows = []
    for i, reps in enumerate(y):
        for value in np.atleast_1d(reps):
            row = {f: levels[f][i >> j & 1] for j, f in enumerate(factors)}
            rows.append(row | {"y": float(value)})
    data = pd.DataFrame(rows)
    return data.sample(frac=1, random_state=seed).reset_index(drop=True)


def by_term(table):
    return table.set_index("term")


# --- Jain Ex. 17.1/17.2: 2^2 ---------------------------------------------------


def test_jain_22_q_ss_and_allocation_of_variation(sv):
    t = by_term(factorial_effects(long_frame(sv.JAIN_22["y"], ["A", "B"]), factors=["A", "B"], response="y"))
    for name, q in sv.JAIN_22["q"].items():
        assert t.loc[JAIN_NAMES[name], "q"] == printed(q)
    for name, ss in sv.JAIN_22["ss"].items():
        assert t.loc[JAIN_NAMES[name], "ss"] == printed(ss)
        assert t.loc[JAIN_NAMES[name], "effect"] == printed(2 * sv.JAIN_22["q"][name])
    for name, pct in sv.JAIN_22["pct"].items():
        assert t.loc[JAIN_NAMES[name], "pct_variation"] == printed(pct)
    assert t.attrs["sst"] == printed(sv.JAIN_22["sst"])
    assert "error" not in t.index and "t" not in t.columns  # unreplicated: no error, no CI


def test_yates_order_and_the_mean_row_first(sv):
    t = factorial_effects(long_frame(sv.JAIN_23["y"], ["A", "B", "C"]), factors=["A", "B", "C"], response="y")
    assert t["term"].tolist() == ["I", "A", "B", "A:B", "C", "A:C", "B:C", "A:B:C"]
    assert yates_terms(["vcpus", "affinity"]) == ["I", "vcpus", "affinity", "vcpus:affinity"]
    assert np.isnan(t.loc[0, ["effect", "ss", "pct_variation", "df"]].astype(float)).all()


# --- Jain Ex. 17.3: 2^3 --------------------------------------------------------


def test_jain_23_q_and_pct(sv):
    t = by_term(
        factorial_effects(long_frame(sv.JAIN_23["y"], list("ABC")), factors=list("ABC"), response="y")
    )
    for name, q in sv.JAIN_23["q"].items():
        assert t.loc[JAIN_NAMES[name], "q"] == printed(q)
    for name, pct in sv.JAIN_23["pct"].items():
        assert t.loc[JAIN_NAMES[name], "pct_variation"] == printed(pct)
    assert t.attrs["sst"] == printed(sv.JAIN_23["sst"])
    assert t["pct_variation"].sum() == pytest.approx(100)


# --- Jain Ex. 18.1-18.4: 2^2 with r = 3, 90% confidence intervals ---------------


@pytest.fixture
def jain_22r3(sv):
    data = long_frame(sv.JAIN_22R3["y"], ["A", "B"])
    return factorial_effects(data, factors=["A", "B"], response="y", alpha=0.10)


def test_jain_22r3_effects_ss_and_error(sv, jain_22r3):
    v = sv.JAIN_22R3
    t = by_term(jain_22r3)
    for name, q in v["q"].items():
        assert t.loc[JAIN_NAMES[name], "q"] == printed(q)
    for name, ss in v["ss"].items():
        assert t.loc[JAIN_NAMES[name], "ss"] == printed(ss)
    assert t.loc["error", "ss"] == printed(v["sse"])
    assert t.loc["error", "df"] == 8
    assert t.attrs["sst"] == printed(v["sst"])
    for name, pct in v["pct"].items():
        assert t.loc[JAIN_NAMES[name], "pct_variation"] == printed(pct)
    assert t.attrs["s_e"] == printed(v["s_e"])
    assert t.attrs["s_q"] == printed(v["s_q"])
    assert t.attrs["t_crit"] == printed(v["t_90_df8"])  # qt(0.95, 8) in R
    assert all(se == printed(v["s_q"]) for se in t.loc[t.index != "error", "se"])


def test_jain_22r3_confidence_intervals_F_and_p(sv, jain_22r3):
    v = sv.JAIN_22R3
    t = by_term(jain_22r3)
    for name, (lo, hi) in v["ci90"].items():
        assert t.loc[JAIN_NAMES[name], "ci_low"] == printed(lo)
        assert t.loc[JAIN_NAMES[name], "ci_high"] == printed(hi)
    for name, f in v["F"].items():  # anova(lm(y ~ A*B)) in R, df (1, 8)
        assert t.loc[JAIN_NAMES[name], "F"] == printed(f)
        assert t.loc[JAIN_NAMES[name], "t"] ** 2 == pytest.approx(f, abs=0.005)
    for name, p in v["p"].items():
        assert t.loc[JAIN_NAMES[name], "p"] == printed(p)


def test_columns_and_attrs_of_a_replicated_table(jain_22r3):
    assert list(jain_22r3.columns) == [
        "term",
        "q",
        "effect",
        "df",
        "ss",
        "ms",
        "pct_variation",
        "se",
        "ci_low",
        "ci_high",
        "t",
        "F",
        "p",
    ]
    assert jain_22r3["term"].iloc[-1] == "error"
    a = jain_22r3.attrs
    assert (a["k"], a["r"], a["n"], a["alpha"], a["df_error"], a["replicated"]) == (2, 3, 12, 0.10, 8, True)
    ss = jain_22r3.loc[jain_22r3.term != "I", "ss"].sum()
    assert ss == pytest.approx(a["sst"])


# --- level coding --------------------------------------------------------------


def test_numbers_sort_low_to_high_whatever_the_row_order(sv):
    levels = {"vcpus": (1, 4), "memory_mb": (512, 2048)}
    data = long_frame(sv.JAIN_22["y"], ["vcpus", "memory_mb"], levels)
    t = by_term(factorial_effects(data, factors=["vcpus", "memory_mb"], response="y"))
    assert t.loc["vcpus", "q"] == 20 and t.loc["memory_mb", "q"] == 10
    assert t.attrs["levels"] == levels


def test_strings_sort_unless_an_explicit_mapping_or_design_says_otherwise(sv):
    levels = {"A": ("floating", "pinned"), "B": ("small", "large")}
    data = long_frame(sv.JAIN_22["y"], ["A", "B"], levels)
    for seed in range(3):  # runs come in random order: the coding must not depend on it
        shuffled = data.sample(frac=1, random_state=seed)
        t = by_term(factorial_effects(shuffled, factors=["A", "B"], response="y"))
        # "large" < "small" alphabetically: B's low level is "large", B and A:B flip
        assert (t.loc["A", "q"], t.loc["B", "q"], t.loc["A:B", "q"]) == (20, -10, -5)
        assert t.attrs["levels"] == {"A": ("floating", "pinned"), "B": ("large", "small")}
    design = SimpleNamespace(
        factors=[
            SimpleNamespace(name="A", levels=("floating", "pinned")),
            SimpleNamespace(name="B", levels=("small", "large")),
            SimpleNamespace(name="unused", levels=(1, 2)),
        ]
    )
    for mapping in (levels, {"A": {"floating": -1, "pinned": 1}, "B": ["small", "large"]}, design):
        t = by_term(factorial_effects(data, factors=["A", "B"], response="y", levels=mapping))
        assert (t.loc["A", "q"], t.loc["B", "q"], t.loc["A:B", "q"]) == (20, 10, 5)


def test_a_design_may_declare_more_levels_than_the_data_holds(sv):
    data = long_frame(sv.JAIN_22["y"], ["A", "B"], {"A": (2, 8), "B": ("x", "y")})
    design = SimpleNamespace(
        factors=[
            SimpleNamespace(name="A", levels=(1, 2, 4, 8)),
            SimpleNamespace(name="B", levels=("y", "z", "x")),
        ]
    )
    t = by_term(factorial_effects(data, factors=["A", "B"], response="y", levels=design))
    assert t.attrs["levels"] == {"A": (2, 8), "B": ("y", "x")}
    assert (t.loc["A", "q"], t.loc["B", "q"]) == (20, -10)
    with pytest.raises(ConfigError, match="levels must be a mapping"):
        factorial_effects(data, factors=["A", "B"], response="y", levels=[("A", (2, 8))])


def test_ordered_categorical_uses_its_category_order(sv):
    data = long_frame(sv.JAIN_22["y"], ["A", "B"], {"A": ("lo", "hi"), "B": ("x", "y")})
    data = data.sort_values("y", ascending=False)
    data["A"] = pd.Categorical(data["A"], categories=["lo", "hi"], ordered=True)
    data["B"] = pd.Categorical(data["B"], categories=["x", "y"])
    t = by_term(factorial_effects(data, factors=["A", "B"], response="y"))
    assert (t.loc["A", "q"], t.loc["B", "q"]) == (20, 10)


# --- errors --------------------------------------------------------------------


def test_three_levels_point_to_anova():
    data = pd.DataFrame({"A": [1, 2, 3, 1, 2, 3], "B": [0, 0, 0, 1, 1, 1], "y": range(6)})
    with pytest.raises(ConfigError, match=r"'A' has 3 level.*anova\(\)"):
        factorial_effects(data, factors=["A", "B"], response="y")


def test_unbalanced_and_incomplete_designs_point_to_anova(sv):
    data = long_frame(sv.JAIN_22R3["y"], ["A", "B"])
    with pytest.raises(ConfigError, match=r"unbalanced.*between 2 and 3.*anova\(\)"):
        factorial_effects(data.iloc[1:], factors=["A", "B"], response="y")
    missing = data[~((data.A == 1) & (data.B == 1))]
    with pytest.raises(ConfigError, match=r"1 of the 4 cells have no observation.*A=1, B=1"):
        factorial_effects(missing, factors=["A", "B"], response="y")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(factors=["A", "nope"]), r"factors: no column 'nope'"),
        (dict(response="nope"), r"response: no column 'nope'"),
        (dict(response="label"), r"response column 'label' must be numeric"),
        (dict(alpha=1.5), r"alpha must be a number strictly between 0 and 1"),
        (dict(levels={"C": (0, 1)}), r"levels: 'C' not in factors"),
        (dict(levels={"A": (-1, 1, 2)}), r"levels\['A'\] must give exactly two levels"),
        (dict(levels={"A": {-1: 1, 1: 1}}), r"must map one level to -1 and one to \+1"),
        (dict(levels={"A": (-1, 5)}), r"levels\['A'\].*does not list level\(s\) 1"),
        (dict(factors=["A", "A"]), r"factors names 'A' more than once"),
        (dict(factors="y"), r"response 'y' is also listed in factors"),
    ],
)
def test_bad_arguments_raise_config_errors_naming_them(sv, kwargs, message):
    data = long_frame(sv.JAIN_22R3["y"], ["A", "B"]).assign(label="x")
    args = dict(factors=["A", "B"], response="y") | kwargs
    with pytest.raises(ConfigError, match=message):
        factorial_effects(data, factors=args.pop("factors"), response=args.pop("response"), **args)


def test_missing_values_are_refused(sv):
    data = long_frame(sv.JAIN_22R3["y"], ["A", "B"])
    with pytest.raises(ConfigError, match=r"'y' has 1 missing.*status == 'ok'"):
        factorial_effects(data.assign(y=data.y.where(data.index != 3)), factors=["A", "B"], response="y")
    with pytest.raises(ConfigError, match=r"column 'B' has 1 missing"):
        factorial_effects(data.assign(B=data.B.where(data.index != 3)), factors=["A", "B"], response="y")
    with pytest.raises(ConfigError, match=r"must be a pandas DataFrame"):
        factorial_effects([1, 2], factors=["A"], response="y")


# --- residuals -----------------------------------------------------------------


def test_full_model_residuals_are_deviations_from_cell_means(sv):
    data = long_frame(sv.JAIN_22R3["y"], ["A", "B"])
    res = factorial_residuals(data, factors=["A", "B"], response="y")
    assert list(res.columns) == ["A", "B", "y", "fitted", "residual"]
    assert res.index.equals(data.index)
    cell_means = data.groupby(["A", "B"])["y"].transform("mean")
    assert np.allclose(res["fitted"], cell_means)
    assert (res["residual"] ** 2).sum() == pytest.approx(sv.JAIN_22R3["sse"])


def test_reduced_model_keeps_the_mean_and_the_listed_terms(sv):
    data = long_frame(sv.JAIN_23["y"], list("ABC"))
    res = factorial_residuals(data, factors=list("ABC"), response="y", terms=["A", "C"])
    q = sv.JAIN_23["q"]
    assert np.allclose(res["fitted"], q["I"] + q["A"] * res["A"] + q["C"] * res["C"])
    with pytest.raises(ConfigError, match=r"terms: 'D' not among"):
        factorial_residuals(data, factors=list("ABC"), response="y", terms=["D"])


def test_a_large_constant_part_costs_no_accuracy(sv):
    # Jain Ex. 18.1 (integers) + 1e12 is exactly representable: q, SSE unchanged
    v = sv.JAIN_22R3
    data = long_frame(v["y"], ["A", "B"])
    t = factorial_effects(data.assign(y=data["y"] + 1e12), factors=["A", "B"], response="y").set_index("term")
    for name, q in v["q"].items():
        term = {"AB": "A:B"}.get(name, name)
        assert t.loc[term, "q"] == pytest.approx(q + (1e12 if name == "I" else 0), rel=1e-15, abs=1e-9)
    assert t.loc["error", "ss"] == pytest.approx(v["sse"], rel=1e-12)
    assert t.attrs["sst"] == pytest.approx(v["sst"], rel=1e-12)


def test_degenerate_responses_give_nan_and_a_note(sv):
    data = long_frame(sv.JAIN_22R3["y"], ["A", "B"])
    const = factorial_effects(data.assign(y=0.1), factors=["A", "B"], response="y")
    assert (const["q"].iloc[1:4] == 0).all()
    assert const["pct_variation"].isna().all() and const["p"].isna().all()
    assert "constant" in const.attrs["note"]
    cells = data.groupby(["A", "B"])["y"].transform("mean") / 7  # no within-cell spread
    t = factorial_effects(data.assign(y=cells), factors=["A", "B"], response="y")
    assert t.loc[t.term == "error", "ss"].iloc[0] == 0
    assert t["t"].isna().all() and t["ci_low"].isna().all()
    assert "no variation within cells" in t.attrs["note"]
