"""labkit.stats t-tests and Shapiro-Wilk against R (values in stats_vectors.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from labkit.errors import ConfigError
from labkit.stats import shapiro, shapiro_by, ttest, ttest_by

from .test_stats_vectors import printed, sv  # noqa: F401  (sv is a fixture)


def check(row, expected):
    assert row["t"] == printed(expected["t"])
    assert row["df"] == printed(expected["df"])
    assert row["p"] == printed(expected["p"])
    assert (row["ci_low"], row["ci_high"]) == printed(expected["ci95"])


def test_welch_sleep(sv):
    # R: t.test(extra ~ group, data = sleep)
    row = ttest(sv.SLEEP_G1, sv.SLEEP_G2).iloc[0]
    check(row, sv.WELCH)
    assert row["test"] == "welch" and row["diff"] == pytest.approx(0.75 - 2.33)


def test_student_sleep(sv):
    # R: t.test(extra ~ group, data = sleep, var.equal = TRUE)
    check(ttest(sv.SLEEP_G1, sv.SLEEP_G2, equal_var=True).iloc[0], sv.STUDENT)


def test_paired_sleep(sv):
    # R: t.test(sleep$extra[1:10], sleep$extra[11:20], paired = TRUE)
    row = ttest(sv.SLEEP_G1, sv.SLEEP_G2, paired=True).iloc[0]
    check(row, sv.PAIRED)
    assert row["test"] == "paired"


def test_ttest_columns_and_alpha(sv):
    out = ttest(sv.SLEEP_G1, sv.SLEEP_G2, alpha=0.10)
    assert list(out.columns) == [
        "test",
        "n_a",
        "n_b",
        "mean_a",
        "mean_b",
        "diff",
        "t",
        "df",
        "p",
        "ci_low",
        "ci_high",
    ]
    wide = ttest(sv.SLEEP_G1, sv.SLEEP_G2).iloc[0]
    assert wide["ci_low"] < out.loc[0, "ci_low"] < out.loc[0, "ci_high"] < wide["ci_high"]


def test_shapiro_weights(sv):
    # R: shapiro.test(c(148, 154, 158, 160, 161, 162, 166, 170, 182, 195, 236))
    row = shapiro(sv.SW_WEIGHTS["x"]).iloc[0]
    assert row["W"] == printed(sv.SW_WEIGHTS["W"])
    assert row["p"] == printed(sv.SW_WEIGHTS["p"])
    assert row["n"] == 11 and not row["normal"]


def sleep_long(sv):
    """The sleep data twice over, as two 'configurations' of a by column."""
    rows = [
        {"cfg": c, "drug": d, "extra": x}
        for c in ("one", "two")
        for d, xs in (("g1", sv.SLEEP_G1), ("g2", sv.SLEEP_G2))
        for x in xs
    ]
    return pd.DataFrame(rows)


def test_ttest_by_runs_welch_per_configuration(sv):
    out = ttest_by(sleep_long(sv), factor="drug", response="extra", by="cfg")
    assert list(out.columns) == [
        "cfg",
        "level_a",
        "level_b",
        "n_a",
        "n_b",
        "mean_a",
        "mean_b",
        "diff",
        "diff_pct",
        "t",
        "df",
        "p",
        "ci_low",
        "ci_high",
        "significant",
        "note",
    ]
    assert out["cfg"].tolist() == ["one", "two"]
    for _, row in out.iterrows():
        check(row, sv.WELCH)  # R: t.test(extra ~ group, data = sleep)
        assert row["diff_pct"] == pytest.approx(100 * (0.75 - 2.33) / 2.33)
        assert not row["significant"]
    swapped = ttest_by(sleep_long(sv), factor="drug", response="extra", by=["cfg"], levels=("g2", "g1"))
    assert swapped.loc[0, "t"] == printed(-sv.WELCH["t"])
    design = SimpleNamespace(factors=[SimpleNamespace(name="drug", levels=("g2", "g1"))])
    by_design = ttest_by(sleep_long(sv), factor="drug", response="extra", by="cfg", levels=design)
    assert by_design["level_a"].tolist() == ["g2", "g2"]
    assert by_design.loc[1, "t"] == printed(-sv.WELCH["t"])


def test_ttest_by_small_cells_get_nan_and_a_note(sv):
    data = sleep_long(sv)
    # cfg "two" keeps a single g2 value
    data = data[~((data.cfg == "two") & (data.drug == "g2"))]
    data = pd.concat([data, pd.DataFrame([{"cfg": "two", "drug": "g2", "extra": 1.0}])])
    out = ttest_by(data, factor="drug", response="extra", by="cfg")
    assert np.isnan(out.loc[1, "p"]) and "at least 2 observations" in out.loc[1, "note"]
    assert out.loc[1, "n_b"] == 1 and out.loc[1, "mean_b"] == 1.0
    assert not out.loc[1, "significant"]


def test_ttest_by_without_by_and_bad_factors(sv):
    data = sleep_long(sv)
    assert len(ttest_by(data[data.cfg == "one"], factor="drug", response="extra")) == 1
    with pytest.raises(ConfigError, match=r"factor 'cfg' cannot also be in by"):
        ttest_by(data, factor="cfg", response="extra", by="cfg")
    three = data.assign(drug=np.resize(["a", "b", "c"], len(data)))
    with pytest.raises(ConfigError, match=r"'drug' has 3 level.*tukey_hsd"):
        ttest_by(three, factor="drug", response="extra", by="cfg")


def test_shapiro_by_cells(sv):
    data = sleep_long(sv)
    data = pd.concat([data, pd.DataFrame([{"cfg": "three", "drug": "g1", "extra": 1.0}] * 2)])
    out = shapiro_by(data, by=["cfg", "drug"], response="extra")
    assert list(out.columns) == ["cfg", "drug", "n", "W", "p", "normal", "note"]
    assert len(out) == 5
    small = out[out.cfg == "three"].iloc[0]
    assert small["n"] == 2 and np.isnan(small["W"]) and "at least 3" in small["note"]
    g1 = out[(out.cfg == "one") & (out.drug == "g1")].iloc[0]
    from scipy import stats as sps  # R: shapiro.test(sleep$extra[1:10])

    assert g1["W"] == pytest.approx(sps.shapiro(sv.SLEEP_G1).statistic)


def test_input_errors(sv):
    with pytest.raises(ConfigError, match="at least 3 observations"):
        shapiro([1, 2])
    with pytest.raises(ConfigError, match="same length"):
        ttest([1, 2, 3], [1, 2], paired=True)
    with pytest.raises(ConfigError, match="b has 1 missing"):
        ttest([1, 2, 3], [1, np.nan, 3])
    with pytest.raises(ConfigError, match="at least 2 observation"):
        ttest([1], [1, 2, 3])
    with pytest.raises(ConfigError, match="by: no column 'nope'"):
        shapiro_by(sleep_long(sv), by="nope", response="extra")
    assert np.isnan(shapiro([2, 2, 2]).loc[0, "W"])
