"""Study 002's Tables 3 and 4 computed on runs (labkit.studies), checked against the paper's own numbers.

Leite et al. 2017 (seed 002_bcdbbfe3ff4c5134.txt), Table 3: Xen, 1 VM, 2 vCPUs, best time 134.78 s without
affinity and 27.89 % difference, so the time with affinity is 134.78 x 1.2789 = 172.37 s; Table 4: from 1 to
2 VMs (2 vCPUs, no affinity) +11.65 s = 8.64 % of 134.78 s. The runs below have those means.
"""
import pandas as pd
import pytest

from labkit.design import Design
from labkit.studies import affinity_best_times, affinity_count_differences, affinity_design


def runs():
    rows = []
    for affinity, count, mean in (("floating", 1, 134.78), ("pinned", 1, 172.37), ("floating", 2, 146.43)):
        for d in (-1.0, 1.0):            # two runs around each mean
            rows.append({"vcpus": 2, "memory_mb": 256, "affinity": affinity, "count": count,
                         "wall_time_s": mean + d})
    return pd.DataFrame(rows)


def test_table3_best_affinity_and_difference_as_the_paper():
    t = affinity_best_times(runs()).set_index("count")
    assert t.loc[1, "best_affinity"] == "floating"
    assert t.loc[1, "best_time_s"] == pytest.approx(134.78)
    assert t.loc[1, "difference_pct"] == pytest.approx(27.89, abs=0.01)
    assert 2 not in t.index                 # one affinity level only at count 2: no row


def test_table4_difference_from_fewest_to_most_instances():
    t = affinity_count_differences(runs()).set_index("affinity")
    assert t.loc["floating", "counts"] == "1 x 2"
    assert t.loc["floating", "difference_s"] == pytest.approx(11.65)
    assert t.loc["floating", "difference_pct"] == pytest.approx(8.64, abs=0.01)
    assert "pinned" not in t.index


def test_affinity_design_with_two_platforms_is_platform_by_2x4():
    d = affinity_design(2, 4096, replications=1, platforms=["local", "lxd"])
    assert isinstance(d, Design) and d.factor_names[0] == "platform" and len(d.plan()) == 32
    assert "platform" not in affinity_design(2, 4096, platforms=["local"]).factor_names
