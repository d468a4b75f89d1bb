"""Manipulation checks on the local backend (issue 41, item 4): every run records whether its
treatment took, read where it acts: the CPUs and the memory limit inside the instance, the pages
KSM merged during the run. A KSM "on" run of a workload whose memory is not mergeable is flagged
``treatment not applied``; STREAM with its arrays marked mergeable gets pages merged."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from labkit.core.instance import InstanceSpec
from labkit.run.campaign import Campaign
from labkit.studies.seeds import KSM, LabelledDesign, SeedCampaign

pytestmark = pytest.mark.root


def run(tmp_path, cid, factors, **kw):
    design = {"name": cid, "factors": factors, "replications": 1, "seed": 5, "telemetry": "off"}
    kw.setdefault("workload", "command")
    kw.setdefault("workload_params", {"argv": ["true"]})
    return Campaign(design, backend="local", campaign_id=cid, data_dir=tmp_path, progress=False,
                    defaults=InstanceSpec(vcpus=1, memory_mb=256), **kw).run()


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
        if r.affinity == "pinned":   # the one CPU the backend chose, seen from inside
            assert aff["observed"] == r.metadata["instances"][0]["host_cpu_ids"] and len(aff["observed"]) == 1
        else:
            assert aff["observed"] == host
        assert mem["verified"] is True and mem["observed"] == r.memory_mb and "memory" in mem["how"]


def test_design_key_turns_the_checks_off(tmp_path):
    design = {"name": "off", "factors": {"memory_mb": [192, 256]}, "replications": 1, "seed": 5,
              "telemetry": "off", "treatment_checks": False}
    store = Campaign(design, backend="local", workload="command", workload_params={"argv": ["true"]},
                     campaign_id="treat-off", data_dir=tmp_path, progress=False).run()
    assert all("treatments" not in m for m in store.runs().metadata)


needs_ksm = pytest.mark.skipif(not (KSM / "run").exists() or os.geteuid() != 0,
                               reason="needs the kernel's KSM (/sys/kernel/mm/ksm) and root")


def ksm_campaign(tmp_path, cid, mergeable):
    # ksmd fast enough to merge within a short run: 1000 pages every 10 ms (put back at the end)
    design = LabelledDesign.with_labels({"name": cid, "factors": {"ksm": ["off", "on"]}, "replications": 1,
                                         "seed": 11, "telemetry": "off"}, {"ksm": {"off": {}, "on": {}}})
    return SeedCampaign(design, backend="local", workload="stream",
                        workload_params={"array_mb": 4, "ntimes": 1500, "threads": 1, "mergeable": mergeable},
                        campaign_id=cid, data_dir=tmp_path, progress=False,
                        defaults=InstanceSpec(vcpus=1, memory_mb=256),
                        ksm_scan={"pages_to_scan": 1000, "sleep_millisecs": 10}).run()


@needs_ksm
def test_ksm_on_with_memory_not_mergeable_is_flagged_and_mergeable_stream_merges(tmp_path):
    before = {k: Path(KSM / k).read_text().strip() for k in ("run", "pages_to_scan", "sleep_millisecs")}
    plain = ksm_campaign(tmp_path, "treat-ksm-plain", False).runs()
    marked = ksm_campaign(tmp_path, "treat-ksm-marked", True).runs()
    assert {k: Path(KSM / k).read_text().strip() for k in before} == before   # put back
    for runs in (plain, marked):
        assert set(runs.status) == {"ok"} and sorted(runs.ksm) == ["off", "on"]
        off = runs[runs.ksm == "off"].iloc[0].metadata
        assert off["treatments"]["ksm"]["verified"] is True and off["treatments"]["ksm"]["observed"]["merged"] == 0
    on = plain[plain.ksm == "on"].iloc[0].metadata
    assert on["treatments"]["ksm"]["verified"] is False, on["treatments"]["ksm"]
    assert on["treatment_failed"] == ["ksm"]
    assert on["treatments"]["ksm"]["observed"]["merged"] == 0
    on = marked[marked.ksm == "on"].iloc[0].metadata
    ksm = on["treatments"]["ksm"]
    assert ksm["verified"] is True and ksm["observed"]["merged"] > 0, ksm
    assert ksm["observed"]["attributed"] is True and "ksm_merging_pages" in ksm["how"]
    assert on["treatment_failed"] == []
