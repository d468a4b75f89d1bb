"""Kalibera & Jones' multi-level repetition plan (labkit.stats.repetition).

Expected values:

* The paper's worked example (Kalibera & Jones, "Rigorous benchmarking in reasonable time", ISMM
  2013, with the variance estimators as corrected in the revised version, Kent Academic Repository
  33611): 3 builds x 2 executions x 2 iterations, S_1^2..S_3^2 = 16.5, 2.6, 3.6 and
  T_1^2..T_3^2 = 16.5, -5.7, 2.3 (to one decimal); the same numbers as 4 iterations x 3 executions,
  S^2 = 12.7, 3.6 and T^2 = 12.7, 0.4. They are the values the authors' group's reference
  implementation checks (softdevteam/libkalibera, python/tests/test_data.py,
  test_worked_example_3_level and test_worked_example_2_level).
* The same implementation's optimal-repetition example (test_optimal_reps_no_rounding): a
  2 x 2 x 3 pilot with costs 100, 20 and 3 gives T^2 = 0.7267, 0.2628, 0.7747 (low to high) and
  unrounded counts r_1 = 4.2937, r_2 = 1.3023, rounded up to 5 and 2.
* Simulation oracles with known components: campaigns run with the plan land within the target
  of the true mean in at least ``confidence`` of the cases (K&J's rule), observe a half-width at
  most the target in at least ``assurance`` of them (Kupper & Hafner 1989), and no integer plan
  on a grid meets the target at a cost more than a rounding step below the plan's.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import kj_estimators, plan_repetitions, runs_needed


def nested(values: dict) -> pd.DataFrame:
    """{(build, execution): [iterations]} -> long rows."""
    return pd.DataFrame(
        [
            {"build": b, "execution": e, "iteration": i, "y": y}
            for (b, e), ys in values.items()
            for i, y in enumerate(ys)
        ]
    )


PAPER = {
    (0, 0): [9.0, 5.0],
    (0, 1): [8.0, 3.0],
    (1, 0): [10.0, 6.0],
    (1, 1): [7.0, 11.0],
    (2, 0): [1.0, 12.0],
    (2, 1): [2.0, 4.0],
}
LIBKALIBERA = {(0, 0): [3, 4, 3], (0, 1): [1.2, 3.1, 3], (1, 0): [0.2, 1, 1.5], (1, 1): [1, 2, 3]}
LEVELS = ["build", "execution", "iteration"]


def test_the_papers_worked_example_three_levels():
    est = kj_estimators(nested(PAPER), response="y", levels=LEVELS)
    assert est["i"].tolist() == [3, 2, 1]
    assert est["r"].tolist() == [3, 2, 2]
    assert est["S2"].round(1).tolist() == [3.6, 2.6, 16.5]
    assert est["T2"].round(1).tolist() == [2.3, -5.7, 16.5]
    assert est.attrs["mean"] == 6.5


def test_the_papers_worked_example_two_levels():
    rows = pd.DataFrame(
        [
            {"execution": e, "iteration": i, "y": y}
            for e, ys in enumerate([[9.0, 5.0, 8.0, 3.0], [10.0, 6.0, 7.0, 11.0], [1.0, 12.0, 2.0, 4.0]])
            for i, y in enumerate(ys)
        ]
    )
    est = kj_estimators(rows, response="y", levels=["execution", "iteration"])
    assert est["S2"].round(1).tolist() == [3.6, 12.7]
    assert est["T2"].round(1).tolist() == [0.4, 12.7]


def test_optimal_counts_equal_the_reference_implementation():
    plan = runs_needed(nested(LIBKALIBERA), response="y", levels=LEVELS, costs=[100, 20, 3], target_ci=0.1)
    assert plan["T2"].tolist() == pytest.approx([0.7747, 0.262777778, 0.7266667], abs=1e-4)
    assert plan["reps_exact"].tolist()[1:] == pytest.approx([1.3023, 4.2937], abs=1e-3)
    assert plan["reps"].tolist()[1:] == [2, 5]
    assert plan.attrs["method"] == "kj"
    # the top level: the fewest builds whose t interval reaches +-10 % of the mean
    var_top = 0.7747 + 0.262778 / 2 + 0.726667 / 10
    r = plan["reps"].iloc[0]
    half = lambda n: sps.t.ppf(0.975, n - 1) * math.sqrt(var_top / n)  # noqa: E731
    target = 0.1 * plan.attrs["mean"]
    assert half(r) <= target < half(r - 1)
    assert plan.attrs["cost"] == r * 100 + r * 2 * 20 + r * 2 * 5 * 3
    assert plan.attrs["total"] == r * 10


def test_reml_agrees_with_kj_on_a_balanced_pilot_with_positive_components():
    rng = np.random.default_rng(3)
    rows = [
        {"instance": i, "run": j, "y": 100 + a + b + rng.normal(scale=1.0)}
        for i, a in enumerate(rng.normal(scale=3.0, size=6))
        for j, b in enumerate(rng.normal(scale=1.5, size=4))
    ]
    pilot = pd.DataFrame(rows)
    pilot["it"] = 0
    kj = runs_needed(
        pilot, response="y", levels=["instance", "run"], costs={"instance": 60, "run": 2}, target_ci=0.01
    )
    reml = runs_needed(
        pilot,
        response="y",
        levels=["instance", "run"],
        costs={"instance": 60, "run": 2},
        target_ci=0.01,
        method="reml",
    )
    assert (kj["T2"] > 0).all()
    assert reml["variance"].tolist() == pytest.approx(kj["variance"].tolist(), rel=1e-3)
    assert reml.attrs["method"] == "reml" and kj.attrs["method"] == "kj"


def test_an_unbalanced_pilot_is_fitted_by_reml():
    rng = np.random.default_rng(4)
    rows = [
        {"instance": i, "run": j, "y": 50 + a + rng.normal()}
        for i, a in enumerate(rng.normal(scale=2.0, size=5))
        for j in range(3 + i % 2)
    ]
    plan = runs_needed(
        pd.DataFrame(rows), response="y", levels=["instance", "run"], costs=[30, 1], target_ci=0.02
    )
    assert plan.attrs["method"] == "reml"
    assert plan["pilot_reps"].isna().all() and plan["S2"].isna().all()
    with pytest.raises(ConfigError, match="balanced"):
        runs_needed(
            pd.DataFrame(rows),
            response="y",
            levels=["instance", "run"],
            costs=[30, 1],
            target_ci=0.02,
            method="kj",
        )


def simulate(rng, comps, reps, n_campaigns):
    """Grand means and top-level sample variances of campaigns run with ``reps`` (high to low)."""
    top = reps[0]
    # each top unit's mean: sum over levels of that level's effects averaged over its units below
    means = np.zeros((n_campaigns, top))
    for j, var in enumerate(comps):
        units = int(np.prod(reps[1 : j + 1]))
        means += rng.normal(scale=math.sqrt(var), size=(n_campaigns, top, units)).mean(axis=2)
    return means.mean(axis=1), means.var(axis=1, ddof=1)


COMPS = {"instance": 4.0, "run": 1.0, "iteration": 9.0}
COSTS = {"instance": 60.0, "run": 5.0, "iteration": 0.5}


@pytest.mark.parametrize("target", [0.6, 1.0])
def test_simulated_campaigns_meet_the_target_with_the_stated_confidence(target):
    plan = plan_repetitions(COMPS, costs=COSTS, target=target)
    reps = plan["reps"].to_numpy()
    rng = np.random.default_rng([12, int(10 * target)])
    n = 4000
    mean, var = simulate(rng, list(COMPS.values()), reps, n)
    within = np.mean(np.abs(mean) <= target)  # true mean 0
    # at least 95 %: the bound a 95 % rate stays above with probability 0.999
    assert within >= sps.binom.ppf(0.001, n, 0.95) / n, within
    half = sps.t.ppf(0.975, reps[0] - 1) * np.sqrt(var / reps[0])
    assert np.mean(np.abs(mean) <= half) >= sps.binom.ppf(0.001, n, 0.95) / n  # coverage
    # K&J's rule sizes for the expected variance: about half the campaigns see a wider interval
    assert 0.3 < np.mean(half <= target) < 0.9


@pytest.mark.parametrize("assurance", [0.8, 0.95])
def test_assurance_is_the_share_of_campaigns_whose_interval_meets_the_target(assurance):
    plan = plan_repetitions(COMPS, costs=COSTS, target=0.8, assurance=assurance)
    reps = plan["reps"].to_numpy()
    rng = np.random.default_rng([13, int(100 * assurance)])
    n = 4000
    _, var = simulate(rng, list(COMPS.values()), reps, n)
    met = np.mean(sps.t.ppf(0.975, reps[0] - 1) * np.sqrt(var / reps[0]) <= 0.8)
    assert met >= sps.binom.ppf(0.001, n, assurance) / n, met
    fewer = plan_repetitions(COMPS, costs=COSTS, target=0.8)
    assert plan["reps"].iloc[0] > fewer["reps"].iloc[0]  # assurance costs more units


def test_no_grid_plan_is_much_cheaper():
    plan = plan_repetitions(COMPS, costs=COSTS, target=0.5)
    comps = np.array(list(COMPS.values()))
    costs = np.array(list(COSTS.values()))
    best = math.inf
    for r_run, r_it in itertools.product(range(1, 13), range(1, 41)):
        var_top = comps[0] + comps[1] / r_run + comps[2] / (r_run * r_it)
        top = max(2, math.ceil(sps.norm.ppf(0.975) ** 2 * var_top / 0.25))
        while sps.t.ppf(0.975, top - 1) * math.sqrt(var_top / top) > 0.5:
            top += 1
        best = min(best, top * (costs[0] + r_run * (costs[1] + r_it * costs[2])))
    assert plan.attrs["cost"] <= best * 1.03, (plan.attrs["cost"], best)
    assert plan.attrs["half_width"] <= 0.5


def test_levels_without_variance():
    # no run-to-run variance: one run per instance; no instance variance: all repetition below
    plan = plan_repetitions({"instance": 4.0, "run": 0.0}, costs=[60, 1], target=1.0)
    assert plan["reps"].tolist()[1] == 1 and plan["reps_exact"].iloc[1] == 0
    plan = plan_repetitions({"instance": 0.0, "run": 4.0}, costs=[60, 1], target=1.0)
    assert "no variance of its own" in plan.attrs["note"]
    # the cheapest of: 2 instances x 323 runs (t = 12.7 with 1 df) = 766, 3 x 25 = 255, 4 x 11 = 284
    assert plan["reps"].tolist() == [3, 25] and plan.attrs["cost"] == 255
    assert plan.attrs["half_width"] <= 1.0
    far = plan_repetitions({"instance": 100.0, "run": 1.0}, costs=[60, 1], target=0.01, max_reps=50)
    assert far["reps"].iloc[0] == 50 and "not reached" in far.attrs["note"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"costs": [1, 2]}, "3 levels"),
        ({"costs": {"build": 1, "execution": 2}}, "missing"),
        ({"costs": [1, 0, 2]}, "positive"),
        ({"target_ci": 0}, "positive"),
        ({"method": "anova"}, "method"),
        ({"levels": ["build", "execution"]}, "identify each row"),
        ({"levels": ["build", "nope", "iteration"]}, "nope"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"response": "y", "levels": LEVELS, "costs": [100, 20, 3], "target_ci": 0.05} | kwargs
    with pytest.raises(ConfigError, match=match):
        runs_needed(nested(PAPER), **args)
    with pytest.raises(ConfigError, match="at least 2 units"):
        runs_needed(
            nested({(0, 0): [1.0, 2.0], (0, 1): [3.0, 4.0]}),
            response="y",
            levels=LEVELS,
            costs=[1, 1, 1],
            target_ci=0.1,
        )
    with pytest.raises(ConfigError, match="assurance"):
        plan_repetitions({"a": 1.0, "b": 1.0}, costs=[1, 1], target=1, assurance=1.5)


def two_configurations(pilot: pd.DataFrame, shift: float) -> pd.DataFrame:
    """``pilot`` as configuration "a" and, as configuration "b", the same rows ``shift`` higher
    on instances of their own (what a design's factor does to a pilot's response)."""
    b = pilot.assign(instance=pilot["instance"].astype(str) + "-b", y=pilot["y"] + shift)
    return pd.concat([pilot.assign(cfg="a"), b.assign(cfg="b")], ignore_index=True)


@pytest.mark.parametrize("drop", [False, True], ids=["balanced-kj", "unbalanced-reml"])
def test_within_pools_the_configurations_instead_of_taking_their_difference_for_instance_variance(drop):
    # a pilot that spans two configurations (the benchmark's floating/pinned): estimated within
    # each configuration and pooled, two identical copies give exactly the one copy's plan
    # (K&J's S^2 averaged; the REML likelihood doubled, the shift absorbed by the fixed blocks);
    # taken as one configuration, the shift between them inflates the instance component
    rng = np.random.default_rng(11)
    one = pd.DataFrame(
        [
            {"instance": f"i{i}", "run": j, "y": 10 + a + rng.normal(scale=0.5)}
            for i, a in enumerate(rng.normal(scale=0.4, size=5))
            for j in range(4)
        ]
    )
    if drop:
        one = one.drop(index=[3, 7]).reset_index(drop=True)
    args = dict(response="y", levels=["instance", "run"], costs={"instance": 40, "run": 2}, target_ci=0.02)
    alone = runs_needed(one, **args)
    pooled = runs_needed(two_configurations(one, 3.0), within="cfg", **args)
    assert pooled.attrs["method"] == alone.attrs["method"] == ("reml" if drop else "kj")
    assert pooled["variance"].tolist() == pytest.approx(alone["variance"].tolist(), rel=1e-3, abs=1e-6)
    assert pooled["reps"].tolist() == alone["reps"].tolist()
    assert pooled.attrs["mean"] == pytest.approx(alone.attrs["mean"])  # the smaller mean: a's
    lumped = runs_needed(two_configurations(one, 3.0), **args)
    assert lumped["variance"].iloc[0] > 2 * pooled["variance"].iloc[0] + 1.0


def test_within_refuses_overlapping_columns_and_a_configuration_with_one_instance():
    rows = pd.DataFrame(
        [
            {"cfg": c, "instance": f"{c}{i}", "run": j, "y": 1.0 + i + 0.1 * j}
            for c, n in (("a", 3), ("b", 1))
            for i in range(n)
            for j in range(2)
        ]
    )
    args = dict(response="y", costs=[10, 1], target_ci=0.05)
    with pytest.raises(ConfigError, match="must not share"):
        runs_needed(rows, levels=["instance", "run"], within=["instance"], **args)
    with pytest.raises(ConfigError, match="at least 2 units"):
        runs_needed(rows, levels=["instance", "run"], within="cfg", **args)
    with pytest.raises(ConfigError, match="within"):
        runs_needed(rows, levels=["instance", "run"], within="nope", **args)
