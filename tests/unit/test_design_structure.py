"""Fractional and blocked designs in labkit.design, against published tables and examples.

Sources
* Minitab 19 help, "Design generators for 2-level designs" (support.minitab.com,
  Modeling statistics > DOE > Factorial and screening designs): for each number of
  factors and runs, the design generators, the resolution and, for 2, 4, 8, ...
  blocks, the block generators and the resolution of the blocked design (e.g.
  "5 32 - Full 2(ABCDE)6 4(ABC,CDE)4"). The same generators are Montgomery's
  Table 8.14 and Box, Hunter & Hunter's Table 6.22.
* D. C. Montgomery, Design and Analysis of Experiments (8th ed.), Example 6.2
  (filtration rate, 2^4 unreplicated, Table 6.10: the 16 responses; effect
  estimates A = 21.625, C = 9.875, D = 14.625, AC = -18.125, AD = 16.625,
  ABCD = 1.375) and Example 7.2 (the same experiment in two blocks, ABCD
  confounded, block 1 = (1), ab, ac, bc, ad, bd, cd, abcd lowered by 20:
  SS_blocks = 1387.5625 and the ABCD estimate becomes -18.625, the other
  effects unchanged).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from labkit.design import Design
from labkit.design.fractional import (
    MINIMUM_ABERRATION,
    block_generators,
    blocked_resolution,
    resolution,
)
from labkit.errors import ConfigError
from labkit.stats.blocking import blocked_effects

# Minitab's table: (k, runs) -> generators, resolution
MINITAB = {
    (3, 4): (["C=AB"], 3),
    (4, 8): (["D=ABC"], 4),
    (5, 8): (["D=AB", "E=AC"], 3),
    (5, 16): (["E=ABCD"], 5),
    (6, 8): (["D=AB", "E=AC", "F=BC"], 3),
    (6, 16): (["E=ABC", "F=BCD"], 4),
    (6, 32): (["F=ABCDE"], 6),
    (7, 8): (["D=AB", "E=AC", "F=BC", "G=ABC"], 3),
    (7, 16): (["E=ABC", "F=BCD", "G=ACD"], 4),
    (7, 32): (["F=ABCD", "G=ABDE"], 4),
    (7, 64): (["G=ABCDEF"], 7),
    (8, 16): (["E=BCD", "F=ACD", "G=ABC", "H=ABD"], 4),
    (8, 32): (["F=ABC", "G=ABD", "H=BCDE"], 4),
    (8, 64): (["G=ABCD", "H=ABEF"], 5),
    (8, 128): (["H=ABCDEFG"], 8),
}
# Minitab's blocked resolutions: (k, generators or None for the full factorial) -> {blocks: res}
MINITAB_BLOCKED = [
    (3, None, {2: 4, 4: 3}),
    (4, ["D=ABC"], {2: 3, 4: 3}),
    (4, None, {2: 5, 4: 3, 8: 3}),
    (5, ["D=AB", "E=AC"], {2: 3}),
    (5, ["E=ABCD"], {2: 3, 4: 3}),
    (5, None, {2: 6, 4: 4, 8: 3, 16: 3}),
    (6, ["E=ABC", "F=BCD"], {2: 4, 4: 3, 8: 3}),
    (6, ["F=ABCDE"], {2: 4, 4: 3, 8: 3}),
    (6, None, {2: 7, 4: 5, 8: 4}),
    (7, ["E=ABC", "F=BCD", "G=ACD"], {2: 4, 4: 3, 8: 3}),
    (7, ["F=ABCD", "G=ABDE"], {2: 4, 4: 3, 8: 3}),
    (7, ["G=ABCDEF"], {2: 4, 4: 4, 8: 4}),
    (8, ["F=ABC", "G=ABD", "H=BCDE"], {2: 4, 4: 3, 8: 3}),
    (8, ["G=ABCD", "H=ABEF"], {2: 4, 4: 4, 8: 3}),
    (8, ["H=ABCDEFG"], {2: 5, 4: 5}),
]


def test_tabulated_generators_match_minitab():
    for (k, runs), (gens, res) in MINITAB.items():
        p = k - runs.bit_length() + 1
        assert MINIMUM_ABERRATION[(k, p)] == gens, (k, p)
        assert resolution(k, gens) == res


@pytest.mark.parametrize("k,gens,expected", MINITAB_BLOCKED)
def test_block_generators_reach_minitabs_blocked_resolution(k, gens, expected):
    for n_blocks, res in expected.items():
        words = block_generators(k, gens, n_blocks)
        assert len(words) == n_blocks.bit_length() - 1
        assert blocked_resolution(k, gens, words) == res, (k, gens, n_blocks, words)


def test_classic_block_words():
    # Montgomery sec. 7.4: 2^4 in two blocks confounds ABCD; 2^5 confounds ABCDE
    assert block_generators(4, None, 2) == ["ABCD"]
    assert block_generators(5, None, 2) == ["ABCDE"]
    with pytest.raises(ConfigError, match="main"):
        block_generators(3, ["C=AB"], 2)
    with pytest.raises(ConfigError, match="powers of two"):
        block_generators(4, None, 3)


FILTRATION = [45, 71, 48, 65, 68, 60, 80, 65, 43, 100, 45, 104, 75, 86, 70, 96]  # Table 6.10


def test_montgomery_example_7_2_blocked_analysis():
    design = Design.from_dict(
        {"factors": {f: [-1, 1] for f in "ABCD"}, "seed": 1, "blocks": {"by": "day", "count": 2}}
    )
    assert design.blocks["confound"] == ["ABCD"]
    plan = design.plan()
    configs = design.configurations()
    blocks = {r.config: r.block for r in plan}
    rows = [
        {**configs[c], "y": FILTRATION[c] - (20 if blocks[c] == 1 else 0), "blk": blocks[c]}
        for c in range(16)
    ]
    block1 = sorted(
        "".join(ch.lower() for ch in "ABCD" if row[ch] == 1) or "(1)" for row in rows if row["blk"] == 1
    )
    assert block1 == sorted(["(1)", "ab", "ac", "bc", "ad", "bd", "cd", "abcd"])
    t = blocked_effects(pd.DataFrame(rows), factors=list("ABCD"), response="y", block="blk").set_index("term")
    assert t.loc["block", "ss"] == pytest.approx(1387.5625)
    assert t.loc["A:B:C:D", "effect"] == pytest.approx(-18.625) and t.loc["A:B:C:D", "confounded"]
    for term, effect in {"A": 21.625, "C": 9.875, "D": 14.625, "A:C": -18.125, "A:D": 16.625}.items():
        assert t.loc[term, "effect"] == pytest.approx(effect)
        assert not t.loc[term, "confounded"]
    assert t.attrs["confounded"] == ["A:B:C:D"]


def test_replicated_blocks_match_ols_with_a_block_term():
    # reference: statsmodels OLS y ~ C(block) + A*B*C, anova_lm typ 1 (blocks fitted first)
    from statsmodels.formula.api import ols
    from statsmodels.stats.anova import anova_lm

    rng = np.random.default_rng(3)
    design = Design.from_dict(
        {
            "factors": {f: [-1, 1] for f in ("xa", "xb", "xc")},
            "replications": 3,
            "seed": 4,
            "blocks": {"by": "day", "count": 3},
        }
    )
    plan = design.plan()
    data = pd.DataFrame([{**r.levels, "block": r.block} for r in plan])
    data["y"] = 10 + 2 * data.xa - data.xb + 3 * data.block + rng.normal(0, 1, len(data))
    ours = blocked_effects(data, factors=["xa", "xb", "xc"], response="y", block="block").set_index("term")
    sm = anova_lm(ols("y ~ C(block) + xa*xb*xc", data).fit(), typ=1)
    assert ours.loc["block", "ss"] == pytest.approx(sm.loc["C(block)", "sum_sq"])
    assert ours.loc["error", "ss"] == pytest.approx(sm.loc["Residual", "sum_sq"])
    assert ours.loc["error", "df"] == sm.loc["Residual", "df"]
    assert ours.loc["xa", "p"] == pytest.approx(sm.loc["xa", "PR(>F)"])
    assert not ours["confounded"].any()


def test_fraction_in_a_design_yaml_dict():
    d = Design.from_dict(
        {
            "factors": {
                "vcpus": [1, 2],
                "memory_mb": [256, 512],
                "affinity": ["floating", "pinned"],
                "count": [1, 2],
            },
            "fraction": {"p": 1},
            "replications": 2,
            "seed": 7,
        }
    )
    assert d.fraction["generators"] == ["D=ABC"] and d.resolution == 4
    assert len(d.configurations()) == 8 and len(d.plan()) == 16
    text = str(d)
    assert "resolution IV" in text and "I = ABCD" in text
    assert "vcpus:memory_mb + affinity:count" in text
    al = d.aliases().set_index("term")
    assert al.loc["vcpus", "aliases"] == "vcpus + memory_mb:affinity:count"
    # the half fraction: count is the product of the other three codes
    for row in d.coded():
        assert row["count"] == row["vcpus"] * row["memory_mb"] * row["affinity"]
    # same as giving the generator; digest stable and different from the full factorial
    same = Design.from_dict({**d.to_dict(), "fraction": {"generators": ["D=ABC"]}})
    assert same.plan() == d.plan() and same.digest() == d.digest()
    full = Design.from_dict({k: v for k, v in d.to_dict().items() if k != "fraction"})
    assert full.digest() != d.digest() and len(full.configurations()) == 16


def test_fold_over_in_a_design():
    d = Design.from_dict(
        {
            "factors": {f: [0, 1] for f in "ABCDEFG"},
            "seed": 1,
            "fraction": {"generators": ["D=AB", "E=AC", "F=BC", "G=ABC"], "fold_over": True},
        }
    )
    assert len(d.configurations()) == 16 and d.resolution == 3
    m = np.array([[row[f] for f in "ABCDEFG"] for row in d.coded()])
    for i in range(7):  # resolution IV after the fold (Montgomery sec. 8.6)
        for j in range(7):
            for h in range(j + 1, 7):
                assert int(m[:, i] @ (m[:, j] * m[:, h])) == 0
    one = Design.from_dict(
        {**d.to_dict(), "fraction": {"generators": d.fraction["generators"], "fold_over": "A"}}
    )
    assert one.fraction["fold_over"] == "A"


def test_blocks_by_hard_to_change_factor():
    d = Design.from_dict(
        {
            "factors": {"vcpus": [1, 2], "memory_mb": [256, 512], "reboot": ["off", "on"]},
            "replications": 3,
            "seed": 11,
            "blocks": {"by": "factor", "factor": "reboot"},
        }
    )
    plan = d.plan()
    assert len(plan) == 24 and len({r.block for r in plan}) == 6
    # each block is one contiguous stretch, holds one level of the factor, and changes the
    # factor only between blocks
    seen, last = [], None
    for r in plan:
        if r.block != last:
            assert r.block not in seen
            seen.append(r.block)
            last = r.block
    for b in set(seen):
        assert len({r.levels["reboot"] for r in plan if r.block == b}) == 1
    assert d.plan() == plan  # deterministic
    other = Design.from_dict({**d.to_dict(), "seed": 12}).plan()
    assert [r.run_id for r in other] != [r.run_id for r in plan]
    assert sorted(r.run_id for r in other) == sorted(r.run_id for r in plan)


def test_blocks_of_whole_replicates_and_block_table():
    d = Design.from_dict(
        {
            "factors": {"A": [0, 1], "B": ["x", "y", "z"]},
            "replications": 4,
            "seed": 2,
            "blocks": {"by": "host", "count": 2},
        }
    )
    bt = d.block_table()
    assert set(bt.block) == {1, 2}
    assert (bt.groupby("block").replicate.apply(set) == pd.Series({1: {1, 2}, 2: {3, 4}})).all()
    assert list(bt.block) == sorted(bt.block)  # block 1 first, then block 2


@pytest.mark.parametrize(
    "spec,match",
    [
        ({"fraction": {"p": 1}, "factors": {"A": [1, 2, 3], "B": [1, 2], "C": [1, 2]}}, "two-level"),
        ({"fraction": {"generators": ["D=ABE"]}}, "not a base factor"),
        ({"fraction": {"p": 1, "x": 1}}, "unknown key"),
        ({"fraction": {"p": 1, "fold_over": "Q"}}, "fold_over"),
        ({"blocks": {"by": "week"}}, "by must be one of"),
        ({"blocks": {"by": "factor", "factor": "Z"}}, "must name a factor"),
        ({"blocks": {"by": "day", "count": 3}, "replications": 2}, "power of two"),
        ({"blocks": {"by": "day", "count": 2, "confound": ["A"]}}, "main effect|one is in|not independent"),
        (
            {"blocks": {"by": "day", "count": 2}, "replications": {"target_ci": 0.02, "min": 3, "max": 5}},
            "cannot be combined",
        ),
    ],
)
def test_structure_errors(spec, match):
    base = {"factors": {f: [0, 1] for f in "ABCD"}, "seed": 1}
    with pytest.raises(ConfigError, match=match):
        Design.from_dict({**base, **spec})
