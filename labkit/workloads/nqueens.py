"""N-queens: labkit's own multi-threaded C solver (study 002's CPU-bound workload).

The solver (csrc/nqueens.c) is compiled once on the controller, statically, and
copied into each instance. Threads default to the instance's vCPUs. The
solution count is checked against the known counts (OEIS A000170): a wrong
count is a failed run, never a measurement.

Metrics: ``wall_time_s`` (the response: the solver's own monotonic clock from
first thread start to last join) and ``solutions``. With ``iterations`` > 1 the solver solves the
board that many times in one process, each solve timed on its own: one ``wall_time_s`` row per
iteration (``Measurement.iteration`` 1-based, so warm-up can be seen and cut), every solve's
count checked, ``solutions`` once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core import cbuild
from ..errors import BenchmarkError, tail
from .base import Measurement, Workload, run_checked
from .params import THREADS, TIMEOUT, Int

if TYPE_CHECKING:
    from ..backends.base import Instance

# OEIS A000170: number of ways to place n non-attacking queens on an n x n board.
KNOWN_SOLUTIONS = {
    4: 2,
    5: 10,
    6: 4,
    7: 40,
    8: 92,
    9: 352,
    10: 724,
    11: 2680,
    12: 14200,
    13: 73712,
    14: 365596,
    15: 2279184,
    16: 14772512,
    17: 95815104,
    18: 666090624,
}

_LINE = re.compile(r"nqueens n=(\d+) threads=(\d+) solutions=(\d+) seconds=([0-9.]+)(?: iteration=(\d+))?")


def parse(output: str, command: Sequence[str] | None = None) -> tuple[int, int, int, float]:
    """(n, threads, solutions, seconds) from the solver's output line."""
    m = _LINE.search(output or "")
    if not m:
        raise BenchmarkError("N-queens output not understood", command, tail(output))
    return int(m[1]), int(m[2]), int(m[3]), float(m[4])


def parse_iterations(
    output: str, iterations: int, command: Sequence[str] | None = None
) -> list[tuple[int, int, int, float]]:
    """(n, threads, solutions, seconds) of each of ``iterations`` solves, in order; BenchmarkError
    when a line is missing or out of order."""
    found = [
        (int(m[5]), int(m[1]), int(m[2]), int(m[3]), float(m[4]))
        for m in _LINE.finditer(output or "")
        if m[5] is not None
    ]
    if [f[0] for f in found] != list(range(1, iterations + 1)):
        raise BenchmarkError(
            f"N-queens output has iterations {[f[0] for f in found][:20]}, expected 1..{iterations}",
            command,
            tail(output),
        )
    return [f[1:] for f in found]


def check_solutions(
    n: int,
    solutions: int,
    command: Sequence[str] | None = None,
    output: str = "",
    *,
    board: int | None = None,
) -> None:
    """Raise BenchmarkError if the output is for another board than ``board`` (when given) or
    ``solutions`` is not the known count for board ``n``."""
    if board is not None and n != board:
        raise BenchmarkError(
            f"N-queens output is for board n={n} but board {board} was asked: wrong result",
            command,
            tail(output),
        )
    expected = KNOWN_SOLUTIONS.get(n)
    if expected is not None and solutions != expected:
        raise BenchmarkError(
            f"N-queens n={n} gave {solutions} solutions, expected {expected}: wrong result",
            command,
            tail(output),
        )


class NQueens(Workload):
    """Count all solutions of the n-queens problem on a ``board`` x ``board`` board.

    Parameters: ``board`` (4..18, default 15), ``threads`` (default: the
    instance's vCPUs), ``timeout_s`` (kill the solver after this long, default 3600),
    ``iterations`` (solves in one process, default 1; above 1 each is a row with its iteration).
    """

    name = "nqueens"
    response = "wall_time_s"
    timed_metrics = ("wall_time_s",)
    length_param = "board"
    defaults = {"board": 15, "threads": None, "timeout_s": 3600, "iterations": 1}
    schema = {"board": Int(4, 18), "threads": THREADS, "timeout_s": TIMEOUT, "iterations": Int(1, 100_000)}
    min_memory_mb = 8
    remote_path = "labkit-nqueens"

    def prepare(self, instance: Instance) -> None:
        binary = cbuild.build("nqueens.c")
        instance.exec(["mkdir", "-p", instance.workdir])
        instance.put(binary, f"{instance.workdir}/{self.remote_path}")

    def run(self, instance: Instance, params: dict) -> list[Measurement]:
        board = self.check_param("board", params.get("board", self.params["board"]))
        threads = params.get("threads") or params["vcpus"]
        iterations = self.check_param("iterations", params.get("iterations") or 1)
        cmd = [f"{instance.workdir}/{self.remote_path}", str(board), str(int(threads))]
        if iterations > 1:
            cmd.append(str(iterations))
        res = run_checked(instance, cmd, timeout=params.get("timeout_s"))
        if iterations == 1:
            n, _, solutions, seconds = parse(res.stdout, cmd)
            check_solutions(n, solutions, cmd, res.stdout, board=board)
            return [
                Measurement("wall_time_s", seconds, "s", instance.index),
                Measurement("solutions", float(solutions), "count", instance.index),
            ]
        solves = parse_iterations(res.stdout, iterations, cmd)
        for n, _, solutions, _ in solves:
            check_solutions(n, solutions, cmd, res.stdout, board=board)
        return [
            Measurement("wall_time_s", seconds, "s", instance.index, i)
            for i, (_, _, _, seconds) in enumerate(solves, start=1)
        ] + [Measurement("solutions", float(solves[0][2]), "count", instance.index)]

    def describe(self) -> dict:
        """As every workload's, without ``iterations`` at its default (1), so that a campaign stored
        before iterations existed resumes."""
        out = super().describe()
        if out["params"].get("iterations") == 1:
            out["params"] = {k: v for k, v in out["params"].items() if k != "iterations"}
        return out

    def version(self, instance: Instance) -> dict:
        return {"nqueens": "labkit-" + cbuild.build("nqueens.c").parent.name}
