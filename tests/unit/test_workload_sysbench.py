"""sysbench parsers against real captured outputs (tests/unit/fixtures/sysbench)."""

from pathlib import Path

import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads import get_workload
from labkit.workloads.base import Measurement
from labkit.workloads.sysbench import Sysbench, parse, parse_version

from .fixtures.fakes import FakeInstance

FIX = Path(__file__).parent / "fixtures" / "sysbench"


def fixture(name):
    return (FIX / name).read_text()


def as_dict(rows):
    return {r.metric: (r.value, r.unit) for r in rows}


def test_cpu():
    rows = as_dict(parse("cpu", fixture("sysbench_cpu.txt")))
    assert rows["events_per_s"] == (2229.79, "events/s")
    assert rows["latency_avg_ms"] == (0.88, "ms")
    assert rows["latency_p95_ms"] == (4.25, "ms")


def test_memory():
    rows = as_dict(parse("memory", fixture("sysbench_memory.txt")))
    assert rows["mib_per_s"] == (5692.13, "MiB/s")
    assert rows["ops_per_s"] == (5828745.22, "ops/s")


def test_threads_events_per_second_from_totals():
    rows = as_dict(parse("threads", fixture("sysbench_threads.txt")))
    assert rows["events_per_s"][0] == pytest.approx(2721 / 2.0005)
    assert rows["latency_avg_ms"] == (1.47, "ms")


@pytest.mark.parametrize(
    "name,read,written",
    [("sysbench_fileio_rndrw.txt", 273.53, 182.35), ("sysbench_fileio_seqrd.txt", 8503.53, 0.0)],
)
def test_fileio(name, read, written):
    rows = as_dict(parse("fileio", fixture(name)))
    assert rows["read_mib_per_s"] == (read, "MiB/s")
    assert rows["write_mib_per_s"] == (written, "MiB/s")
    assert set(rows) == {"read_mib_per_s", "write_mib_per_s", "reads_per_s", "writes_per_s", "fsyncs_per_s"}


def test_instance_index_is_carried():
    assert all(r.instance == 3 for r in parse("cpu", fixture("sysbench_cpu.txt"), instance=3))


@pytest.mark.parametrize(
    "test,name",
    [
        ("cpu", "sysbench_cpu.txt"),
        ("memory", "sysbench_memory.txt"),
        ("threads", "sysbench_threads.txt"),
        ("fileio", "sysbench_fileio_rndrw.txt"),
    ],
)
def test_truncated_output_raises_with_command_and_tail(test, name):
    text = fixture(name)
    cut = text[: text.index("General statistics") - 5]
    with pytest.raises(BenchmarkError) as err:
        parse(test, cut, command=["sysbench", test, "run"])
    assert err.value.command == ["sysbench", test, "run"]
    assert "Threads started" in err.value.output_tail or "sysbench" in err.value.output_tail


@pytest.mark.parametrize("test", ["cpu", "memory", "threads", "fileio"])
def test_malformed_output_raises(test):
    with pytest.raises(BenchmarkError):
        parse(test, "FATAL: unknown option\nGeneral statistics:\n garbage")
    with pytest.raises(BenchmarkError):
        parse(test, "")


def test_wrong_test_output_raises():
    # a cpu report has no memory throughput line
    with pytest.raises(BenchmarkError, match="MiB transferred"):
        parse("memory", fixture("sysbench_cpu.txt"))


def test_cut_inside_latency_block():
    text = fixture("sysbench_cpu.txt")
    with pytest.raises(BenchmarkError):
        parse("cpu", text[: text.index("95th percentile")])


def test_version():
    assert parse_version(fixture("version.txt")) == "1.0.20"
    assert parse_version(fixture("sysbench_cpu.txt")) == "1.0.20"
    with pytest.raises(BenchmarkError):
        parse_version("bash: sysbench: command not found")


def test_commands_and_threads_default_to_vcpus():
    w = get_workload("sysbench", test="cpu", cpu_max_prime=200000)
    assert w.response == "events_per_s"
    argv = w.command(w.params_for({}, vcpus=4))
    assert argv[:3] == ["sysbench", "cpu", "--threads=4"]
    assert "--cpu-max-prime=200000" in argv and argv[-1] == "run"
    argv = w.command(w.params_for({"threads": 1}, vcpus=4))
    assert "--threads=1" in argv
    assert Sysbench(test="memory").response == "mib_per_s"
    assert Sysbench(test="fileio").response == "read_mib_per_s"
    fio = Sysbench(test="fileio", fileio_mode="seqwr")
    argv = fio.command(fio.params_for({}, 2))
    assert "--file-test-mode=seqwr" in argv and "--file-total-size=64M" in argv


def test_bad_parameters():
    with pytest.raises(ConfigError, match="test"):
        Sysbench(test="disk")
    with pytest.raises(ConfigError, match="unknown parameter"):
        Sysbench(bogus=1)
    w = Sysbench()
    with pytest.raises(ConfigError, match="threads"):
        w.command(w.params_for({"threads": 0}, 2))
    with pytest.raises(ConfigError, match="fileio_mode"):
        w.command(w.params_for({"test": "fileio", "fileio_mode": "x"}, 2))


def test_fileio_run_prepares_and_always_cleans_up():
    inst = FakeInstance({"run": (0, fixture("sysbench_fileio_rndrw.txt"))})
    rows = Sysbench(test="fileio").run(inst, {"vcpus": 1})
    assert as_dict(rows)["read_mib_per_s"][0] == 273.53
    assert any("prepare" in " ".join(c) for c in inst.calls)
    assert inst.calls[-1] == ["rm", "-rf", "/work/sysbench-fileio"]
    bad = FakeInstance({"run": (0, "truncated")})
    with pytest.raises(BenchmarkError):
        Sysbench(test="fileio").run(bad, {"vcpus": 1})
    assert bad.calls[-1] == ["rm", "-rf", "/work/sysbench-fileio"]


def test_missing_tool_names_debian_package():
    inst = FakeInstance({"command -v": (1, "")})
    with pytest.raises(BenchmarkError, match="'sysbench'.*Debian package 'sysbench'"):
        Sysbench().prepare(inst)


def test_nonzero_exit_becomes_benchmark_error():
    inst = FakeInstance({"sysbench cpu": (1, "FATAL: something broke")})
    with pytest.raises(BenchmarkError, match="exit 1") as err:
        Sysbench().run(inst, {"vcpus": 1})
    assert "FATAL" in err.value.output_tail


def test_rows_are_measurements():
    assert all(isinstance(r, Measurement) for r in parse("cpu", fixture("sysbench_cpu.txt")))


def test_cpu_fixed_work_times_the_events():
    """``events``: a fixed amount of work with no time limit; the response is the time taken
    (fixture: `sysbench cpu --threads=1 --time=0 --events=2000 --cpu-max-prime=10000 run`)."""
    w = Sysbench(test="cpu", events=2000)
    assert w.response == "total_time_s"
    argv = w.command(w.params_for({}, vcpus=1))
    assert "--time=0" in argv and "--events=2000" in argv and argv[-1] == "run"
    assert not any(a.startswith("--time=") and a != "--time=0" for a in argv)
    rows = as_dict(parse("cpu", fixture("sysbench_cpu_events.txt")))
    assert rows["total_time_s"] == (4.2038, "s")
    assert rows["events_per_s"] == (475.63, "events/s")
    assert as_dict(parse("cpu", fixture("sysbench_cpu.txt")))["total_time_s"] == (2.048, "s")
    with pytest.raises(ConfigError, match="'events'.*for test 'cpu', not 'memory'"):
        Sysbench(test="memory", events=10)
    with pytest.raises(ConfigError, match="events"):
        Sysbench(test="cpu", events=0)
