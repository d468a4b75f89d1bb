"""Thread scaling helpers (study 000: threads 1..8 as a factor)."""

import pytest

from labkit.design.host_scaling import thread_levels
from labkit.errors import ConfigError
from labkit.workloads import get_workload
from labkit.workloads.scaling import resolve_threads


@pytest.mark.parametrize(
    "vcpus,levels", [(1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8]), (12, [1, 2, 4, 8, 12])]
)
def test_thread_levels(vcpus, levels):
    assert thread_levels(vcpus) == levels


def test_thread_levels_without_max():
    assert thread_levels(6, include_max=False) == [1, 2, 4]


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", True, None])
def test_thread_levels_rejects(bad):
    with pytest.raises(ConfigError):
        thread_levels(bad)


def test_resolve_threads():
    assert resolve_threads({"threads": None, "vcpus": 4}) == 4
    assert resolve_threads({"vcpus": 3}) == 3
    assert resolve_threads({"threads": 2, "vcpus": 4}) == 2
    assert resolve_threads({"threads": "8", "vcpus": 4}) == 8  # oversubscription is a legal level
    assert resolve_threads({"threads": 2.0, "vcpus": 4}) == 2
    with pytest.raises(ConfigError, match="stream"):
        resolve_threads({"threads": 0, "vcpus": 4}, "stream")


@pytest.mark.parametrize(
    "name,extra",
    [
        ("sysbench", {}),
        ("stream", {}),
        ("nqueens", {}),
        ("parsec", {"install_path": "/p"}),
        ("npb", {"install_path": "/n"}),
    ],
)
def test_parallel_workloads_accept_a_threads_factor(name, extra):
    w = get_workload(name, **extra)
    assert w.accepts("threads")
    assert w.params_for({"threads": 2}, vcpus=4)["threads"] == 2
    assert w.params_for({}, vcpus=4)["threads"] is None  # None = the instance's vCPUs
