"""HPL's size against the minimum run length (labkit.studies.hpl_length): the projection's
arithmetic worked by hand here, and the committed interconnect campaign's HPL seconds recomputed
from its stored Gflop/s with HPL's own operation count (HPL_pdtest.c of HPL 2.3: 2/3 n³ + 3/2 n²)."""

from pathlib import Path

import pandas as pd
import pytest

from labkit.errors import ConfigError
from labkit.run.runlength import RunLength
from labkit.store import Store
from labkit.studies.hpl_length import hpl_projection, hpl_projection_of

REPO = Path(__file__).resolve().parents[2]


def _length(seconds: dict[str, float]) -> RunLength:
    measured = pd.Series(seconds, dtype=float)
    return RunLength("hpcc", 1.0, "", measured, pd.Series("derived", index=measured.index), "n")


def test_projection_arithmetic():
    # the shortest HPL, 0.008 s, lasts 1 s at 400 * (1 / 0.008) ** (1/3) = 400 * 5 = 2000
    length = _length({"a": 0.008, "b": 0.010, "c": 0.064})
    wall = pd.Series({"a": 6.0, "b": 10.0, "c": 20.0})
    duration = pd.Series({"a": 8.0, "b": 13.0, "c": 30.0})
    p = hpl_projection(length, 400, wall, duration)
    assert p.n_needed == 2000 and p.short and p.runs == 3
    assert (p.shortest, p.median, p.longest) == (0.008, 0.010, 0.064)
    # the median run: 13 s, of which 3 s set-up (13 - 10), 9.99 s the rest of HPCC, 0.01 s HPL; r = 5
    assert p.run_s == 13.0
    assert p.projected_s == pytest.approx(3.0 + 9.99 * 25 + 0.010 * 125)
    text = p.sentence()
    assert "n ≈ 2000" in text and "instead of 13 s" in text and "3 runs" in text
    assert f"about {3 * p.projected_s / 3600:.1f} h" in text


def test_projection_rounds_up_to_a_hundred_and_never_shrinks():
    p = hpl_projection(_length({"a": 0.5}), 400, pd.Series({"a": 2.0}), pd.Series({"a": 3.0}))
    assert p.n_needed == 600  # 400 * 2 ** (1/3) = 504 -> 600
    q = hpl_projection(_length({"a": 3.0}), 400, pd.Series({"a": 4.0}), pd.Series({"a": 5.0}))
    assert q.n_needed == 400 and not q.short


def test_bad_input():
    with pytest.raises(ConfigError, match="n must be a positive integer"):
        hpl_projection(_length({"a": 0.1}), 0, pd.Series({"a": 1.0}), pd.Series({"a": 1.0}))
    with pytest.raises(ConfigError):
        hpl_projection(_length({"a": 0.1}), True, pd.Series({"a": 1.0}), pd.Series({"a": 1.0}))
    # no run with all three: nothing to project
    assert hpl_projection(_length({"a": 0.1}), 400, pd.Series({"b": 1.0}), pd.Series({"a": 1.0})) is None


def test_committed_interconnect_campaign():
    with Store.for_campaign(REPO / "data", "interconnect-local", readonly=True) as st:
        p = hpl_projection_of(st)
        tidy, runs, n = st.tidy(), st.runs(), st.meta()["workload"]["params"]["n"]
    ok = runs[runs.status == "ok"].run_id
    gflops = tidy[(tidy.metric == "hpl_gflops") & tidy.run_id.isin(ok)].groupby("run_id").value.median()
    seconds = (2 / 3 * n**3 + 3 / 2 * n**2) / (gflops * 1e9)
    assert p is not None and p.n == n and p.runs == len(ok)
    assert p.shortest == pytest.approx(seconds.min()) and p.longest == pytest.approx(seconds.max())
    assert p.short and p.n_needed > n
