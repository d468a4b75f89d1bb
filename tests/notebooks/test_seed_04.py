"""Notebook 04 (seed 001: pipeline applications on KVM and LXC) with papermill.

The workload is the pipeline-shaped stand-in (NOT PARSEC); view mode reads the committed
data/pipeline-* campaigns (data/pipeline-disk-libvirt: qcow2 vs raw on libvirt, QEMU TCG), run
mode runs a tiny campaign on ``local`` (root), and a tiny disk-format campaign on libvirt (4 VMs).
"""
import re

import pytest

from labkit.store import load_results

from .conftest import markdown_outputs, outputs_text

NB = "04_pipeline_kvm_lxc.ipynb"


def test_view_committed_results(run_notebook, tmp_path):
    nb = run_notebook(NB, mode="view", data_dir=None)
    md = markdown_outputs(nb)
    assert "Stand-in, not PARSEC" in md
    assert "Dedup: KVM slower than LXC (mean over thread counts): not measured here; the paper 40.19 %" in md
    text = outputs_text(nb)
    assert "p_holm" in text
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"04_dedup_wall_time_s.png", "04_ferret_wall_time_s.png", "04_paper_vs_labkit.svg"} <= figs
    # the disk-format section: the committed campaign, both formats, every VM under TCG, verdicts in words
    assert "runs in pipeline-disk-libvirt (0 failed or timed out, left out); formats ['qcow2', 'raw']; " \
           "libvirt domain types ['qemu']" in text
    assert "Every VM of this campaign ran as QEMU TCG" in md
    assert "**Disk format (qcow2 vs raw) under QEMU TCG**" in md
    assert "Dedup: qcow2 slows KVM's I/O path (attributed; not measured): qcow2 " in md
    assert re.search(r"The paper's claim is \*\*(reproduced|same direction, different size|opposite|inconclusive|"
                     r"not reproduced)\*\* here", md)
    assert "ANOVA: disk format F = " in md and "normal residuals: " in md
    assert {"04_disk_dedup_wall_time_s.png", "04_disk_ferret_wall_time_s.png",
            "04_disk_format_paper_vs_labkit.svg"} <= figs


@pytest.mark.root
def test_run_tiny_on_local(run_notebook, tmp_path):
    nb = run_notebook(NB, mode="run", platforms=["local"], size_mb=4, replications=2, campaign_id="pl", seed=5,
                      disk_formats=[])
    assert "platforms: local" in outputs_text(nb)
    tidy = load_results(tmp_path / "data", "pl-local")
    assert set(tidy.status) == {"ok"}, tidy.error.dropna().tolist()
    assert tidy.run_id.nunique() == 2 * 2 * 2
    dedup = tidy[(tidy.app == "dedup") & (tidy.metric == "unique_chunks")]
    assert set(dedup.value) == {4.0}      # 4 MiB of 256 KiB chunks, every chunk 4 times: 4 unique


@pytest.mark.libvirt
@pytest.mark.root
@pytest.mark.slow
def test_run_tiny_disk_format_on_libvirt(run_notebook, tmp_path):
    """qcow2 vs raw for real: 2 formats x 2 replications of a 2 MiB dedup, one VM each (TCG here)."""
    nb = run_notebook(NB, mode="run", platforms=["local"], size_mb=2, replications=2, campaign_id="pld", seed=5,
                      disk_apps=["dedup"], disk_threads_levels=[1], disk_size_mb=2, disk_replications=2)
    tidy = load_results(tmp_path / "data", "pld-disk-libvirt")
    assert set(tidy.status) == {"ok"}, tidy.error.dropna().tolist()
    assert sorted(tidy.drop_duplicates("run_id").platform) == ["kvm-qcow2"] * 2 + ["kvm-raw"] * 2
    assert "formats ['qcow2', 'raw']" in outputs_text(nb)
    assert "**Disk format (qcow2 vs raw)" in markdown_outputs(nb)
