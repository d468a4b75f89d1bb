"""Sample size and adaptive replication (labkit.stats.samplesize, labkit.run.adaptive).

Published values: J. Cohen, Statistical Power Analysis for the Behavioral Sciences
(2nd ed., 1988), Table 2.4.1: runs per group for a two-sided two-sample t test at
alpha = .05 with power .80 -- d = .50: 64, d = .80: 26 (the exact noncentral-t
solution, statsmodels TTestIndPower().solve_power, gives 63.8 and 25.5, rounded up).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.design import Design
from labkit.errors import ConfigError
from labkit.run.adaptive import next_round, worst_fixed_equivalent
from labkit.stats.samplesize import n_for_halfwidth, n_for_power, sample_size


@pytest.mark.parametrize("d,n", [(0.5, 64), (0.8, 26)])
def test_power_sample_size_matches_cohen(d, n):
    assert n_for_power(d * 3.0, 3.0) == n


def test_halfwidth_n_is_the_smallest_that_reaches_the_target():
    sd = np.array([1.0, 2.0, 0.5, 10.0])
    h = np.array([0.5, 0.3, 0.5, 1.0])
    n = n_for_halfwidth(sd, h)
    for s, hw, k in zip(sd, h, n):
        k = int(k)
        assert sps.t.ppf(0.975, k - 1) * s / np.sqrt(k) <= hw
        assert k == 2 or sps.t.ppf(0.975, k - 2) * s / np.sqrt(k - 1) > hw
    # large n: the t interval tends to the z interval n = (1.96 s / h)^2
    assert n_for_halfwidth(1.0, 0.01)[()] == pytest.approx((1.959964 / 0.01) ** 2, rel=0.01)
    assert np.isnan(n_for_halfwidth(np.nan, 1.0)[()]) and n_for_halfwidth(0.0, 1.0)[()] == 2


def test_sample_size_table():
    data = pd.DataFrame({"cfg": ["a"] * 4 + ["b"] * 4, "y": [10.0, 10.1, 9.9, 10.0, 10, 12, 8, 11]})
    t = sample_size(data, response="y", by="cfg", target=0.02).set_index("cfg")
    assert t.loc["a", "met"] and not t.loc["b", "met"]
    assert t.loc["b", "n_needed"] > 4 and t.loc["a", "n_needed"] <= 4
    hw = sps.t.ppf(0.975, 3) * np.std([10, 12, 8, 11], ddof=1) / 2
    assert t.loc["b", "half_width"] == pytest.approx(hw)
    with pytest.raises(ConfigError, match="target"):
        sample_size(data, response="y", by="cfg", target=0)


def adaptive(**rep):
    return Design.from_dict(
        {
            "factors": {"vcpus": [1, 2], "memory_mb": [256, 512]},
            "seed": 5,
            "replications": {"target_ci": 0.02, "min": 3, "max": 8, **rep},
        }
    )


def stored(design, values: dict):
    """runs as stored_values() returns them: values[config] = list of values (None = failed)."""
    rows, order = [], 0
    for c, vals in values.items():
        for i, v in enumerate(vals):
            rows.append(
                {
                    "run_id": f"c{c:04d}r{i + 1:03d}",
                    "run_order": order,
                    "config": c,
                    "replicate": i + 1,
                    "status": "ok" if v is not None else "failed",
                    "value": np.nan if v is None else v,
                }
            )
            order += 1
    return pd.DataFrame(rows)


def test_next_round_adds_only_where_needed_and_is_deterministic():
    d = adaptive()
    runs = stored(d, {0: [10, 10.01, 9.99], 1: [10, 11, 9], 2: [5, 5.001, 4.999], 3: [1, None, 1.5]})
    r1 = next_round(d, runs, 1)
    assert r1 == next_round(d, runs, 1)  # same seed, same round: same runs
    by_cfg = {c: sorted(r.replicate for r in r1 if r.config == c) for c in range(4)}
    assert by_cfg[0] == [] and by_cfg[2] == []  # already at the target
    assert by_cfg[1] == [4]  # one at a time (batch 1), numbered after 3
    assert by_cfg[3] == [4]  # two successes (one run failed): one more
    assert [r.order for r in r1] == list(range(12, 12 + len(r1)))
    assert len({r.run_id for r in r1}) == len(r1)
    assert [r.run_id for r in r1] != sorted(r.run_id for r in r1) or len(r1) < 3
    # batch: up to that many per round, never more than the sd says is still needed
    r3 = next_round(adaptive(batch=3), runs, 1)
    assert sorted(r.replicate for r in r3 if r.config == 1) == [4, 5, 6]
    near = stored(d, {0: [10, 10.01, 9.99], 1: [10, 10.1, 9.9], 2: [5, 5.001, 4.999], 3: [1, 1.001, 0.999]})
    need = int(n_for_halfwidth(0.1, 0.02 * 10)[()])  # 4 runs for config 1
    assert need == 4 and [r.replicate for r in next_round(adaptive(batch=5), near, 1)] == [4]
    # cap: a configuration with max attempts gets nothing more
    capped = stored(
        d,
        {0: [10, 10.01, 9.99], 1: [10, 11, 9, 12, 8, 10, 11, 9], 2: [5, 5.001, 4.999], 3: [1, 1.001, 0.999]},
    )
    assert next_round(d, capped, 2) == []


def test_a_balanced_round_gives_every_configuration_what_the_neediest_gets():
    """balanced: true keeps the cells equal for a 2^k analysis: config 1 needs 3 more (batch 3),
    so all four get 3, each numbered after its own last replicate, none beyond its cap."""
    d = adaptive(balanced=True, batch=3)
    runs = stored(d, {0: [10, 10.01, 9.99], 1: [10, 11, 9], 2: [5, 5.001, 4.999], 3: [1, 1.001, 0.999]})
    by_cfg = {c: sorted(r.replicate for r in next_round(d, runs, 1) if r.config == c) for c in range(4)}
    assert by_cfg == {0: [4, 5, 6], 1: [4, 5, 6], 2: [4, 5, 6], 3: [4, 5, 6]}
    near_cap = stored(
        d, {0: [10, 10.01, 9.99, 10, 10, 10, 10], 1: [10, 11, 9], 2: [5, 5.001, 4.999], 3: [1, 1.001, 0.999]}
    )
    by_cfg = {c: len([r for r in next_round(d, near_cap, 1) if r.config == c]) for c in range(4)}
    assert by_cfg == {0: 1, 1: 3, 2: 3, 3: 3}  # config 0: one left before max 8
    done = stored(d, {c: [10, 10.01, 9.99] for c in range(4)})
    assert next_round(d, done, 1) == []  # nobody needs more: no round
    unbalanced = next_round(adaptive(batch=3), runs, 1)  # the default: only config 1
    assert {r.config for r in unbalanced} == {1}
    # absent from the design when false: a design of before keeps its digest
    assert "balanced" not in adaptive().to_dict()["replications"]
    assert adaptive(balanced=True).to_dict()["replications"]["balanced"] is True
    with pytest.raises(ConfigError, match="balanced must be true or false"):
        adaptive(balanced="yes")


def test_adaptive_spec_errors():
    with pytest.raises(ConfigError, match="target_ci"):
        adaptive(target_ci=-1)
    with pytest.raises(ConfigError, match="max"):
        adaptive(max=2)
    with pytest.raises(ConfigError, match="unknown"):
        adaptive(tarket=1)
    d = adaptive()
    assert Design.from_dict(d.to_dict()).digest() == d.digest()
    assert "adaptive up to 8" in str(d)


def test_worst_fixed_equivalent():
    d = adaptive()
    runs = stored(
        d, {0: [10, 10.01, 9.99], 1: [10, 11, 9, 12, 8, 10, 11, 9], 2: [5, 5.001, 4.999], 3: [1, 1.01, 0.99]}
    )
    w = worst_fixed_equivalent(d, runs)
    assert w["adaptive_runs"] == 17
    # the worst configuration (1) has 8 runs, so a fixed design needs 8 everywhere
    assert w["fixed_replicates"] == 8 and w["fixed_runs"] == 32
    assert w["saving"] == pytest.approx(1 - 17 / 32)
    # whatever its values, the worst configuration needs exactly its own count (no rounding up)
    rng = np.random.default_rng(4)
    for _ in range(50):
        noisy = stored(
            d,
            {
                0: [10, 10.01, 9.99],
                1: list(10 + rng.normal(0, 1, 8)),
                2: [5, 5.001, 4.999],
                3: [1, 1.01, 0.99],
            },
        )
        assert worst_fixed_equivalent(d, noisy)["fixed_replicates"] == 8


@pytest.mark.root
@pytest.mark.parametrize(
    "testbed",
    [
        None,
        {"hosts": [{"name": "here", "platforms": ["local"]}]},
        {"assign": "random", "hosts": [{"name": "here", "platforms": ["local"]}]},
    ],
    ids=["one-backend", "testbed-blocks", "testbed-random"],
)
def test_adaptive_campaign_caps_resumes_and_keeps_run_ids(tmp_path, testbed):
    # the same rounds on one backend and on a testbed (the fleet ran the minimum replicates before)
    from labkit.run.campaign import Campaign

    spec = {
        "factors": {"vcpus": [1, 2]},
        "seed": 9,
        "replications": {"target_ci": 1e-9, "min": 2, "max": 4},
    }  # unreachable: the cap
    cmd = ["sh", "-c", "sleep 0.0{vcpus}"]

    def camp(cid):
        return Campaign(
            Design.from_dict(spec),
            workload="command",
            workload_params={"argv": cmd},
            campaign_id=cid,
            data_dir=tmp_path,
            progress=False,
            testbed=testbed,
        )

    whole = camp("t-ad").run().runs()
    assert sorted(whole.run_id) == [f"c{c:04d}r{r:03d}" for c in (0, 1) for r in (1, 2, 3, 4)]
    camp("t-ad2").run(max_runs=5)  # interrupted in the first round
    again = camp("t-ad2").run().runs()
    assert sorted(again.run_id) == sorted(whole.run_id)  # nothing duplicated or lost
    assert again.run_order.is_unique
    spec["replications"]["target_ci"] = 10.0  # met at once: the plan only
    assert len(camp("t-ad3").run().runs()) == 4


class _PilotStore:
    """What run_adaptive reads of a store whose pilot (the initial plan) is stored: 3 runs of each
    configuration of ``design``, ``duration_s`` seconds each; the rounds' runs are never stored (so
    run_adaptive stops after its first round: none of them could run)."""

    campaign = "t-worst-case"

    def __init__(self, design, duration_s):
        self.plan = design.plan()
        self.meta_ = {}
        self.frame = pd.DataFrame(
            {
                "run_id": [r.run_id for r in self.plan],
                "config": [r.config for r in self.plan],
                "duration_s": [duration_s] * len(self.plan),
            }
        )

    def completed(self):
        return {r.run_id for r in self.plan}

    def runs(self):
        return self.frame

    def tidy(self):  # values far apart: every configuration's CI is too wide, a round follows
        return pd.DataFrame(
            {
                "run_id": [r.run_id for r in self.plan],
                "run_order": [r.order for r in self.plan],
                "config": [r.config for r in self.plan],
                "replicate": [r.replicate for r in self.plan],
                "status": "ok",
                "metric": "y",
                "value": [1.0 + 9 * (r.replicate % 2) for r in self.plan],
            }
        )

    def meta(self):
        return dict(self.meta_)

    def set_meta(self, **kw):
        self.meta_.update(kw)


def test_the_worst_case_of_an_adaptive_campaign_is_logged_before_its_first_round(caplog):
    """Issue 47, finding 8: an adaptive campaign says what it commits to at worst (every
    configuration run ``max`` times) in runs and hours at the pilot's mean run time, before any
    round's run starts; before, nothing was said."""
    import logging

    from labkit.run.adaptive import run_adaptive

    d = adaptive()  # 4 configurations, min 3, max 8
    store = _PilotStore(d, 360.0)  # the pilot: 12 runs of 6 minutes
    said_before = []

    def execute(runs):
        said_before.append([r.getMessage() for r in caplog.records])

    with caplog.at_level(logging.WARNING, logger="labkit.run.adaptive"):
        run_adaptive(d, store, execute, response="y")
    line = (
        "adaptive: at most 20 more run(s) (4 configuration(s) x max 8, 12 stored), about 2.0 h at "
        "the pilot's mean run time of 360.0 s, one run at a time"
    )
    assert said_before and said_before[0] == [line]
