"""labkit.stats.lenth: Lenth (1989), same formulas as R's BsMD::LenthPlot.

No value of stats_vectors.py covers Lenth's method, so the expected numbers
are derived by hand in the comments from the definitions; t quantiles are R's
qt() (scipy.stats.t.ppf).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import factorial_effects, lenth

from .test_stats_vectors import printed, sv  # noqa: F401  (sv is a fixture)

# Montgomery, Design and Analysis of Experiments, Example 6.2 (filtration rate,
# unreplicated 2^4), data as in the BsMD2 Lenth() example: A fastest.
RATE = [45, 71, 48, 65, 68, 60, 80, 65, 43, 100, 45, 104, 75, 86, 70, 96]


def rate_frame():
    i = np.arange(16)
    return pd.DataFrame({f: np.where(i >> j & 1, 1, -1) for j, f in enumerate("ABCD")} | {"rate": RATE})


def test_filtration_rate_example():
    effects = factorial_effects(rate_frame(), factors=list("ABCD"), response="rate")
    res = lenth(effects)
    # |effects| sorted: .125 .375 1.125 1.375 1.625 1.875 2.375 2.625 3.125 4.125
    #                   9.875 14.625 16.625 18.125 21.625  -> median 2.625, s0 = 3.9375
    # kept (< 9.84375): the first ten, median 1.75 -> PSE = 2.625
    assert res.m == 15 and res.d == 5
    assert res.s0 == pytest.approx(3.9375)
    assert res.pse == pytest.approx(2.625)
    assert res.me == printed(6.75)  # qt(0.975, 5) * 2.625 = 2.5706 * 2.625
    assert res.sme == printed(13.70)  # qt((1 + 0.95^(1/15))/2, 5) * 2.625
    assert res.gamma == pytest.approx((1 + 0.95 ** (1 / 15)) / 2)
    assert sorted(res.active) == ["A", "A:C", "A:D", "C", "D"]
    assert sorted(res.sme_active) == ["A", "A:C", "A:D", "D"]
    assert list(res.table.columns) == ["term", "effect", "abs_effect", "active", "sme_active"]
    assert res.table["term"].tolist() == effects["term"].tolist()[1:]


def test_jain_23_hand_computation(sv):
    # effects 2q: 20 10 10 40 4 6 2 -> s0 = 1.5 * 10 = 15; drop 40 (>= 37.5);
    # median(20 10 10 4 6 2) = 8 -> PSE = 12, d = 7/3.
    effects = {t: 2 * q for t, q in sv.JAIN_23["q"].items() if t != "I"}
    res = lenth(effects, alpha=0.10)
    assert (res.s0, res.pse, res.d) == (15, 12, pytest.approx(7 / 3))
    assert res.me == pytest.approx(sps.t.ppf(0.95, 7 / 3) * 12)
    gamma = (1 + 0.90 ** (1 / 7)) / 2
    assert res.sme == pytest.approx(sps.t.ppf(gamma, 7 / 3) * 12)
    assert res.active == ["C"]  # ME = 2.64 * 12 = 31.7 < 40
    assert res.sme_active == []  # SME = 6.6 * 12 = 79


def test_inputs_may_be_series_sequences_or_tables():
    c = [10.0, -1.0, 0.5, 0.2, -0.3, 0.1, 0.4]
    a = lenth(c)
    b = lenth(pd.Series(c, index=list("ABCDEFG")))
    assert a.pse == b.pse and a.me == b.me
    assert a.active == ["c1"] and b.active == ["A"]


def test_bad_input():
    with pytest.raises(ConfigError, match="at least 2 effects"):
        lenth([1.0])
    with pytest.raises(ConfigError, match="missing or infinite"):
        lenth([1.0, np.nan, 2.0])
    with pytest.raises(ConfigError, match="effects must be numbers"):
        lenth(["a", "b"])
    with pytest.raises(ConfigError, match="alpha"):
        lenth([1, 2, 3], alpha=0)
    with pytest.raises(ConfigError, match="effects: no column 'effect'"):
        lenth(pd.DataFrame({"term": ["A"], "q": [1.0]}))


def test_more_than_half_zero_effects_give_nan_like_bsmd():
    # R: BsMD::LenthPlot with more than half of the effects exactly 0 gives
    # PSE = NA (median|c| = 0, so no |c| < 2.5 s0 remains): nothing is active
    res = lenth({"A": 4.0, "B": 0.0, "C": 0.0, "A:B": 0.0, "A:C": 1.0, "B:C": 0.0, "A:B:C": 0.0})
    assert res.s0 == 0
    assert np.isnan(res.pse) and np.isnan(res.me) and np.isnan(res.sme)
    assert res.active == [] and res.sme_active == []
    assert "5 of the 7 effects are exactly zero" in res.note
    assert lenth([10.0, -1.0, 0.5, 0.2, -0.3, 0.1, 0.4]).note == ""
