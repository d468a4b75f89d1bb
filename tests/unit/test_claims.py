"""Structured claims (labkit.report.claims): the verdict vocabulary at each of its boundaries,
intervals of positive quantities on the log scale, quotes checked against data/reference, and
invalid runs left out and counted (labkit.report.validity)."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.report.claim_compute import compute
from labkit.report.claims import (
    MIMETYPE,
    Claim,
    Measured,
    claims_table,
    mean_interval,
    quote,
    render,
    verdict,
)
from labkit.report.validity import rule, screen

REF = Path(__file__).resolve().parents[2] / "data" / "reference"
INF = math.inf
NAN = math.nan


@pytest.mark.parametrize(
    "lo, hi, paper, expected",
    [
        # the paper's value inside our interval, 0 outside: reproduced (bounds count as inside)
        (1.0, 10.0, 5.0, "reproduced"),
        (1.0, 10.0, 10.0, "reproduced"),
        (1.0, 10.0, 1.0, "reproduced"),
        (-10.0, -1.0, -10.0, "reproduced"),
        # our interval contains both 0 and the paper's value: inconclusive (0 on a bound is inside)
        (0.0, 10.0, 5.0, "inconclusive"),
        (-66.0, 88.0, 40.19, "inconclusive"),  # notebook 04's "consistent"
        (-5.0, 5.0, 0.0, "inconclusive"),  # "no difference" needs more than a wide interval
        (NAN, NAN, 3.2, "inconclusive"),  # an unbounded Fieller interval
        (-INF, INF, 3.2, "inconclusive"),
        (NAN, 20.0, 3.2, "inconclusive"),  # open on one side
        # significant on the paper's side, the paper's value outside: same direction, different size
        (1.0, 10.0, 10.001, "same direction, different size"),
        (1.0, 10.0, 0.999, "same direction, different size"),
        (1000.0, 1200.0, 3.2, "same direction, different size"),
        (-10.0, -1.0, -11.0, "same direction, different size"),
        # significant on the other side: opposite
        (-10.0, -0.001, 3.2, "opposite"),
        (1.0, 10.0, -3.0, "opposite"),
        # neither: the paper's value excluded, no direction shown (or the paper says 0, ours is not)
        (-5.0, 3.0, 10.0, "not reproduced"),
        (-5.0, 0.0, 10.0, "not reproduced"),
        (1.0, 3.0, 0.0, "not reproduced"),
    ],
)
def test_verdict_by_interval(lo, hi, paper, expected):
    assert verdict(lo, hi, paper) == expected


@pytest.mark.parametrize(
    "lo, hi, direction, expected",
    [
        (1.0, 3.0, 1, "reproduced"),
        (0.0, 3.0, 1, "inconclusive"),
        (-3.0, -1.0, 1, "opposite"),
        (-3.0, -1.0, -1, "reproduced"),
        (-1.0, 1.0, 0, "inconclusive"),
        (0.5, 1.0, 0, "not reproduced"),
        (NAN, NAN, 1, "inconclusive"),
    ],
)
def test_verdict_of_a_claim_in_words(lo, hi, direction, expected):
    assert verdict(lo, hi, None, direction=direction) == expected


@pytest.mark.parametrize(
    "plo, phi, expected",
    [
        (2.5, 6.0, "reproduced"),  # both significant, the intervals overlap
        (3.0, 6.0, "reproduced"),  # touching counts as overlapping
        (3.5, 6.0, "same direction, different size"),  # no overlap
        (-1.0, 6.0, "same direction, different size"),  # the paper's effect is not significant
    ],
)
def test_verdict_with_the_papers_interval(plo, phi, expected):
    assert verdict(1.0, 3.0, 5.0, paper_low=plo, paper_high=phi) == expected


def test_not_comparable_and_not_measured_override_the_numbers():
    assert verdict(1.0, 10.0, 5.0, comparable=False) == "not comparable"
    # nothing measured is "not measured", whatever else (issue 42: PARSEC Raytrace and Vips)
    assert verdict(NAN, NAN, 5.0, comparable=False, measured=False) == "not measured"
    assert verdict(1.0, 10.0, 5.0, randomized=False) == "not randomized together"
    assert verdict(1.0, 10.0, 5.0, comparable=False, randomized=False) == "not comparable"
    assert verdict(NAN, NAN, 5.0, measured=False) == "not measured"


def test_verdict_refuses_a_reversed_interval_and_a_missing_paper_value():
    with pytest.raises(ConfigError, match="low bound above"):
        verdict(3.0, 1.0, 2.0)
    with pytest.raises(ConfigError, match="direction"):
        verdict(1.0, 3.0, None)


def test_mean_interval_linear_is_the_t_interval():
    x = [3.0, -1.0, 4.0, 1.5]
    m = mean_interval(x)
    lo, hi = sps.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=sps.sem(x))
    assert m["scale"] == "linear" and m["low"] == pytest.approx(lo) and m["high"] == pytest.approx(hi)


@pytest.mark.parametrize("x", [[100.0, 700.0], [117.0, 277.0, 700.0], [1.0, 1000.0], [5.0, 5.0, 5.1]])
def test_mean_interval_of_a_positive_quantity_is_on_the_log_scale_and_never_negative(x):
    m = mean_interval(x)
    linear = sps.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=sps.sem(x))
    assert m["scale"] == "log" and m["low"] > 0 and m["low"] < m["mean"] < m["high"]
    assert m["low"] * m["high"] == pytest.approx(m["mean"] ** 2)  # symmetric in log
    # same width in log units as the t interval's relative half-width
    assert math.log(m["high"] / m["mean"]) == pytest.approx((linear[1] - np.mean(x)) / np.mean(x))
    if len(x) == 2:
        assert linear[0] < 0  # the linear interval would have gone negative


def test_mean_interval_of_one_value_has_no_interval():
    m = mean_interval([4.0])
    assert m["mean"] == 4.0 and math.isnan(m["low"]) and m["n"] == 1


def test_quote_reads_the_row_and_checks_its_citation():
    q = quote(
        REF / "iperf_udp.csv", {"platform": "KVM+VM"}, "udp_mbps", where="Table 7.2, p. 46", unit="Mbit/s"
    )
    assert q.value == 672 and q.seed == "004_beba910cf0dde7e8.txt" and q.reference == "iperf_udp.csv"
    with pytest.raises(ConfigError, match="is not how"):
        quote(REF / "iperf_udp.csv", {"platform": "KVM+VM"}, "udp_mbps", where="Table 9.9")
    with pytest.raises(ConfigError, match="rows match"):
        quote(REF / "iperf_udp.csv", {"platform": "Xen"}, "udp_mbps", where="Table 7.2, p. 46")
    words = quote(
        REF / "pipeline_disk_format.csv",
        {"application": "Ferret"},
        "stated_pct",
        where="section 4",
        direction=0,
    )
    assert words.value is None and words.direction == 0
    with pytest.raises(ConfigError, match="direction"):
        quote(REF / "pipeline_disk_format.csv", {"application": "Ferret"}, "stated_pct", where="section 4")


def test_claim_renders_escaped_with_its_verdict_and_table():
    paper = quote(
        REF / "pipeline_kvm_lxc.csv", {"application": "Dedup"}, "stated_pct", where="abstract and section 4"
    )
    src = Measured(
        ("pipeline-libvirt", "pipeline-lxd"),
        "wall_time_s",
        "slowdown_pct",
        select={"campaign": "pipeline-libvirt"},
        baseline={"campaign": "pipeline-lxd"},
        lower_is_better=True,
    )
    c = Claim(
        "dedup",
        "Dedup <b>KVM</b> vs LXC",
        1089.0,
        "%",
        src,
        low=900.0,
        high=1300.0,
        n=3,
        n_base=3,
        paper=paper,
        comparable=False,
        why="QEMU TCG here, KVM there",
    )
    assert c.verdict == "not comparable"
    md = render([c])
    assert "&lt;b&gt;" in md and "not comparable" in md and "001_94cd1ff94cd4e3e1.txt" in md
    t = claims_table([c])
    assert "ci_family" in t.columns and t.ci_family.iloc[0] == ""  # not scored: no family interval
    assert list(t.verdict) == ["not comparable"] and t.note.iloc[0] == "QEMU TCG here, KVM there"
    with pytest.raises(ConfigError, match="why"):
        Claim("x", "x", 1.0, "%", src, paper=paper, comparable=False)
    assert c.to_dict()["source"]["select"] == {"campaign": "pipeline-libvirt"} and MIMETYPE.endswith("+json")


def _tidy():
    rows = []
    for i, (plat, loss, rate) in enumerate(
        [
            ("local", 1.0, 900.0),
            ("local", 2.0, 920.0),
            ("docker", 80.0, 90.0),
            ("docker", 3.0, 880.0),
            ("docker", 4.0, 860.0),
        ]
    ):
        for metric, v in (("udp_lost_percent", loss), ("udp_mbit_per_s", rate), ("tcp_mbit_per_s", 2 * rate)):
            rows.append(
                {
                    "campaign": "net",
                    "run_id": f"r{i}",
                    "platform": plat,
                    "status": "ok",
                    "metric": metric,
                    "value": v,
                    "instance": 0,
                }
            )
    return pd.DataFrame(rows)


def test_screen_leaves_out_the_invalid_metrics_of_a_run_and_counts_them():
    kept, bad = screen(_tidy(), ["udp_loss"])
    assert list(bad.run_id) == ["r2"] and bad.threshold.iloc[0] == 5.0
    assert not ((kept.run_id == "r2") & (kept.metric == "udp_mbit_per_s")).any()
    assert ((kept.run_id == "r2") & (kept.metric == "tcp_mbit_per_s")).any()  # TCP still counts
    assert screen(_tidy(), [rule("udp_loss", 90.0)])[1].empty
    with pytest.raises(ConfigError, match="use one of"):
        rule("nope")


def test_compute_a_measured_claim_with_exclusions():
    tidy = _tidy()
    src = Measured(
        ("net",),
        "udp_mbit_per_s",
        "slowdown_pct",
        select={"platform": "docker"},
        baseline={"platform": "local"},
        exclude="udp_loss",
    )
    c = compute(src, "unused", tidy=tidy)
    assert c["n"] == 2 and c["n_base"] == 2 and c["excluded"] == 1
    assert c["value"] == pytest.approx(100 * (910.0 / 870.0 - 1))
    runs = compute(
        Measured(("net",), "udp_mbit_per_s", "excluded", select={"platform": "docker"}, exclude="udp_loss"),
        "unused",
        tidy=tidy,
    )
    assert runs["value"] == 1.0
    with pytest.raises(ConfigError, match="baseline"):
        Measured(("net",), "x", "slowdown_pct")


def test_the_display_payload_is_strict_json_and_reads_back_with_float():
    """An unbounded interval (NaN, inf) made every executed notebook carry jupyter_client's
    "Out of range float values are not JSON compliant" warning."""
    import json
    import math

    from labkit.report.claims import json_safe

    payload = json_safe({"value": 1.5, "low": math.nan, "high": math.inf, "x": [-math.inf, 2]})
    text = json.dumps(payload, allow_nan=False)
    back = json.loads(text)
    assert math.isnan(float(back["low"])) and float(back["high"]) == math.inf
    assert float(back["x"][0]) == -math.inf and back["value"] == 1.5 and back["x"][1] == 2
