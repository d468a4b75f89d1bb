"""Issue 32 (a), the levels side: a real local campaign with runs_per_instance 3 whose boots' instances
get different CPU caps on purpose stores its levels right (instance, boot, run_seq, iteration) and
each instance's own counters in the samples table. The statistics on this store (a large instance
variance component, no false effect of a factor constant within instances) are the analysis side's
test, on the same fixture (``capped_levels_store``).
"""

from __future__ import annotations

import pandas as pd
import pytest

pytestmark = pytest.mark.root


def test_capped_boots_store_their_levels(capped_levels_store):
    st = capped_levels_store
    runs, tidy, samples = st.runs(), st.tidy(), st.samples()
    assert len(runs) == 12 and set(runs.status) == {"ok"}, runs[["status", "error"]]
    wall = tidy[tidy.metric == "wall_time_s"]
    # 2 configurations x 6 replicates, 3 runs per boot: 4 boots, 4 instances (count 1), each booted once
    assert wall.instance.nunique() == 4 and set(wall.boot) == {1}
    assert set(wall.groupby("instance").run_id.nunique()) == {3}
    assert set(wall.iteration) == {1, 2, 3} and len(wall) == 12 * 3
    assert tidy[tidy.metric == "solutions"].iteration.isna().all()
    # the runs of an instance are one boot of one configuration, run back to back
    for _, rows in runs.groupby(runs.metadata.map(lambda m: m["instances"][0]["name"])):
        assert rows.vcpus.nunique() == 1 and len({m["boot_group"] for m in rows.metadata}) == 1
        seqs = sorted(rows.run_seq)
        assert seqs == list(range(seqs[0], seqs[0] + 3))
        assert sorted(m["boot_position"] for m in rows.metadata) == [1, 2, 3]
    assert sorted(runs.run_seq) == list(range(1, 13))
    assert list(runs.sort_values("started").run_seq) == list(range(1, 13))
    # each boot's cap is in its cgroup and recorded with every run of the boot
    caps = runs.metadata.map(lambda m: m["instances"][0]["test_cpu_cap"])
    quotas = runs.metadata.map(lambda m: m["instances"][0]["test_cpu_quota"])
    for cap, quota in zip(caps, quotas):
        assert int(quota.split()[0]) == int(cap * 100_000)
    per_instance = pd.DataFrame(
        {"instance": runs.metadata.map(lambda m: m["instances"][0]["name"]), "cap": caps}
    )
    assert set(per_instance.groupby("instance").cap.nunique()) == {1}
    # the instance's own counters, sampled with its id, for every instance
    mine = samples[samples.instance.notna()]
    assert set(mine.instance) == set(wall.instance)
    assert {"instance_cpu_pct", "instance_throttled_periods", "instance_memory_mb"} <= set(mine.metric)
    for md in runs.metadata:
        assert md["telemetry"]["instance_stats"] == "local stats"
        assert md["quiet_check"]["measured"] is True and md["quiet_check"]["other_cpu_pct"] >= 0
