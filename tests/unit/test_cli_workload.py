"""``labkit run`` needs a workload (issue 46, friction: it silently ran 12 N-queens runs): from
``--workload`` or the design file's ``workload:`` key, the command line winning; with neither it
stops with one line naming the workloads and both ways to choose one."""

import pytest

from labkit.cli import main
from labkit.design import Design
from labkit.errors import ConfigError
from labkit.workloads import REGISTRY

DESIGN = "factors:\n  vcpus: [1, 2]\n  affinity: [floating, pinned]\nreplications: 3\nseed: 2\n"


class Made(Exception):
    """Raised in place of making the campaign: nothing runs."""


@pytest.fixture
def made(monkeypatch):
    """The keyword arguments ``labkit run`` makes its Campaign with (then it stops)."""
    import labkit.run.campaign as campaign_module

    seen: dict = {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise Made

    monkeypatch.setattr(campaign_module, "Campaign", record)
    return seen


def _design(tmp_path, extra: str = ""):
    path = tmp_path / "d.yaml"
    path.write_text(DESIGN + extra)
    return path


def test_labkit_run_without_a_workload_is_an_error(tmp_path, capsys):
    """Before: "no --workload given: running the default workload nqueens ...", then the runs (here
    the misspelt backend stops it, so the old code exits 2 too, but with another message)."""
    design = _design(tmp_path)
    assert (
        main(
            [
                "run",
                str(design),
                "--backend",
                "lcoal",
                "--no-quarantine",
                "--data-dir",
                str(tmp_path / "data"),
            ]
        )
        == 2
    )
    said = capsys.readouterr()
    (line,) = said.err.splitlines()
    assert line.startswith(
        f"labkit: error: {design} names no workload: pass --workload NAME, "
        "or add 'workload: NAME' to the design file"
    )
    assert line.endswith("workloads: " + ", ".join(sorted(REGISTRY)))
    assert said.out == ""
    assert not (tmp_path / "data").exists()


def test_the_designs_workload_key_is_used(tmp_path, capsys, made):
    design = _design(tmp_path, "workload: {name: nqueens, params: {board: 10, iterations: 2}}\n")
    with pytest.raises(Made):
        main(["run", str(design), "--no-quarantine", "--param", "board=8", "--data-dir", str(tmp_path)])
    assert made["workload"] == "nqueens"
    assert made["workload_params"] == {"board": 8, "iterations": 2}  # --param over the design's
    assert "command line wins" not in capsys.readouterr().out


def test_the_command_line_wins_and_says_so(tmp_path, capsys, made):
    design = _design(tmp_path, "workload: {name: stream, params: {ntimes: 5}}\n")
    with pytest.raises(Made):
        main(["run", str(design), "--no-quarantine", "--workload", "nqueens", "--data-dir", str(tmp_path)])
    assert made["workload"] == "nqueens" and made["workload_params"] == {}  # stream's ntimes is not nqueens'
    assert (
        "--workload nqueens given: running it, not the design's workload stream (the command line wins)"
        in capsys.readouterr().out
    )


def test_a_misspelt_workload_gets_did_you_mean(tmp_path, capsys):
    design = _design(tmp_path)
    assert main(["run", str(design), "--workload", "nqeens", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "labkit: error: --workload: unknown workload 'nqeens' (did you mean 'nqueens'?); "
        "available: " + ", ".join(sorted(REGISTRY))
    )
    named = _design(tmp_path, "workload: nqeens\n")
    assert main(["run", str(named), "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"labkit: error: {named}: 'workload': unknown workload 'nqeens' "
        "(did you mean 'nqueens'?); available: "
    )
    assert err.rstrip().endswith("(line 6)")  # the key's line in the file
    assert not (tmp_path / "data").exists()


def test_a_bad_workload_key_is_one_of_the_files_problems(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(
        "factors:\n  vcpus: [1, 2]\n  affinity: [floating, pinnd]\n"
        "workload: {name: nqueens, params: {board: 99, bord: 3}}\n"
    )
    with pytest.raises(ConfigError) as exc:
        Design.from_yaml(path)
    text = str(exc.value)
    assert text.startswith(f"{path}: 2 problems:\n")
    assert "'workload': workload 'nqueens': unknown parameter(s) bord (did you mean 'board'?)" in text
    path.write_text("factors:\n  vcpus: [1, 2]\nworkload: {name: nqueens, params: {board: 99}}\n")
    with pytest.raises(
        ConfigError, match=r"'workload': .*board.*99.* expected an integer from 4 to 18 \(line 3\)"
    ):
        Design.from_yaml(path)
    with pytest.raises(ConfigError, match=r"'workload': unknown key\(s\) parms \(did you mean 'params'\?\)"):
        Design.from_dict({"factors": {"vcpus": [1, 2]}, "workload": {"name": "nqueens", "parms": {}}})


def test_the_key_is_kept_in_the_design_but_not_in_its_digest():
    plain = Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 4})
    named = Design.from_dict(
        {"factors": {"vcpus": [1, 2]}, "seed": 4, "workload": {"name": "nqueens", "params": {"board": 9.0}}}
    )
    assert named.named_workload == {
        "name": "nqueens",
        "params": {"board": 9},
    }  # canonical, as the schema reads it
    assert plain.named_workload is None and "workload" not in plain.to_dict()
    assert Design.from_dict(named.to_dict()) == named  # stored and read back
    assert named.digest() == plain.digest()
    assert Design.from_dict({"factors": {"vcpus": [1, 2]}, "workload": "command"}).named_workload == {
        "name": "command",
        "params": {},
    }  # argv may come from --param: the workload says when it is missing


def test_the_python_campaign_reads_the_designs_workload_key(tmp_path):
    """``Campaign(design)`` without ``workload=`` runs the workload the design names, with its
    parameters (a given ``workload_params`` winning); ``workload=`` wins over the key."""
    from labkit.run.campaign import Campaign

    design = {
        "name": "named",
        "factors": {"vcpus": [1, 2]},
        "replications": 1,
        "seed": 1,
        "workload": {"name": "stream", "params": {"array_mb": 4, "ntimes": 3}},
    }
    named = Campaign(
        design, backend="local", data_dir=tmp_path, campaign_id="named-a", workload_params={"ntimes": 5}
    )
    assert named.workload.name == "stream"
    assert named.workload.params["array_mb"] == 4 and named.workload.params["ntimes"] == 5
    given = Campaign(design, backend="local", workload="nqueens", data_dir=tmp_path, campaign_id="named-b")
    assert given.workload.name == "nqueens"
    plain = Campaign(
        {k: v for k, v in design.items() if k != "workload"},
        backend="local",
        data_dir=tmp_path,
        campaign_id="named-c",
    )
    assert plain.workload.name == "nqueens"
