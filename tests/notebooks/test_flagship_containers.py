"""The flagship notebook, unchanged, on the docker and lxd backends: a small 2^4 design
end to end (provision, N-queens in every instance, store, statistics, figures), and
nothing named labkit- left on the daemon afterwards."""
from __future__ import annotations

import time

import pytest

from labkit.store import load_results

from .conftest import outputs_text

SMALL = dict(vcpus_levels=[1, 2], memory_levels=[128, 256], affinity_levels=["floating", "pinned"],
             count_levels=[1, 2], replications=1, board_size=8, seed=11, mode="run")


def _labkit_instances(name: str, campaign: str) -> set[str]:
    """The campaign's instances on the daemon (other test runs' instances are not ours to count)."""
    from labkit.backends import get_backend
    from labkit.core.ids import campaign_prefix
    be = get_backend(name)
    try:
        return set(be.list_labkit(campaign_prefix(campaign)))
    finally:
        be.close()


def _run_flagship(run_notebook, tmp_path, backend: str):
    campaign = f"nb-{backend}"
    before = _labkit_instances(backend, campaign)
    try:
        nb = run_notebook("01_affinity_factorial.ipynb", backend=backend, backend_options={},
                          campaign_id=campaign, **SMALL)
    finally:
        deadline = time.monotonic() + 30
        while (left := _labkit_instances(backend, campaign) - before) and time.monotonic() < deadline:
            time.sleep(1)
        assert not left, f"{backend}: the campaign left instances behind: {sorted(left)}"
    tidy = load_results(tmp_path / "data", campaign)
    assert tidy.run_id.nunique() == 16
    assert set(tidy.status) == {"ok"}, tidy.loc[tidy.status != "ok", "error"].head().tolist()
    assert set(tidy.loc[tidy.metric == "solutions", "value"]) == {92.0}  # 8 queens
    text = outputs_text(nb).lower()
    for expected in ("vcpus:affinity", "pct_variation", "wrote"):
        assert expected in text, expected
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    assert f"01_pareto_{backend}.png" in figs, sorted(figs)
    # view mode reads the same store and provisions nothing
    run_notebook("01_affinity_factorial.ipynb", backend=backend, campaign_id=campaign,
                 mode="view")
    return tidy


@pytest.mark.docker
def test_flagship_on_docker(run_notebook, tmp_path):
    _run_flagship(run_notebook, tmp_path, "docker")


@pytest.mark.lxd
@pytest.mark.slow
def test_flagship_on_lxd(run_notebook, tmp_path):
    _run_flagship(run_notebook, tmp_path, "lxd")
