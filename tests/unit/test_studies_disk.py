"""labkit.studies.disk: seed 001's disk image format (qcow2 vs raw) as two libvirt platforms.

Expected statistics are R's printed output on R's own data sets (tests/vectors/stats_vectors.py):
Welch ``t.test(extra ~ group, data = sleep)``, ``shapiro.test`` on the weights of
Shapiro & Wilk (1965), ``car::leveneTest(weight ~ group, data = PlantGrowth)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from labkit.design import Design
from labkit.errors import ConfigError
from labkit.run.testbed import Testbed
from labkit.studies.disk import (
    claim_verdicts,
    disk_format_comparison,
    disk_format_design,
    disk_format_testbed,
    fixed_params,
    residual_checks,
)

from .test_stats_vectors import printed, sv  # noqa: F401  (sv is a fixture)


def test_testbed_declares_one_libvirt_platform_per_format():
    tb = Testbed.load(disk_format_testbed(options={"disk_cache": "none"}))
    assert {n: (p.backend, p.options) for n, p in tb.platforms.items()} == {
        "kvm-qcow2": ("libvirt", {"disk_format": "qcow2", "disk_cache": "none"}),
        "kvm-raw": ("libvirt", {"disk_format": "raw", "disk_cache": "none"}),
    }
    tb.check_platforms(["kvm-qcow2", "kvm-raw"])
    with pytest.raises(ConfigError, match="disk_formats='vmdk'"):
        disk_format_testbed(["qcow2", "vmdk"])
    with pytest.raises(ConfigError, match="two distinct"):
        disk_format_testbed(["raw", "raw"])
    with pytest.raises(ConfigError, match="set per platform"):
        disk_format_testbed(options={"disk_format": "raw"})


def test_design_crosses_platform_with_the_factors_that_vary():
    d = disk_format_design(apps=["dedup", "ferret"], threads_levels=[2], replications=2, seed=7)
    assert d["factors"] == {"platform": ["kvm-qcow2", "kvm-raw"], "app": ["dedup", "ferret"]}
    assert fixed_params(apps=["dedup", "ferret"], threads_levels=[2]) == {"threads": 2}
    design = Design.from_dict(d)
    assert len(design.plan()) == 2 * 2 * 2
    with pytest.raises(ConfigError, match="threads needs at least one level"):
        disk_format_design(apps=["dedup"], threads_levels=[], replications=2, seed=7)


def _sleep(sv):
    # R's sleep data: group 1 as qcow2, group 2 as raw
    return pd.DataFrame(
        {
            "disk_format": ["qcow2"] * 10 + ["raw"] * 10,
            "app": "dedup",
            "t": list(sv.SLEEP_G1) + list(sv.SLEEP_G2),
        }
    )


def test_comparison_is_welch_on_the_recorded_format(sv):
    row = disk_format_comparison(_sleep(sv), "t", by=["app"]).iloc[0]
    # R: t.test(extra ~ group, data = sleep)
    assert row["t"] == printed(sv.WELCH["t"]) and row["df"] == printed(sv.WELCH["df"])
    assert row["p"] == printed(sv.WELCH["p"]) and row["p_holm"] == row["p"]  # one group: Holm is p
    assert (row["ci_low"], row["ci_high"]) == printed(sv.WELCH["ci95"])
    assert (row["n_a"], row["n_b"]) == (10, 10)
    assert row["ratio"] == pytest.approx(np.mean(sv.SLEEP_G1) / np.mean(sv.SLEEP_G2))
    assert row["slower_pct"] == pytest.approx(100 * (row["ratio"] - 1))
    with pytest.raises(ConfigError, match="need runs of both"):
        disk_format_comparison(_sleep(sv).query("disk_format == 'raw'"), "t", by=["app"])
    with pytest.raises(ConfigError, match="no 'disk_format' column"):
        disk_format_comparison(_sleep(sv).drop(columns="disk_format"), "t")


def test_comparison_says_when_two_runs_cannot_test_variances():
    d = pd.DataFrame({"disk_format": ["qcow2", "qcow2", "raw", "raw"], "t": [2.0, 2.2, 1.0, 1.1]})
    row = disk_format_comparison(d, "t", by=[]).iloc[0]
    assert np.isnan(row["bf_p"]) and "Brown-Forsythe needs >= 3" in row["note"]
    assert row["ratio"] == pytest.approx(2.1 / 1.05)


def test_residual_checks_against_r(sv):
    # Shapiro-Wilk is location-invariant: one cell's residuals give shapiro.test(x)'s W and p
    one = pd.DataFrame({"f": "a", "y": sv.SW_WEIGHTS["x"]})
    sw = residual_checks(one, "y", ["f"]).set_index("check").loc["normal residuals"]
    assert sw["statistic"] == printed(sv.SW_WEIGHTS["W"]) and sw["p"] == printed(sv.SW_WEIGHTS["p"])
    assert not sw["holds"]
    # R: car::leveneTest(weight ~ group, data = PlantGrowth): F 1.1192, p 0.3412
    pg = pd.DataFrame(
        {
            "group": ["ctrl"] * 10 + ["trt1"] * 10 + ["trt2"] * 10,
            "weight": [*sv.PG_CTRL, *sv.PG_TRT1, *sv.PG_TRT2],
        }
    )
    bf = residual_checks(pg, "weight", ["group"]).set_index("check").loc["equal variances"]
    assert bf["statistic"] == printed(1.1192) and bf["p"] == printed(0.3412) and bf["holds"]
    few = residual_checks(pg.groupby("group").head(2), "weight", ["group"]).set_index("check")
    assert (
        pd.isna(few.loc["equal variances", "holds"]) and "fewer than 3" in few.loc["equal variances", "note"]
    )
    with pytest.raises(ConfigError, match="missing"):
        residual_checks(pg, "weight", ["app"])


def test_verdicts_follow_the_interval():
    t = pd.DataFrame(
        {
            "claim": list("abcde"),
            "stated_direction": ["slower", "slower", "slower", "no difference", "no difference"],
            "ci_low": [1.0, -5.0, -9.0, -66.0, 3.0],
            "ci_high": [9.0, 4.0, -1.0, 88.0, np.nan],
        }
    )
    # a wide interval around 0 does not show "no difference" (notebook 04 once called -66..+88 % consistent)
    assert claim_verdicts(t).verdict.tolist() == [
        "reproduced",
        "inconclusive",
        "opposite",
        "inconclusive",
        "not reproduced",
    ]
    assert claim_verdicts(t.assign(ours_pct=np.nan)).verdict.tolist() == ["not measured"] * 5
    with pytest.raises(ConfigError, match="stated_direction 'faster'"):
        claim_verdicts(t.assign(stated_direction="faster"))
