"""Campaign comparison statistics (labkit.stats.compare).

* Pettitt's test: the 40 values of Pettitt (1979), "A non-parametric approach to the
  change-point problem", Applied Statistics 28, Table 1, for which the paper (and R's
  ``wq::pett`` documentation example, which reproduces it) gives K = 232, p = 0.0146
  and the change after observation 17.
* Per-configuration differences: Welch's t test and CI as R's ``t.test(b, a)`` /
  ``scipy.stats.ttest_ind(equal_var=False)``; Holm as R's ``p.adjust(p, "holm")``
  (statsmodels ``multipletests``).
* Drift test: the campaign and interaction F tests of R's
  ``anova(lm(log(y) ~ factor(cfg) * campaign))`` with type-II sums of squares
  (statsmodels ``anova_lm(typ=2)`` as the reference implementation).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats.compare import changepoint, config_differences, drift_test, pettitt

PETTITT_TABLE_1 = [
    -1.05,
    0.96,
    1.22,
    0.58,
    -0.98,
    -0.03,
    -1.54,
    -0.71,
    -0.35,
    0.66,
    0.44,
    0.91,
    -0.02,
    -1.42,
    1.26,
    -1.02,
    -0.81,
    1.66,
    1.05,
    0.97,
    2.14,
    1.22,
    -0.24,
    1.60,
    0.72,
    -0.12,
    0.44,
    0.03,
    0.66,
    0.56,
    1.37,
    1.66,
    0.10,
    0.80,
    1.29,
    0.49,
    -0.07,
    1.18,
    3.29,
    1.84,
]


def test_pettitt_reproduces_the_paper():
    r = pettitt(PETTITT_TABLE_1).iloc[0]
    assert r.K == 232 and r.change_point == 17
    assert r.p == pytest.approx(0.0146, abs=5e-5)
    assert r.change
    assert not pettitt(PETTITT_TABLE_1, min_effect=5.0).iloc[0].change  # significant, not practical
    with pytest.raises(ConfigError):
        pettitt([1.0, 2.0])


def two_campaigns(shift=1.0, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for camp, factor in (("a", 1.0), ("b", shift)):
        for x in (1, 2):
            for z in ("p", "q"):
                for _ in range(5):
                    rows.append(
                        {
                            "camp": camp,
                            "x": x,
                            "z": z,
                            "y": factor * (10 * x + (3 if z == "q" else 0)) * rng.lognormal(0, 0.02),
                        }
                    )
    d = pd.DataFrame(rows)
    return d[d.camp == "a"], d[d.camp == "b"]


def test_config_differences_match_welch_and_holm():
    from statsmodels.stats.multitest import multipletests

    a, b = two_campaigns(1.05)
    t = config_differences(a, b, response="y", factors=["x", "z"])
    assert len(t) == 4
    for row in t.itertuples():
        xa = a[(a.x == row.x) & (a.z == row.z)].y
        xb = b[(b.x == row.x) & (b.z == row.z)].y
        ref = sps.ttest_ind(xb, xa, equal_var=False)
        ci = ref.confidence_interval(0.95)
        assert row.p == pytest.approx(ref.pvalue) and row.ci_low == pytest.approx(ci.low)
        assert row.ci_high == pytest.approx(ci.high)
        assert row.ratio == pytest.approx(xb.mean() / xa.mean())
        assert row.ratio_low < row.ratio < row.ratio_high
    assert np.allclose(t.p_adj, multipletests(t.p, method="holm")[1])
    assert t.drift.all()
    assert not config_differences(a, b, response="y", factors=["x", "z"], min_effect_pct=10).drift.any()


def test_drift_test_matches_anova_lm():
    from statsmodels.formula.api import ols
    from statsmodels.stats.anova import anova_lm

    a, b = two_campaigns(1.03, seed=2)
    r = drift_test(a, b, response="y", factors=["x", "z"]).iloc[0]
    d = pd.concat([a, b]).assign(
        ly=lambda f: np.log(f.y),
        cfg=lambda f: f.x.astype(str) + f.z,
        camp=lambda f: (f.camp == "b").astype(float),
    )
    sm = anova_lm(ols("ly ~ C(cfg) * camp", d).fit(), typ=2)
    assert r.F == pytest.approx(sm.loc["camp", "F"])
    assert r.p == pytest.approx(sm.loc["camp", "PR(>F)"])
    assert r.p_interaction == pytest.approx(sm.loc["C(cfg):camp", "PR(>F)"])
    assert r.ci_low_pct < r.shift_pct < r.ci_high_pct
    assert r.shift_pct == pytest.approx(3.0, abs=1.5) and r.drift
    same = drift_test(a, a, response="y", factors=["x", "z"]).iloc[0]
    assert same.shift_pct == pytest.approx(0, abs=1e-9) and not same.drift


def test_changepoint_over_campaigns():
    rng = np.random.default_rng(5)
    rows = []
    for i in range(16):
        level = 1.0 if i < 8 else 1.10  # the host got 10 % slower from campaign 9 on
        for x in (1, 2):
            for _ in range(3):
                rows.append({"campaign": f"c{i}", "x": x, "y": level * 5 * x * rng.lognormal(0, 0.01)})
    data = pd.DataFrame(rows)
    r = changepoint(data, response="y", factors=["x"], campaign="campaign").iloc[0]
    assert r.change_point == 8 and r.campaign_before == "c7"
    assert r.shift_pct == pytest.approx(10, abs=2) and r.change
    assert (
        not changepoint(data, response="y", factors=["x"], campaign="campaign", min_effect_pct=20)
        .iloc[0]
        .change
    )
    with pytest.raises(ConfigError, match="order"):
        changepoint(data, response="y", factors=["x"], campaign="campaign", order=["c0", "c1"])


def _pettitt_matrix(x):
    """The implementation before the rank-sum form (O(n²) memory), kept as the oracle."""
    x = np.asarray(x, float)
    n = len(x)
    s = np.sign(x[None, :] - x[:, None])
    row = np.cumsum(np.triu(s, 1)[:, ::-1], axis=1)[:, ::-1]
    u = np.array([row[: t + 1, t + 1].sum() for t in range(n - 1)])
    t = int(np.argmax(np.abs(u)))
    K = float(abs(u[t]))
    shift = float(np.median(x[t + 1 :, None] - x[None, : t + 1]))
    return K, t + 1, min(1.0, 2 * np.exp(-6 * K**2 / (n**3 + n**2))), shift


@pytest.mark.parametrize("direct", [True, False])
def test_pettitt_rank_sum_form_equals_the_sign_matrix(direct, monkeypatch):
    """Identical K, change point, p and shift on small series, with ties, both ways of taking the
    median of the differences (the full matrix, and selection without it)."""
    import labkit.stats.compare as compare

    if not direct:
        monkeypatch.setattr(compare, "_DIRECT_PAIRS", 0)
    rng = np.random.default_rng(79)
    series = [PETTITT_TABLE_1, [1.0, 2.0, 3.0], [3.0, 3.0, 3.0, 3.0]]
    for n in (4, 7, 30, 101):
        series += [
            rng.normal(size=n),
            rng.integers(0, 4, n).astype(float),
            np.r_[rng.normal(size=n // 2), 2 + rng.normal(size=n - n // 2)] * 1e6 + 1e9,
        ]
    for x in series:
        r = pettitt(x).iloc[0]
        assert (r.K, r.change_point, r.p, r["shift"]) == _pettitt_matrix(x)


def test_median_difference_selection_equals_numpy(monkeypatch):
    import labkit.stats.compare as compare

    monkeypatch.setattr(compare, "_DIRECT_PAIRS", 0)
    rng = np.random.default_rng(80)
    for trial in range(60):
        a, b = rng.normal(size=rng.integers(1, 30)), rng.normal(size=rng.integers(1, 30))
        if trial % 3 == 0:
            a, b = np.round(a, 1), np.round(b, 1)  # ties
        if trial % 4 == 0:
            b = -np.abs(b) * 1e-300  # tiny and negative values
        assert compare.median_difference(a, b) == np.median(a[:, None] - b[None, :])


def test_pettitt_memory_is_linear():
    """100,000 values: the sign matrix would need 74.5 GiB; the rank-sum form finds the change."""
    x = np.random.default_rng(81).normal(size=100_000)
    x[60_000:] += 0.5
    r = pettitt(x).iloc[0]
    assert abs(r.change_point - 60_000) < 500 and r.p < 1e-10
    assert r["shift"] == pytest.approx(0.5, abs=0.05)
