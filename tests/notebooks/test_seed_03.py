"""Notebook 03 (seed 000: dedicated, shared and overcommitted deployments) with papermill.

View mode reads the committed data/deployments-* campaigns: one per benchmark with the platforms as
a factor, all runs of a benchmark in one random order (local, lxd and, for cpu and network, libvirt
under QEMU TCG, on the 2-core test machine; run from clean commit 7bb160a), and data/deployments-ksm
(KSM off/on on mergeable STREAM, native, one campaign). Run mode runs tiny campaigns
in the new layout, one per benchmark with the platforms as a factor, on ``local`` (native, needs
root) and on ``local`` + ``lxd``, and checks that every scenario ran with its vCPUs and instance
count, that the platforms share one randomized plan, and that the KSM campaign (mergeable
STREAM, KSM off/on as a factor) records the treatment check of every run.
"""
import json
import sqlite3
from pathlib import Path

import pytest

from labkit.store import Store, load_results

from .conftest import REPO, images, markdown_outputs, outputs_text

NB = "03_deployment_scenarios.ipynb"


def test_view_committed_results_sets_the_reports_percentages_beside_ours(run_notebook, tmp_path):
    nb = run_notebook(NB, mode="view", data_dir=None)
    text = outputs_text(nb)
    assert "platforms: local, lxd, libvirt" in text and "skipped" not in text
    assert "libvirt (TCG)" in text                               # KVM here is emulated, and says so
    assert "ksm_on" in text                                     # KSM state per run, shown
    # the committed campaigns are one per benchmark, platforms randomized together
    assert "cpu      on local, lxd, libvirt: one campaign, platforms randomized together" in text
    assert "linpack  on local, lxd: one campaign, platforms randomized together" in text
    md = markdown_outputs(nb)
    assert "Blackscholes LXC vs native (2 threads) (ours: cpu events_per_s, dedicated): " in md
    assert "verdict: not comparable" in md                      # the KVM rows: QEMU TCG here
    assert "platforms not randomized together" not in md and "Not randomized together:" not in md
    assert "Platforms randomized together (one campaign each, all runs in one random order)" in md
    assert "Raytrace KVM overhead" in md and "not measured: Raytrace (PARSEC) is not bundled" in md
    assert "no comparable labkit measurement" in text
    assert "KVM (libvirt) has no result here" not in md and "ran under TCG emulation" in md
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"03_paper_vs_labkit.png", "03_cpu_events_per_s.svg", "03_network_tcp_mbit_per_s.png"} <= figs
    assert images(nb) == len([f for f in figs if f.endswith(".png")])


def test_view_committed_ksm_campaigns(run_notebook, tmp_path):
    """The committed deployments-ksm campaign (native, KSM off/on crossed with the scenarios on
    mergeable STREAM that waits for KSM to merge before its timed passes), viewed with the
    notebook's defaults: the manipulation check it prints agrees with the treatment check stored
    with each run, KSM is a term of the ANOVA, and the KSM figures are written."""
    with sqlite3.connect(f"file:{REPO / 'data' / 'deployments-ksm' / 'store.sqlite'}?mode=ro", uri=True) as con:
        rows = con.execute("SELECT levels, metadata FROM runs WHERE status = 'ok'").fetchall()
    on = [json.loads(m)["treatments"]["ksm"] for lv, m in rows if json.loads(lv)["ksm"] == "on"]
    assert on, "no KSM on run in data/deployments-ksm"
    verified = [t for t in on if t["verified"] is True]
    most = max(t["observed"]["merged"] for t in on)
    nb = run_notebook(NB, mode="view", data_dir=None)
    text, md = outputs_text(nb), markdown_outputs(nb)
    assert "ksm      on local: one campaign, platforms randomized together" in text
    assert "level:ksm" in text                                    # the ANOVA's scenario x KSM term
    check = f"local: KSM on merged up to {most} pages in {len(verified)} of {len(on)} runs."
    assert len(verified) == len(on) and check in md, check
    assert "- **Did KSM take?** " + check in md                       # and in the conclusions
    assert "KSM on vs off, local, shared, ksm STREAM triad (MB/s)" in md
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"03_ksm_triad_mb_per_s.png", "03_ksm_copy_mb_per_s.png"} <= figs
    assert not any("deployments-ksm" in f for f in figs)


@pytest.mark.root
def test_run_tiny_on_local_then_view(run_notebook, tmp_path):
    params = dict(platforms=["local"], benchmarks=["linpack", "cpu", "network"], replications=1,
                  linpack_n=200, cpu_time_s=0.5, iperf_duration_s=0.5, campaign_id="dep", seed=3,
                  host_cpus=2, ksm_levels=None)
    nb = run_notebook(NB, mode="run", **params)
    assert "platforms: local" in outputs_text(nb)
    tidy = load_results(tmp_path / "data", "dep-cpu")               # one campaign per benchmark
    assert set(tidy.status) == {"ok"}, tidy.error.dropna().tolist()
    assert not (tmp_path / "data" / "dep-cpu-local").exists()
    with Store(tmp_path / "data" / "dep-cpu" / "store.sqlite", readonly=True) as st:
        runs = st.runs()
    got = {r.scenario: (r.vcpus, r.count) for r in runs.itertuples()}
    assert got == {"dedicated": (2, 1), "shared": (1, 2), "overcommitted": (1, 3)}   # seed 000's scenarios, 2 CPUs
    assert all("run" in m["ksm"] for m in runs.metadata)
    net = load_results(tmp_path / "data", "dep-network")
    assert set(net.scenario) == {"shared", "overcommitted"} and set(net.status) == {"ok"}
    nb2 = run_notebook(NB, mode="view", **params)
    assert "platforms: local" in outputs_text(nb2)
    md = markdown_outputs(nb2)
    assert "platforms not randomized together" not in md and "Not randomized together:" not in md


@pytest.mark.root
@pytest.mark.lxd
def test_run_tiny_on_local_and_lxd_randomizes_the_platforms_together(run_notebook, tmp_path):
    """platforms=[local, lxd]: one campaign per benchmark whose platform factor is crossed with the
    scenarios, both platforms' runs interleaved in one plan; the claims compare them within it."""
    from labkit.backends.testing import available
    ok, why = available("lxd")
    if not ok:
        pytest.skip(f"lxd unavailable: {why}")
    params = dict(platforms=["local", "lxd"], benchmarks=["cpu"], replications=1, cpu_time_s=0.5,
                  campaign_id="depl", seed=3, host_cpus=2, ksm_levels=None)
    nb = run_notebook(NB, mode="run", **params)
    text = outputs_text(nb)
    assert "cpu      on local, lxd: one campaign, platforms randomized together" in text
    with Store(tmp_path / "data" / "depl-cpu" / "store.sqlite", readonly=True) as st:
        runs, meta = st.runs(), st.meta()
    assert meta["design"]["factors"]["platform"] == ["local", "lxd"]
    assert set(runs.status) == {"ok"}, runs.error.dropna().tolist()
    assert sorted((r.platform, r.scenario) for r in runs.itertuples()) == sorted(
        (p, s) for p in ("local", "lxd") for s in ("dedicated", "shared", "overcommitted"))
    order = list(runs.sort_values("run_order").platform)
    assert order != sorted(order) and order != sorted(order, reverse=True)   # interleaved, not one after the other
    md = markdown_outputs(nb)
    assert "Platforms randomized together (one campaign each, all runs in one random order): cpu (local, lxd)" in md
    assert "platforms not randomized together" not in md and "Not randomized together:" not in md


@pytest.mark.root
def test_ksm_campaign_is_switched_per_run_checked_analysed_and_put_back(run_notebook, tmp_path):
    """ksm_levels=["off", "on"]: one <campaign_id>-ksm campaign of mergeable STREAM, KSM crossed with
    the scenarios, switched on this host before each run (off unmerges: 2), recorded as found, its
    treatment check stored with every run and said in the notebook, in the ANOVA and the
    conclusions; the host's KSM and ksmd's scan rate are as they were afterwards."""
    root = Path("/sys/kernel/mm/ksm")
    if not (root / "run").exists():
        pytest.skip("this kernel has no KSM")
    before = {f: (root / f).read_text().strip() for f in ("run", "pages_to_scan", "sleep_millisecs")}
    params = dict(platforms=["local"], benchmarks=[], replications=2, ksm_platforms=["local"], ksm_array_mb=8,
                  ksm_ntimes=5, campaign_id="depk", seed=3, host_cpus=2, ksm_levels=["off", "on"])
    nb = run_notebook(NB, mode="run", **params)
    assert {f: (root / f).read_text().strip() for f in before} == before
    with Store(tmp_path / "data" / "depk-ksm" / "store.sqlite", readonly=True) as st:
        runs, meta = st.runs(), st.meta()
    assert meta["workload"]["name"] == "stream" and meta["workload"]["params"]["mergeable"] is True
    assert len(runs) == 12 and set(runs.status) == {"ok"}, runs.error.dropna().tolist()
    assert all(m["ksm"]["run"] == {"off": 2, "on": 1}[k] for k, m in zip(runs.ksm, runs.metadata))
    assert all(m["treatments"]["ksm"]["level"] == k for k, m in zip(runs.ksm, runs.metadata))
    assert all(m["ksm_scan"] == {"pages_to_scan": 100000, "sleep_millisecs": 0} for m in runs.metadata)
    text, md = outputs_text(nb), markdown_outputs(nb)
    assert "level:ksm" in text                                    # the ANOVA's scenario x KSM term
    assert md.count("KSM on vs off, local") == 6                  # per scenario: triad and copy
    on = [m["treatments"]["ksm"]["verified"] for k, m in zip(runs.ksm, runs.metadata) if k == "on"]
    assert f"in {sum(v is True for v in on)} of 6 runs" in md and "Did KSM take?" in md


@pytest.mark.root
def test_run_the_papers_threads_sweep_tiny_on_local(run_notebook, tmp_path):
    """threads_levels="paper": seed 000's 1..8 threads (section 3.1, data/reference/sweeps.csv) cut to
    this host's 2 CPUs, crossed with the scenarios; the notebook says which levels it left out."""
    params = dict(platforms=["local"], benchmarks=["cpu"], replications=1, cpu_time_s=0.5, campaign_id="dept",
                  seed=3, host_cpus=2, threads_levels="paper", ksm_levels=None)
    nb = run_notebook(NB, mode="run", **params)
    text = outputs_text(nb)
    assert "threads: 1, 2 threads here; the paper: 1, 2, 3, 4, 5, 6, 7, 8 (seed 000, section 3.1" in text
    assert "not run here: 3, 4, 5, 6, 7, 8 (above what this host's CPUs allows, 2)" in text
    with Store(tmp_path / "data" / "dept-cpu" / "store.sqlite", readonly=True) as st:
        runs = st.runs()
    assert set(runs.status) == {"ok"}, runs.error.dropna().tolist()
    got = sorted((r.scenario, r.threads, r.vcpus, r.count) for r in runs.itertuples())
    assert got == [("dedicated", 1, 2, 1), ("dedicated", 2, 2, 1), ("overcommitted", 1, 1, 3),
                   ("overcommitted", 2, 1, 3), ("shared", 1, 1, 2), ("shared", 2, 1, 2)]
