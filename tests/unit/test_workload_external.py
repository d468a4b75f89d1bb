"""EXPERIMENTAL PARSEC / NPB runners.

The NPB parser and the PARSEC hooks parser are tested on output captured from the programs of
tests/support (``python -m tests.support.capture``: npb_like.c as 2 MPI ranks across two local
instances, and with 2 OpenMP threads; parsec_like.c with 2 threads), which print NPB 3.4's
report format and PARSEC's hooks lines; tests/integration/test_npb_parsec.py runs them through
the workloads on real backends. The parsecmgmt wrapper's fixtures (``parsec/blackscholes_*``)
are reconstructed from parsecmgmt's documented run log (no program here prints it).
"""

import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads import get_workload
from labkit.workloads.external import Npb, Parsec, parse_npb, parse_parsec, parse_parsec_hooks

from .fixtures.fakes import FakeInstance, fixture

MPI = fixture("npb", "zs_S_mpi_2ranks.txt")
OMP = fixture("npb", "zs_S_omp_2threads.txt")
HOOKS = fixture("parsec", "parsec_like_2threads.txt")


@pytest.mark.parametrize(
    "workload",
    [
        Parsec(binary="/opt/p/bin/parsec_like"),
        Parsec(install_path="/opt/parsec-3.0"),
        Npb(install_path="/opt/npb"),
    ],
)
def test_experimental_runners_say_so_in_every_run(workload):
    # what a run stores of the workload (its version facts) marks the runner experimental
    assert workload.experimental and workload.version(FakeInstance())["experimental"] is True


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
        parse_parsec(OMP)
    text = fixture("parsec", "blackscholes_simsmall.txt").replace("real\t0m0.062s", "real\tabc")
    with pytest.raises(BenchmarkError, match="real"):
        parse_parsec(text)


def test_parse_parsec_hooks_of_a_threaded_run():
    rows = parse_parsec_hooks(HOOKS, ["parsec_like"], 1, threads=2)
    assert [(r.metric, r.value, r.unit, r.instance) for r in rows] == [
        ("roi_time_s", 0.088, "s", 1),
        ("threads", 2, "count", 1),
    ]
    with pytest.raises(BenchmarkError, match="says 2 threads, the run asked for 4"):
        parse_parsec_hooks(HOOKS, threads=4)


def test_parsec_hooks_truncated_unhooked_and_untimed():
    with pytest.raises(BenchmarkError, match="truncated"):
        parse_parsec_hooks(HOOKS[: HOOKS.index("[HOOKS] Terminating")])
    with pytest.raises(BenchmarkError, match="gcc-hooks"):
        parse_parsec_hooks("\n".join(line for line in HOOKS.splitlines() if "[HOOKS]" not in line))
    with pytest.raises(BenchmarkError, match="ENABLE_TIMING"):
        parse_parsec_hooks("\n".join(line for line in HOOKS.splitlines() if "ROI:" not in line))
    with pytest.raises(BenchmarkError):
        parse_parsec_hooks("")


def test_parse_npb_mpi_report():
    rows, info = parse_npb(MPI)
    assert {r.metric: (r.value, r.unit) for r in rows} == {
        "time_s": (0.18, "s"),
        "mops_total": (380.61, "Mop/s"),
    }
    assert info == {"benchmark": "ZS", "class": "S", "version": "labkit-test", "processes": 2}


def test_parse_npb_openmp_report():
    rows, info = parse_npb(OMP)
    assert {r.metric: r.value for r in rows} == {"time_s": 0.25, "mops_total": 267.56}
    assert info == {"benchmark": "ZS", "class": "S", "version": "labkit-test", "threads": 2}


def test_npb_failed_verification_is_not_a_measurement():
    with pytest.raises(BenchmarkError, match="verification UNSUCCESSFUL"):
        parse_npb(fixture("npb", "zs_S_mpi_2ranks_unsuccessful.txt"))


def test_npb_truncated_and_malformed():
    with pytest.raises(BenchmarkError, match="Benchmark Completed"):
        parse_npb(MPI[: MPI.index("ZS Benchmark Completed")], command=["zs.S.x"])
    with pytest.raises(BenchmarkError, match="Mop/s total"):
        parse_npb(MPI[: MPI.index("Mop/s total")])
    with pytest.raises(BenchmarkError, match="non-numeric"):
        parse_npb(MPI.replace("380.61", "************"))  # Fortran's f12.2 overflowing
    with pytest.raises(BenchmarkError):
        parse_npb("")


def test_npb_run_sets_threads_checks_the_report_and_launcher():
    inst = FakeInstance({"zs.S.x": (0, OMP)}, index=1)
    w = Npb(install_path="/opt/npb", benchmark="zs", klass="s")
    w.prepare(inst)
    rows = w.run(inst, w.params_for({"threads": 2}, 4))
    assert inst.calls[-1] == ["/opt/npb/bin/zs.S.x"]
    assert {(r.metric, r.value, r.instance) for r in rows} == {
        ("time_s", 0.25, 1),
        ("mops_total", 267.56, 1),
        ("threads", 2, 1),
    }
    assert w.version(inst)["npb"] == "labkit-test" and not w.spans({})
    with pytest.raises(BenchmarkError, match="says 2 threads, the run asked for 4"):
        w.run(inst, w.params_for({}, 4))
    with pytest.raises(BenchmarkError, match="report is of ZS class S, the run asked for EP class S"):
        ep = Npb(install_path="/opt/npb", benchmark="ep")
        ep.run(FakeInstance({"ep.S.x": (0, OMP)}), ep.params_for({"threads": 2}, 2))
    mpi = Npb(install_path="/opt/npb", benchmark="zs", mpirun="mpirun -np {threads}", args="-f")
    inst2 = FakeInstance({"zs.S.x": (0, MPI)})
    assert {r.metric: r.value for r in mpi.run(inst2, mpi.params_for({}, 3))}["processes"] == 2
    assert inst2.calls[-1] == ["mpirun", "-np", "3", "/opt/npb/bin/zs.S.x", "-f"]
    assert Npb(install_path="/opt/npb").version(inst2)["npb"].startswith("unknown")


def test_npb_ranks_span_the_run_instances():
    w = Npb(install_path="/opt/npb", ranks=2)
    assert w.spans({}) and Npb(install_path="/opt/npb").spans({"ranks": 4})
    with pytest.raises(ConfigError, match="ranks"):
        Npb(install_path="/opt/npb", ranks=0)


def test_missing_install_is_explained():
    inst = FakeInstance({"test -e": (1, "")})
    with pytest.raises(BenchmarkError, match="does not download or build"):
        Parsec(install_path="/opt/parsec-3.0").prepare(inst)
    with pytest.raises(BenchmarkError, match="experimental"):
        Npb(install_path="/opt/npb").prepare(inst)
    with pytest.raises(BenchmarkError, match="PARSEC benchmark binary not found"):
        Parsec(binary="/opt/parsec/bin/swaptions").prepare(inst)


def test_parsec_run_command():
    inst = FakeInstance(
        {
            "parsecmgmt": (0, fixture("parsec", "blackscholes_simsmall.txt")),
            "cat /opt/parsec-3.0/version": (0, "3.0-beta-20150206\n"),
        }
    )
    w = Parsec(install_path="/opt/parsec-3.0/", package="swaptions", input="native")
    rows = w.run(inst, w.params_for({}, 8))
    assert inst.calls[-1] == [
        "/opt/parsec-3.0/bin/parsecmgmt",
        "-a",
        "run",
        "-p",
        "swaptions",
        "-i",
        "native",
        "-n",
        "8",
        "-c",
        "gcc",
    ]
    assert rows[0].metric == "wall_time_s"
    assert w.version(inst)["parsec"] == "3.0-beta-20150206"


def test_parsec_binary_run_directly_with_threads():
    inst = FakeInstance({"parsec_like": (0, HOOKS)})
    w = Parsec(binary="/opt/p/bin/parsec_like", args="-ns 16 -nt {threads}")
    rows = w.run(inst, w.params_for({"threads": 2}, 1))
    assert inst.calls[-1] == ["/opt/p/bin/parsec_like", "-ns", "16", "-nt", "2"]
    assert [r.metric for r in rows] == ["wall_time_s", "roi_time_s", "threads"] and rows[0].value >= 0
    with pytest.raises(BenchmarkError, match="asked for 3"):
        w.run(inst, w.params_for({"threads": 3}, 1))
    failing = FakeInstance({"parsec_like": (1, HOOKS[: HOOKS.index("Task 1")], "Verification failed")})
    with pytest.raises(BenchmarkError, match="exit 1"):
        w.run(failing, w.params_for({"threads": 2}, 1))
    assert w.version(inst)["parsec"].startswith("unknown")
