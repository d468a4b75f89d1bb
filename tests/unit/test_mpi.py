"""MPI/HPCC helpers: the hpcc summary parser on a captured output, the input grid, the
launch agent and the mpirun command line (no daemon, no MPI run)."""

from __future__ import annotations

import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads import get_workload, mpi
from labkit.workloads.mpi import agent_script, hpcc_input, mpirun_argv, parse_hpcc

FIX = Path(__file__).parent / "fixtures" / "hpcc" / "hpccoutf_2ranks.txt"


def test_parse_hpcc_summary():
    rows = {r.metric: (r.value, r.unit) for r in parse_hpcc(FIX.read_text())}
    # the file's own summary lines: HPL_Tflops=0.00184146, AvgPingPongLatency_usec=2212.73 ...
    assert rows["hpl_gflops"] == (pytest.approx(1.84146), "GFLOP/s")
    assert rows["pingpong_latency_us"] == (pytest.approx(2212.73), "us")
    assert rows["pingpong_bandwidth_gb_per_s"] == (pytest.approx(0.174282), "GB/s")
    assert rows["star_stream_triad_gb_per_s"][0] == pytest.approx(15.9841)
    assert rows["random_ring_latency_us"][0] == pytest.approx(1089.79)
    assert rows["random_ring_bandwidth_gb_per_s"][0] == pytest.approx(0.263133)


def test_parse_hpcc_refuses_truncated_and_failed():
    text = FIX.read_text()
    with pytest.raises(BenchmarkError, match="summary"):
        parse_hpcc(text[: text.index("End of Summary")])
    with pytest.raises(BenchmarkError, match="Success"):
        parse_hpcc(text.replace("Success=1", "Success=0"))
    with pytest.raises(BenchmarkError, match="HPL_Tflops"):
        parse_hpcc(text.replace("HPL_Tflops=", "HPL_Gone="))


@pytest.mark.parametrize("ranks,p,q", [(1, 1, 1), (2, 1, 2), (4, 2, 2), (6, 2, 3), (7, 1, 7)])
def test_hpcc_grid(ranks, p, q):
    lines = hpcc_input(1000, ranks).splitlines()
    assert lines[5].split()[0] == "1000"
    assert (int(lines[10].split()[0]), int(lines[11].split()[0])) == (p, q)


def _inst(i, peer_subnet="10.200.0.0/24"):
    return SimpleNamespace(
        index=i,
        address=f"10.200.0.{i + 2}",
        network=SimpleNamespace(subnet="10.200.0.0/24", peer_subnet=peer_subnet),
        host_command=lambda argv, i=i: ["enter", f"i{i}", *argv],
    )


def test_agent_maps_names_and_addresses_to_instances():
    text = agent_script([_inst(0), _inst(1)], "/tmp/w")
    assert f'10.200.0.3|inst1) exec enter i1 sh -c {shlex.quote(mpi._INSIDE)} /tmp/w/ompi1 "$*" ;;' in text
    assert text.rstrip().endswith("exit 1")


def test_mpirun_spreads_ranks_and_stays_on_the_subnet():
    argv = mpirun_argv([_inst(0), _inst(1)], "/a", 3, "/tmp/w", ["hpcc"])
    assert argv[argv.index("--host") + 1] == "10.200.0.2:2,10.200.0.3:1"
    assert argv[argv.index("oob_tcp_if_include") + 1] == "10.200.0.0/24"
    assert argv[argv.index("btl_tcp_if_include") + 1] == "10.200.0.0/24"
    assert argv[-1] == "hpcc" and shlex.join(argv)
    # ranks that never start fail the run instead of hanging until the workload's timeout
    assert int(argv[argv.index("orte_startup_timeout") + 1]) > 0
    # and a daemon that dies is seen: it stays attached to its agent instead of daemonizing
    assert argv[argv.index("orte_leave_session_attached") + 1] == "1"
    # idle ranks yield: co-located instances would otherwise wait a scheduler tick per message
    assert argv[argv.index("mpi_yield_when_idle") + 1] == "1"


def test_ranks_talk_over_the_bonded_data_subnet_and_mpirun_over_the_host_one():
    """nics > 1: mpirun (on the host, which has no data address) reaches the orteds on the run's
    subnet; the ranks' messages cross the bonded NICs' data subnet."""
    argv = mpirun_argv([_inst(0, "10.201.9.0/24"), _inst(1, "10.201.9.0/24")], "/a", 2, "/tmp/w", ["hpcc"])
    assert argv[argv.index("oob_tcp_if_include") + 1] == "10.200.0.0/24"
    assert argv[argv.index("btl_tcp_if_include") + 1] == "10.201.9.0/24"
    assert argv[argv.index("--host") + 1] == "10.200.0.2:1,10.200.0.3:1"


def test_mpi_parser_hook_is_checked_at_once():
    with pytest.raises(ConfigError, match="parser"):
        get_workload("mpi", program="x", parser="no_such_module:f")
    with pytest.raises(ConfigError):
        get_workload("mpi", program="x", parser="rm -rf /")
    assert get_workload("mpi", program="x", parser="labkit.workloads.mpi:parse_hpcc").spans({})
