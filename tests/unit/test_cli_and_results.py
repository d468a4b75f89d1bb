"""The CLI on the local backend, response shaping and the study's derived levels."""

import re

import pandas as pd
import pytest

from labkit.cli import main
from labkit.errors import ConfigError
from labkit.store import load_design
from labkit.store.results import responses
from labkit.studies import affinity_design, affinity_levels


@pytest.mark.root
def test_cli_run_and_export(tmp_path, capsys):
    design = tmp_path / "d.yaml"
    design.write_text("name: cli\nfactors:\n  vcpus: [1, 2]\n  affinity: [floating, pinned]\nseed: 9\n")
    rc = main(
        [
            "run",
            str(design),
            "--workload",
            "nqueens",
            "--param",
            "board=8",
            "--campaign-id",
            "t-cli",
            "--data-dir",
            str(tmp_path / "data"),
        ]
    )
    assert rc == 0
    assert "4 runs stored" in capsys.readouterr().out
    assert (
        main(
            [
                "export",
                "t-cli",
                "--data-dir",
                str(tmp_path / "data"),
                "--out",
                str(tmp_path / "x"),
                "--format",
                "csv",
            ]
        )
        == 0
    )
    assert len(pd.read_csv(tmp_path / "x" / "results.csv")) == 8  # 4 runs x (wall time, solutions)
    assert load_design(tmp_path / "data", "t-cli").factor_names == ["vcpus", "affinity"]


def test_cli_reports_bad_input(tmp_path, capsys):
    design = tmp_path / "d.yaml"
    design.write_text("factors:\n  vcpus: [1]\n")
    assert main(["run", str(design), "--workload", "nqueens"]) == 2
    assert "vcpus" in capsys.readouterr().err
    assert main(["run", str(design), "--workload", "nqueens", "--param", "oops"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def _tidy():
    rows = []
    for run, (v, st, vals) in enumerate([(1, "ok", [2.0, 4.0]), (2, "ok", [1.0]), (2, "failed", [None])]):
        for i, x in enumerate(vals):
            rows.append(
                {
                    "run_id": f"r{run}",
                    "replicate": 1,
                    "vcpus": v,
                    "instance": i,
                    "metric": "wall_time_s" if x is not None else None,
                    "value": x,
                    "status": st,
                }
            )
    return pd.DataFrame(rows)


def test_responses_average_instances_and_count_exclusions():
    out = responses(_tidy(), "wall_time_s", ["vcpus"])
    assert out.set_index("run_id")["wall_time_s"].to_dict() == {"r0": 3.0, "r1": 1.0}
    assert out.attrs["excluded"] == 1
    assert responses(_tidy(), "wall_time_s", ["vcpus"], how="max").wall_time_s.max() == 4.0
    with pytest.raises(ConfigError, match="metrics present"):
        responses(_tidy(), "rps", ["vcpus"])
    with pytest.raises(ConfigError, match="memory_mb"):
        responses(_tidy(), "wall_time_s", ["memory_mb"])


def test_affinity_levels_scale_with_the_host():
    assert affinity_levels(2, 24000)["vcpus"] == [1, 2]
    assert affinity_levels(8, 24000)["vcpus"] == [4, 8]
    assert affinity_levels(4, 1000)["memory_mb"] == [125, 250]  # a quarter of the host at most
    d = affinity_design(4, 16000, replications=2, seed=1, count=[2, 4])
    assert d.factor_names == ["vcpus", "memory_mb", "affinity", "count"]
    assert len(d.plan()) == 32 and d.factors[3].levels == (2, 4)


# -- list / show / analyze / compare / report on a copy of the committed data ---------------
REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture
def data(tmp_path):
    """A copy of the committed stores (the committed files are never opened for writing)."""
    import shutil

    out = tmp_path / "data"
    for cid in ("affinity-local", "overhead-cpu", "overhead-memory"):
        shutil.copytree(REPO / "data" / cid, out / cid)
    return out


def test_cli_version_list_show(data, capsys):
    from labkit import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"labkit {__version__}"
    assert main(["list", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    from labkit.store import load_results

    n = load_results(data, "affinity-local").run_id.nunique()
    assert "affinity-local" in out and "vcpus,memory_mb,affinity,count" in out and f" {n} " in out
    assert main(["show", "affinity-local", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert f"runs       {n}: {n} ok\n" in out and "host.kernel" in out and "{'ok'" not in out
    assert main(["show", "nope", "--data-dir", str(data)]) == 2
    assert "no campaign 'nope'" in capsys.readouterr().err


def test_cli_analyze_answers_in_words(data, capsys):
    assert main(["analyze", "affinity-local", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    # count = 2 runs have two instances: the instances of a run are a level (issue 32), and the
    # factors, constant within a run, are tested against the run level by a mixed model
    assert "wall_time_s on vcpus, memory_mb, affinity, count (levels)" in out
    assert (
        "decision rules: Holm over 15 terms, α = 0.05, no practical threshold declared: significance only"
        in out
    )
    assert "test: mixed-model t-test of each effect (REML, Satterthwaite df)." in out
    # the three large terms (each about a third of the variation), listed by size
    m = re.search(r"Matters \(significant after the correction\): (.*)\.\n", out)
    assert m and set(m.group(1).split(", ")) == {"vCPUs", "instances", "vCPUs × instances"}
    assert "Error term: the variance of run (runs have several instances (up to 2)" in out
    # quantile intervals where the runs per configuration allow them (the median's needs 6)
    assert "variance by level (reml):" in out and re.search(
        r"per configuration: mean(, p50)? with 95 % intervals", out
    )
    # the drift check in words, as the store's run-order residuals have it (recomputed here)
    from labkit.stats import drift_segments
    from labkit.store import load_results

    tidy = load_results(data, "affinity-local")
    factors = ["vcpus", "memory_mb", "affinity", "count"]
    ok = tidy[(tidy.status == "ok") & (tidy.metric == "wall_time_s")]
    runs = ok.groupby("run_id", as_index=False).agg(
        {"value": "mean", "run_seq": "first", **{f: "first" for f in factors}}
    )
    changes = drift_segments(runs, response="value", order="run_seq", factors=factors).attrs["changes"]
    assert "pct_low" in out and ("No drift" in out) == (changes == 0)
    assert changes == 0 or f"changes {changes} time" in out


def test_cli_compare_flags_drift_with_holm(data, capsys):
    """A copy of one multi-platform campaign compared with itself has no drift."""
    assert main(["compare", "overhead-cpu", "overhead-cpu", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert "0 of 8 configurations drifted" in out and "fingerprints are identical" in out
    from labkit.report import compare

    table, _, _ = compare(data, "overhead-cpu", "overhead-cpu")
    assert set(table.threads) == {1, 2} and set(table.platform) == {"local", "docker", "lxd", "libvirt"}
    assert {"ci_low", "ci_high", "p_holm", "drift"} <= set(table)
    with pytest.raises(ConfigError, match="different factors"):
        compare(data, "affinity-local", "overhead-cpu")


def test_cli_report_html_and_bundle(data, tmp_path, capsys):
    import zipfile

    before = (data / "affinity-local" / "store.sqlite").read_bytes()
    html_path, zip_path = tmp_path / "r.html", tmp_path / "b.zip"
    assert (
        main(
            [
                "report",
                "affinity-local",
                "--data-dir",
                str(data),
                "-o",
                str(html_path),
                "--bundle",
                str(zip_path),
            ]
        )
        == 0
    )
    page = html_path.read_text()
    from labkit.store import Store

    with Store(data / "affinity-local" / "store.sqlite", readonly=True) as st:
        telemetry = not st.samples().empty
    # pareto, main effects, interactions, run order, Q-Q; variance by level, drift and, when the
    # store has it, per-run telemetry (issue 32)
    assert page.count('src="data:image/png;base64,') == 7 + telemetry and "<script" not in page
    assert "Matters (significant after the correction)" in page and "host.kernel" in page
    assert "Decisions" in page and "Order effects" in page and "Suspect runs" in page
    import re

    headings = {re.sub(r"^\d+\. ", "", h) for h in re.findall(r"<h2>(.*?)</h2>", page)}
    assert {
        "Error term and variance by level",
        "Quantiles per configuration",
        "Drift in run order",
    } <= headings
    assert (html_path.stat().st_mode & 0o777) == 0o600
    names = set(zipfile.ZipFile(zip_path).namelist())
    assert {"results.csv", "results.parquet", "store.sqlite", "campaign.json", "environment.json"} <= names
    assert (data / "affinity-local" / "store.sqlite").read_bytes() == before
    assert main(["report", "affinity-local", "--data-dir", str(data)]) == 2


def test_list_campaigns_and_run_facts_on_committed_data(data):
    from labkit.store.results import list_campaigns
    from labkit.studies import load_platform_campaigns, overhead_benchmarks

    table = list_campaigns(data)
    assert list(table.campaign) == ["affinity-local", "overhead-cpu", "overhead-memory"]
    assert table.set_index("campaign").loc["overhead-cpu", "ok"] == 40  # 4 platforms x 2 threads x 5
    b = overhead_benchmarks()
    got, failures, facts = load_platform_campaigns(data, {"cpu": "overhead-cpu", "disk": "overhead-disk"}, b)
    assert len(got) == 40 and set(got.test) == {"cpu events_per_s threads=1", "cpu events_per_s threads=2"}
    assert set(got.platform) == {"local", "docker", "lxd", "libvirt"}
    assert list(failures.benchmark) == ["disk"] and "no results" in failures.note.iloc[0]
    assert set(facts["docker"]["versions"]["cpu"]) == {"sysbench"}
    assert facts["libvirt"]["domain_types"] == {"qemu"} and not facts["local"]["domain_types"]


def test_one_loader_for_campaigns_keyed_by_platform_and_benchmark_or_by_benchmark(data):
    """labkit.store.results.load_campaigns is the one multi-campaign loader: notebook 03 keys a
    one-platform campaign by (platform, benchmark), notebook 02 a multi-platform one by its
    benchmark (labkit.studies.load_platform_campaigns is that same function)."""
    import inspect

    from labkit.store import results
    from labkit.store.results import load_campaigns
    from labkit.studies import load_platform_campaigns, overhead_benchmarks

    assert load_platform_campaigns is load_campaigns
    assert "studies" not in inspect.getsource(results)  # store knows nothing of the studies above it
    b = overhead_benchmarks()
    # the same multi-platform campaign, by benchmark: each run's platform; the one-platform
    # campaign keyed (platform, benchmark): the given platform labels its rows and its facts
    by_bench, _, facts = load_campaigns(data, {"cpu": "overhead-cpu"}, b)
    one = {("native", "cpu"): "affinity-local"}
    pinned, failures, pfacts = load_campaigns(
        data, one, {"cpu": {"factor": "vcpus", "metrics": ["wall_time_s"]}}
    )
    assert set(by_bench.platform) == {"local", "docker", "lxd", "libvirt"} and set(facts) == set(
        by_bench.platform
    )
    assert set(pinned.platform) == {"native"} and set(pfacts) == {"native"} and failures.empty
    assert len(pinned) == pinned.run_id.nunique() > 0 and set(pinned.factor) == {"vcpus"}
    assert pfacts["native"]["fingerprints"]
    # a campaign with a platform factor keyed by one platform, a bad key, an unknown benchmark
    with pytest.raises(ConfigError, match="has a platform factor"):
        load_campaigns(data, {("local", "cpu"): "overhead-cpu"}, b)
    with pytest.raises(ConfigError, match="neither a benchmark name nor a"):
        load_campaigns(data, {("local", "cpu", "x"): "overhead-cpu"}, b)
    with pytest.raises(ConfigError, match="benchmark 'nope' is not among"):
        load_campaigns(data, {"nope": "overhead-cpu"}, b)
    # a campaign that cannot be read is a failure row under its key's platform
    _, missing, _ = load_campaigns(data, {("lxd", "cpu"): "no-such-campaign"}, b)
    assert list(missing.platform) == ["lxd"] and list(missing.benchmark) == ["cpu"]


def test_affinity_reference_in_our_term_names():
    from labkit.studies import affinity_reference

    ref = affinity_reference(REPO / "data" / "reference" / "affinity_influence.csv")
    kvm = ref[ref.source.str.endswith("KVM")].set_index("term").pct_variation
    assert kvm.to_dict() == {
        "vcpus": 69.7,
        "count": 21.32,
        "vcpus:count": 8.32,
    }  # Leite et al., Tables 5-8 (KVM, N-queens)
