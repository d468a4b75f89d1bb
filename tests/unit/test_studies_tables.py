"""Study 002's Tables 3 and 4 computed on runs (labkit.studies), checked against the paper's own numbers.

Leite et al. (seed 002_bcdbbfe3ff4c5134.txt), Table 3: Xen, 1 VM, 2 vCPUs, best time 134.78 s without
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
        for d in (-1.0, 1.0):  # two runs around each mean
            rows.append(
                {"vcpus": 2, "memory_mb": 256, "affinity": affinity, "count": count, "wall_time_s": mean + d}
            )
    return pd.DataFrame(rows)


def test_table3_best_affinity_and_difference_as_the_paper():
    t = affinity_best_times(runs()).set_index("count")
    assert t.loc[1, "best_affinity"] == "floating"
    assert t.loc[1, "best_time_s"] == pytest.approx(134.78)
    assert t.loc[1, "difference_pct"] == pytest.approx(27.89, abs=0.01)
    assert 2 not in t.index  # one affinity level only at count 2: no row


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


# -- notebook 01's second workload: Apache + ab (requests/s, higher is better) ----------------
def rates():
    """Leite et al. (seed 002), text under Figure 3 (Xen, Apache): with affinity the
    requests/s drop by 4.10 % from fewer to more VMs at 2 vCPUs, without it by 8.9 %. The runs
    below have means 1000 -> 959 (pinned) and 1100 -> 1002.1 (floating)."""
    rows = []
    for affinity, count, mean in (
        ("pinned", 1, 1000.0),
        ("pinned", 2, 959.0),
        ("floating", 1, 1100.0),
        ("floating", 2, 1002.1),
    ):
        for d in (-5.0, 5.0):
            rows.append(
                {
                    "vcpus": 2,
                    "memory_mb": 256,
                    "affinity": affinity,
                    "count": count,
                    "requests_per_s": mean + d,
                }
            )
    return pd.DataFrame(rows)


def test_table3_with_higher_is_better_picks_the_higher_mean():
    t = affinity_best_times(rates(), "requests_per_s", higher_is_better=True).set_index("count")
    assert t.loc[1, "best_affinity"] == "floating" and t.loc[1, "best_mean"] == pytest.approx(1100.0)
    assert t.loc[1, "other_mean"] == pytest.approx(1000.0)
    assert t.loc[1, "difference_pct"] == pytest.approx(100 * 100 / 1100)  # the other is 9.09 % lower
    assert "best_time_s" not in t.columns


def test_table4_drop_in_requests_as_figure_3_states_it():
    t = affinity_count_differences(rates(), "requests_per_s", column="difference").set_index("affinity")
    assert t.loc["pinned", "difference_pct"] == pytest.approx(-4.10)
    assert t.loc["floating", "difference_pct"] == pytest.approx(-8.9)
    assert t.loc["pinned", "difference"] == pytest.approx(-41.0)


def test_affinity_workloads_and_campaign_ids():
    from labkit.errors import ConfigError
    from labkit.studies import affinity_campaign_id, affinity_workload

    a = affinity_workload("apache")
    assert (a["workload"], a["response"], a["higher_is_better"], a["paper"]) == (
        "apache",
        "requests_per_s",
        True,
        "Apache",
    )
    assert a["params"]["path"] == "from_host"  # the load generator outside the VMs
    n = affinity_workload("nqueens", board_size=12)
    assert (n["response"], n["higher_is_better"], n["params"]) == ("wall_time_s", False, {"board": 12})
    assert affinity_campaign_id("apache", ["local"], "view") == "affinity-apache-local"
    assert affinity_campaign_id("apache", ["local"], "run") == "affinity-apache-local-new"
    assert affinity_campaign_id("apache", ["local", "lxd"], "view") == "affinity-apache-platforms"
    assert affinity_campaign_id("nqueens", ["docker"], "view") == "affinity-docker"  # unchanged
    assert affinity_campaign_id("nqueens", ["lxd", "libvirt"], "view") == "affinity-lxd-libvirt"
    assert affinity_campaign_id("nqueens", ["libvirt", "lxd"], "run") == "affinity-libvirt-lxd-new"
    with pytest.raises(ConfigError, match="workload='iperf3'.*nqueens, apache"):
        affinity_workload("iperf3")


def test_better_level_says_which_direction_is_better():
    from labkit.studies import affinity_better_level

    s = affinity_better_level(rates(), "requests_per_s", higher_is_better=True)
    assert s.startswith("requests/s, higher is better: the better CPU affinity level overall is floating")
    s = affinity_better_level(runs(), "wall_time_s", higher_is_better=False)
    assert "lower is better" in s and "is floating" in s


def test_apache_reference_is_tables_6_and_8():
    """Leite et al. (seed 002), Table 6 (Xen, Apache: vCPU 37.94 %, VMs 16.35 %, affinity
    12.34 %, ...) and Table 8 (KVM, Apache: VM 37.11 %, vCPU 19.06 %, memory 4.03 %, ...)."""
    from pathlib import Path

    from labkit.studies import affinity_reference

    ref = affinity_reference(
        Path(__file__).resolve().parents[2] / "data" / "reference" / "affinity_influence.csv",
        workload="Apache",
    )
    xen = ref[ref.source.str.endswith("Xen")].set_index("term").pct_variation
    kvm = ref[ref.source.str.endswith("KVM")].set_index("term").pct_variation
    # the paper's "VM e affinity" and "vCPU, VM e affinity" in our effects' factor order
    assert (xen["vcpus"], xen["count"], xen["affinity"], xen["affinity:count"]) == (37.94, 16.35, 12.34, 7.14)
    assert (kvm["count"], kvm["vcpus"], kvm["memory_mb"], kvm["vcpus:affinity:count"]) == (
        37.11,
        19.06,
        4.03,
        6.0,
    )
    assert kvm["affinity:count"] == 3.94 and xen["vcpus:affinity:count"] == 4.18
    assert len(xen) == 7 and len(kvm) == 6
