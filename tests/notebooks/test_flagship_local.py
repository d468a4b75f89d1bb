"""The flagship notebook executed through papermill on tiny parameters, on the local backend."""
import re
import sqlite3

import pytest

from labkit.store import load_results

from .conftest import images, markdown_outputs, outputs_text


@pytest.mark.root
def test_flagship_runs_then_views(run_notebook, tmp_path):
    params = dict(backend="local", vcpus_levels=[1, 2], memory_levels=[64, 128], count_levels=[1, 2],
                  replications=2, board_size=10, seed=5, campaign_id="nb-local", mode="run")
    nb = run_notebook("01_affinity_factorial.ipynb", **params)
    tidy = load_results(tmp_path / "data", "nb-local")
    assert tidy.run_id.nunique() == 16 * 2
    assert set(tidy.status) == {"ok"}
    assert set(tidy.loc[tidy.metric == "solutions", "value"]) == {724.0}
    text = outputs_text(nb)
    for expected in ("vcpus:affinity", "pct_variation", "shapiro", "wrote"):
        assert expected.lower() in text.lower(), expected
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    for stem in ("01_pareto_local", "01_response_by_config_local", "01_main_effects_local",
                 "01_interactions_local", "01_run_order_local", "01_qq_local", "01_pareto_vs_paper_local"):
        assert f"{stem}.png" in figs and f"{stem}.svg" in figs
    # every figure displayed inline: 7 of the 2^k analysis, variance by level, drift, telemetry
    assert images(nb) == 10
    for stem in ("01_variance_by_level_local", "01_drift_local", "01_telemetry_local"):
        assert f"{stem}.png" in figs
    assert "best_affinity" in text and "difference_s" in text          # Tables 3 and 4 computed on our runs
    assert "Does CPU affinity matter?" in markdown_outputs(nb)
    # a run that failed (as a daemon hiccup makes one) is run once more, so every cell is analysed
    db = sqlite3.connect(tmp_path / "data" / "nb-local" / "store.sqlite")
    with db:
        [(rid,)] = db.execute("SELECT run_id FROM runs ORDER BY run_order LIMIT 1 OFFSET 5").fetchall()
        db.execute("DELETE FROM measurements WHERE run_id = ?", (rid,))
        db.execute("UPDATE runs SET status = 'failed', error = 'BackendError: injected' WHERE run_id = ?", (rid,))
    db.close()
    nb = run_notebook("01_affinity_factorial.ipynb", **params)
    assert "1 of 32 runs failed and ran once more" in markdown_outputs(nb)
    assert "BackendError: injected" in outputs_text(nb)
    tidy = load_results(tmp_path / "data", "nb-local")
    assert set(tidy.status) == {"ok"} and tidy.run_id.nunique() == 32
    assert "vcpus:affinity" in outputs_text(nb)
    # view mode reads the same store and provisions nothing
    run_notebook("01_affinity_factorial.ipynb", **{**params, "mode": "view"})
    assert load_results(tmp_path / "data", "nb-local").run_id.nunique() == 32


@pytest.mark.parametrize("workload, campaign, tag, words", [
    ("nqueens", "affinity-local", "local", ["Does CPU affinity matter?", "lower is better"]),
    ("apache", "affinity-apache-local", "apache_local", ["Does CPU affinity matter?", "higher is better"]),
])
def test_view_mode_on_committed_results(run_notebook, tmp_path, workload, campaign, tag, words):
    """Binder's path: the committed data/<campaign> is analysed without any backend (N-queens,
    and Apache + ab from the host with requests/s, higher is better)."""
    import shutil

    from .conftest import REPO
    src = REPO / "data" / campaign
    if not src.exists():
        pytest.fail(f"data/{campaign} (a committed flagship result) is missing")
    shutil.copytree(src, tmp_path / "data" / campaign)
    shutil.copytree(REPO / "data" / "reference", tmp_path / "data" / "reference")
    before = (src / "store.sqlite").read_bytes()
    nb = run_notebook("01_affinity_factorial.ipynb", mode="view", workload=workload)
    text = outputs_text(nb)
    assert f"campaign '{campaign}'" in text          # the workload's default campaign id
    assert "labkit local" in text     # the comparison with the paper's table ran
    assert (tmp_path / "figures" / f"01_pareto_{tag}.png").exists()
    assert (tmp_path / "figures" / f"01_pareto_vs_paper_{tag}.png").exists()   # our Pareto beside Tables 5-8
    from labkit.store import Store
    with Store(src / "store.sqlite", readonly=True) as st:
        telemetry = not st.samples().empty     # stores made before telemetry was kept have none
    # 7 of the 2^k analysis, variance by level and drift (issue 32), and telemetry where stored
    assert images(nb) == 9 + telemetry
    assert ("runs flagged suspect" in markdown_outputs(nb)) == telemetry
    concl = markdown_outputs(nb)
    for w in words:
        assert w in concl, w
    # one of the four answers of the rules (docs/conclusions.md), with the family correction named
    assert re.search(r"Does CPU affinity matter\? (Yes: |No: |Negligible: |Not resolved at this n )"
                     r"[^\n]*\(Holm over 15 terms", concl)
    assert "Leite et al., Xen" in concl
    if workload == "apache":      # the paper's Apache rows (Tables 6 and 8, Figure 3/7 text), not N-queens'
        assert "37.94" in text and "37.11" in text and "30.55" in text and "51.48" not in text
    assert (src / "store.sqlite").read_bytes() == before      # committed data untouched


def test_view_mode_defaults_read_the_committed_campaign_read_only(run_notebook, tmp_path):
    """No data_dir/campaign_id given: the committed data/affinity-local, opened read-only, figures
    in the given folder; the committed store is byte-for-byte unchanged."""
    from .conftest import REPO
    store = REPO / "data" / "affinity-local" / "store.sqlite"
    before = store.read_bytes()
    nb = run_notebook("01_affinity_factorial.ipynb", mode="view", data_dir=None)
    assert "campaign 'affinity-local'" in outputs_text(nb)
    assert store.read_bytes() == before


@pytest.mark.parametrize("platforms, workload, campaign, runs", [
    (["local", "lxd"], "nqueens", "affinity-platforms", 192),               # 2^5 x 6
    (["local", "lxd"], "apache", "affinity-apache-platforms", 192),         # 2^5 x 6
    (["lxd", "libvirt"], "nqueens", "affinity-lxd-libvirt", 96),            # 2^5 x 3, libvirt = TCG
])
def test_view_mode_on_the_committed_platform_design(run_notebook, tmp_path, platforms, workload, campaign, runs):
    """platforms=[local, lxd] and [lxd, libvirt]: the committed platform x 2^4 campaigns (one 2^5
    design each; N-queens and Apache + ab) in view mode, found from the platforms alone, with the
    platform:affinity interaction estimated and Tables 3-8 beside the paper."""
    from .conftest import REPO
    store = REPO / "data" / campaign / "store.sqlite"
    before = store.read_bytes()
    nb = run_notebook("01_affinity_factorial.ipynb", mode="view", data_dir=None, platforms=platforms,
                      workload=workload)
    text = outputs_text(nb)
    pair = "+".join(platforms)
    tag = pair if workload == "nqueens" else f"{workload}_{pair}"
    assert f"campaign '{campaign}'" in text and "platform:affinity" in text
    assert "best_affinity" in text and f"labkit {pair}" in text
    assert ("ran under QEMU TCG" in markdown_outputs(nb)) == ("libvirt" in platforms)   # the caveat
    assert (tmp_path / "figures" / f"01_pareto_vs_paper_{tag}.png").exists()
    tidy = load_results(REPO / "data", campaign)
    assert tidy.run_id.nunique() == runs and set(tidy.status) == {"ok"}
    assert store.read_bytes() == before


def test_view_mode_shows_levels_telemetry_and_drift_of_the_committed_store(run_notebook, tmp_path):
    """Issue 32, item 5: notebook 01 in view mode on the committed data/affinity-local shows each
    level's variance share, the per-run telemetry figure with the suspect runs counted, and the
    drift check, each the value recomputed here from the store (not typed)."""
    import re

    import numpy as np

    from labkit.stats import drift_segments, level_effects
    from labkit.store import Store

    from .conftest import REPO
    factors = ["vcpus", "memory_mb", "affinity", "count"]
    with Store(REPO / "data" / "affinity-local" / "store.sqlite", readonly=True) as st:
        tidy, stored, samples = st.tidy(), st.runs(), st.samples()
    assert len(samples) and samples.run_id.nunique() == len(stored)      # every run has telemetry
    assert {"host", "instance", "boot", "run_seq", "suspect"} <= set(tidy.columns)
    ok = tidy[(tidy.status == "ok") & (tidy.metric == "wall_time_s")]
    assert ok.groupby(factors).run_id.nunique().min() >= 5               # >= 5 runs per configuration
    # the levels: one row per run and instance, a run's instances a level of their own (count = 2)
    obs = ok.groupby(["run_id", "instance"], as_index=False).agg(
        {"value": "mean", **{f: "first" for f in factors}})
    fit = level_effects(obs, response="value", factors=factors, random=["run_id"])
    runs = ok.groupby("run_id", as_index=False).agg({"value": "mean", "host": "first", "run_seq": "first",
                                                     **{f: "first" for f in factors}})
    runs["host"] = runs["host"].fillna("local")
    drift = drift_segments(runs, response="value", order="run_seq", by="host", factors=factors)
    suspect = int(stored.suspect.fillna(False).astype(bool).sum())

    nb = run_notebook("01_affinity_factorial.ipynb", mode="view", data_dir=None)
    cell = next(c for c in nb.cells if c.get("id") == "a32lvl02")
    md = "\n".join(o["data"]["text/markdown"] for o in cell.outputs if "text/markdown" in o.get("data", {}))
    plain = "\n".join(o["data"].get("text/plain", "") for o in cell.outputs if "data" in o)
    # each level's share of the variance: the table and the sentence, as recomputed
    assert "### Error term and variance by level" in md
    for comp, pct in zip(fit.variance.component, fit.variance.pct):
        label = {"run_id": "run", "residual": "residual (between the instances of a run)"}[comp]
        assert f"{label} {pct:.1f} %" in md or (0 < pct < 0.05 and f"{label} < 0.1 %" in md), (comp, pct)
        assert re.search(rf"\b{comp}\b", plain)
    # the drift check: change points and segments, in the section and in the conclusions
    changes = int(drift.attrs["changes"])
    assert f"{changes} change point{'s' if changes != 1 else ''} in 1 host series" in md
    concl = markdown_outputs(nb)
    assert ("No drift" in concl) == (changes == 0)
    if changes:
        assert f"changes {changes} time" in concl
        for _, s in drift.iterrows():
            assert f"runs {s['start']:g}-{s['end']:g}" in concl
    # per-run telemetry: the figure, how many runs were flagged, and the table of every run
    assert "### Telemetry per run" in md
    assert f"{suspect} of {len(stored)} runs flagged suspect" in md
    html = "\n".join(o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {}))
    flagged = stored[stored.suspect.fillna(False).astype(bool)]
    first = (flagged if len(flagged) else stored).sort_values("run_order").run_id.iloc[0]
    assert "suspect_reason" in html and first in html          # the suspect runs listed first
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    for stem in ("01_variance_by_level_local", "01_drift_local", "01_telemetry_local"):
        assert f"{stem}.png" in figs and f"{stem}.svg" in figs
    assert sum("image/png" in o.get("data", {}) for o in cell.outputs) == 3   # levels, drift, telemetry
    assert np.isclose(fit.variance.pct.sum(), 100)
