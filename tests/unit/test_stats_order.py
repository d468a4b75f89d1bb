"""labkit.stats.order_effects (issue 41, item 7): a trend or carry-over injected into a randomized
run order is found; stationary, independent runs are flagged at about alpha."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import order_effects


def campaign(*, n_reps=8, trend=0.0, carry=0.0, sd=1.0, seed=0, hosts=("h1",)):
    """A 2 x 2 design (A, B), ``n_reps`` replicates, run in a random order on each host:
    y = 10 + 3·A + trend·position + carry·(the previous run had A = +1) + N(0, sd²)."""
    rng = np.random.default_rng(seed)
    rows = []
    for host in hosts:
        configs = [(a, b) for a in (-1, 1) for b in (-1, 1) for _ in range(n_reps)]
        order = rng.permutation(len(configs))
        prev_a = None
        for seq, i in enumerate(order, start=1):
            a, b = configs[i]
            y = 10 + 3 * a + trend * seq + (carry if prev_a == 1 else 0.0) + rng.normal(0, sd)
            rows.append({"host": host, "run_seq": seq, "A": a, "B": b, "y": y})
            prev_a = a
    return pd.DataFrame(rows)


def test_an_injected_trend_is_found_with_its_slope():
    # 0.1 per run over 32 runs: 3.2 units of drift against sd 1 (the effect of A is 6)
    out = order_effects(campaign(trend=0.1), response="y", factors=["A", "B"])
    row = out.iloc[0]
    assert row.trend and not row.trusted and row.p_trend_adj < 0.001
    assert row.slope == pytest.approx(0.1, abs=0.03)  # the slope injected, in the response unit
    # the residuals are y minus the configuration means: Spearman on them by hand
    d = campaign(trend=0.1)
    res = d.y - d.groupby(["A", "B"]).y.transform("mean")
    assert row.rho == pytest.approx(sps.spearmanr(d.run_seq, res)[0])
    assert list(out.columns) == [
        "host",
        "n",
        "rho",
        "p_trend",
        "slope",
        "groups",
        "H",
        "p_carry",
        "p_trend_adj",
        "p_carry_adj",
        "trend",
        "carryover",
        "trusted",
    ]


def test_carry_over_from_the_previous_configuration_is_found():
    out = order_effects(campaign(carry=3.0, n_reps=10, seed=2), response="y", factors=["A", "B"])
    assert out.iloc[0].carryover and out.iloc[0].p_carry_adj < 0.01 and not out.iloc[0].trusted
    assert out.iloc[0].groups == 4


def test_stationary_runs_are_flagged_at_about_alpha():
    # 400 campaigns without trend or carry-over: the share with any flag (after Holm over the two
    # tests) stays near, and not above, 5 % (binomial 99 % upper bound for 400 draws at 0.05: 0.08)
    flagged = [
        not order_effects(campaign(seed=s), response="y", factors=["A", "B"]).iloc[0].trusted
        for s in range(400)
    ]
    assert np.mean(flagged) <= 0.08


def test_each_host_is_its_own_series_and_short_hosts_are_named():
    d = pd.concat(
        [
            campaign(trend=0.2, hosts=("busy",)),
            campaign(seed=5, hosts=("quiet",)),
            campaign(n_reps=1, seed=6, hosts=("tiny",)).head(4),
        ]
    )
    out = order_effects(d, response="y", factors=["A", "B"]).set_index("host")
    assert out.loc["busy", "trend"] and out.loc["quiet", "trusted"]
    assert out.attrs["short"] == ["tiny"] and "tiny" not in out.index


def test_bad_input_is_a_config_error():
    with pytest.raises(ConfigError, match="run_seq"):
        order_effects(campaign().drop(columns="run_seq"), response="y", factors=["A"])
    with pytest.raises(ConfigError, match="no host has 6 runs"):
        order_effects(campaign().head(4), response="y", factors=["A"])
