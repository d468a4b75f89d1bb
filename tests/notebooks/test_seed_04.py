"""Notebook 04 (seed 001: pipeline applications on KVM and LXC) with papermill.

The workload is the pipeline-shaped stand-in (NOT PARSEC); view mode reads the committed
data/pipeline-* campaigns, run mode runs a tiny campaign on ``local`` (root).
"""
import pytest

from labkit.store import load_results

from .conftest import markdown_outputs, outputs_text

NB = "04_pipeline_kvm_lxc.ipynb"


def test_view_committed_results(run_notebook, tmp_path):
    nb = run_notebook(NB, mode="view", data_dir=None)
    md = markdown_outputs(nb)
    assert "Stand-in, not PARSEC" in md
    assert "Dedup: KVM slower than LXC (mean over threads)** (paper +40.19 %)" in md
    assert "qcow2 vs raw" in md
    assert "p_holm" in outputs_text(nb)
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"04_dedup_wall_time_s.png", "04_ferret_wall_time_s.png", "04_paper_vs_labkit.svg"} <= figs


@pytest.mark.root
def test_run_tiny_on_local(run_notebook, tmp_path):
    nb = run_notebook(NB, mode="run", platforms=["local"], size_mb=4, replications=2, campaign_id="pl", seed=5)
    assert "platforms: local" in outputs_text(nb)
    tidy = load_results(tmp_path / "data", "pl-local")
    assert set(tidy.status) == {"ok"}, tidy.error.dropna().tolist()
    assert tidy.run_id.nunique() == 2 * 2 * 2
    dedup = tidy[(tidy.app == "dedup") & (tidy.metric == "unique_chunks")]
    assert set(dedup.value) == {4.0}      # 4 MiB of 256 KiB chunks, every chunk 4 times: 4 unique
