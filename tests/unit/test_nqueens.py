"""The N-queens solver against the known solution counts (OEIS A000170)."""

import subprocess

import pytest

from labkit.core import cbuild
from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads.nqueens import KNOWN_SOLUTIONS, NQueens, check_solutions, parse


@pytest.mark.parametrize("n, expected", [(8, 92), (10, 724), (12, 14200), (14, 365596)])
@pytest.mark.parametrize("threads", [1, 3])
def test_solver_counts(n, expected, threads):
    binary = cbuild.build("nqueens.c")
    out = subprocess.run([str(binary), str(n), str(threads)], capture_output=True, text=True, check=True)
    got_n, got_threads, solutions, seconds = parse(out.stdout)
    assert (got_n, got_threads, solutions) == (n, threads, expected)
    assert seconds >= 0


def _count_queens(n: int) -> int:
    """An independent count (plain backtracking over columns and diagonals) to check the table."""

    def place(row, cols, d1, d2):
        if row == n:
            return 1
        return sum(
            place(row + 1, cols | {c}, d1 | {row - c}, d2 | {row + c})
            for c in range(n)
            if c not in cols and row - c not in d1 and row + c not in d2
        )

    return place(0, frozenset(), frozenset(), frozenset())


@pytest.mark.parametrize("n", range(4, 10))
def test_known_table_against_an_independent_count(n):
    # OEIS A000170 for n <= 9, recounted here by a solver that shares no code with labkit's
    assert KNOWN_SOLUTIONS[n] == _count_queens(n)


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


def test_build_is_cached(monkeypatch, tmp_path):
    monkeypatch.setattr(cbuild, "CACHE", tmp_path)
    compiled = []
    real = cbuild.compile_c
    monkeypatch.setattr(cbuild, "compile_c", lambda *a, **kw: compiled.append(a) or real(*a, **kw))
    first = cbuild.build("nqueens.c")
    assert cbuild.build("nqueens.c") == first and first.is_file()
    assert len(compiled) == 1  # the second call found the cached binary: no compiler run
    cbuild.build("nqueens.c", flags=("-O1", "-pthread"))
    assert len(compiled) == 2  # other flags: another binary


def test_board_parameter_validated():
    with pytest.raises(ConfigError, match="board"):
        NQueens(board=40)
    with pytest.raises(ConfigError, match="unknown parameter.*size"):
        NQueens(size=8)
