"""The explorer's logic without a browser: catalog and filters, the primary response, run tables
(with and without the measurement-level columns), "did you mean", notebook modes, readable
numbers, compare's notes and grouped host facts, the dashboard's command."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

from labkit.cli import main  # noqa: E402
from labkit.errors import ConfigError, did_you_mean  # noqa: E402
from labkit.report import catalog, compare  # noqa: E402
from labkit.report.notebook import notebook_mode  # noqa: E402
from labkit.report.tables import format_number, html_table, readable  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "tests" / "vectors" / "campaigns"
OLD = "interconnect-libvirt-nics"  # the fixture's store from before telemetry (2026-11-24)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A copy of some committed stores (the committed files are never opened for writing), and one
    store as committed on 2026-11-24, before telemetry and levels were kept: interconnect-libvirt-nics
    at 2 runs per configuration (re-run with 5 on 2026-11-27; the old store is kept under tests/vectors)."""
    out = tmp_path_factory.mktemp("data")
    for cid in (
        "affinity-local",
        "affinity-apache-local",
        "affinity-platforms",
        "affinity-lxd-libvirt",
        "overhead-cpu",
    ):
        shutil.copytree(REPO / "data" / cid, out / cid)
    # one design run twice, on local and on lxd (2026-11-27): the committed study now runs its platforms
    # in one randomized campaign (issue 42), so the two are kept as vectors of the comparison
    for cid in ("deployments-cpu-local", "deployments-cpu-lxd"):
        shutil.copytree(VECTORS / cid, out / cid)
    (out / OLD).mkdir()
    shutil.copyfile(REPO / "tests" / "vectors" / f"{OLD}-before-telemetry.sqlite", out / OLD / "store.sqlite")
    return out


# -- numbers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "x, shown",
    [
        (2786.855, "2787"),
        (-201.335, "-201.3"),
        (0.30028, "0.3003"),
        (34.170573, "34.17"),
        (1.209442e-49, "1.2e-49"),
        (6.792042e-07, "6.8e-7"),
        (1.0, "1"),
        (32262.187658, "32262"),
        (float("nan"), ""),
        (None, ""),
        (True, "yes"),
        ("<b>", "<b>"),
        (0.0, "0"),
        (2.5e12, "2.5e+12"),
    ],
)
def test_numbers_to_four_significant_digits(x, shown):
    assert format_number(x) == shown


def test_tables_are_formatted_and_escaped():
    df = pd.DataFrame({"name_of<x>": ["<script>alert(1)</script>", "a&b"], "value": [2786.855, 1e-9]})
    assert list(readable(df)["value"]) == ["2787", "1.0e-9"]
    page = html_table(df, caption="<i>c</i>")
    assert "<script>" not in page and "&lt;script&gt;" in page and "a&amp;b" in page
    assert (
        "name_<wbr>of&lt;x&gt;" in page
        and "&lt;i&gt;c&lt;/i&gt;" in page
        and "<td class=num>2787</td>" in page
    )
    assert "… 1 more rows" in html_table(df, max_rows=1)
    with pytest.raises(ConfigError):
        format_number(1.0, digits=0)


# -- did you mean -------------------------------------------------------------------------------------
def test_did_you_mean():
    assert (
        did_you_mean("affinity-locl", ["affinity-local", "overhead-cpu"])
        == " (did you mean 'affinity-local'?)"
    )
    assert did_you_mean("VCPU", ["vcpus", "count"]) == " (did you mean 'vcpus'?)"
    assert did_you_mean("zzz", ["vcpus"]) == ""


def test_missing_campaign_suggests_and_refuses_paths(data, capsys):
    with pytest.raises(ConfigError, match=r"no campaign 'affinity-locl' .*did you mean 'affinity-local'"):
        catalog.require_campaign(data, "affinity-locl")
    for bad in ("../data", "a/b", "", ".."):
        with pytest.raises(ConfigError, match="folder name"):
            catalog.require_campaign(data, bad)
    assert main(["show", "affinity-locl", "--data-dir", str(data)]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'affinity-local'" in err and len(err.strip().splitlines()) == 1
    assert main(["analyze", "affinity-local", "--factors", "vcpu", "--data-dir", str(data)]) == 2
    assert "did you mean 'vcpus'" in capsys.readouterr().err
    assert main(["analyze", "affinity-local", "--response", "wall_time", "--data-dir", str(data)]) == 2
    assert "did you mean 'wall_time_s'" in capsys.readouterr().err


def test_unknown_workload_and_parameter_and_factor_suggest():
    from labkit.design import Design
    from labkit.workloads import get_workload, workload_class

    with pytest.raises(ConfigError, match="did you mean 'nqueens'"):
        workload_class("nqeens")
    with pytest.raises(ConfigError, match="did you mean 'board'"):
        get_workload("nqueens", bord=12)
    with pytest.raises(ConfigError, match="did you mean 'vcpus'"):
        Design.from_dict({"factors": {"vcpu": [1, 2]}}).validate_for(get_workload("nqueens"))


# -- catalog ----------------------------------------------------------------------------------------
def test_catalog_and_its_filters(data):
    cat = catalog.campaign_catalog(data)
    assert len(cat) == 8 and set(cat.status) == {"complete"}
    row = cat.set_index("campaign").loc["overhead-cpu"]
    assert (
        row.platforms == "local,docker,lxd,libvirt" and row.response == "events_per_s" and row.planned == 40
    )
    assert list(catalog.filter_catalog(cat, search="platform nqueens").campaign) == [
        "affinity-lxd-libvirt",
        "affinity-platforms",
    ]
    assert list(catalog.filter_catalog(cat, platform="docker").campaign) == ["overhead-cpu"]
    assert set(catalog.filter_catalog(cat, backend="lxd").campaign) == {
        "affinity-lxd-libvirt",
        "deployments-cpu-lxd",
    }
    # all but the old interconnect-libvirt-nics (2026-11-24): run again on 2026-11-27 with telemetry and levels
    assert list(catalog.filter_catalog(cat, study="deployments_cpu", since="2026-11-27").campaign) == [
        "deployments-cpu-local",
        "deployments-cpu-lxd",
    ]
    assert catalog.filter_catalog(cat, until="2026-11-24").campaign.tolist() == ["interconnect-libvirt-nics"]
    assert catalog.filter_catalog(cat, since="2026-11-25").campaign.tolist() == [
        "affinity-apache-local",
        "affinity-local",
        "affinity-lxd-libvirt",
        "affinity-platforms",
        "deployments-cpu-local",
        "deployments-cpu-lxd",
        "overhead-cpu",
    ]
    assert catalog.filter_catalog(cat, status="failures").empty
    with pytest.raises(ConfigError, match="YYYY-MM-DD"):
        catalog.filter_catalog(cat, since="yesterday")


def test_failed_and_unreadable_campaigns_are_said_so(tmp_path):
    from tests.support.payloads import payload_store

    payload_store(tmp_path, "hostile")  # one failed run among ok ones
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "store.sqlite").write_bytes(b"not a database" * 100)
    cat = catalog.campaign_catalog(tmp_path).set_index("campaign")
    assert cat.loc["hostile", "status"] == "failures" and cat.loc["hostile", "not_ok"] == 1
    assert cat.loc["broken", "status"] == "unreadable" and cat.loc["broken", "study"].startswith("unreadable")


def test_primary_response_is_declared_and_never_a_constant(data):
    from labkit.store import load_results

    tidy = load_results(data, "affinity-local")
    assert set(tidy.metric) == {"wall_time_s", "solutions"} and catalog.response_metrics(tidy) == [
        "wall_time_s"
    ]
    assert catalog.primary_response({"workload": {"response": "wall_time_s"}}, tidy)[0] == "wall_time_s"
    metric, why = catalog.primary_response({"workload": {"response": "solutions"}}, tidy)
    assert metric == "wall_time_s" and "constant" in why
    metric, why = catalog.primary_response({"workload": {}}, tidy)
    assert metric == "wall_time_s" and "no response declared" in why


def _tidy(extra: dict | None = None) -> pd.DataFrame:
    rows = []
    for i, (status, host) in enumerate([("ok", "h1"), ("ok", "h2"), ("failed", "h1"), ("ok", "h1")]):
        for inst in (0, 1):
            rows.append(
                {
                    "run_id": f"r{i}",
                    "run_order": i,
                    "vcpus": 1 + i % 2,
                    "status": status,
                    "host": host,
                    "started": f"2026-01-0{i + 1}",
                    "duration_s": 1.0,
                    "instance": inst,
                    "metric": "t_s" if status == "ok" else None,
                    "value": 1.0 + i + inst if status == "ok" else None,
                    "error": "boom\nmore" if status == "failed" else None,
                    **({k: v(i, inst) for k, v in extra.items()} if extra else {}),
                }
            )
    return pd.DataFrame(rows)


def test_run_table_without_the_measurement_level_columns():
    runs = catalog.run_table(_tidy(), ["vcpus"], "t_s")
    assert list(runs.columns) == [
        "run_order",
        "run_id",
        "vcpus",
        "status",
        "host",
        "started",
        "duration_s",
        "t_s",
        "instances",
        "error",
    ]
    assert runs.t_s.tolist()[:2] == [1.5, 2.5] and pd.isna(runs.t_s[2]) and runs.error[2] == "boom"
    assert catalog.filter_runs(runs, status="ok", host="h1").run_id.tolist() == ["r0", "r3"]
    assert len(catalog.filter_runs(runs, suspect=True)) == 4  # no suspect column: the filter is ignored
    with pytest.raises(ConfigError, match="did you mean 'vcpus'"):
        catalog.run_table(_tidy(), ["vcpu"])


def test_run_table_shows_suspect_boot_run_seq_iteration_when_present():
    tidy = _tidy(
        {
            "suspect": lambda i, inst: i == 1 and inst == 1,
            "boot": lambda i, inst: 1,
            "run_seq": lambda i, inst: i,
            "iteration": lambda i, inst: inst,
        }
    )
    runs = catalog.run_table(tidy, ["vcpus"], "t_s")
    assert {"suspect", "boot", "run_seq", "iteration"} <= set(runs.columns)
    assert runs.suspect.tolist() == [False, True, False, False]
    assert runs.iteration.tolist() == [2, 2, 2, 2]  # two distinct iterations per run
    assert catalog.filter_runs(runs, suspect=True).run_id.tolist() == ["r1"]
    assert catalog.filter_runs(runs, suspect=False, status="ok").run_id.tolist() == ["r0", "r3"]


# -- compare -----------------------------------------------------------------------------------------
def test_compare_notes_and_grouped_host_facts(data, capsys):
    table, fpd, verdict = compare(data, "deployments-cpu-local", "deployments-cpu-lxd")
    assert table.attrs["notes"] == ["the backends differ: local vs lxd"]
    assert fpd[fpd.kind == "differs"].fact.tolist() == ["backend.backend"]
    only = fpd[fpd.kind == "only in deployments-cpu-lxd"]
    assert "backend.lxd_version" in set(only.fact) and (only.a == "n/a").all()
    assert "Host facts that differ: backend.backend (local vs lxd)" in verdict
    assert "backend.lxd_version" not in verdict and "not differences" in verdict
    assert main(["compare", "deployments-cpu-local", "deployments-cpu-lxd", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert "note: the backends differ: local vs lxd" in out
    assert "recorded only for deployments-cpu-lxd" in out and " n/a " not in out
    table, _, verdict = compare(data, "affinity-platforms", "affinity-lxd-libvirt")
    assert any("levels of platform" in n for n in table.attrs["notes"]) and "designs" in verdict
    with pytest.raises(ConfigError, match="the workloads differ: nqueens in affinity-local, apache in"):
        compare(data, "affinity-local", "affinity-apache-local")
    with pytest.raises(ConfigError, match="different factors"):
        compare(data, "affinity-local", "overhead-cpu")


# -- the explorer -------------------------------------------------------------------------------------
def test_explorer_views(data):
    from matplotlib.figure import Figure

    from labkit.report.explore import Explorer

    ex = Explorer(data, campaign="affinity-local")
    assert ex.comparable("affinity-platforms") == ["affinity-lxd-libvirt"]
    analysis = ex.analysis_view("affinity-local")
    assert "wall\\_time\\_s on" in analysis[0].data or "wall_time_s on" in analysis[0].data
    # pareto, main effects, interactions, run order, Q-Q; variance by level and drift (issue 32)
    assert sum(isinstance(x, Figure) for x in analysis) == 7
    text = [getattr(x, "data", "") for x in analysis]
    assert "#### Error term and variance by level" in text and "#### Drift in run order" in text
    from labkit.store import Store, load_results

    n = load_results(data, "affinity-local").run_id.nunique()
    runs = ex.runs_view("affinity-local", status="ok")
    assert f"{n} of {n} runs" in runs[0].data
    view = ex.comparison_view("affinity-platforms", "affinity-lxd-libvirt")
    assert isinstance(view[-1], Figure) and any("How they differ" in getattr(x, "data", "") for x in view)
    # telemetry: every run's summaries with the suspect runs counted, then one run's samples (the
    # first suspect one); stores made before telemetry was kept say they have none
    for cid in (
        "affinity-local",
        "affinity-apache-local",
        "affinity-lxd-libvirt",
        "interconnect-libvirt-nics",
    ):
        with Store(data / cid / "store.sqlite", readonly=True) as st:
            stored, samples = st.runs(), st.samples()
        tel = ex.telemetry_view(cid)
        shown = [getattr(x, "data", "") for x in tel]
        if cid == OLD:  # committed before telemetry was kept
            assert samples.empty and "No telemetry stored" in shown[0]
            continue
        flagged = stored[stored.suspect.fillna(False).astype(bool)]
        assert "#### Telemetry per run" in shown and isinstance(tel[-1], Figure)
        assert any(f"{len(flagged)} of {len(stored)} runs flagged suspect" in t for t in shown)
        first = (flagged if len(flagged) else stored).sort_values("run_order").run_id.iloc[0]
        assert f"Telemetry of run {first}" in shown[-2] and ("**suspect**" in shown[-2]) == bool(len(flagged))
    with pytest.raises(ConfigError, match="did you mean"):
        Explorer(data, campaign="affinity-locl")


def test_explorer_application_filters_the_picker(data):
    from labkit.report.explore import Explorer

    root = Explorer(data, campaign="affinity-local").app()
    app = next(w for w in root.children if hasattr(w, "children") and len(w.children) == 2)  # picker + count
    pick, count = app.children
    assert pick.value == "affinity-local" and len(pick.options) == 8
    search = root.children[1].children[0]
    search.value = "deployments"
    assert list(pick.options) == ["deployments-cpu-local", "deployments-cpu-lxd"]
    assert pick.value == "deployments-cpu-local" and count.value.startswith("2 of 8")
    search.value = "nothing-matches-this"
    assert pick.value is None and count.value.startswith("0 of 8")


def test_telemetry_of_a_run(tmp_path):
    from matplotlib.figure import Figure

    from labkit.design import Run
    from labkit.report.explore import Explorer
    from labkit.store import Store

    with Store(tmp_path / "tele" / "store.sqlite") as st:
        st.set_meta(
            campaign_id="tele",
            design={"name": "t", "factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 1},
            backend="local",
            workload={"name": "command", "response": "wall_time_s"},
        )
        for i, v in enumerate((1, 2)):
            st.record_run(
                Run(f"c{i}r001", i, i, 1, {"vcpus": v}),
                status="ok",
                started="2026-01-01T00:00:00",
                duration_s=1.0,
                measurements=[SimpleNamespace(instance=0, metric="wall_time_s", value=1.0 + i, unit="s")],
                samples=[(t * 0.5, m, float(t)) for t in range(4) for m in ("cpu_pct", "steal_pct")],
            )
    view = Explorer(tmp_path).telemetry_view("tele", "c1r001")
    assert "4 samples" in view[0].data and isinstance(view[1], Figure)
    assert len([ax for ax in view[1].axes if ax.get_visible()]) == 2


# -- notebook modes ----------------------------------------------------------------------------------
def test_notebook_mode_auto_views_what_is_stored(data, capsys):
    never = lambda b: pytest.fail("auto must not probe backends when a campaign is stored")  # noqa: E731
    m = notebook_mode("auto", data_dir=data, campaigns=["affinity-local"], backends=["local"], can_run=never)
    assert m.mode == "view" and capsys.readouterr().out.startswith("mode view (auto: reading affinity-local")
    m = notebook_mode("auto", data_dir=data, campaigns=["overhead-cpu", "overhead-disk"], can_run=never)
    assert m.mode == "view" and m.missing == ["overhead-disk"] and "not stored: overhead-disk" in m.line()
    assert 'mode = "run"' in m.line()


def test_notebook_mode_auto_runs_only_when_nothing_is_stored(data, capsys):
    m = notebook_mode(
        "auto", data_dir=data, campaigns=["new-one"], backends=["local"], can_run=lambda b: (True, "")
    )
    assert m.mode == "run" and "no stored campaign new-one" in m.line() and 'mode = "view"' in m.line()
    with pytest.raises(ConfigError, match="backend 'docker' cannot start instances here"):
        notebook_mode(
            "auto",
            data_dir=data,
            campaigns=["new-one"],
            backends=["docker"],
            can_run=lambda b: (False, "dockerd is not running\nmore"),
        )
    assert notebook_mode("run", data_dir=data, campaigns=["affinity-local"]).mode == "run"


def test_notebook_mode_view_of_a_missing_campaign_suggests(data):
    with pytest.raises(ConfigError, match="no stored campaign affinity-locl .*did you mean 'affinity-local'"):
        notebook_mode("view", data_dir=data, campaigns=["affinity-locl"])
    with pytest.raises(ConfigError, match="did you mean 'view'"):
        notebook_mode("veiw", data_dir=data, campaigns=["affinity-local"])


# -- figures and the dashboard ---------------------------------------------------------------------
def test_one_line_per_set_of_figures(tmp_path):
    from labkit.report import plots

    fig = plots.run_order(pd.DataFrame({"run_order": [0, 1, 2], "y": [1.0, 2.0, 1.5]}), "y")
    written = plots.save_figure(fig, "a", tmp_path) + plots.save_figure(fig, "b", tmp_path)
    assert plots.figures_written(written) == f"wrote 2 figures (4 files: png, svg) to {tmp_path}"


def test_dashboard_command_listens_on_loopback_with_a_hidden_token():
    from labkit.report.dashboard import voila_command

    argv, env, url = voila_command(port=8900)
    assert argv[1:3] == ["-m", "voila"] and argv[3].endswith("notebooks/00_explorer.ipynb")
    assert "--Voila.ip=127.0.0.1" in argv and "--port=8900" in argv and "--token" in argv
    assert "--VoilaConfiguration.strip_sources=True" in argv
    assert "--KernelManager.transport_encryption=auto" in argv
    token = env["JUPYTER_TOKEN"]
    assert (
        len(token) >= 24
        and not any(token in a for a in argv)
        and url == f"http://127.0.0.1:8900/?token={token}"
    )
    argv, env, url = voila_command(port=8901, ip="0.0.0.0", token="")
    assert "JUPYTER_TOKEN" not in env and "--token" not in argv and url == "http://127.0.0.1:8901/"
    for bad in ({"port": 0}, {"port": 70000}, {"port": "80"}, {"ip": "localhost; rm -rf /"}):
        with pytest.raises(ConfigError):
            voila_command(**bad)
