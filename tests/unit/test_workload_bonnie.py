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
    assert argv[-1] == "-D"          # O_DIRECT by default: the disk, not the page cache
    buffered = get_workload("bonnie", size_mb=64, direct="false")
    assert "-D" not in buffered.command(buffered.params, "/w")
    with pytest.raises(ConfigError, match="at least twice ram_mb"):
        w.command({**w.params, "ram_mb": 40}, "/w")
    with pytest.raises(ConfigError):
        get_workload("bonnie", size_mb=0)
