"""The family rule and the verdict vocabulary of labkit.report.claims (issue 42 item 5): the scored
claims of a notebook decided on Bonferroni simultaneous intervals (known truth: statsmodels'
``multipletests(method="bonferroni")``, Seabold & Perktold 2010, on one-sample t-test p-values),
rankings on Tukey-Kramer intervals (known truth: statsmodels' ``pairwise_tukeyhsd``), "no
difference" claims by equivalence, rounding gaps within the paper's printed precision, stand-ins
and separate campaigns never scored."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multicomp import pairwise_tukeyhsd
from statsmodels.stats.multitest import multipletests

from labkit.errors import ConfigError
from labkit.report.claim_compute import compute
from labkit.report.claims import (
    Claim,
    Measured,
    Quote,
    apply_family,
    claims_table,
    family_rule,
    interval_at,
    quote,
    rank_verdict,
    tukey_pairs,
    verdict,
)

REF = Path(__file__).resolve().parents[2] / "data" / "reference"
SRC = Measured(("c",), "m", "mean")


def words(direction):
    return Quote(
        value=None,
        seed="000_8a70f6a90476fa6b.txt",
        where="x",
        reference="x.csv",
        row={},
        column="v",
        direction=direction,
    )


def sample_claims(seed=7):
    rng = np.random.default_rng(seed)
    out, ps = [], []
    for i, shift in enumerate([0.0, 0.35, 0.55, 0.7, 0.9, 1.3, 2.5, -0.8]):
        x = rng.normal(shift, 1.0, 12)
        m = x.mean()
        lo, hi = sps.t.interval(0.95, len(x) - 1, loc=m, scale=sps.sem(x))
        out.append(
            Claim(
                f"k{i}",
                f"claim {i}",
                m,
                "",
                SRC,
                low=lo,
                high=hi,
                n=len(x),
                paper=words(1),
                spread={"kind": "mean", "x": list(x)},
            )
        )
        ps.append(sps.ttest_1samp(x, 0.0).pvalue)
    return out, np.array(ps)


def test_the_family_decides_as_bonferronis_adjusted_p_values():
    claims, p = sample_claims()
    unadjusted = [c.verdict for c in claims]
    m = apply_family(claims)
    assert m == len(claims) and all(c.family == m for c in claims)
    reject = multipletests(p, alpha=0.05, method="bonferroni")[0]
    for c, r, pv in zip(claims, reject, p):
        lo, hi = c.family_interval()
        assert (not lo <= 0 <= hi) == bool(r), (c.key, pv, lo, hi)
        expected = ("reproduced" if c.value > 0 else "opposite") if r else "inconclusive"
        assert c.verdict == expected
    # the data make it matter: some claims significant alone are not in the family of 8
    assert sum(v != "inconclusive" for v in unadjusted) > int(reject.sum())
    t = claims_table(claims)
    assert "Bonferroni over the 8 scored claims" in family_rule(claims)
    assert (t.ci_family != "").all() and list(t.verdict) == [c.verdict for c in claims]


def test_unscored_claims_stay_out_of_the_family():
    claims, _ = sample_claims()
    claims[0].comparable, claims[0].why = False, "sysbench cpu, not PARSEC"
    claims[1].randomized, claims[1].why = False, "native and LXD from separate campaigns"
    claims[2].value = math.nan
    assert apply_family(claims) == 5
    assert [c.verdict for c in claims[:3]] == ["not comparable", "not randomized together", "not measured"]
    assert claims[0].family is None and "3 claim(s) stated, not scored" in family_rule(claims)


def test_a_stored_interval_without_its_runs_widens_as_a_normal_interval():
    z0, z1 = sps.norm.ppf(0.975), sps.norm.ppf(1 - 0.05 / 16)  # two-sided at 1 - 0.05/8
    r, se = 1.3, 0.05  # Derived: a log-ratio interval in %
    c = Claim(
        "d",
        "d",
        100 * (r - 1),
        "%",
        SRC,
        low=100 * (r * math.exp(-z0 * se) - 1),
        high=100 * (r * math.exp(z0 * se) - 1),
    )
    lo, hi = interval_at(c, 1 - 0.05 / 8)
    assert lo == pytest.approx(100 * (r * math.exp(-z1 * se) - 1)) and hi == pytest.approx(
        100 * (r * math.exp(z1 * se) - 1)
    )
    lin = Claim("l", "l", 2.0, "s", SRC, low=1.0, high=3.0)
    assert interval_at(lin, 1 - 0.05 / 8) == pytest.approx((2 - z1 / z0, 2 + z1 / z0))
    with pytest.raises(ConfigError, match="level"):
        interval_at(lin, 1.5)


def test_tukey_kramer_pairs_equal_statsmodels():
    rng = np.random.default_rng(3)
    groups = {"local": rng.normal(100, 5, 6), "docker": rng.normal(120, 6, 5), "lxd": rng.normal(90, 4, 7)}
    values = np.concatenate(list(groups.values()))
    labels = np.concatenate([[k] * len(v) for k, v in groups.items()])
    for alpha in (0.05, 0.05 / 6):
        ref = pd.DataFrame(
            pairwise_tukeyhsd(values, labels, alpha=alpha).summary().data[1:],
            columns=["group1", "group2", "meandiff", "p", "lower", "upper", "reject"],
        )
        ours = tukey_pairs(groups, "docker", level=1 - alpha).set_index("other")
        for r in ref.itertuples():
            if "docker" not in (r.group1, r.group2):
                continue
            other = r.group2 if r.group1 == "docker" else r.group1
            sign = -1 if r.group1 == "docker" else 1  # statsmodels: group2 - group1
            assert ours.loc[other, "diff"] == pytest.approx(sign * r.meandiff, abs=1e-3)
            lo, hi = sorted((sign * r.lower, sign * r.upper))
            assert ours.loc[other, "low"] == pytest.approx(lo, abs=1e-3)
            assert ours.loc[other, "high"] == pytest.approx(hi, abs=1e-3)


@pytest.mark.parametrize(
    "means, direction, higher, expected",
    [
        ({"local": 100, "docker": 150, "lxd": 80}, -1, True, "opposite"),  # "docker worst": ours rank it best
        ({"local": 100, "docker": 50, "lxd": 80}, -1, True, "reproduced"),
        ({"local": 100, "docker": 90, "lxd": 80}, -1, True, "not reproduced"),  # above lxd, not at the top
        ({"local": 100, "docker": 99.5, "lxd": 100.5}, -1, True, "inconclusive"),
        ({"local": 100, "docker": 50, "lxd": 80}, 1, False, "reproduced"),  # lowest time is the best
        ({"local": 100, "docker": 150, "lxd": 80}, 1, True, "reproduced"),
    ],
)
def test_rankings_are_judged_as_rankings(means, direction, higher, expected):
    noise = np.array([-1.0, 0.0, 1.0, 0.5, -0.5])
    spread = {
        "groups": {k: list(v + noise) for k, v in means.items()},
        "level": "docker",
        "higher_is_better": higher,
    }
    assert rank_verdict(spread, direction) == expected


def test_a_rank_claim_computes_from_runs():
    rows = [
        {
            "campaign": "c",
            "run_id": f"{p}{i}",
            "platform": p,
            "status": "ok",
            "metric": "w",
            "value": v + i,
            "instance": 0,
        }
        for p, v in (("local", 100.0), ("docker", 150.0), ("lxd", 80.0))
        for i in range(4)
    ]
    src = Measured(("c",), "w", "rank", select={"platform": "docker"}, levels=("local", "docker", "lxd"))
    got = compute(src, "unused", tidy=pd.DataFrame(rows))
    assert got["value"] == 1.0 and got["spread"]["level"] == "docker"
    with pytest.raises(ConfigError, match="levels"):
        Measured(("c",), "w", "rank", select={"platform": "docker"})


def test_no_difference_claims_are_decided_by_equivalence():
    # inside +-margin: reproduced ("equivalent" or a "negligible difference")
    assert verdict(-1.0, 1.0, 0.0, margin=2.0) == "reproduced"
    assert verdict(0.5, 1.5, None, direction=0, margin=2.0) == "reproduced"
    # outside the margin and excluding 0: not reproduced; wide and holding 0: inconclusive
    assert verdict(1.0, 5.0, None, direction=0, margin=2.0) == "not reproduced"
    assert verdict(-5.0, 5.0, 0.0, margin=2.0) == "inconclusive"
    # the 1 - 2 alpha interval decides equivalence, the 1 - alpha one a difference
    assert verdict(-2.5, 2.5, 0.0, margin=2.0, tost_low=-1.9, tost_high=1.9) == "reproduced"
    with pytest.raises(ConfigError, match="margin"):
        verdict(-1.0, 1.0, 0.0, margin=-1.0)


def test_rounding_gaps_within_the_printed_precision_are_no_gaps():
    q = quote(
        REF / "iperf_udp.csv", {"platform": "KVM+VM"}, "udp_mbps", where="Table 7.2, p. 46", unit="Mbit/s"
    )
    assert q.value == 672 and q.precision == 0.5  # printed "672": 671.5 to 672.5
    assert verdict(28.3, 28.9, 28.0) == "same direction, different size"
    assert verdict(28.3, 28.9, 28.0, paper_precision=0.5) == "reproduced"
    assert verdict(28.6, 28.9, 28.0, paper_precision=0.5) == "same direction, different size"
