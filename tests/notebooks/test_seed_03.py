"""Notebook 03 (seed 000: dedicated, shared and overcommitted deployments) with papermill.

View mode reads the committed data/deployments-* campaigns (local and lxd on the 2-core test
machine); run mode runs tiny campaigns on ``local`` only (native, needs root) and checks that
every scenario ran with its vCPUs and instance count and that KSM was recorded per run.
"""
import pytest

from labkit.store import Store, load_results

from .conftest import images, markdown_outputs, outputs_text

NB = "03_deployment_scenarios.ipynb"


def test_view_committed_results_sets_the_reports_percentages_beside_ours(run_notebook, tmp_path):
    nb = run_notebook(NB, mode="view", data_dir=None)
    text = outputs_text(nb)
    assert "platforms: local, lxd" in text and "skipped libvirt" in text
    assert "ksm_on" in text                                     # KSM state per run, shown
    md = markdown_outputs(nb)
    assert "Blackscholes LXC vs native (2 threads):** the report +2.0 %, labkit (cpu, dedicated)" in md
    assert "Raytrace KVM overhead" in md and "no comparable labkit measurement" in md
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"03_paper_vs_labkit.png", "03_cpu_events_per_s.svg", "03_network_tcp_mbit_per_s.png"} <= figs
    assert images(nb) == len([f for f in figs if f.endswith(".png")])


@pytest.mark.root
def test_run_tiny_on_local_then_view(run_notebook, tmp_path):
    params = dict(platforms=["local"], benchmarks=["linpack", "cpu", "network"], replications=1,
                  linpack_n=200, cpu_time_s=0.5, iperf_duration_s=0.5, campaign_id="dep", seed=3,
                  host_cpus=2)
    nb = run_notebook(NB, mode="run", **params)
    assert "platforms: local" in outputs_text(nb)
    tidy = load_results(tmp_path / "data", "dep-cpu-local")
    assert set(tidy.status) == {"ok"}, tidy.error.dropna().tolist()
    with Store(tmp_path / "data" / "dep-cpu-local" / "store.sqlite", readonly=True) as st:
        runs = st.runs()
    got = {r.scenario: (r.vcpus, r.count) for r in runs.itertuples()}
    assert got == {"dedicated": (2, 1), "shared": (1, 2), "overcommitted": (1, 3)}   # seed 000's scenarios, 2 CPUs
    assert all("run" in m["ksm"] for m in runs.metadata)
    net = load_results(tmp_path / "data", "dep-network-local")
    assert set(net.scenario) == {"shared", "overcommitted"} and set(net.status) == {"ok"}
    nb2 = run_notebook(NB, mode="view", **params)
    assert "platforms: local" in outputs_text(nb2)
