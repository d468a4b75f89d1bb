"""labkit.design.fractional against Montgomery, Design and Analysis of Experiments (ch. 8).

* Example 8.1: the 2^(4-1) filtration-rate experiment, D = ABC (I = ABCD),
  responses of Table 8.3 and the effect estimates Montgomery publishes:
  A = 19.00, B = 1.50, C = 14.00, D = 16.50, AB + CD = -1.00,
  AC + BD = -18.50, AD + BC = 19.00.
* Table 8.14: the resolution printed for each tabulated design.
* Example 8.4 / sec. 8.5: the 2^(7-4)_III design D=AB, E=AC, F=BC, G=ABC, whose
  main effects are each aliased with three two-factor interactions, e.g.
  A + BD + CE + FG; a full fold-over makes it resolution IV (sec. 8.6).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from labkit.design.fractional import (
    MINIMUM_ABERRATION,
    aliases,
    defining_relation,
    fold_over,
    fractional_design,
    fractional_effects,
    resolution,
)
from labkit.errors import ConfigError
from labkit.stats import factorial_effects

# Table 8.14 resolutions, as printed
TABLE_8_14_RESOLUTION = {
    (3, 1): 3,
    (4, 1): 4,
    (5, 1): 5,
    (5, 2): 3,
    (6, 1): 6,
    (6, 2): 4,
    (6, 3): 3,
    (7, 1): 7,
    (7, 2): 4,
    (7, 3): 4,
    (7, 4): 3,
    (8, 2): 5,
    (8, 3): 4,
    (8, 4): 4,
    (8, 1): 8,
}


def filtration():
    d = fractional_design(4, ["D=ABC"])
    # standard order (1), ad, bd, ab, cd, ac, bc, abcd (Montgomery Table 8.3)
    return d.assign(rate=[45, 100, 45, 65, 75, 60, 80, 96])


def test_example_8_1_design_and_relation():
    d = fractional_design(4, ["D=ABC"])
    assert d.attrs["defining_relation"] == ["ABCD"] and d.attrs["resolution"] == 4
    runs = ["".join(c.lower() for c in "ABCD" if row[c] == 1) or "(1)" for _, row in d.iterrows()]
    assert runs == ["(1)", "ad", "bd", "ab", "cd", "ac", "bc", "abcd"]
    al = aliases(4, ["D=ABC"]).set_index("term")
    assert al.loc["A", "aliases"] == "A + BCD"
    assert al.loc["AB", "short"] == "AB + CD"
    assert al.loc["AC", "short"] == "AC + BD" and al.loc["BC", "short"] == "AD + BC"


def test_example_8_1_effects_reported_with_aliases():
    t = fractional_effects(filtration(), ["D=ABC"], factors=list("ABCD"), response="rate").set_index(
        "aliases"
    )
    published = {
        "A": 19.00,
        "B": 1.50,
        "C": 14.00,
        "A:B + C:D": -1.00,
        "A:C + B:D": -18.50,
        "A:D + B:C": 19.00,
        "D": 16.50,
    }
    assert set(t.index) == set(published)
    for chain, effect in published.items():
        assert t.loc[chain, "effect"] == pytest.approx(effect)
    # from a factorial_effects table of the base factors, same answer
    base = factorial_effects(filtration(), factors=list("ABC"), response="rate")
    t2 = fractional_effects(base, ["D=ABC"], k=4).set_index("aliases")
    assert t2.loc["D", "effect"] == pytest.approx(16.50)
    assert t2.loc["A:C + B:D", "effect"] == pytest.approx(-18.50)


def test_table_8_14_resolutions():
    for (k, p), gens in MINIMUM_ABERRATION.items():
        assert resolution(k, gens) == TABLE_8_14_RESOLUTION[(k, p)], (k, p)
        d = fractional_design(k, p=p)
        assert len(d) == 2 ** (k - p) and len(d.columns) == k
        # every column balanced and orthogonal to every other
        m = d.to_numpy()
        assert (m.sum(axis=0) == 0).all()
        assert (m.T @ m == len(d) * np.eye(k)).all()


def test_2_7_4_alias_chains_and_fold_over():
    gens = ["D=AB", "E=AC", "F=BC", "G=ABC"]
    assert len(defining_relation(7, gens)) == 15 and resolution(7, gens) == 3
    al = aliases(7, gens).set_index("term")
    assert al.loc["A", "short"] == "A + BD + CE + FG"
    folded = fold_over(fractional_design(7, gens))
    assert len(folded) == 16 and folded["fold"].tolist() == [0] * 8 + [1] * 8
    m = folded[list("ABCDEFG")].to_numpy()
    # resolution IV after the fold: every main effect orthogonal to every 2FI
    for i in range(7):
        for j in range(7):
            for h in range(j + 1, 7):
                assert int(m[:, i] @ (m[:, j] * m[:, h])) == 0


def test_bad_generators():
    with pytest.raises(ConfigError, match="look like"):
        fractional_design(4, ["DABC"])
    with pytest.raises(ConfigError, match="not a base factor"):
        fractional_design(4, ["D=ABE"])
    with pytest.raises(ConfigError, match="generated factors"):
        fractional_design(4, ["C=AB"])
    with pytest.raises(ConfigError, match="no tabulated"):
        fractional_design(12, p=9)
    with pytest.raises(ConfigError, match="at least two"):
        fractional_design(4, ["D=A"])
    with pytest.raises(ConfigError, match="not a column"):
        fold_over(fractional_design(4, ["D=ABC"]), "Z")
    assert isinstance(fractional_design(5, "D=AB E=AC"), pd.DataFrame)
