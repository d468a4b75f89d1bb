"""Issue 41, item 5: tail KPIs offered where a study plans and reads its runs, with the runs they
need (runs_for_quantile, checked against TriScale's and Wilks' published counts in
test_stats_quantile.py): the noise check says how many runs a p95/p99 upper bound needs, and the
report's quantile table shows the one-sided bounds ("p95 at most")."""

from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.report.measurement import quantiles_display
from labkit.run.noisecheck import NoiseCheck
from labkit.stats import quantile_summary


def _noise(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "platform": "local",
                "host": "local",
                "n": n,
                "mean": 1.0,
                "cv": 0.01,
                "cv_low": 0.008,
                "cv_high": 0.013,
                "median": 1.0,
                "median_low": 0.99,
                "median_high": 1.01,
                "aa_diff_pct": 0.1,
                "aa_p": 0.7,
            }
        ]
    )


def test_the_noise_check_says_what_a_tail_kpi_needs():
    """At 95 %: 59 runs for p95 (Wilks 1941: 1 - 0.95^59 >= 0.95), 299 for p99."""
    short = NoiseCheck(_noise(12), None, "nc", None, None, 0.05, 0.8).text()
    assert "upper bound on p95 needs 59 runs per configuration, on p99 299" in short
    assert "this check ran 12: plan more runs for a tail KPI" in short
    enough = NoiseCheck(_noise(60), None, "nc", None, None, 0.05, 0.8).text()
    assert "this check ran 60)" in enough and "plan more runs" not in enough


def test_the_report_shows_p95_at_most_where_the_runs_allow_it():
    rng = np.random.default_rng(3)
    data = pd.DataFrame({"g": ["a"] * 60 + ["b"] * 10, "y": rng.lognormal(size=70)})
    q = quantile_summary(data, by="g", response="y")
    shown = quantiles_display(q).set_index("g")
    assert shown.loc["a", "p95 at most"] == f"{q.set_index('g').loc['a', 'p95_upper']:.4g}"
    assert shown.loc["b", "p95 at most"] == "—" and "p99 at most" not in shown  # 299 runs for p99
