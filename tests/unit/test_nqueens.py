"""The N-queens solver against the known solution counts (OEIS A000170)."""
import subprocess

import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads import cbuild
from labkit.workloads.nqueens import KNOWN_SOLUTIONS, NQueens, check_solutions, parse


@pytest.mark.parametrize("n, expected", [(8, 92), (10, 724), (12, 14200), (14, 365596)])
@pytest.mark.parametrize("threads", [1, 3])
def test_solver_counts(n, expected, threads):
    binary = cbuild.build("nqueens.c")
    out = subprocess.run([str(binary), str(n), str(threads)], capture_output=True, text=True, check=True)
    got_n, got_threads, solutions, seconds = parse(out.stdout)
    assert (got_n, got_threads, solutions) == (n, threads, expected)
    assert seconds >= 0


def test_known_table_matches_issue():
    assert {k: KNOWN_SOLUTIONS[k] for k in (8, 10, 12, 14)} == {8: 92, 10: 724, 12: 14200, 14: 365596}


def test_wrong_count_is_a_failure():
    with pytest.raises(BenchmarkError, match="expected 92"):
        check_solutions(8, 91, ["nqueens", "8"], "nqueens n=8 threads=1 solutions=91 seconds=0.1")


@pytest.mark.parametrize("text", ["", "garbage", "nqueens n=8 threads=1 solutions=", "Segmentation fault"])
def test_unparseable_output(text):
    with pytest.raises(BenchmarkError, match="not understood"):
        parse(text, ["nqueens", "8"])


def test_solver_rejects_bad_arguments():
    binary = cbuild.build("nqueens.c")
    assert subprocess.run([str(binary), "2"], capture_output=True).returncode == 2
    assert subprocess.run([str(binary)], capture_output=True).returncode == 2


def test_build_is_cached():
    assert cbuild.build("nqueens.c") == cbuild.build("nqueens.c")


def test_board_parameter_validated():
    with pytest.raises(ConfigError, match="board"):
        NQueens(board=40)
    with pytest.raises(ConfigError, match="unknown parameter.*size"):
        NQueens(size=8)
