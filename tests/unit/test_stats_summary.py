"""labkit.stats.summarize: per-configuration mean and t-based CI."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import summarize

from .test_stats_vectors import sv  # noqa: F401  (sv is a fixture)


def test_summary_of_plant_growth(sv):
    groups = {"ctrl": sv.PG_CTRL, "trt1": sv.PG_TRT1, "trt2": sv.PG_TRT2}
    data = pd.DataFrame([{"group": g, "weight": w} for g, ws in groups.items() for w in ws])
    out = summarize(data, by="group", response="weight", alpha=0.10)
    assert list(out.columns) == ["group", "n", "mean", "std", "sem", "ci_low", "ci_high"]
    for _, row in out.iterrows():
        x = np.array(groups[row["group"]])
        # R: t.test(x, conf.level = 0.90)$conf.int == scipy.stats.t.interval
        lo, hi = sps.t.interval(0.90, len(x) - 1, loc=x.mean(), scale=sps.sem(x))
        assert (row["n"], row["mean"], row["std"]) == (10, pytest.approx(x.mean()),
                                                       pytest.approx(x.std(ddof=1)))
        assert (row["ci_low"], row["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))


def test_several_by_columns_single_observations_and_overall():
    data = pd.DataFrame({"vcpus": [2, 1, 1, 2, 2], "affinity": ["p", "f", "f", "p", "f"],
                         "y": [4.0, 1.0, 3.0, 6.0, 7.0]})
    out = summarize(data, by=["vcpus", "affinity"], response="y")
    assert out[["vcpus", "affinity", "n"]].values.tolist() == [[1, "f", 2], [2, "f", 1],
                                                              [2, "p", 2]]
    single = out.iloc[1]
    assert single["mean"] == 7 and np.isnan(single["std"]) and np.isnan(single["ci_low"])
    overall = summarize(data, by=None, response="y")
    assert overall.loc[0, "n"] == 5 and overall.loc[0, "mean"] == pytest.approx(4.2)


def test_summary_errors():
    data = pd.DataFrame({"a": [1, 2], "y": ["x", "y"]})
    with pytest.raises(ConfigError, match="response column 'y' must be numeric"):
        summarize(data, by="a", response="y")
    with pytest.raises(ConfigError, match="by: no column 'b'"):
        summarize(data, by=["b"], response="y")
