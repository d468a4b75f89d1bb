"""Notebook 05b (seed 003, private cloud: HPCC across instances, link classes, k noisy neighbours).

View mode reads the committed data/interconnect-local campaign; run mode runs a tiny campaign
on ``local`` (root; MPI across 2 instances on a private network, 1 and 0 neighbours) and checks
that the neighbours were started as many as the factor says.
"""

import pytest

from labkit.store import Store

from .conftest import markdown_outputs, outputs_text

NB = "05b_interconnect_private_cloud.ipynb"


def test_view_committed_results(run_notebook, tmp_path):
    nb = run_notebook(NB, mode="view", data_dir=None)
    md = markdown_outputs(nb)
    assert "Not comparable" in md and "NIC aggregation could not be tested" in md
    assert "latency 64 B: 10 GbE (A10) vs 50 GbE IB (F8)" in md
    assert "Neighbours:" in md
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"05b_pingpong_latency_us.png", "05b_wall_time_s.svg", "05b_paper_vs_labkit.png"} <= figs


@pytest.mark.root
@pytest.mark.slow   # 4 HPCC runs across 2 instances: about 2.5 min on 2 cores
def test_run_tiny_on_local(run_notebook, tmp_path):
    """Also the regression test of an unreplicated run (replications=1): the ANOVA falls back to
    the additive model instead of failing for want of residual degrees of freedom."""
    nb = run_notebook(NB, mode="run", links=["gbe-rate", "10gbe-rate"], neighbours=[0, 1], replications=1,
                      hpcc_n=200, campaign_id="ic", seed=4, run_timeout=240)
    text = outputs_text(nb)
    assert "run(s) failed" not in markdown_outputs(nb), text[-3000:]
    assert "runs; tools:" in text
    assert "additive ANOVA" in text
    with Store(tmp_path / "data" / "ic" / "store.sqlite", readonly=True) as st:
        runs = st.runs()
    assert len(runs) == 4
    for r in runs.itertuples():
        assert len(r.metadata.get("neighbours", [])) == r.neighbours        # k neighbours started
        assert r.metadata["network"]["link"]["rate_bit_per_s"] == {"gbe-rate": 1e9, "10gbe-rate": 1e10}[r.link]
        assert "run" in r.metadata["ksm"]
