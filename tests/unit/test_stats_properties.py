"""Property tests of labkit.stats.factorial_effects (hypothesis).

For random balanced 2^k·r data:
* the ss of every term plus the error ss equals SST = Σ(y - ȳ)²;
* q, ss, se, t and p agree with statsmodels ``ols("y ~ A*B*...")`` on -1/+1
  coded factors + ``anova_lm(typ=1)`` (all SS types agree when balanced) to
  1e-9, relative to the size of the data (|y| up to 1e3 makes SS up to ~1e9,
  so an absolute 1e-9 would test floating-point noise, not the method).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from labkit.stats import factorial_effects

LEVEL_PAIRS = [(-1, 1), (0, 1), (1, 4), (512, 2048), ("floating", "pinned"), ("kvm", "xen")]
FACTORS = ["vcpus", "affinity", "memory_mb", "count", "hyp"]
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def designs(draw, min_r=1):
    k = draw(st.integers(1, 4))
    r = draw(st.integers(min_r, 4))
    factors = FACTORS[:k]
    pairs = [draw(st.sampled_from(LEVEL_PAIRS)) for _ in factors]
    y = draw(
        arrays(np.float64, 2**k * r, elements=st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False))
    )
    cells = np.repeat(np.arange(2**k), r)
    order = draw(st.permutations(range(len(cells))))
    cells = cells[list(order)]
    data = pd.DataFrame({f: [p[c >> j & 1] for c in cells] for j, (f, p) in enumerate(zip(factors, pairs))})
    data["y"] = y
    return data, factors


def scale(data) -> float:
    return max(1.0, float(np.sum((data["y"] - data["y"].mean()) ** 2)))


@SETTINGS
@given(designs(min_r=1))
def test_terms_plus_error_add_up_to_sst(design):
    data, factors = design
    t = factorial_effects(data, factors=factors, response="y")
    sst = float(np.sum((data["y"] - data["y"].mean()) ** 2))
    total = t.loc[t.term != "I", "ss"].sum()
    assert abs(total - sst) <= 1e-9 * max(1.0, sst)
    assert abs(t.attrs["sst"] - sst) <= 1e-9 * max(1.0, sst)
    if sst > 1e-6:
        assert abs(t.loc[t.term != "I", "pct_variation"].sum() - 100) <= 1e-7


@SETTINGS
@given(designs(min_r=2))
def test_agrees_with_statsmodels_ols_and_anova_lm(design):
    from statsmodels.formula.api import ols
    from statsmodels.stats.anova import anova_lm

    data, factors = design
    t = factorial_effects(data, factors=factors, response="y").set_index("term")
    coded = pd.DataFrame({f: np.where(data[f] == t.attrs["levels"][f][1], 1.0, -1.0) for f in factors})
    coded["y"] = data["y"].to_numpy()
    model = ols("y ~ " + " * ".join(factors), data=coded).fit()
    table = anova_lm(model, typ=1)
    tol = 1e-9 * scale(data)
    ytol = 1e-9 * max(1.0, float(np.abs(data["y"]).max()))
    assert abs(t.loc["I", "q"] - model.params["Intercept"]) <= ytol
    for term in t.index.drop(["I", "error"]):
        assert abs(t.loc[term, "q"] - model.params[term]) <= ytol
        assert abs(t.loc[term, "ss"] - table.loc[term, "sum_sq"]) <= tol
    assert abs(t.loc["error", "ss"] - table.loc["Residual", "sum_sq"]) <= tol
    assert t.loc["error", "df"] == table.loc["Residual", "df"]
    if model.mse_resid > 1e-9 * scale(data) / len(data):  # t and p are noise otherwise
        se = np.sqrt(model.mse_resid / len(data))
        assert abs(t.attrs["s_q"] - se) <= 1e-9 * max(1.0, se)
        for term in t.index.drop("error"):
            name = "Intercept" if term == "I" else term
            assert np.isclose(t.loc[term, "t"], model.tvalues[name], rtol=1e-9, atol=1e-9)
            assert np.isclose(t.loc[term, "p"], model.pvalues[name], rtol=1e-6, atol=1e-12)
