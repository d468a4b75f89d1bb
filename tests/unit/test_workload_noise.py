"""labkit.run.noise with a scripted backend: order of operations, confirmation, teardown on every path."""

import pytest

from labkit.core.instance import InstanceSpec
from labkit.errors import BackendError, BenchmarkError, ConfigError
from labkit.run.noise import KINDS, load_command, neighbours

from .fixtures.fakes import FakeInstance

RUNNING = (None, "")  # the load runs until it is killed


class FakeBackend:
    name = "fake"

    def __init__(self, answers=None, fail_on=None):
        self.answers = answers or {}
        self.fail_on = fail_on
        self.made = []

    def provision(self, spec, *, prefix="labkit"):
        if self.fail_on is not None and len(self.made) == self.fail_on:
            raise BackendError("no more room")
        inst = FakeInstance(self.answers, workdir=f"/w{len(self.made)}", spec=spec)
        inst.name = f"{prefix}-{len(self.made)}"
        self.made.append(inst)
        return [inst]


def answers(running=RUNNING, workers="2\n", **extra):
    base = {
        "labkit-noise.log 2>&1": running,
        "pgrep": (0, workers),
        "command -v": (0, "/usr/bin/tool\n"),
        "--version": (0, "stress-ng, version 0.15.06\n"),
    }
    base.update(extra)
    return base


def test_none_does_nothing():
    be = FakeBackend()
    with neighbours(be, InstanceSpec(), "none") as group:
        assert group == []
    assert be.made == []


def test_cpu_neighbours_start_confirm_stop_teardown():
    be = FakeBackend(answers())
    spec = InstanceSpec(vcpus=2, memory_mb=256, count=3)
    with neighbours(be, spec, "cpu", count=2) as group:
        assert len(group) == 2 and len(be.made) == 2
        for inst in be.made:
            assert inst.spec.count == 1 and inst.spec.vcpus == 2  # same spec, one each
            assert inst.ran("stress-ng --cpu 2") and inst.ran("pgrep -c stress-ng")
            assert not inst.ran("kill") and not inst._destroyed
        assert group[0]["kind"] == "cpu" and group[0]["workers"] == 2
        assert group[0]["tool_version"] == "stress-ng 0.15.06"
        assert group.instances == be.made
    for inst in be.made:
        assert inst.ran("kill sh -c") and inst._destroyed


def test_teardown_when_the_main_run_fails():
    be = FakeBackend(answers())
    with pytest.raises(RuntimeError):
        with neighbours(be, InstanceSpec(), "memory"):
            raise RuntimeError("main run crashed")
    assert be.made[0].ran("kill sh -c") and be.made[0]._destroyed


def test_load_that_dies_is_refused_and_torn_down():
    be = FakeBackend(answers(running=(1, "")))
    with pytest.raises(BackendError, match="not running: exited"):
        with neighbours(be, InstanceSpec(), "io"):
            pytest.fail("must not yield")
    assert be.made[0]._destroyed


def test_load_without_workers_times_out():
    be = FakeBackend(answers(workers="1\n"))
    with pytest.raises(BackendError, match="expected >= 2"):
        with neighbours(be, InstanceSpec(), "cpu", confirm_s=0.3):
            pass
    assert be.made[0]._destroyed


def test_missing_tool_names_package_and_tears_down():
    be = FakeBackend(answers(**{"command -v": (1, "")}))
    with pytest.raises(BenchmarkError, match="Debian package 'iperf3'"):
        with neighbours(be, InstanceSpec(), "network"):
            pass
    assert be.made[0]._destroyed


def test_provision_failure_tears_down_those_made():
    be = FakeBackend(answers(), fail_on=1)
    with pytest.raises(BackendError, match="no more room"):
        with neighbours(be, InstanceSpec(), "cpu", count=2):
            pass
    assert len(be.made) == 1 and be.made[0]._destroyed


def test_bad_arguments():
    with pytest.raises(ConfigError, match="noise kind"):
        with neighbours(FakeBackend(), InstanceSpec(), "disk"):
            pass
    with pytest.raises(ConfigError, match="command"):
        with neighbours(FakeBackend(), InstanceSpec(), "command"):
            pass
    with pytest.raises(ConfigError):
        with neighbours(FakeBackend(), InstanceSpec(), "cpu", count=-1):
            pass


def test_load_commands():
    spec = InstanceSpec(vcpus=2, memory_mb=1000)
    assert load_command("cpu", spec, "/w") == "stress-ng --cpu 2 --timeout 3600s"
    assert "--vm 2 --vm-bytes 200M" in load_command("memory", spec, "/w")
    assert "--temp-path /w" in load_command("io", spec, "/w", max_s=60) and "--timeout 60s" in load_command(
        "io", spec, "/w", max_s=60
    )
    net = load_command("network", spec, "/w", port=23456)
    assert "-B 127.0.0.1 -p 23456" in net and "-c 127.0.0.1 -p 23456" in net  # loopback only
    assert "sysbench cpu run" in load_command("command", spec, "/w", command="sysbench cpu run")
    assert set(KINDS) == {"none", "cpu", "memory", "io", "network", "command"}


def test_command_kind_runs_a_chosen_workload():
    be = FakeBackend(answers())
    with neighbours(be, InstanceSpec(), "command", command="sysbench cpu --time=5 run") as group:
        assert "sysbench cpu --time=5 run" in group[0]["command"]
    assert be.made[0]._destroyed
