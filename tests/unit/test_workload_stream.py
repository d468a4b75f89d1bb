"""STREAM-format parser (labkit's kernel, real outputs) and array sizing."""

import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads.stream import Stream, array_elements, parse, parse_cache_sizes

from .fixtures.fakes import FakeInstance, fixture


def test_parse_real_output():
    r = {m.metric: (m.value, m.unit) for m in parse(fixture("stream", "labkit_stream_2threads.txt"))}
    assert r["copy_mb_per_s"] == (25252.6, "MB/s")
    assert r["scale_mb_per_s"] == (26322.1, "MB/s")
    assert r["add_mb_per_s"] == (29268.2, "MB/s")
    assert r["triad_mb_per_s"] == (29754.8, "MB/s")
    assert r["array_mib"][0] == pytest.approx(4_000_000 * 8 / 1048576)


REFERENCE = """-------------------------------------------------------------
STREAM version $Revision: 5.10 $
-------------------------------------------------------------
Array size = 10000000 (elements), Offset = 0 (elements)
-------------------------------------------------------------
Function    Best Rate MB/s  Avg time     Min time     Max time
Copy:           11234.5     0.014912     0.014242     0.015517
Scale:          10999.1     0.015210     0.014547     0.015815
Add:            12320.3     0.020169     0.019480     0.020796
Triad:          12301.9     0.020144     0.019509     0.020703
-------------------------------------------------------------
Solution Validates: avg error less than 1.000000e-13 on all three arrays
-------------------------------------------------------------
"""


def test_parse_reference_stream_layout():
    r = {m.metric: m.value for m in parse(REFERENCE)}
    assert r["triad_mb_per_s"] == 12301.9 and r["copy_mb_per_s"] == 11234.5


def test_truncated_output():
    text = fixture("stream", "labkit_stream_1thread.txt")
    with pytest.raises(BenchmarkError, match="truncated"):
        parse(text[: text.index("Add:")], command=["stream"])
    # rows cut but validation line present (malformed)
    broken = text.replace("Triad:", "Triad?")
    with pytest.raises(BenchmarkError, match="triad"):
        parse(broken)


def test_failed_validation_and_garbage():
    with pytest.raises(BenchmarkError, match="validate"):
        parse(
            REFERENCE.replace(
                "Solution Validates: avg error less than 1.000000e-13 on all three arrays",
                "Failed Validation on array a[]",
            )
        )
    with pytest.raises(BenchmarkError):
        parse("")
    with pytest.raises(BenchmarkError):
        parse("Segmentation fault")


def test_cache_sizes_and_array_sizing():
    assert parse_cache_sizes("32K\n32K\n512K\n32768K\n") == 32 * 1024 * 1024
    assert parse_cache_sizes("") == 0
    llc = 32 * 1024 * 1024
    assert array_elements(None, llc, None) == 4 * llc // 8  # STREAM's 4x LLC rule
    assert array_elements(None, llc, 512) == int(512 * 1048576 * 0.6 / 3) // 8  # memory cap
    assert array_elements(64, llc, 512) == 64 * 1048576 // 8
    with pytest.raises(ConfigError):
        array_elements(-1, llc, None)


def test_bad_parameters():
    with pytest.raises(ConfigError):
        Stream(ntimes=1)
    with pytest.raises(ConfigError):
        Stream(array_mb="big")


def test_run_command_uses_threads_and_sizes():
    inst = FakeInstance(
        {
            "cache/index": (0, "32K\n512K\n32768K\n"),
            "labkit-stream": (0, fixture("stream", "labkit_stream_2threads.txt")),
        }
    )
    rows = Stream(ntimes=3).run(inst, {"vcpus": 2, "threads": None})
    assert rows[3].metric == "triad_mb_per_s"
    cmd = inst.calls[-1]
    assert cmd[0] == "/work/labkit-stream" and cmd[2:] == ["3", "2"]
    assert int(cmd[1]) == int(512 * 1048576 * 0.6 / 3) // 8  # default spec: 512 MB


def test_nonzero_exit_reports_tail():
    inst = FakeInstance({"labkit-stream": (4, "Failed Validation: avg relative errors")})
    with pytest.raises(BenchmarkError, match="exit 4") as err:
        Stream(array_mb=16).run(inst, {"vcpus": 1})
    assert "Failed Validation" in err.value.output_tail


def test_ksm_settle_runs_before_the_timed_passes_and_is_reported():
    """The real kernel, compiled here: with mergeable and a settle time it waits (outside every
    timed pass) for KSM to merge half its arrays' pages, at most settle_ms, and says what it found;
    whether KSM runs on this host at the time does not matter to what is checked."""
    import subprocess

    from labkit.core import cbuild

    binary = cbuild.build("stream.c")
    out = subprocess.run(
        [str(binary), "200000", "3", "1", "1", "300"], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    r = {m.metric: m.value for m in parse(out)}
    total = 3 * ((200000 * 8 + 4095) // 4096)
    assert f"pages merged of {total} after" in out
    assert 0 <= r["ksm_settle_pages"] <= total and r["ksm_settle_s"] >= 0
    assert r["ksm_settle_pages"] >= total // 2 or r["ksm_settle_s"] >= 0.3  # merged half, or waited it all
    plain = subprocess.run(
        [str(binary), "200000", "3", "1", "1"], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "KSM settle" not in plain and "ksm_settle_pages" not in {m.metric for m in parse(plain)}
    inst = FakeInstance({"labkit-stream": (0, out)})
    Stream(array_mb=16, ntimes=3, mergeable=True, ksm_settle_s=2.5).run(inst, {"vcpus": 1})
    assert inst.calls[-1][-2:] == ["1", "2500"]
    with pytest.raises(ConfigError):
        Stream(ksm_settle_s=-1)
