"""Regression tests of issue 13 (inputs): every bad design, YAML file, level, parameter or CLI
value is a ConfigError naming the file and key, in bounded time and memory (6, 7); N-queens
output for another board is a failure (10)."""

import math

import pytest

from labkit import cli
from labkit.cli.run import _parse_workload_params
from labkit.design import Design
from labkit.errors import BenchmarkError, ConfigError
from labkit.run.campaign import Campaign
from labkit.workloads import get_workload
from labkit.workloads.nqueens import check_solutions

BASE = {"factors": {"vcpus": [1, 2]}, "seed": 1}


def design_file(tmp_path, data: bytes | str, name="d.yaml"):
    p = tmp_path / name
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


# -- 6: design files -----------------------------------------------------------------------------
def test_anchor_bomb_is_refused(tmp_path):
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, cur in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")  # 9**9 leaves in ~500 bytes
    p = design_file(tmp_path, "\n".join(lines) + "\nfactors: {vcpus: *i}\n")
    assert p.stat().st_size < 600
    with pytest.raises(ConfigError, match=rf"{p}.*(aliases|expands to more than)"):
        Design.from_yaml(p)


def test_non_utf8_file_names_the_file(tmp_path):
    p = design_file(tmp_path, b"factors:\n  vcpus: [1, 2]\nname: caf\xe9\n")
    with pytest.raises(ConfigError, match=rf"{p}: not UTF-8"):
        Design.from_yaml(p)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000,
        "factors: " + "{a: " * 200 + "1" + "}" * 200,
        "a: 1\n---\nb: 2\n",
        "a: !!python/object/apply:os.system [id]\n",
        "factors: {vcpus: [2001-13-45, 2]}\n",
        "\t- bad",
    ],
)
def test_malformed_files_are_config_errors(tmp_path, text):
    p = design_file(tmp_path, text)
    with pytest.raises(ConfigError, match=str(p)):
        Design.from_yaml(p)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        Design.from_yaml(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "data, key",
    [
        ({"factors": {"affinity": [["pinned"], "floating"]}}, "affinity"),
        ({"factors": {"affinity": [{"a": 1}, "floating"]}}, "affinity"),
        ({"factors": {"vcpus": [{"x": 1}, 2]}}, "vcpus"),
        ({"factors": {"threads": [{"x": 1}, 2]}}, "threads"),
        ({**BASE, "replications": 200_000_000}, "replications"),
        ({**BASE, "replications": 2e8}, "replications"),
        ({**BASE, "replications": math.inf}, "replications"),
        ({"factors": {f"f{i}": [1, 2] for i in range(17)}}, "factors"),
        ({"factors": {"board": list(range(4, 100))}}, "board"),
        ({"factors": {"count": [1, 10**6]}}, "count"),
        ({"factors": {"vcpus": [1, 10**6]}}, "vcpus"),
        ({"factors": {"memory_mb": [512, 10**12]}}, "memory_mb"),
        ({"factors": {f"f{i}": list(range(10)) for i in range(6)}}, "runs"),
        ({**BASE, "seed": 2**70}, "seed"),
        ({**BASE, "seed": 1.5}, "seed"),
        ({**BASE, "name": ["x"]}, "name"),
        ({"factors": {"threads": [math.nan, 1]}}, "threads"),
        ({"factors": {"threads": ["x" * 10_000, 1]}}, "threads"),
    ],
)
def test_bad_values_are_config_errors_naming_the_key(data, key):
    with pytest.raises(ConfigError, match=key):
        Design.from_dict(data, source="d.yaml")


def test_deep_dict_is_a_config_error():
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(ConfigError, match="threads"):
        Design.from_dict({"factors": {"threads": [deep, 1]}})


# -- 7: levels and parameters checked against the workload's schema before the first run ---------
def test_levels_are_checked_against_the_workload_schema(tmp_path):
    d = Design.from_dict({"factors": {"board": [8, 25]}, "seed": 1}, source="d.yaml")
    with pytest.raises(ConfigError, match=r"d.yaml: factor 'board' level 25.*from 4 to 18"):
        Campaign(d, workload="nqueens", data_dir=tmp_path)
    d = Design.from_dict({"factors": {"threads": ["1; touch /tmp/x", 2]}, "seed": 1})
    with pytest.raises(ConfigError, match="threads"):
        Campaign(d, workload="nqueens", data_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_8_and_8_0_are_one_level(tmp_path):
    with pytest.raises(ConfigError, match="duplicate"):
        Design.from_dict({"factors": {"board": [8, 8.0]}})
    with pytest.raises(ConfigError, match="duplicate"):
        Design.from_dict({"factors": {"vcpus": [2, "2"]}})
    d = Design.from_dict({"factors": {"board": [8.0, 10]}, "seed": 1})
    Campaign(d, workload="nqueens", data_dir=tmp_path, campaign_id="b")
    assert d.factors[0].levels == (8, 10)  # canonical: integers


def test_param_text_follows_the_schema():
    w = _parse_workload_params(["argv=true", "timeout_s=5"], "command")
    assert w == {"argv": "true", "timeout_s": 5}
    assert _parse_workload_params(['argv=["sleep", "1"]'], "command") == {"argv": ["sleep", "1"]}
    assert _parse_workload_params(["board=8", "threads=null"], "nqueens") == {"board": 8, "threads": None}
    for bad in (["board=eight"], ["board=25"], ["board=8.5"], ["timeout_s=nan"], ["threads=-1"]):
        with pytest.raises(ConfigError, match=bad[0].split("=")[0]):
            _parse_workload_params(bad, "nqueens")
    with pytest.raises(ConfigError, match="unknown parameter"):
        get_workload("nqueens", **_parse_workload_params(["size=3"], "nqueens"))


@pytest.mark.parametrize("timeout", ["nan", "-1", "0", "inf", "1e308"])
def test_bad_timeouts_are_refused(tmp_path, timeout, capsys):
    p = design_file(tmp_path, "factors: {vcpus: [1, 2]}\nseed: 1\n")
    rc = cli.main(
        ["run", str(p), "--workload", "nqueens", "--timeout", timeout, "--data-dir", str(tmp_path / "data")]
    )
    assert rc == 2 and "run_timeout" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()
    with pytest.raises(ConfigError, match="run_timeout"):
        Campaign(Design.from_dict(BASE), workload="nqueens", run_timeout=float(timeout), data_dir=tmp_path)


def test_workload_parameters_are_checked_at_construction():
    with pytest.raises(ConfigError, match="argv"):
        get_workload("command", argv={"a": 1})
    with pytest.raises(ConfigError, match="patterns"):
        get_workload("fio", patterns=["seqread", "nope"])
    with pytest.raises(ConfigError, match="test"):
        get_workload("sysbench", test=["cpu"])


# -- 10: N-queens output for another board ---------------------------------------------------------
def test_nqueens_output_for_another_board_is_a_failure():
    with pytest.raises(BenchmarkError, match="board n=19 but board 8"):
        check_solutions(19, 5, ["nqueens", "8"], "nqueens n=19 threads=1 solutions=5 seconds=0.1", board=8)
    check_solutions(8, 92, board=8)


def test_control_characters_are_a_config_error(tmp_path):
    p = design_file(tmp_path, "\x7ffactors: {}\n")  # found by the reliability fuzz (yaml ReaderError)
    with pytest.raises(ConfigError, match=str(p)):
        Design.from_yaml(p)


def test_unicode_digit_level_is_a_config_error():
    with pytest.raises(ConfigError, match="vcpus"):
        Design.from_dict({"factors": {"vcpus": ["\u00b2", 1]}})  # "²".isdigit() but int("²") fails
