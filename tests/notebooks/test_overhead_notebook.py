"""Notebook 02 (virtualization overhead, after study 004) executed with papermill on tiny parameters.

Runs on ``local`` (native, needs root) and on ``docker`` when it is usable; the notebook itself
filters the platforms with labkit.testing.available and prints why one is skipped.
"""
import pytest

from labkit.store import load_results
from labkit.testing import available

from .conftest import outputs_text

NB = "02_virtualization_overhead.ipynb"
TINY = dict(backends=["local", "docker"], replications=2, vcpus=2, memory_mb=512,
            cpu_time_s=1, cpu_max_prime=5000, stream_array_mb=16, stream_ntimes=2,
            fio_size_mb=8, fio_runtime_s=1, fio_patterns="randread", fio_block_sizes=["4k", "64k"],
            iperf_duration_s=1, apache_requests=300, apache_concurrency_levels=[2, 4],
            campaign_id="ovh", seed=11)
BENCHES = ["cpu", "memory", "disk", "network", "application"]


@pytest.mark.root
def test_overhead_notebook_runs_then_views(run_notebook, tmp_path):
    docker_ok, _ = available("docker")
    platforms = ["local"] + (["docker"] if docker_ok else [])
    nb = run_notebook(NB, mode="run", **TINY)
    text = outputs_text(nb)
    assert "platforms: " + ", ".join(platforms) in text
    if not docker_ok:
        assert "skipped docker" in text
    for platform in platforms:
        for bench in BENCHES:
            tidy = load_results(tmp_path / "data", f"ovh-{bench}-{platform}")
            assert tidy.run_id.nunique() == 2 * 2, (platform, bench)       # 2 levels x 2 replications
            assert set(tidy.status) == {"ok"}, tidy.error.dropna().tolist()
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    for stem in ("02_cpu_events_per_s", "02_memory_triad_mb_per_s", "02_disk_randread_iops",
                 "02_network_tcp_mbit_per_s", "02_network_udp_mbit_per_s",
                 "02_application_requests_per_s"):
        assert f"{stem}.png" in figs and f"{stem}.svg" in figs, stem
    assert "sysbench" in text and "iperf3" in text        # tool versions from the run metadata
    if docker_ok:
        for expected in ("ratio", "ci_high", "eta_sq", "group_a", "p_adj", "normal"):
            assert expected in text, expected
        assert "02_overhead.png" in figs
    # view mode: the stored campaigns, nothing provisioned
    nb2 = run_notebook(NB, mode="view", **TINY)
    assert "platforms: " + ", ".join(platforms) in outputs_text(nb2)
    assert load_results(tmp_path / "data", "ovh-cpu-local").run_id.nunique() == 4


def test_view_mode_without_results_says_why(run_notebook):
    import papermill as pm
    with pytest.raises(pm.PapermillExecutionError, match="no platform"):
        run_notebook(NB, mode="view", **TINY)


def test_view_mode_on_committed_results_labels_tcg_and_shows_every_figure(run_notebook, tmp_path):
    """Binder's path for notebook 02: the committed overhead campaigns, read-only, every figure shown."""
    from .conftest import REPO, images
    nb = run_notebook(NB, mode="view", data_dir=None)    # the committed data/overhead-*
    text = outputs_text(nb)
    assert "libvirt (TCG)" in text
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    assert "02_overhead.png" in figs
    assert images(nb) == len([f for f in figs if f.endswith(".png")])
    assert not list((REPO / "data").glob("overhead-*/store.sqlite-journal"))
