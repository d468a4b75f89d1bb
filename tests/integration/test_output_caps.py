"""Output caps on the daemon backends (issue 28): a command printing 200 MiB costs the controller
less than 100 MB of memory while its byte totals stay exact. Each measure runs in a child Python
process (its peak RSS, VmHWM, before and after the exec); the local backend's is in
tests/unit/test_output.py."""

from __future__ import annotations

import secrets

import pytest

from tests.support.exec_memory import BIG, campaign_in_child, check_big, exec_in_child

from .conftest import PREFIX


@pytest.mark.parametrize(
    "backend_name",
    [
        pytest.param("docker", marks=pytest.mark.docker),
        pytest.param("lxd", marks=pytest.mark.lxd),
        pytest.param("ssh", marks=pytest.mark.ssh),
    ],
)
def test_exec_of_200_mib_keeps_controller_memory_bounded(backend_name):
    check_big(exec_in_child(backend_name, f"{PREFIX}-out-"))


@pytest.mark.root
def test_a_campaign_whose_run_prints_200_mib_keeps_its_output_file_and_its_memory_bounded(tmp_path):
    """Issue 28 (second pass): every run's output goes to output/<run_id>.log, an ok run's too:
    its first and last MiB with the total size stated, 0600; the controller (a whole campaign in
    a child process, its resident size sampled with psutil) grows by less than 100 MB while the
    workload prints 203 MiB."""
    from labkit.store import OUTPUT_CAP, Store

    seen = campaign_in_child(str(tmp_path), secrets.token_hex(3), BIG)
    assert seen["status"] == "ok"
    assert seen["rss_growth"] < 100 * 2**20, f"controller grew by {seen['rss_growth'] >> 20} MiB (psutil)"
    assert seen["hwm_growth"] < 100 * 2**20, f"controller peak grew by {seen['hwm_growth'] >> 20} MiB"
    path = tmp_path / seen["cid"] / "output" / f"{seen['run_id']}.log"
    assert path.stat().st_mode & 0o777 == 0o600 and path.stat().st_size < OUTPUT_CAP + 8192
    with Store.for_campaign(tmp_path, seen["cid"], readonly=True) as st:
        text = st.run_output(seen["run_id"])
    first = text.split("\n", 1)[0]
    assert first.startswith(f"# labkit: command output of run {seen['run_id']} (ok): ")
    assert first.endswith("bytes; the first 1 MiB and the last 1 MiB kept")
    assert f"{200 * 2**20 + 3 + 3 * 2**20} bytes printed on stdout and stderr" in text  # the total, exact
    assert f"stdout {200 * 2**20 + 3} bytes, stderr {3 * 2**20} bytes" in text
    assert "aaaaaaaaaa" in text and "bytes omitted" in text and text.rstrip().endswith("e" * 100)
