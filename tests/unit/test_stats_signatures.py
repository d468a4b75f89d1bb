"""labkit.stats' public functions: the data (or the samples) positional, every other argument
keyword-only, so ``anova(data, response=..., factors=...)`` reads the same in every function and
an old positional call (``anova(data, "y", ["A"])``) fails with a TypeError instead of silently
binding a column name to the wrong parameter."""

from __future__ import annotations

import inspect

import pandas as pd
import pytest

import labkit.stats as stats

# the functions that do not take one DataFrame ``data``: their positional (sample) parameters
SAMPLES = {
    "config_differences": ("a", "b"),
    "drift_test": ("a", "b"),  # two campaigns' frames
    "ttest": ("a", "b"),
    "hedges_g": ("a", "b"),
    "ratio_ci": ("a", "b"),
    "fieller_ratio": ("num", "den"),
    "shapiro": ("x",),
    "pettitt": ("values",),
    "boxcox_transform": ("y",),
    "lenth": ("effects",),
    "adjust_p": ("p",),
    "correct": ("table",),
    "effect_sizes": ("table",),  # a result table in
    "n_for_halfwidth": ("sd", "halfwidth"),
    "n_for_power": ("delta", "sd"),  # elementwise numbers
    "yates_terms": ("factors",),
    "quantile_ci": ("values",),
    "change_points": ("values",),
    "warmup": ("values",),  # one series
    "runs_needed": ("pilot",),
    "plan_repetitions": ("variances",),  # a pilot, its components
    "cv_ci": ("values",),
    "detectable_effect": ("sd",),
    "equivalence": ("a", "b"),
    "equivalence_paired": ("a", "b"),  # two samples
    "decide": ("table", "rules"),
    "runs_for_quantile": ("q",),
    "stein_ci": ("values",),
}
PUBLIC = sorted(n for n in stats.__all__ if inspect.isfunction(getattr(stats, n)))


def test_the_table_names_only_public_functions():
    assert set(SAMPLES) <= set(PUBLIC)


@pytest.mark.parametrize("name", PUBLIC)
def test_only_the_data_is_positional(name):
    params = inspect.signature(getattr(stats, name)).parameters.values()
    positional = tuple(
        p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    )
    assert positional == SAMPLES.get(name, ("data",)), (
        f"{name}{inspect.signature(getattr(stats, name))}: make the parameters after the data keyword-only"
    )


def test_an_old_positional_call_is_a_type_error():
    data = pd.DataFrame({"A": [-1, 1, -1, 1], "y": [1.0, 2.0, 1.5, 2.5]})
    with pytest.raises(TypeError):
        stats.anova(data, "y", ["A"])
    with pytest.raises(TypeError):
        stats.factorial_effects(data, ["A"], "y")
    assert list(stats.factorial_effects(data, factors=["A"], response="y").term) == ["I", "A", "error"]
