"""The done-when of issue 32 on a real store: a campaign with ``runs_per_instance: 3`` on the local
backend whose instances get different CPU caps on purpose (:class:`tests.support.levels.CapPerBoot`
caps each boot's instance cgroups once they exist: the first boot of every configuration at 20 % of
a CPU, the second at 100 %, so the caps are orthogonal to the factors), and a factor that changes
nothing (``timeout_s``). The analysis must report a
large instance variance component and must not call the factor significant, where an ordinary
least-squares fit over the runs is more confident (a smaller standard error, a smaller p-value)
than the data allow. The synthetic version with known truth and R references is
tests/unit/test_report_levels.py and test_stats_levels.py.
"""

from __future__ import annotations

import pytest

from tests.support.levels import CapPerBoot

pytestmark = pytest.mark.root

#: 6 replicates per configuration in boots of 3: 2 boots per configuration, 8 instances in all. The
#: boards take long enough (0.1-1 s on one CPU) for a CPU cap to bite: CFS enforces a quota per
#: 100 ms period, so a solve shorter than the quota runs at full speed whatever the cap
DESIGN = {
    "name": "capped",
    "factors": {"timeout_s": [600, 601], "board": [13, 14]},
    "replications": 6,
    "seed": 7,
    "runs_per_instance": 3,
}


def test_capped_instances_are_the_error_term(tmp_path):
    from labkit.report import analyze
    from labkit.run.campaign import Campaign
    from labkit.stats import factorial_effects

    st = Campaign(
        DESIGN,
        backend="local",
        workload="nqueens",
        data_dir=tmp_path,
        campaign_id="capped-levels",
        hooks=[CapPerBoot((0.2, 1.0), balanced=True)],
        progress=False,
    ).run()
    caps = {m["instances"][0]["name"]: m["instances"][0]["test_cpu_cap"] for m in st.runs().metadata}
    assert len(caps) == 8 and sorted(caps.values()) == [0.2] * 4 + [1.0] * 4  # 8 boots (4 configurations x 2)
    a = analyze(tmp_path, "capped-levels")
    assert a.level_design.runs_per_instance == 3 and "instance" in a.level_design.random
    share = a.levels.variance.set_index("component")["pct"]
    assert share["instance"] > 50, share
    fx = a.effects.set_index("term")
    # the null factor: not significant at a strict level (a 5 % false alarm rate would make the test
    # fail once in twenty runs; at 0.001 it is once in a thousand)
    assert fx.loc["timeout_s", "p"] > 0.001
    assert "Error term: the variation between instances" in str(a.conclusions)
    ols = factorial_effects(a.runs, factors=a.factors, response=a.response).set_index("term")
    assert ols.loc["timeout_s", "se"] < fx.loc["timeout_s", "se"]
    assert ols.loc["timeout_s", "p"] < fx.loc["timeout_s", "p"]
