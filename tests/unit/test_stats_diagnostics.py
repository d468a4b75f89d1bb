"""labkit.stats.factorial_diagnostics: Shapiro-Wilk on residuals, log model offered."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.stats import factorial_diagnostics, factorial_effects

from .test_stats_factorial import long_frame
from .test_stats_vectors import sv  # noqa: F401  (sv is a fixture)


def test_jain_22r3_residuals_pass(sv):
    data = long_frame(sv.JAIN_22R3["y"], ["A", "B"])
    d = factorial_diagnostics(data, factors=["A", "B"], response="y")
    # scipy.stats.shapiro (R: shapiro.test) of y - cell mean
    res = data["y"] - data.groupby(["A", "B"])["y"].transform("mean")
    ref = sps.shapiro(res)
    assert d.normal is True and len(d.table) == 1
    assert d.table.loc[0, "W"] == pytest.approx(ref.statistic)
    assert d.table.loc[0, "p"] == pytest.approx(ref.pvalue)
    assert "look normal" in d.message and d.log_effects is None
    assert list(d.residuals.columns) == ["A", "B", "y", "fitted", "residual"]


def lognormal_design(seed=2, r=10):
    rng = np.random.default_rng(seed)
    rows = [
        {"A": a, "B": b, "y": float(np.exp(1 + a + 0.5 * b + rng.normal(0, 1)))}
        for a in (-1, 1)
        for b in (-1, 1)
        for _ in range(r)
    ]
    return pd.DataFrame(rows)


def test_non_normal_residuals_are_flagged_and_the_log_model_offered():
    data = lognormal_design()
    d = factorial_diagnostics(data, factors=["A", "B"], response="y")
    assert d.normal is False
    assert d.message.startswith("WARNING: residuals of 'y' are not normal")
    assert d.table["model"].tolist() == ["response", "log(y)"]
    assert bool(d.table.loc[1, "normal"]) and "consider the log model" in d.message
    expected = factorial_effects(data.assign(y=np.log(data.y)), factors=["A", "B"], response="y")
    pd.testing.assert_frame_equal(d.log_effects, expected)
    assert d.log_residuals is not None and str(d) == d.message


def test_log_not_possible_with_non_positive_response():
    data = lognormal_design()
    data.loc[0, "y"] = -50.0
    d = factorial_diagnostics(data, factors=["A", "B"], response="y")
    assert d.normal is False and "not possible" in d.message and d.log_effects is None


def test_unreplicated_full_model_is_saturated(sv):
    data = long_frame(sv.JAIN_23["y"], list("ABC"))
    d = factorial_diagnostics(data, factors=list("ABC"), response="y")
    assert d.normal is None and "saturated" in d.table.loc[0, "note"]
    reduced = factorial_diagnostics(data, factors=list("ABC"), response="y", terms=["A", "C"])
    assert reduced.normal is not None and np.isfinite(reduced.table.loc[0, "W"])
