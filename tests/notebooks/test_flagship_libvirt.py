"""The flagship notebook (01, the KVM/Xen affinity study) on real VMs through libvirt.

A full 2^4 design on tiny levels: 16 runs, 24 VM boots (1 or 2 VMs per run,
side by side). Under TCG on 2 cores that takes several minutes: marked slow, it
still runs in CI (LABKIT_REQUIRE=libvirt turns a missing libvirtd into a failure).
"""
import pytest

from labkit.store import load_results

from .conftest import outputs_text

pytestmark = [pytest.mark.libvirt, pytest.mark.slow]


def test_flagship_runs_on_libvirt(run_notebook, tmp_path):
    params = dict(backend="libvirt", backend_options={}, vcpus_levels=[1, 2], memory_levels=[256, 512],
                  affinity_levels=["floating", "pinned"], count_levels=[1, 2], replications=1,
                  board_size=8, seed=11, campaign_id="nb-libvirt", mode="run")
    nb = run_notebook("01_affinity_factorial.ipynb", **params)
    tidy = load_results(tmp_path / "data", "nb-libvirt")
    runs = tidy.drop_duplicates("run_id")
    assert len(runs) == 16
    assert set(runs.status) == {"ok"}, runs.loc[runs.status != "ok", ["status", "error"]].to_string()
    assert set(tidy.loc[tidy.metric == "solutions", "value"]) == {92.0}
    # both instances of a count=2 run reported (the VMs ran side by side)
    two = tidy[(tidy["count"] == 2) & (tidy.metric == "wall_time_s")]
    assert set(two.groupby("run_id").instance.nunique()) == {2}
    text = outputs_text(nb)
    for expected in ("vcpus:affinity", "pct_variation", "wrote"):
        assert expected.lower() in text.lower(), expected
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    for stem in ("01_pareto_libvirt", "01_main_effects_libvirt", "01_interactions_libvirt"):
        assert f"{stem}.png" in figs, figs
