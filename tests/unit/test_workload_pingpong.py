"""The ``pingpong`` workload's message size (seed 003 swept 1 B to 4 MB, section 4.2.1): checked
as a parameter and as a factor level with a ConfigError naming the key and the range, and handed
to the program as one decimal argv word. The real sweep across two instances is
tests/integration/test_pingpong_sweep.py."""

from __future__ import annotations

import pytest

from labkit.design import Design
from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads import get_workload, pingpong, workload_class
from labkit.workloads.base import Measurement


@pytest.mark.parametrize("bad", [0, -1, 4194305, 1.5, True, "4096; rm -rf /", "$(reboot)", "1e3", [8]])
def test_a_message_size_outside_1_byte_to_4_mib_is_refused_with_where(bad):
    with pytest.raises(ConfigError, match=r"pingpong.*message_bytes.*1 to 4194304"):
        get_workload("pingpong", message_bytes=bad)
    with pytest.raises(ConfigError, match=r"message_bytes.*1 to 4194304"):
        pingpong.program("/x/labkit-pingpong", bad)


def test_a_bad_level_of_the_message_size_factor_is_refused_before_any_run():
    d = Design.from_dict({"factors": {"message_bytes": [1, 8388608]}, "replications": 1}, source="d.yaml")
    with pytest.raises(ConfigError, match=r"message_bytes.*8388608.*1 to 4194304"):
        d.validate_for(workload_class("pingpong")())
    ok = Design.from_dict({"factors": {"message_bytes": [1, "4096", 4194304.0]}, "replications": 1})
    ok.validate_for(workload_class("pingpong")())


def test_the_size_is_one_decimal_argv_word():
    assert pingpong.program("/w/labkit-pingpong") == ["/w/labkit-pingpong"]
    assert pingpong.program("/w/labkit-pingpong", 4194304) == ["/w/labkit-pingpong", "4194304"]
    assert pingpong.program("/w/labkit-pingpong", "64") == ["/w/labkit-pingpong", "64"]


def test_run_group_passes_the_size_and_checks_the_output_is_for_it(monkeypatch):
    """The launch is replaced (no MPI here): what reaches mpirun, and that an output for another
    size is an error, not a measurement."""
    seen = {}

    def fake_launch(instances, argv, *, ranks, timeout, binaries, wdir):
        seen.update(argv=argv, ranks=ranks, binaries=binaries, wdir=wdir)
        out = (
            f"pingpong_message_bytes {seen.get('print', argv[-1])}\npingpong_latency_us 20.000\n"
            "pingpong_bandwidth_mb_per_s 51.200\n"
        )
        return type("R", (), {"stdout": out})(), wdir, 1.5

    monkeypatch.setattr(pingpong, "launch", fake_launch)
    monkeypatch.setattr(
        pingpong, "remove_launch_dir", lambda instances, wdir: seen.setdefault("removed", wdir)
    )
    monkeypatch.setattr(pingpong, "cached_binary", lambda: "/cache/labkit-pingpong")
    wl = get_workload("pingpong")
    rows = wl.run_group([object(), object()], {"message_bytes": 1024})
    assert seen["argv"] == [f"{seen['wdir']}/labkit-pingpong", "1024"] and seen["ranks"] == 2
    assert (
        seen["binaries"] == {"labkit-pingpong": "/cache/labkit-pingpong"} and seen["removed"] == seen["wdir"]
    )
    assert rows[:2] == [
        Measurement("pingpong_latency_us", 20.0, "us", 0),
        Measurement("pingpong_bandwidth_mb_per_s", 51.2, "MB/s", 0),
    ]
    assert rows[2].metric == "wall_time_s" and rows[2].value == 1.5
    seen["print"] = "8"
    with pytest.raises(BenchmarkError, match="not for 1024-byte messages"):
        wl.run_group([object(), object()], {"message_bytes": 1024})
