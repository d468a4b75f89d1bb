"""bonnie++ parser against real captured output (tests/unit/fixtures/bonnie: bonnie++ 2.00a,
`bonnie++ -d DIR -s 256 -r 128 -n 0 -u root -q -f -m labkit`, on this project's machine)."""

from pathlib import Path

import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads import get_workload
from labkit.workloads.bonnie import parse

FIX = Path(__file__).parent / "fixtures" / "bonnie"


def test_block_write_and_rewrite_read_from_the_end_of_the_csv_line():
    rows = {r.metric: (r.value, r.unit) for r in parse((FIX / "bonnie_256m.csv").read_text())}
    # the read and the seeks ran too fast to time ('+++++'): left out, never a number
    assert rows == {"write_kib_per_s": (325426.0, "KiB/s"), "rewrite_kib_per_s": (425156.0, "KiB/s")}


def test_bad_output_raises():
    with pytest.raises(BenchmarkError, match="no CSV result line"):
        parse("Writing intelligently...done\n")
    with pytest.raises(BenchmarkError, match="too few"):
        parse("1.98,2.00a,labkit,1\n")
    line = (FIX / "bonnie_256m.csv").read_text().replace("325426", "+++++").replace("425156", "+++++")
    with pytest.raises(BenchmarkError, match="timed none"):
        parse(line)
    # the response (block write) untimed while the rewrite was: the run fails, saying what to change
    with pytest.raises(BenchmarkError, match="did not time the block write.*direct"):
        parse((FIX / "bonnie_256m.csv").read_text().replace("325426", "+++++"))
    with pytest.raises(BenchmarkError, match="'12x' is not a number"):
        parse((FIX / "bonnie_256m.csv").read_text().replace("325426", "12x"))


def test_command_and_parameters():
    w = get_workload("bonnie", size_mb=64)
    argv = w.command(w.params, "/w/bonnie")
    assert argv[:3] == ["bonnie++", "-d", "/w/bonnie"]
    assert argv[argv.index("-s") + 1] == "64" and argv[argv.index("-r") + 1] == "32"
    assert argv[-1] == "-D"  # O_DIRECT by default: the disk, not the page cache
    buffered = get_workload("bonnie", size_mb=64, direct="false")
    assert "-D" not in buffered.command(buffered.params, "/w")
    with pytest.raises(ConfigError, match="at least twice ram_mb"):
        w.command({**w.params, "ram_mb": 40}, "/w")
    with pytest.raises(ConfigError):
        get_workload("bonnie", size_mb=0)


def test_file_creation_results_and_concurrent_copies():
    """Seed 004's form (section 7.3: 25, 50 and 100 files; Figure 7.5: four processes): a real
    bonnie++ 2.00a run captured here with `bonnie++ -d DIR -s 64 -r 32 -n 4 -f -q -u root -m labkit
    -c 4 -D` (bonnie_64m_n4_c4.txt); the untimed rates ('+++++') are left out."""
    rows = {r.metric: (r.value, r.unit) for r in parse((FIX / "bonnie_64m_n4_c4.txt").read_text())}
    assert rows == {
        "write_kib_per_s": (99475.0, "KiB/s"),
        "create_per_s": (1007.0, "files/s"),
        "random_create_per_s": (1285.0, "files/s"),
    }


def test_files_and_concurrency_reach_the_command_and_are_checked():
    w = get_workload("bonnie", size_mb=64, files=25, concurrency=4)
    argv = w.command(w.params, "/w")
    assert argv[argv.index("-n") + 1] == "25" and argv[argv.index("-c") + 1] == "4"
    plain = get_workload("bonnie", size_mb=64)
    argv = plain.command(plain.params, "/w")
    assert argv[argv.index("-n") + 1] == "0" and "-c" not in argv  # the default: no file tests, one copy
    for key, bad in (
        ("files", -1),
        ("files", 1001),
        ("files", "25 -x"),
        ("concurrency", 0),
        ("concurrency", 65),
    ):
        with pytest.raises(ConfigError, match=f"bonnie.*{key}.*an integer from"):
            get_workload("bonnie", **{key: bad})
