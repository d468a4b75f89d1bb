"""Notebook 00 (explorer) on the committed campaigns, read-only, under papermill's defaults."""
import pytest

from .conftest import REPO, images, markdown_outputs, outputs_text

NB = "00_explorer.ipynb"


@pytest.mark.parametrize("interactive", [False, True])
def test_explorer_defaults_on_committed_data(run_notebook, interactive):
    before = (REPO / "data" / "affinity-local" / "store.sqlite").read_bytes()
    nb = run_notebook(NB, data_dir=None, campaign="affinity-local", interactive=interactive)
    text = outputs_text(nb)
    assert "overhead-cpu" in text and "overhead-network" in text     # the catalog lists every campaign
    concl = markdown_outputs(nb)
    # count = 2 runs have two instances, a level of its own: a mixed model's t-tests (issue 32)
    assert "Significant (mixed-model t-test of each effect" in concl and "vCPUs" in concl
    assert "Error term: the variance of run" in concl
    assert images(nb) == 5            # pareto, main effects, interactions, run order, Q-Q
    assert (REPO / "data" / "affinity-local" / "store.sqlite").read_bytes() == before


def test_explorer_any_response_and_factor(run_notebook):
    nb = run_notebook(NB, data_dir=None, campaign="overhead-memory", response="copy_mb_per_s")
    assert "copy_mb_per_s on platform, threads" in markdown_outputs(nb)   # two factors, platform 3 levels
    assert images(nb) == 3            # platform has 3 levels: ANOVA figures, no 2^k Pareto
