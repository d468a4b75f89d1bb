"""EXPERIMENTAL PARSEC / NPB runners: parsers against the suites' documented report formats."""
import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads import get_workload
from labkit.workloads.external import EXPERIMENTAL, Npb, Parsec, parse_npb, parse_parsec

from .fixtures.fakes import FakeInstance, fixture


def test_marked_experimental():
    assert EXPERIMENTAL and Parsec.experimental and Npb.experimental
    assert "EXPERIMENTAL" in Parsec.__doc__ and "bring" in Parsec.__doc__


def test_install_path_is_required_and_says_so():
    with pytest.raises(ConfigError, match="does not ship PARSEC"):
        get_workload("parsec")
    with pytest.raises(ConfigError, match="does not ship the NAS"):
        get_workload("npb")


def test_parse_parsec():
    r = {m.metric: (m.value, m.unit) for m in parse_parsec(fixture("parsec", "blackscholes_simsmall.txt"))}
    assert r == {"wall_time_s": (0.062, "s"), "roi_time_s": (0.011, "s")}


def test_parsec_minutes_and_no_hooks():
    text = fixture("parsec", "blackscholes_simsmall.txt").replace("real\t0m0.062s", "real\t2m3.500s")
    text = "\n".join(line for line in text.splitlines() if "ROI" not in line)
    r = {m.metric: m.value for m in parse_parsec(text)}
    assert r == {"wall_time_s": 123.5}


def test_parsec_truncated_and_foreign():
    with pytest.raises(BenchmarkError, match="truncated"):
        parse_parsec(fixture("parsec", "blackscholes_truncated.txt"), command=["parsecmgmt"])
    with pytest.raises(BenchmarkError, match="not parsecmgmt"):
        parse_parsec(fixture("npb", "ep_S_omp.txt"))
    text = fixture("parsec", "blackscholes_simsmall.txt").replace("real\t0m0.062s", "real\tabc")
    with pytest.raises(BenchmarkError, match="real"):
        parse_parsec(text)


def test_parse_npb_omp():
    rows, info = parse_npb(fixture("npb", "ep_S_omp.txt"))
    assert {r.metric: (r.value, r.unit) for r in rows} == {"time_s": (1.05, "s"), "mops_total": (31.87, "Mop/s")}
    assert info == {"benchmark": "EP", "class": "S", "version": "3.4.2", "threads": 2}


def test_parse_npb_multizone_mpi():
    rows, info = parse_npb(fixture("npb", "bt_mz_C_mpi.txt"))
    assert rows[0].value == 7.67 and rows[1].value == 316523.02
    assert info["benchmark"] == "BT-MZ" and info["processes"] == 36


def test_npb_failed_verification_is_not_a_measurement():
    with pytest.raises(BenchmarkError, match="UNSUCCESSFUL"):
        parse_npb(fixture("npb", "ep_S_unsuccessful.txt"))


def test_npb_truncated_and_malformed():
    text = fixture("npb", "ep_S_omp.txt")
    with pytest.raises(BenchmarkError, match="Benchmark Completed"):
        parse_npb(text[: text.index("EP Benchmark Completed")], command=["ep.S.x"])
    with pytest.raises(BenchmarkError, match="Mop/s total"):
        parse_npb(text[: text.index("Mop/s total")])
    with pytest.raises(BenchmarkError, match="non-numeric"):
        parse_npb(text.replace("1.05", "*****"))
    with pytest.raises(BenchmarkError):
        parse_npb("")


def test_npb_run_sets_threads_and_launcher():
    inst = FakeInstance({"ep.S.x": (0, fixture("npb", "ep_S_omp.txt"))})
    w = Npb(install_path="/opt/NPB3.4.2/NPB3.4-OMP", benchmark="ep", klass="s")
    w.prepare(inst)
    rows = w.run(inst, w.params_for({"threads": 2}, 4))
    assert inst.calls[-1] == ["/opt/NPB3.4.2/NPB3.4-OMP/bin/ep.S.x"] and rows[0].metric == "time_s"
    assert w.version(inst)["npb"] == "3.4.2"
    mpi = Npb(install_path="/opt/npb", mpirun="mpirun -np {threads}")
    inst2 = FakeInstance({"ep.S.x": (0, fixture("npb", "ep_S_omp.txt"))})
    mpi.run(inst2, mpi.params_for({}, 3))
    assert inst2.calls[-1] == ["mpirun", "-np", "3", "/opt/npb/bin/ep.S.x"]
    assert Npb(install_path="/opt/npb").version(inst2)["npb"].startswith("unknown")


def test_missing_install_is_explained():
    inst = FakeInstance({"test -e": (1, "")})
    with pytest.raises(BenchmarkError, match="does not download or build"):
        Parsec(install_path="/opt/parsec-3.0").prepare(inst)
    with pytest.raises(BenchmarkError, match="experimental"):
        Npb(install_path="/opt/npb").prepare(inst)


def test_parsec_run_command():
    inst = FakeInstance({"parsecmgmt": (0, fixture("parsec", "blackscholes_simsmall.txt")),
                         "cat /opt/parsec-3.0/version": (0, "3.0-beta-20150206\n")})
    w = Parsec(install_path="/opt/parsec-3.0/", package="swaptions", input="native")
    rows = w.run(inst, w.params_for({}, 8))
    assert inst.calls[-1] == ["/opt/parsec-3.0/bin/parsecmgmt", "-a", "run", "-p", "swaptions", "-i",
                              "native", "-n", "8", "-c", "gcc"]
    assert rows[0].metric == "wall_time_s"
    assert w.version(inst)["parsec"] == "3.0-beta-20150206"
