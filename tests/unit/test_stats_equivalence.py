"""Equivalence tests (labkit.stats.equivalence): TOST with Welch's t, and paired.

Oracles:
* published values: statsmodels' own test suite, statsmodels/stats/tests/test_tost.py (Josef
  Perktold, 2012), whose expected values were computed with R's ``equivalence`` package,
  ``tost(x, y, epsilon = 0.6)`` (Welch; ``paired = TRUE`` for pairs) on the ``clinic`` data
  printed there (columns var1, var2 of groups 1 and 2): ``tost_clinic_indep_1`` p = 0.04853083976236974,
  CI (-0.2666862980722534, 0.596019631405587); ``tost_clinic_indep`` p = 0.4317936812594803,
  CI (0.194916250699966, 0.930417082633366); ``tost_clinic_paired_1`` p = 0.003166881489265175,
  CI (-0.0744336620516462, 0.4037669953849797); ``tost_clinic_paired`` p = 0.4412034046017588,
  CI (0.1261653305099018, 0.999168002823431);
* the reference implementation at run time: statsmodels' ``ttost_ind(a, b, low, upp,
  usevar="unequal")`` / ``ttost_paired`` and scipy's ``ttest_ind(equal_var=False)`` /
  ``ttest_rel`` for ``p_diff``;
* known truth for the four verdicts (seeded draws).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.weightstats import ttost_ind, ttost_paired

from labkit.errors import ConfigError
from labkit.stats import equivalence, equivalence_paired

RAW_CLINIC = """\
1 1 2.84 4.00 3.45 2.55 2.46  2 1 2.51 3.26 3.10 2.82 2.48  3 1 2.41 4.14 3.37 2.99 3.04
4 1 2.95 3.42 2.82 3.37 3.35  5 1 3.14 3.25 3.31 2.87 3.41  6 1 3.79 4.34 3.88 3.40 3.16
7 1 4.14 4.97 4.25 3.43 3.06  8 1 3.85 4.31 3.92 3.58 3.91  9 1 3.02 3.11 2.20 2.24 2.28
10 1 3.45 3.41 3.80 3.86 3.91  11 1 5.37 5.02 4.59 3.99 4.27  12 1 3.81 4.21 4.08 3.18 1.86
13 1 4.19 4.59 4.79 4.17 2.60  14 1 3.16 5.30 4.69 4.83 4.51  15 1 3.84 4.32 4.25 3.87 2.93
16 2 2.60 3.76 2.86 2.41 2.71  17 2 2.82 3.66 3.20 2.49 2.49  18 2 2.18 3.65 3.87 3.00 2.65
19 2 3.46 3.60 2.97 1.80 1.74  20 2 4.01 3.48 4.42 3.06 2.76  21 2 3.04 2.87 2.87 2.71 2.87
22 2 3.47 3.24 3.47 3.26 3.14  23 2 4.06 3.92 3.18 3.06 1.74  24 2 2.91 3.99 3.06 2.02 3.18
25 2 3.59 4.21 4.02 3.26 2.85  26 2 4.51 4.21 3.78 2.63 1.92  27 2 3.16 3.31 3.28 3.25 3.52
28 2 3.86 3.61 3.28 3.19 3.09  29 2 3.31 2.97 3.76 3.18 2.60  30 2 3.02 2.73 3.87 3.50 2.93"""
CLINIC = np.array(RAW_CLINIC.split(), float).reshape(-1, 7)

# (column, R's equivalence::tost p-value, its 90 % interval), from statsmodels' test_tost.py
PUBLISHED_INDEP = [
    (2, 0.04853083976236974, (-0.2666862980722534, 0.596019631405587), "equivalent"),
    (3, 0.4317936812594803, (0.194916250699966, 0.930417082633366), "different"),
]
PUBLISHED_PAIRED = [
    (2, 0.003166881489265175, (-0.0744336620516462, 0.4037669953849797), "equivalent"),
    (3, 0.4412034046017588, (0.1261653305099018, 0.999168002823431), "different"),
]


@pytest.mark.parametrize("col, p, ci, word", PUBLISHED_INDEP)
def test_welch_tost_matches_r_equivalence_and_statsmodels(col, p, ci, word):
    a, b = CLINIC[:15, col], CLINIC[15:, col]
    out = equivalence(a, b, margin=0.6, relative=False)
    assert list(out.columns) == [
        "diff",
        "ratio",
        "ci_low",
        "ci_high",
        "p_tost",
        "p_diff",
        "margin",
        "n_a",
        "n_b",
        "verdict",
    ]
    row = out.iloc[0]
    assert row.p_tost == pytest.approx(p, rel=1e-10)
    assert row.p_tost == pytest.approx(ttost_ind(a, b, -0.6, 0.6, usevar="unequal")[0], rel=1e-12)
    assert (row.ci_low, row.ci_high) == pytest.approx(ci, rel=1e-10)
    assert row.p_diff == pytest.approx(sps.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-12)
    assert row["diff"] == pytest.approx(a.mean() - b.mean()) and row.ratio == pytest.approx(
        a.mean() / b.mean()
    )
    assert (row.margin, row.n_a, row.n_b, row.verdict) == (0.6, 15, 15, word)


@pytest.mark.parametrize("col, p, ci, word", PUBLISHED_PAIRED)
def test_paired_tost_matches_r_equivalence_and_statsmodels(col, p, ci, word):
    a, b = CLINIC[:15, col], CLINIC[15:, col]
    row = equivalence_paired(a, b, margin=0.6, relative=False).iloc[0]
    assert row.p_tost == pytest.approx(p, rel=1e-10)
    assert row.p_tost == pytest.approx(ttost_paired(a, b, -0.6, 0.6)[0], rel=1e-12)
    assert (row.ci_low, row.ci_high) == pytest.approx(ci, rel=1e-10)
    assert row.p_diff == pytest.approx(sps.ttest_rel(a, b).pvalue, rel=1e-12)
    assert row.verdict == word


def test_a_relative_margin_is_a_fraction_of_mean_b():
    a, b = CLINIC[:15, 4], CLINIC[15:, 4]
    row = equivalence(a, b, margin=0.1).iloc[0]
    m = 0.1 * b.mean()
    assert row.margin == pytest.approx(m)
    assert row.p_tost == pytest.approx(ttost_ind(a, b, -m, m, usevar="unequal")[0], rel=1e-12)


def test_the_four_verdicts_on_known_truth():
    rng = np.random.default_rng(41)
    # the same mean, 40 runs each, 1 % noise, margin 5 %: shown equivalent
    same = equivalence(100 + rng.normal(0, 1, 40), 100 + rng.normal(0, 1, 40), margin=0.05).iloc[0]
    assert same.verdict == "equivalent"
    # a real 0.5 % difference with 2,000 runs each: significant, yet inside a 5 % margin
    tiny = equivalence(100.5 + rng.normal(0, 1, 2000), 100 + rng.normal(0, 1, 2000), margin=0.05).iloc[0]
    assert tiny.verdict == "negligible difference" and tiny.p_diff < 1e-20 and tiny.p_tost < 1e-20
    # a 20 % difference: different, not equivalent
    far = equivalence(120 + rng.normal(0, 1, 10), 100 + rng.normal(0, 1, 10), margin=0.05).iloc[0]
    assert far.verdict == "different"
    # 3 noisy runs each (CV 10 %): neither shown
    vague = equivalence(100 + rng.normal(0, 10, 3), 100 + rng.normal(0, 10, 3), margin=0.05).iloc[0]
    assert vague.verdict == "inconclusive" and vague.ci_low < -5 and vague.ci_high > 5
    # paired: a common per-pair nuisance cancels
    base = 100 + rng.normal(0, 10, 12)
    paired = equivalence_paired(base + rng.normal(0, 0.2, 12), base, margin=0.05).iloc[0]
    assert paired.verdict == "equivalent"
    assert equivalence(base + rng.normal(0, 0.2, 12), base, margin=0.05).iloc[0].verdict == "inconclusive"


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: equivalence([1.0], [1.0, 2.0], margin=0.1), "at least 2 values on each side: a has 1"),
        (lambda: equivalence([1.0, 2.0], [3.0], margin=0.1), "b has 1"),
        (lambda: equivalence([1.0, 1.0], [2.0, 2.0, 2.0], margin=0.1), "all 2 values of a and all 3"),
        (lambda: equivalence([1.0, 2.0], [1.0, 2.0], margin=0), "margin must be a positive"),
        (lambda: equivalence([1.0, 2.0], [1.0, -1.0], margin=0.1), "mean\\(b\\) != 0"),
        (lambda: equivalence([1.0, 2.0], [1.0, 3.0], margin=0.1, alpha=0.5), "alpha must be below 0.5"),
        (lambda: equivalence([1.0, np.nan], [1.0, 3.0], margin=0.1), "missing or infinite"),
        (lambda: equivalence_paired([1.0, 2.0], [1.0, 2.0, 3.0], margin=0.1), "got 2 and 3"),
        (lambda: equivalence_paired([1.0], [1.0], margin=0.1), "at least 2 pairs, got 1"),
        (lambda: equivalence_paired([2.0, 3.0], [1.0, 2.0], margin=0.1), "differences a - b are all 1"),
    ],
)
def test_bad_input_says_what_is_wrong(call, match):
    with pytest.raises(ConfigError, match=match):
        call()


def test_family_verdicts_corrects_only_the_tests_that_ran_and_reads_each_verdict():
    """Holm as statsmodels' multipletests(method="holm") computes it (R's p.adjust(p, "holm") gives
    the same), over the finite p-values only; NaN marks a test that did not run."""
    from statsmodels.stats.multitest import multipletests

    from labkit.stats.equivalence import family_verdicts

    p_tost = [0.01, float("nan"), 0.02, 0.30]
    p_diff = [0.50, float("nan"), 0.001, 0.04]
    pt, pd_, verdicts = family_verdicts(p_tost, p_diff, alpha=0.05)
    assert pt[[0, 2, 3]] == pytest.approx(multipletests([0.01, 0.02, 0.30], method="holm")[1])
    assert pd_[[0, 2, 3]] == pytest.approx(multipletests([0.50, 0.001, 0.04], method="holm")[1])
    assert np.isnan(pt[1]) and np.isnan(pd_[1])
    # 0.03 / 0.5 -> equivalent; untested -> ""; 0.04 / 0.003 -> negligible difference;
    # 0.30 / 0.08 -> inconclusive (0.04 alone would have said "different")
    assert list(verdicts) == ["equivalent", "", "negligible difference", "inconclusive"]
    _, _, raw = family_verdicts(p_tost, p_diff, alpha=0.05, method="none")
    assert raw[3] == "different"
    with pytest.raises(ConfigError, match="as long as each other"):
        family_verdicts([0.1], [0.1, 0.2], alpha=0.05)
