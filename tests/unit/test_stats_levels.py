"""The right error term when runs share instances or hosts (labkit.stats.level_effects).

Reference values: tests/vectors/levels_results.csv, made by tests/vectors/levels_vectors.R with
R 4.2.2, lme4 1.1.31 and lmerTest 3.1.3 (see tests/vectors/levels_README.md): a
``runs_per_instance = 3`` campaign whose instances get different CPU caps and whose factors have
no effect (the split-plot ANOVA's instance stratum, ``aov(... + Error(instance))``, the REML fit
with the instance as a random level, and the OLS fit over the runs that calls A significant), a
hosts x instances study with the hosts as fixed blocks, and a fleet with hosts, host x
configuration and instances as random levels. The simulation oracle (known truth: no effect)
checks the false-positive rates: near 5 % with the instance as the error term, far above with OLS.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import factorial_effects, level_effects, mixed_effects, unit_means

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
REL = 1e-3


def reference(name: str) -> pd.DataFrame:
    ref = pd.read_csv(VECTORS / "levels_results.csv")
    return ref[ref.dataset == name].set_index("name")


def split() -> pd.DataFrame:
    return pd.read_csv(VECTORS / "levels_split.csv")


def test_ems_equals_the_split_plot_anovas_instance_stratum():
    res = level_effects(split(), response="y", factors=["A", "B"], random="instance")
    assert res.method == "ems" and res.error_term == "instance" and res.units == 12
    ems = reference("split_ems")
    fx = res.effects.set_index("term")
    for term in ("A", "B", "A:B"):
        assert fx.loc[term, "F"] == pytest.approx(ems.loc[term, "value"], rel=1e-6)
        assert fx.loc[term, "p"] == pytest.approx(ems.loc[term, "p"], rel=1e-6)
        assert fx.loc[term, "df"] == ems.loc[term, "df"] == 8
    assert (fx.loc[["A", "B", "A:B"], "p"] > 0.05).all()


def test_reml_equals_lme4_and_agrees_with_ems():
    data = split()
    reml = level_effects(data, response="y", factors=["A", "B"], random="instance", method="reml")
    ems = level_effects(data, response="y", factors=["A", "B"], random="instance")
    ref = reference("split_reml")
    fx = reml.effects.set_index("term").loc[["I", "A", "B", "A:B"]]
    assert fx["q"].to_numpy() == pytest.approx(ref.loc[["I", "A", "B", "A:B"], "value"].to_numpy(), rel=REL)
    assert fx["se"].to_numpy() == pytest.approx(ref.loc[["I", "A", "B", "A:B"], "se"].to_numpy(), rel=REL)
    assert fx["df"].to_numpy() == pytest.approx(ref.loc[["I", "A", "B", "A:B"], "df"].to_numpy(), rel=REL)
    got = reml.variance.set_index("component")["variance"]
    assert got["instance"] == pytest.approx(ref.loc["instance", "value"], rel=REL)
    assert got["residual"] == pytest.approx(ref.loc["residual", "value"], rel=REL)
    # balanced, positive instance component: the two methods are the same test
    for col in ("q", "se", "t", "p", "pct_variation"):
        assert reml.effects[col].to_numpy() == pytest.approx(
            ems.effects[col].to_numpy(), rel=1e-4, nan_ok=True
        )
    assert ems.variance["variance"].to_numpy() == pytest.approx(got.to_numpy(), rel=1e-4)


def test_the_done_when_case_large_instance_component_and_no_false_call():
    """runs_per_instance = 3, instances capped differently: the instance variance dominates and A
    is not significant; an OLS fit over the runs (R: F = 5.78 on 1 and 32 df, p = 0.022) calls it."""
    data = split()
    res = level_effects(data, response="y", factors=["A", "B"], random="instance")
    share = res.variance.set_index("component")["pct"]
    assert share["instance"] > 90
    assert res.effects.set_index("term").loc["A", "p"] > 0.05
    ols = factorial_effects(data, factors=["A", "B"], response="y").set_index("term")
    ref = reference("split_ols")
    assert ols.loc["A", "F"] == pytest.approx(ref.loc["A", "value"], rel=1e-6)
    assert ols.loc["A", "p"] == pytest.approx(ref.loc["A", "p"], rel=1e-6) and ols.loc["A", "p"] < 0.05


def simulate(rng, *, instances=2, runs=3, unbalanced=False):
    """A 2^2 design with no effect: instance sd 3 (CPU caps), run sd 0.5."""
    rows = []
    for a in (-1, 1):
        for b in (-1, 1):
            for i in range(instances):
                cap = rng.normal(scale=3.0)
                n = runs - (unbalanced and rng.random() < 0.3)
                rows += [
                    {"A": a, "B": b, "instance": f"{a}{b}-{i}", "y": 100 + cap + rng.normal(scale=0.5)}
                    for _ in range(n)
                ]
    return pd.DataFrame(rows)


def test_false_positive_rates_simulated():
    """Known truth (no effect), 400 campaigns: the instance error term keeps the rate of calling A
    significant near 5 %; OLS over the runs calls it in about a third of them."""
    rng = np.random.default_rng(20261130)
    n = 400
    mixed = ols = 0
    for _ in range(n):
        data = simulate(rng)
        mixed += (
            level_effects(data, response="y", factors=["A", "B"], random="instance")
            .effects.set_index("term")
            .loc["A", "p"]
            < 0.05
        )
        ols += (
            factorial_effects(data, factors=["A", "B"], response="y").set_index("term").loc["A", "p"] < 0.05
        )
    assert sps.binom.ppf(0.001, n, 0.05) <= mixed <= sps.binom.ppf(0.999, n, 0.05), mixed
    assert ols > 0.2 * n, ols


def test_false_positive_rate_of_reml_on_unbalanced_campaigns():
    rng = np.random.default_rng(20261131)
    n = 30
    calls = sum(
        level_effects(simulate(rng, unbalanced=True), response="y", factors=["A", "B"], random="instance")
        .effects.set_index("term")
        .loc["A", "p"]
        < 0.05
        for _ in range(n)
    )
    assert calls <= sps.binom.ppf(0.999, n, 0.05), calls


def test_hosts_as_fixed_blocks_equal_lme4():
    perf = pd.read_csv(VECTORS / "lme4_perf.csv")
    fit = mixed_effects(perf, response="time", fixed=["A", "B"], random="instance", blocks="host")
    ref = reference("perf_blocks")
    fx = fit.fixed.set_index("term").loc[["I", "A", "B", "A:B"]]
    for col, rcol in (("estimate", "value"), ("se", "se"), ("df", "df")):
        assert fx[col].to_numpy() == pytest.approx(ref.loc[["I", "A", "B", "A:B"], rcol].to_numpy(), rel=REL)
    got = fit.variance.set_index("component")["variance"]
    assert got["instance"] == pytest.approx(ref.loc["instance", "value"], rel=REL)
    assert got["residual"] == pytest.approx(ref.loc["residual", "value"], rel=REL)
    with pytest.raises(ConfigError, match="confounded"):
        mixed_effects(
            perf.assign(block=perf.A), response="time", fixed=["A", "B"], random="instance", blocks="block"
        )


def test_a_fleet_with_random_hosts_equals_lme4():
    fleet = pd.read_csv(VECTORS / "levels_fleet.csv")
    res = level_effects(fleet, response="y", factors=["A", "B"], random=["host", "config", "instance"])
    assert res.method == "reml"
    assert res.error_term == "config and instance"
    ref = reference("fleet")
    fx = res.effects.set_index("term").loc[["I", "A", "B", "A:B"]]
    for col, rcol in (("q", "value"), ("se", "se"), ("df", "df")):
        assert fx[col].to_numpy() == pytest.approx(ref.loc[["I", "A", "B", "A:B"], rcol].to_numpy(), rel=REL)
    got = res.variance.set_index("component")["variance"]
    for comp in ("host", "config", "instance", "residual"):
        assert got[comp] == pytest.approx(ref.loc[comp, "value"], rel=REL)


def test_unit_means_and_refusals():
    data = split()
    means = unit_means(data, response="y", unit="instance", keep=["A", "B"])
    assert len(means) == 12 and (means["n"] == 3).all()
    assert means["y"].sum() == pytest.approx(data.groupby("instance")["y"].mean().sum())
    with pytest.raises(ConfigError, match="vary within"):
        unit_means(data, response="y", unit="instance", keep=["run"])
    unbalanced = data.iloc[1:]
    with pytest.raises(ConfigError, match="EMS needs the same number"):
        level_effects(unbalanced, response="y", factors=["A", "B"], random="instance", method="ems")
    assert level_effects(unbalanced, response="y", factors=["A", "B"], random="instance").method == "reml"
    with pytest.raises(ConfigError, match="method"):
        level_effects(data, response="y", factors=["A", "B"], random="instance", method="ols")
