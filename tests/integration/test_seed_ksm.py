"""KSM as a factor (seed 000 credits kernel same-page merging for several results): a
SeedCampaign switches this host's KSM before each run's instances start, records it with the
run, and puts back the state it found. On the local backend, against a KSM directory of its
own (``ksm_root``) and against the kernel's /sys/kernel/mm/ksm."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from labkit.errors import ConfigError
from labkit.studies.seeds import KSM, SeedCampaign, run_ksm, scenario_design

pytestmark = pytest.mark.root
BENCH = {"scenarios": ["dedicated", "shared"]}


def campaign(tmp_path, cid, **kw):
    design = scenario_design(
        BENCH, os.cpu_count() or 1, replications=2, seed=3, name="ksm", ksm=["off", "on"]
    )
    return SeedCampaign(
        design,
        backend="local",
        workload="command",
        workload_params={"argv": ["true"]},
        campaign_id=cid,
        data_dir=tmp_path,
        progress=False,
        **kw,
    )


def recorded(store):
    runs = store.runs()
    return [(r.ksm, r.metadata["ksm"]["run"]) for r in runs.itertuples()]


def test_each_run_starts_with_its_ksm_level_and_the_state_found_is_put_back(tmp_path):
    root = tmp_path / "ksm"
    root.mkdir()
    (root / "run").write_text("0\n")
    store = campaign(tmp_path, "ksm-fake", ksm_root=root).run()
    seen = recorded(store)
    assert len(seen) == 8 and set(store.runs().status) == {"ok"}
    assert {lv for lv, _ in seen} == {"off", "on"}
    assert all(value == {"off": 2, "on": 1}[lv] for lv, value in seen)  # off unmerges (2)
    assert (root / "run").read_text().strip() == "0"  # what it found
    assert all("ksm_end" in m and m["ksm_end"]["run"] == m["ksm"]["run"] for m in store.runs().metadata)
    table = run_ksm(tmp_path, {("local", "command"): "ksm-fake"})  # what notebook 03 reads
    assert sorted(table.ksm_run) == [1, 1, 1, 1, 2, 2, 2, 2]
    assert list(table.columns[-2:]) == ["ksm_pages_sharing", "ksm_pages_sharing_end"]


def test_no_ksm_here_fails_before_any_run(tmp_path):
    with pytest.raises(ConfigError, match="no KSM"):
        campaign(tmp_path, "ksm-none", ksm_root=tmp_path / "absent").run()
    assert not (tmp_path / "ksm-none" / "store.sqlite").exists()


@pytest.mark.skipif(not (KSM / "run").exists() or os.geteuid() != 0, reason="needs the kernel's KSM and root")
def test_the_kernels_ksm_is_switched_per_run_and_restored(tmp_path):
    before = Path(KSM / "run").read_text().strip()
    store = campaign(tmp_path, "ksm-real").run()
    seen = recorded(store)
    assert len(seen) == 8 and all(value == {"off": 2, "on": 1}[lv] for lv, value in seen)
    assert Path(KSM / "run").read_text().strip() == before
