"""Manipulation checks on the local backend (issue 41, item 4): every run records whether its
treatment took, read where it acts: the CPUs and the memory limit inside the instance, the pages
KSM merged during the run, the qdisc on a shaped link and the rate its traffic reached. A KSM
"on" run of a workload whose memory is not mergeable is flagged ``treatment not applied``; STREAM
with its arrays marked mergeable gets pages merged; a link whose tbf was removed behind labkit's
back is flagged, with the traffic that then beat its rate."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from labkit.core.instance import InstanceSpec
from labkit.core.network_factors import parse_link
from labkit.run.campaign import Campaign
from labkit.run.hooks import RunHook
from labkit.run.treatments import LINK_QDISC_TOLERANCE
from labkit.studies.seeds import KSM, LabelledDesign, SeedCampaign

pytestmark = pytest.mark.root


def run(tmp_path, cid, factors, **kw):
    design = {"name": cid, "factors": factors, "replications": 1, "seed": 5, "telemetry": "off"}
    kw.setdefault("workload", "command")
    kw.setdefault("workload_params", {"argv": ["true"]})
    kw.setdefault("defaults", InstanceSpec(vcpus=1, memory_mb=256))
    return Campaign(design, backend="local", campaign_id=cid, data_dir=tmp_path, progress=False, **kw).run()


def test_pinned_cpus_and_memory_limits_are_read_inside_the_instance(tmp_path):
    store = run(tmp_path, "treat-inside", {"affinity": ["pinned", "floating"], "memory_mb": [192, 256]})
    runs = store.runs()
    assert len(runs) == 4 and set(runs.status) == {"ok"}
    host = sorted(os.sched_getaffinity(0))
    for r in runs.itertuples():
        t = r.metadata["treatments"]
        assert set(t) == {"affinity", "memory_mb"}
        assert r.metadata["treatment_failed"] == []
        aff, mem = t["affinity"], t["memory_mb"]
        assert aff["verified"] is True and "Cpus_allowed_list" in aff["how"]
        if r.affinity == "pinned":  # the one CPU the backend chose, seen from inside
            assert aff["observed"] == r.metadata["instances"][0]["host_cpu_ids"] and len(aff["observed"]) == 1
        else:
            assert aff["observed"] == host
        assert mem["verified"] is True and mem["observed"] == r.memory_mb and "memory" in mem["how"]


def test_design_key_turns_the_checks_off(tmp_path):
    design = {
        "name": "off",
        "factors": {"memory_mb": [192, 256]},
        "replications": 1,
        "seed": 5,
        "telemetry": "off",
        "treatment_checks": False,
    }
    store = Campaign(
        design,
        backend="local",
        workload="command",
        workload_params={"argv": ["true"]},
        campaign_id="treat-off",
        data_dir=tmp_path,
        progress=False,
    ).run()
    assert all("treatments" not in m for m in store.runs().metadata)


needs_ksm = pytest.mark.skipif(
    not (KSM / "run").exists() or os.geteuid() != 0,
    reason="needs the kernel's KSM (/sys/kernel/mm/ksm) and root",
)


def ksm_campaign(tmp_path, cid, mergeable):
    # the timed passes rewrite every page, so a marked STREAM waits until KSM merged half its arrays
    # (ksm_settle_s, at most 60 s); ksmd scans 50 pages every 20 ms (put back at the end), so the
    # merged count ramps up over about a second and the checks' 0.2-s polls see it on a loaded machine
    design = LabelledDesign.with_labels(
        {"name": cid, "factors": {"ksm": ["off", "on"]}, "replications": 1, "seed": 11, "telemetry": "off"},
        {"ksm": {"off": {}, "on": {}}},
    )
    return SeedCampaign(
        design,
        backend="local",
        workload="stream",
        workload_params={
            "array_mb": 4,
            "ntimes": 1500,
            "threads": 1,
            "mergeable": mergeable,
            **({"ksm_settle_s": 60} if mergeable else {}),
        },
        campaign_id=cid,
        data_dir=tmp_path,
        progress=False,
        defaults=InstanceSpec(vcpus=1, memory_mb=256),
        ksm_scan={"pages_to_scan": 50, "sleep_millisecs": 20},
    ).run()


@needs_ksm
def test_ksm_on_with_memory_not_mergeable_is_flagged_and_mergeable_stream_merges(tmp_path):
    before = {k: Path(KSM / k).read_text().strip() for k in ("run", "pages_to_scan", "sleep_millisecs")}
    plain = ksm_campaign(tmp_path, "treat-ksm-plain", False).runs()
    marked = ksm_campaign(tmp_path, "treat-ksm-marked", True).runs()
    assert {k: Path(KSM / k).read_text().strip() for k in before} == before  # put back
    for runs in (plain, marked):
        assert set(runs.status) == {"ok"} and sorted(runs.ksm) == ["off", "on"]
        off = runs[runs.ksm == "off"].iloc[0].metadata
        assert (
            off["treatments"]["ksm"]["verified"] is True
            and off["treatments"]["ksm"]["observed"]["merged"] == 0
        )
    on = plain[plain.ksm == "on"].iloc[0].metadata
    assert on["treatments"]["ksm"]["verified"] is False, on["treatments"]["ksm"]
    assert on["treatment_failed"] == ["ksm"]
    assert on["treatments"]["ksm"]["observed"]["merged"] == 0
    on = marked[marked.ksm == "on"].iloc[0].metadata
    ksm = on["treatments"]["ksm"]
    assert ksm["verified"] is True and ksm["observed"]["merged"] > 0, ksm
    assert ksm["observed"]["attributed"] is True and "ksm_merging_pages" in ksm["how"]
    assert on["treatment_failed"] == []


needs_link_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("ip", "tc", "iperf3")),
    reason="a shaped link needs ip, tc and iperf3 on this host",
)
#: tbf's own bound: in any window of t seconds it lets out at most rate * t + its burst (the
#: 64 KiB labkit.core.network_factors.shape_commands gives it at these rates)
TBF_BURST_BYTES = 65536


def link_campaign(tmp_path, cid, levels, hooks=()):
    """A 2-instance run per ``link`` level with iperf3 TCP from inst1 into inst0 over the run's
    private network (its bridge and veths only, made and removed by the campaign)."""
    return run(
        tmp_path,
        cid,
        {"link": levels},
        workload="iperf3",
        hooks=list(hooks),
        workload_params={"path": "instances", "protocol": "tcp", "duration_s": 2},
        defaults=InstanceSpec(vcpus=1, memory_mb=256, count=2),
    )


@needs_link_tools
@pytest.mark.network
def test_a_shaped_link_is_read_back_and_its_traffic_held_to_the_rate(tmp_path):
    store = link_campaign(tmp_path, "treat-link", ["50mbit/", "100mbit/"])
    runs = store.runs()
    assert set(runs.status) == {"ok"} and sorted(runs.link) == ["100mbit/", "50mbit/"]
    tidy = store.tidy()
    for r in runs.itertuples():
        rec = r.metadata["treatments"]["link"]
        rate = parse_link(r.link).rate_bit
        assert rec["verified"] is True, rec
        assert r.metadata["treatment_failed"] == []
        ob = rec["observed"]
        assert ob["qdisc"] == "tbf" and abs(ob["qdisc_rate_bit_per_s"] - rate) <= LINK_QDISC_TOLERANCE * rate
        devices = r.metadata["network"]["device"]
        assert set(ob["devices"]) == {f"{devices}h0", f"{devices}h1"}  # each instance's host end
        # the traffic into inst0 (the iperf3 server): iperf3 saw it, the link carried it, never
        # above what tbf lets through (the rate over the window plus one burst)
        server = ob["devices"][f"{devices}h0"]
        goodput = tidy[(tidy.run_id == r.run_id) & (tidy.metric == "tcp_mbit_per_s")].value.iloc[0] * 1e6
        assert server["bytes"] > 0 and ob["peak_bit_per_s"] == server["peak_bit_per_s"]
        assert server["peak_bit_per_s"] <= rate + 8 * TBF_BURST_BYTES / server["window_s"], server
        assert server["mean_bit_per_s"] <= rate and goodput <= rate
        assert server["peak_bit_per_s"] >= 0.9 * goodput  # the counter saw what iperf3 measured (+ headers)


class DropShaping(RunHook):
    """What a tc command run behind labkit's back does: removes the tbf of inst0's link once the
    run's instances are made, before the workload starts."""

    def instances_ready(self, ctx):
        if ctx.run.levels["link"] != "none":
            subprocess.run(["tc", "qdisc", "del", "dev", ctx.instances[0].host_device, "root"], check=True)


@needs_link_tools
@pytest.mark.network
def test_a_link_whose_shaping_is_gone_is_flagged_and_an_unshaped_level_is_checked(tmp_path):
    store = link_campaign(tmp_path, "treat-link-gone", ["none", "50mbit/"], hooks=[DropShaping()])
    runs = store.runs()
    assert set(runs.status) == {"ok"}
    gone = runs[runs.link == "50mbit/"].iloc[0].metadata
    rec = gone["treatments"]["link"]
    assert rec["verified"] is False and gone["treatment_failed"] == ["link"], rec
    inst0 = gone["network"]["device"] + "h0"
    assert (
        f"{inst0}: no tbf qdisc (found noqueue)" in rec["how"]
        and rec["observed"]["qdisc_rate_bit_per_s"] is None
    )
    # with nothing shaping it, iperf3's traffic into inst0 beat the level's rate, and the check saw it
    assert rec["observed"]["devices"][inst0]["peak_bit_per_s"] > 50e6 and f"{inst0}: traffic at" in rec["how"]
    # unshaped on purpose: no shaping qdisc, as the level asks
    none = runs[runs.link == "none"].iloc[0].metadata
    assert none["treatments"]["link"]["verified"] is True and none["treatment_failed"] == []
    assert none["treatments"]["link"]["observed"]["qdisc"] == "noqueue"
