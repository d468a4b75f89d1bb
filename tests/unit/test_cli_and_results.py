"""The CLI on the local backend, response shaping and the study's derived levels."""
import pandas as pd
import pytest

from labkit.cli import main
from labkit.errors import ConfigError
from labkit.results import responses
from labkit.store import Store, load_design
from labkit.studies import affinity_design, affinity_levels


@pytest.mark.root
def test_cli_run_and_export(tmp_path, capsys):
    design = tmp_path / "d.yaml"
    design.write_text("name: cli\nfactors:\n  vcpus: [1, 2]\n  affinity: [floating, pinned]\nseed: 9\n")
    rc = main(["run", str(design), "--param", "board=8", "--campaign-id", "t-cli",
               "--data-dir", str(tmp_path / "data")])
    assert rc == 0
    assert "4 runs stored" in capsys.readouterr().out
    assert main(["export", "t-cli", "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "x"),
                 "--format", "csv"]) == 0
    assert len(pd.read_csv(tmp_path / "x" / "results.csv")) == 8   # 4 runs x (wall time, solutions)
    assert load_design(tmp_path / "data", "t-cli").factor_names == ["vcpus", "affinity"]


def test_cli_reports_bad_input(tmp_path, capsys):
    design = tmp_path / "d.yaml"
    design.write_text("factors:\n  vcpus: [1]\n")
    assert main(["run", str(design)]) == 2
    assert "vcpus" in capsys.readouterr().err
    assert main(["run", str(design), "--param", "oops"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def _tidy():
    rows = []
    for run, (v, st, vals) in enumerate([(1, "ok", [2.0, 4.0]), (2, "ok", [1.0]), (2, "failed", [None])]):
        for i, x in enumerate(vals):
            rows.append({"run_id": f"r{run}", "replicate": 1, "vcpus": v, "instance": i,
                         "metric": "wall_time_s" if x is not None else None, "value": x, "status": st})
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
    assert affinity_levels(4, 1000)["memory_mb"] == [125, 250]     # a quarter of the host at most
    d = affinity_design(4, 16000, replications=2, seed=1, count=[2, 4])
    assert d.factor_names == ["vcpus", "memory_mb", "affinity", "count"]
    assert len(d.plan()) == 32 and d.factors[3].levels == (2, 4)
