"""Decision rules (labkit.stats.rules): known truth in a 2^5 design with two replicates.

The data are built with numpy (seeded): mean 100, noise sd 10, so the standard error of each q is
about 10/sqrt(64) = 1.25 (1.11 in this draw) and, with a 5 % practical threshold of the mean, the
threshold is 5 on the q scale.
After the noise is drawn, the q of five terms is set exactly (adding a multiple of a term's ±1
column changes that term's q only: the columns are orthogonal): A q = 10 (matters), B q = 0.3
(shown inside ±5: does not matter), C q = 4.5 (significant after Holm, below 5: negligible),
A:B at the t of p = 0.04 (significant alone, not after Holm over 31 terms; its interval lies
inside ±5), D q = 3.2 (p ≈ 0.007, not significant after Holm, interval reaching past 5: not
resolved, t ≈ 2.9). Holm is R's ``p.adjust(p, "holm")`` (labkit.stats.adjust_p, tested against it).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import Rules, adjust_p, decide, factorial_effects

FACTORS = ["A", "B", "C", "D", "E"]


def design_table():
    rng = np.random.default_rng(4141)
    runs = pd.DataFrame(list(itertools.product([-1, 1], repeat=5)) * 2, columns=FACTORS)
    y = 100 + rng.normal(0, 10, len(runs))
    base = factorial_effects(runs.assign(y=y), factors=FACTORS, response="y").set_index("term")
    se, df = base.loc["A", "se"], base.attrs["df_error"]
    want = {"A": 10.0, "B": 0.3, "C": 4.5, "A:B": sps.t.ppf(1 - 0.04 / 2, df) * se, "D": 3.2}
    for term, q in want.items():
        col = np.prod([runs[f] for f in term.split(":")], axis=0)
        y = y + (q - base.loc[term, "q"]) * col
    table = factorial_effects(runs.assign(y=y), factors=FACTORS, response="y")
    return table, want


def test_verdicts_on_known_truth():
    table, want = design_table()
    t = table.set_index("term")
    assert t.loc["A:B", "p"] == pytest.approx(0.04, rel=1e-6)  # the spurious one
    out = decide(table, Rules(practical=0.05), estimate="q")
    assert out.attrs["rules"] == "Holm over 31 terms, α = 0.05, practical ≥ 5 % of the mean"
    d = out.set_index("term")
    fam = d.index.difference(["I", "error"])
    assert np.allclose(d.loc[fam, "p_adjusted"], adjust_p(d.loc[fam, "p"].to_numpy()), rtol=0, atol=0)
    assert d.loc["A:B", "p_adjusted"] >= 0.05  # Holm takes it back
    assert d.loc["A", "verdict"] == "matters"
    assert d.loc["B", "verdict"] == "does not matter"
    assert d.loc["C", "verdict"] == "negligible"
    assert d.loc["A:B", "verdict"] == "does not matter"
    assert d.loc["D", "verdict"] == "not resolved at this n"
    assert pd.isna(d.loc["I", "verdict"]) and pd.isna(d.loc["error", "verdict"])
    assert d.loc["A", "threshold"] == pytest.approx(0.05 * t.loc["I", "q"])
    # runs to resolve D (formula in decide's docstring), by hand
    h = (d.loc["D", "ci_high"] - d.loc["D", "ci_low"]) / 2
    se = h / sps.norm.ppf(0.975)
    n_sig = 64 * (sps.norm.ppf(1 - 0.05 / 62) * se / 3.2) ** 2
    n_eq = 64 * (h / (d.loc["D", "threshold"] - 3.2)) ** 2
    assert d.loc["D", "runs_to_resolve"] == np.ceil(min(n_sig, n_eq)) > 64
    assert d["runs_to_resolve"].notna().sum() == (d["verdict"] == "not resolved at this n").sum()


def test_without_correction_the_spurious_term_would_matter_and_without_threshold_nothing_is_shown_equal():
    table, _ = design_table()
    d = decide(table, Rules(), estimate="q").set_index("term")
    assert d.loc["A", "verdict"] == "matters" and d.loc["C", "verdict"] == "matters"
    assert "does not matter" not in set(d["verdict"])  # no threshold: never shown
    assert d.attrs["rules"] == "Holm over 31 terms, α = 0.05, no practical threshold"
    bonf = decide(table, Rules(family="bonferroni", alpha=0.1), estimate="q").attrs["rules"]
    assert bonf.startswith("Bonferroni over 31 terms, α = 0.1")


def test_a_share_of_variation_threshold():
    table, _ = design_table()
    sst, n = table.attrs["sst"], table.attrs["n"]
    d = decide(table, Rules(practical=0.02, practical_of="variation"), estimate="q").set_index("term")
    assert d.loc["A", "threshold"] == pytest.approx(np.sqrt(0.02 * sst / n))
    # matters exactly when significant and the term's own pct_variation is at least 2 %
    fam = d.index.difference(["I", "error"])
    sig = d.loc[fam, "p_adjusted"] < 0.05
    assert ((d.loc[fam, "verdict"] == "matters") == (sig & (d.loc[fam, "pct_variation"] >= 2))).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"alpha": 0.5}, "alpha"),
        ({"practical": -0.1}, "practical"),
        ({"practical": 1.5, "practical_of": "variation"}, "in \\(0, 1\\)"),
        ({"practical_of": "sd"}, "practical_of"),
        ({"family": "fdr"}, "family"),
    ],
)
def test_bad_rules(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Rules(**kwargs)


def test_bad_tables():
    table, _ = design_table()
    with pytest.raises(ConfigError, match="estimate"):
        decide(table, Rules())
    with pytest.raises(ConfigError, match="mean="):
        decide(table.drop(columns="term"), Rules(practical=0.05), estimate="q")
    with pytest.raises(ConfigError, match="rules must be"):
        decide(table, {"alpha": 0.05}, estimate="q")
