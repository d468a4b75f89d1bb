"""Notebook 00 (explorer) on the committed campaigns, read-only, under papermill."""
import json

import pytest

from .conftest import REPO, images, markdown_outputs, widget_outputs

NB = "00_explorer.ipynb"


def test_explorer_static_on_committed_data(run_notebook):
    before = (REPO / "data" / "affinity-local" / "store.sqlite").read_bytes()
    nb = run_notebook(NB, data_dir=None, campaign="affinity-local", interactive=False)
    html = "\n".join(o["data"]["text/html"] for c in nb.cells for o in c.get("outputs", [])
                     if "text/html" in o.get("data", {}))
    assert "overhead-cpu" in html and "overhead-network" in html     # the catalog lists every campaign
    concl = markdown_outputs(nb)
    assert "wall\\_time\\_s on vcpus" in concl or "wall_time_s on vcpus" in concl   # the declared response
    # count = 2 runs have two instances, a level of its own: a mixed model's t-tests (issue 32)
    # every term decided by the declared rules (issue 41): Holm over the 15 terms, no practical threshold
    assert "Holm over 15 terms, α = 0.05, no practical threshold declared: significance only" in concl
    assert "test: mixed-model t-test of each effect" in concl and "Matters (significant after the correction)" in concl
    assert "**Decisions**" in concl and "Order effects" in concl
    assert "Error term: the variance of run" in concl
    assert "1.209442e-49" not in html and "2786.855000" not in html   # numbers to 4 significant digits
    # each level's share of the variance and the drift check (issue 32), after the analysis
    assert "#### Error term and variance by level" in concl and "#### Drift in run order" in concl
    from labkit.store import Store
    with Store(REPO / "data" / "affinity-local" / "store.sqlite", readonly=True) as st:
        stored, telemetry = st.runs(), not st.samples().empty
    suspect = int(stored.suspect.fillna(False).astype(bool).sum())
    if telemetry:    # every run's telemetry, suspect runs counted, then one run's samples
        assert f"{suspect} of {len(stored)} runs flagged suspect" in concl and "**Telemetry of run " in concl
    # pareto, main effects, interactions, run order, Q-Q, variance by level, drift; telemetry:
    # the runs' summaries, the median and p95 of the shown run's configuration (issue 45) and one run's samples
    assert images(nb) == 7 + 3 * telemetry
    if telemetry:
        assert "median and p95 across all " in concl
    assert (REPO / "data" / "affinity-local" / "store.sqlite").read_bytes() == before


def test_explorer_application_with_widgets(run_notebook):
    """interactive=True: the ipywidgets application, its first analysis rendered into its Output
    widgets (saved in the notebook's widget state) with the figures."""
    nb = run_notebook(NB, data_dir=None, campaign="affinity-local", interactive=True)
    views = [o for c in nb.cells for o in c.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(views) == 1
    captured = widget_outputs(nb)
    assert sum("image/png" in o.get("data", {}) for o in captured) >= 5
    text = json.dumps(captured)
    # count = 2 runs keep their instances as a level: a mixed model's t-tests (issue 32)
    assert "test: mixed-model t-test of each effect" in text and "wall" in text
    assert "Matters (significant after the correction)" in text      # decided by the rules (issue 41)


def test_explorer_any_response_and_factor(run_notebook):
    nb = run_notebook(NB, data_dir=None, campaign="overhead-memory", response="copy_mb_per_s", interactive=False)
    assert "copy_mb_per_s on platform, threads" in markdown_outputs(nb)   # two factors, platform 3 levels
    # platform has 3 levels: ANOVA figures, no 2^k Pareto; drift; telemetry (re-run 2026-11-27 with it):
    # the runs' summaries, the shown run's configuration (median and p95, issue 45) and one run's samples
    from labkit.store import Store
    with Store(REPO / "data" / "overhead-memory" / "store.sqlite", readonly=True) as st:
        telemetry = not st.samples().empty
    assert images(nb) == 4 + 3 * telemetry


def test_explorer_compares_two_campaigns_side_by_side(run_notebook):
    nb = run_notebook(NB, data_dir=str(REPO / "tests" / "vectors" / "campaigns"), campaign="deployments-cpu-local",
                      compare_with="deployments-cpu-lxd",
                      interactive=False)
    md = markdown_outputs(nb)
    assert "the backends differ: local vs lxd" in md
    assert "configurations drifted significantly from deployments-cpu-local to deployments-cpu-lxd" in md
    assert "recorded only for deployments" in md.lower()
    # ANOVA figures (main effects, run order), drift, the comparison, and since deployments-cpu-local
    # was re-run with telemetry (2026-11-27) its telemetry tab: the runs' summaries, the shown run's
    # configuration (median and p95, issue 45) and one run's samples
    assert images(nb) == 7


def test_explorer_missing_campaign_is_one_line(run_notebook):
    from papermill.exceptions import PapermillExecutionError
    with pytest.raises(PapermillExecutionError) as exc:
        run_notebook(NB, data_dir=None, campaign="affinity-locl", interactive=False)
    err = exc.value
    assert err.ename == "ConfigError" and "did you mean 'affinity-local'" in err.evalue
    shown = "\n".join(err.traceback)
    assert "Traceback" not in shown and "File " not in shown and len(err.traceback) <= 2
