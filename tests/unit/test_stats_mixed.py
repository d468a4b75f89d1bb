"""labkit.stats.mixed_effects against lme4's REML fits in R.

Reference values: tests/vectors/lme4_results.csv, made by tests/vectors/lme4_vectors.R with
R 4.2.2, lme4 1.1.31 and lmerTest 3.1.3 (Satterthwaite df; Debian 12's r-base-core,
r-cran-lme4 and r-cran-lmertest; see tests/vectors/lme4_README.md): lme4's datasets Dyestuff, Dyestuff2 (a singular fit), Pastes
(nested) and Penicillin (crossed), and a simulated hosts x instances x runs study, balanced and
unbalanced, each stored beside it as tests/vectors/lme4_<name>.csv. The tests do not need R.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from labkit.errors import ConfigError
from labkit.stats import mixed as mixed_module
from labkit.stats import mixed_effects

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
# dataset -> (response, random columns, fixed factors), as in lme4_vectors.R's calls
CASES = {
    "Dyestuff": ("Yield", ["Batch"], None),
    "Dyestuff2": ("Yield", ["Batch"], None),
    "Pastes": ("strength", ["batch", "sample"], None),
    "Penicillin": ("diameter", ["plate", "sample"], None),
    "perf": ("time", ["host", "instance"], ["A", "B"]),
    "perf_unbalanced": ("time", ["host", "instance"], ["A", "B"]),
}
REL = 1e-3


def _data(name: str) -> pd.DataFrame:
    return pd.read_csv(VECTORS / f"lme4_{name}.csv")


def _reference(name: str) -> pd.DataFrame:
    ref = pd.read_csv(VECTORS / "lme4_results.csv")
    return ref[ref.dataset == name]


def _fit(name: str):
    response, random, fixed = CASES[name]
    return mixed_effects(_data(name), response=response, random=random, fixed=fixed)


@pytest.mark.parametrize("name", list(CASES))
def test_equals_lme4_reml(name):
    fit = _fit(name)
    ref = _reference(name)
    fixed = ref[ref.kind == "fixed"]
    assert list(fit.fixed.term) == list(fixed.name)
    assert fit.fixed.estimate.to_numpy() == pytest.approx(fixed.value.to_numpy(), rel=REL)
    assert fit.fixed.se.to_numpy() == pytest.approx(fixed.se.to_numpy(), rel=REL)
    assert fit.fixed.df.to_numpy() == pytest.approx(fixed.df.to_numpy(), rel=REL)
    variance = ref[ref.kind == "variance"].set_index("name").value
    got = fit.variance.set_index("component").variance
    assert sorted(got.index) == sorted(variance.index)
    for component, value in variance.items():
        if value == 0:
            assert got[component] == pytest.approx(0, abs=1e-6 * variance["residual"])
        else:
            assert got[component] == pytest.approx(value, rel=REL), component
    assert fit.singular == bool(ref.singular.iloc[0])
    assert -2 * fit.reml_llf == pytest.approx(ref.REMLcrit.iloc[0], rel=1e-6)
    assert fit.variance.pct.sum() == pytest.approx(100)
    assert list(fit.variance.component) == CASES[name][1] + ["residual"]


def test_the_singular_fit_says_so():
    fit = _fit("Dyestuff2")
    assert fit.singular and fit.variance.variance.iloc[0] == 0
    assert "'Batch'" in fit.note and "singular" in fit.note
    assert not _fit("Dyestuff").singular and _fit("Dyestuff").note == ""


def test_components_follow_the_order_given_not_sorted():
    data = _data("Penicillin")
    fit = mixed_effects(data, response="diameter", random=["sample", "plate"])
    assert list(fit.variance.component) == ["sample", "plate", "residual"]
    ref = _reference("Penicillin").set_index("name").value
    assert fit.variance.variance.iloc[0] == pytest.approx(ref["sample"], rel=REL)


def test_satterthwaite_df_and_se_equal_the_exact_split_plot_test():
    """Balanced: factor A is set per instance, so its exact test is the ANOVA of the instance
    means (host + A, 24 - 4 - 1 = 19 df); B and A:B vary within instances (96 - 24 - 2 = 70)."""
    data = _data("perf")
    fit = mixed_effects(data, response="time", random=["host", "instance"], fixed=["A", "B"])
    table = fit.fixed.set_index("term")
    assert table.df.to_dict() == pytest.approx({"I": 3, "A": 19, "B": 70, "A:B": 70}, rel=1e-4)
    means = data.groupby(["host", "instance"], as_index=False).agg(time=("time", "mean"), A=("A", "first"))
    X = np.column_stack([pd.get_dummies(means.host).to_numpy(float), means.A.to_numpy(float)])
    beta, ss, *_ = np.linalg.lstsq(X, means.time.to_numpy(), rcond=None)
    se_a = np.sqrt(ss[0] / 19 / len(means))
    assert table.loc["A", "estimate"] == pytest.approx(beta[-1], rel=1e-9)
    assert table.loc["A", "se"] == pytest.approx(se_a, rel=1e-5)
    # an OLS fit of the runs would test A with 92 df and a far smaller standard error
    assert table.loc["A", "se"] > 3 * table.loc["B", "se"]


def test_a_wrong_optimizer_stop_loses_to_the_anova_restart(monkeypatch):
    """An optimizer that 'converges' at a wrong point from the default start must not win."""
    real = mixed_module._fits

    def wrong_from_default(model, outer, start, label):
        fit = real(model, outer, start, label)
        if label == "default" and fit is not None:
            fit = dict(fit, vcomp=fit["vcomp"] * 25 + 1, optimizer="broken")
        return fit

    monkeypatch.setattr(mixed_module, "_fits", wrong_from_default)
    fit = _fit("Penicillin")
    assert fit.start == "anova" and fit.optimizer != "broken"
    ref = _reference("Penicillin").set_index("name").value
    assert fit.variance.set_index("component").variance["sample"] == pytest.approx(ref["sample"], rel=REL)


def test_no_converged_fit_is_a_config_error(monkeypatch):
    monkeypatch.setattr(mixed_module, "_fits", lambda model, outer, start, label: None)
    with pytest.raises(ConfigError, match="no optimizer"):
        _fit("Dyestuff")


def test_levels_set_the_sign_of_the_coefficient():
    data = _data("perf")
    base = mixed_effects(data, response="time", random=["host", "instance"], fixed=["A", "B"])
    flipped = mixed_effects(
        data, response="time", random=["host", "instance"], fixed=["A", "B"], levels={"A": (1, -1)}
    )
    assert flipped.levels["A"] == (1, -1) and base.levels["A"] == (-1, 1)
    a = base.fixed.set_index("term").estimate
    b = flipped.fixed.set_index("term").estimate
    assert b["A"] == pytest.approx(-a["A"], rel=1e-6) and b["B"] == pytest.approx(a["B"], rel=1e-6)
    labelled = data.assign(A=data.A.map({-1: "off", 1: "on"}))
    named = mixed_effects(labelled, response="time", random=["host", "instance"], fixed=["A", "B"])
    assert named.fixed.estimate.to_numpy() == pytest.approx(a.to_numpy(), rel=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(response="nope", random=["Batch"]), "no column 'nope'"),
        (dict(response="Yield", random=["nope"]), "random: no column 'nope'"),
        (dict(response="Yield", random=[]), "random must name at least one column"),
        (dict(response="Batch", random=["Batch"]), "must be numeric"),
        (dict(response="Yield", random=["Batch", "Batch"]), "more than once"),
        (dict(response="Yield", random=["Batch"], fixed=["Batch"]), "both fixed and random"),
        (dict(response="Yield", random=["Batch"], fixed=["Yield"]), "also listed in fixed"),
        (dict(response="Yield", random=["one"]), "'one' has 1 unit"),
        (dict(response="Yield", random=["row"]), "a unit for every observation"),
        (dict(response="Yield", random=["Batch"], fixed=["three"]), "has 3 level"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs, message):
    data = _data("Dyestuff").assign(one="x", row=range(30), three=[1, 2, 3] * 10)
    with pytest.raises(ConfigError, match=message):
        mixed_effects(data, **kwargs)


def test_bad_data_are_config_errors():
    with pytest.raises(ConfigError, match="pandas DataFrame"):
        mixed_effects([1, 2], response="y", random="g")
    data = _data("Dyestuff")
    with pytest.raises(ConfigError, match="missing"):
        mixed_effects(data.assign(Batch=data.Batch.where(data.index > 0)), response="Yield", random="Batch")
    with pytest.raises(ConfigError, match="missing or infinite"):
        mixed_effects(data.assign(Yield=data.Yield.where(data.index > 0)), response="Yield", random="Batch")
    perf = _data("perf")
    empty_cell = perf[~((perf.A == 1) & (perf.B == 1))]
    with pytest.raises(ConfigError, match="cannot separate"):
        mixed_effects(empty_cell, response="time", random=["host", "instance"], fixed=["A", "B"])
    with pytest.raises(TypeError):
        mixed_effects(data, "Yield", "Batch")  # type: ignore[misc]
