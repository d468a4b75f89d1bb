"""labkit.stats ANOVA against the NIST StRD ANOVA datasets (certified values).

Data and certified values: tests/vectors/nist_anova/*.dat, NIST Statistical
Reference Datasets, Analysis of Variance
(https://www.itl.nist.gov/div898/strd/anova/anova.html), as shipped in SciPy's
test data; the certified values are parsed from each file's header.

Two references per dataset:

* the certified values. The data file holds decimal numbers such as
  1000000000000.4 that float64 cannot represent, so even exact arithmetic on
  the float64 inputs differs from them: by < 1e-13 (relative) on the lower-
  difficulty sets, < 1e-10 on the average ones and < 1e-4 on SmLs07-09
  (13 constant leading digits). The tolerances below are those limits:
  every certified digit float64 input can carry, and >= 4 digits of F on
  SmLs07-09 (issue 17);
* exact rational arithmetic (fractions.Fraction) on the same float64 inputs,
  computed here independently of labkit: labkit must agree to 1e-13.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from labkit.stats import anova, oneway_anova

NIST = Path(__file__).resolve().parents[1] / "vectors" / "nist_anova"
DATASETS = [
    "SiRstv",
    "SmLs01",
    "SmLs02",
    "SmLs03",
    "AtmWtAg",
    "SmLs04",
    "SmLs05",
    "SmLs06",
    "SmLs07",
    "SmLs08",
    "SmLs09",
]
# relative tolerance against the certified values, by NIST's level of difficulty
TOLERANCE = {"Lower": 1e-12, "Average": 2e-10, "Higher": 1e-4}
NUM = r"([-+]?\d\.\d+E[-+]\d+)"


@cache
def dataset(name: str):
    """(certified values, data frame) parsed from the NIST file."""
    text = (NIST / f"{name}.dat").read_text()
    between = re.search(rf"Between \w+\s+(\d+)\s+{NUM}\s+{NUM}\s+{NUM}", text)
    within = re.search(rf"Within \w+\s+(\d+)\s+{NUM}\s+{NUM}", text)
    r2 = re.search(rf"Certified R-Squared\s+{NUM}", text)
    sd = re.search(rf"Standard Deviation\s+{NUM}", text)
    level = re.search(r"(Lower|Average|Higher) Level of Difficulty", text).group(1)
    cert = {
        "df_b": int(between.group(1)),
        "ss_b": float(between.group(2)),
        "ms_b": float(between.group(3)),
        "F": float(between.group(4)),
        "df_w": int(within.group(1)),
        "ss_w": float(within.group(2)),
        "ms_w": float(within.group(3)),
        "r2": float(r2.group(1)),
        "sd": float(sd.group(1)),
        "level": level,
    }
    lines = text.splitlines()
    # the data follow the last "Data:" line (the header has another)
    start = max(i for i, line in enumerate(lines) if line.strip().startswith("Data:"))
    rows = [line.split() for line in lines[start + 1 :] if line.strip()]
    data = pd.DataFrame({"treatment": [int(r[0]) for r in rows], "y": [float(r[1]) for r in rows]})
    return cert, data


@cache
def exact(name: str) -> dict:
    """SS between, SS within and F in exact rational arithmetic on the float64 inputs."""
    _, data = dataset(name)
    groups = {}
    for g, y in zip(data["treatment"], data["y"]):
        groups.setdefault(g, []).append(Fraction(y))
    n = len(data)
    grand = sum(sum(v) for v in groups.values()) / n
    ss_b = ss_w = Fraction(0)
    for values in groups.values():
        m = sum(values) / len(values)
        ss_b += len(values) * (m - grand) ** 2
        ss_w += sum((x - m) ** 2 for x in values)
    k = len(groups)
    f = (ss_b / (k - 1)) / (ss_w / (n - k))
    return {"ss_b": float(ss_b), "ss_w": float(ss_w), "F": float(f)}


def table(fn, data):
    if fn is oneway_anova:
        return oneway_anova(data, response="y", factor="treatment").set_index("term")
    return anova(data, response="y", factors=["treatment"]).set_index("term")


def test_every_dataset_is_present_and_parses():
    for name in DATASETS:
        cert, data = dataset(name)
        assert len(data) == cert["df_b"] + cert["df_w"] + 1
        assert data["treatment"].nunique() == cert["df_b"] + 1


@pytest.mark.parametrize("fn", [oneway_anova, anova], ids=["oneway_anova", "anova"])
@pytest.mark.parametrize("name", DATASETS)
def test_nist_certified_values(name, fn):
    cert, data = dataset(name)
    t = table(fn, data)
    rel = TOLERANCE[cert["level"]]
    assert t.loc["treatment", "df"] == cert["df_b"]
    assert t.loc["error", "df"] == cert["df_w"]
    assert t.loc["treatment", "F"] == pytest.approx(cert["F"], rel=rel, abs=0)
    # SS are not scale-free: the float64 error of the inputs is relative to the
    # deviations (0.1 around 1e12), twice as large on the SS as on F
    ss_rel = rel if cert["level"] != "Higher" else 3e-4
    assert t.loc["treatment", "ss"] == pytest.approx(cert["ss_b"], rel=ss_rel, abs=0)
    assert t.loc["error", "ss"] == pytest.approx(cert["ss_w"], rel=ss_rel, abs=0)
    assert t.loc["treatment", "ms"] == pytest.approx(cert["ms_b"], rel=ss_rel, abs=0)
    assert t.loc["error", "ms"] == pytest.approx(cert["ms_w"], rel=ss_rel, abs=0)
    assert t.loc["treatment", "eta_sq"] == pytest.approx(cert["r2"], rel=ss_rel, abs=0)
    assert np.sqrt(t.loc["error", "ms"]) == pytest.approx(cert["sd"], rel=ss_rel, abs=0)
    assert t.attrs["note"] == ""
    # as close to exact arithmetic on the float64 inputs as float64 output allows
    ex = exact(name)
    assert t.loc["treatment", "F"] == pytest.approx(ex["F"], rel=1e-13, abs=0)
    assert t.loc["treatment", "ss"] == pytest.approx(ex["ss_b"], rel=1e-13, abs=0)
    assert t.loc["error", "ss"] == pytest.approx(ex["ss_w"], rel=1e-13, abs=0)


def test_the_higher_difficulty_sets_keep_four_digits_of_f():
    # issue 17: before the fix SmLs09 gave F = 1,805 instead of the certified 2,001
    for name in ("SmLs07", "SmLs08", "SmLs09"):
        cert, data = dataset(name)
        f = oneway_anova(data, response="y", factor="treatment").loc[0, "F"]
        assert f"{f:.4g}" == f"{cert['F']:.4g}"
