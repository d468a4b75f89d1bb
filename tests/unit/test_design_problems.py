"""Every bad key, factor and level of a design file in one error, each with its factor, level and
line (issue 46: two bad levels were reported one per attempt)."""

import pytest

from labkit.cli import main
from labkit.design import Design, Factor
from labkit.design.problems import DesignProblems, yaml_lines
from labkit.errors import ConfigError
from labkit.workloads import get_workload

BAD = """\
name: bad
replication: 3
factors:
  vcpus: [1, 0]
  affinity:
    - floating
    - pinnd
  noise: [none, cpuu]
  board: [8, 99]
  bord: [1, 2]
seed: 1
"""


@pytest.fixture
def bad(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    return path


def test_the_file_alone_reports_every_key_and_level_it_can_check(bad):
    with pytest.raises(DesignProblems) as exc:
        Design.from_yaml(bad)
    err = exc.value
    assert isinstance(err, ConfigError)
    lines = str(err).splitlines()
    assert lines[0] == f"{bad}: 3 problems:"
    assert lines[1].startswith("  unknown key(s) 'replication' (did you mean 'replications'?); allowed: ")
    assert lines[1].endswith(" (line 2)")
    assert lines[2] == "  factor 'vcpus': level 0 must be a positive integer (line 4)"
    assert lines[3] == (
        "  factor 'affinity': level 'pinnd' not allowed; use one of pinned, floating "
        "(did you mean 'pinned'?) (line 7)"
    )  # the level's own line
    assert [p.where for p in err.problems] == [
        ("replication",),
        ("factors", "vcpus", 1),
        ("factors", "affinity", 1),
    ]


def test_with_the_workload_every_problem_at_once(bad):
    with pytest.raises(DesignProblems) as exc:
        Design.from_yaml(bad, workload=get_workload("nqueens"))
    text = str(exc.value)
    assert text.startswith(f"{bad}: 6 problems:\n")
    for part in (
        "'replication'",
        "factor 'vcpus': level 0",
        "factor 'affinity': level 'pinnd'",
        "factor 'noise': level 'cpuu' not allowed; use none, cpu, memory, io, network "
        "(did you mean 'cpu'?) (line 8)",
        "factor 'board' level 99: 99 is not allowed; expected an integer from 4 to 18 (line 9)",
        "design factor 'bord' is neither a host factor",
    ):
        assert part in text, part
    assert text.count("\n  ") == 6


def test_labkit_run_says_them_all_before_anything_runs(bad, tmp_path, capsys):
    assert main(["run", str(bad), "--workload", "nqueens", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert f"labkit: error: {bad}: 6 problems:" in err and "(line 9)" in err
    assert not (tmp_path / "data").exists()


def test_validate_for_collects_every_bad_parameter_level_and_memory():
    d = Design.from_dict(
        {"factors": {"board": [2, 8, 40], "memory_mb": [1, 512], "link": ["fast", "gbe"]}, "seed": 1}
    )
    with pytest.raises(DesignProblems) as exc:
        d.validate_for(get_workload("nqueens"))
    assert [p.where for p in exc.value.problems] == [
        ("factors", "board", 0),
        ("factors", "board", 2),
        ("factors", "link", 0),
        ("factors", "memory_mb", 0),
    ]
    text = str(exc.value)
    assert text.startswith("design: 4 problems:\n  factor 'board' level 2: 2 is not allowed")
    assert "  factor 'link' level 'fast': 'fast' is not a link" in text
    need = get_workload("nqueens").min_memory_mb
    assert f"  factor 'memory_mb': level(s) [1] below the {need} MB that workload 'nqueens' needs" in text


def test_one_problem_reads_as_one_line_and_a_good_design_still_loads(tmp_path):
    with pytest.raises(ConfigError) as exc:
        Factor("vcpus", [1, 2, 2000])
    assert str(exc.value) == "factor 'vcpus': level 2000 above the maximum 1024"
    path = tmp_path / "ok.yaml"
    path.write_text("factors:\n  vcpus: [1, 2]\n  board: [8.0, 10]\nseed: 3\n")
    d = Design.from_yaml(path, workload=get_workload("nqueens"))
    d.validate_for(get_workload("nqueens"))
    assert d.factors[1].levels == (8, 10) and d.lines[("factors", "board", 0)] == 3


def test_yaml_lines_of_keys_factors_and_levels(bad):
    lines = yaml_lines(bad)
    assert lines[("seed",)] == 11 and lines[("factors", "bord")] == 10
    assert lines[("factors", "affinity")] == 5 and lines[("factors", "affinity", 0)] == 6
    assert yaml_lines(bad.parent / "missing.yaml") == {}
