"""require_tool (labkit/workloads/base.py): a missing tool is a BenchmarkError naming its Debian
package; an exec that exits 0 with its output lost (LXD under load, lxd#11890: it failed 1 of 40
overhead-network runs on 2026-11-29) is asked again rather than read as "not installed"."""

import pytest

from labkit.backends.base import ExecResult
from labkit.errors import BenchmarkError
from labkit.workloads.base import LOST_OUTPUT_TRIES, require_tool


class Replies:
    """An instance whose exec answers from a list of (exit code, stdout), counting the calls."""

    name = "lk-test-0"

    def __init__(self, *replies):
        self.replies, self.calls = list(replies), 0

    def exec(self, argv, check=True, timeout=None, env=None):
        code, out = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        return ExecResult(argv, code, out, "", 0.01, self.name)


def test_a_found_tool_is_its_path_at_the_first_ask():
    inst = Replies((0, "/usr/bin/iperf3\n"))
    assert require_tool(inst, "iperf3", "iperf3") == "/usr/bin/iperf3" and inst.calls == 1


def test_lost_output_is_asked_again():
    inst = Replies((0, ""), (0, "/usr/bin/iperf3\n"))
    assert require_tool(inst, "iperf3", "iperf3") == "/usr/bin/iperf3" and inst.calls == 2


def test_a_missing_tool_names_its_package_without_asking_again():
    inst = Replies((1, ""))
    with pytest.raises(BenchmarkError, match="'ab' is not installed in lk-test-0; .*'apache2-utils'"):
        require_tool(inst, "ab", "apache2-utils")
    assert inst.calls == 1


def test_output_lost_every_time_is_an_error_after_the_tries():
    inst = Replies((0, ""))
    with pytest.raises(BenchmarkError, match="exited 0 and printed nothing 3 times .*output was lost"):
        require_tool(inst, "iperf3", "iperf3")
    assert inst.calls == LOST_OUTPUT_TRIES == 3
