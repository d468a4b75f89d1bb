"""Output caps (issue 28): a command's output is kept as head + tail with exact totals, whatever it
prints; a stored error is capped. Sink units, the local backend for real, the store."""

from __future__ import annotations

import os

import pytest

from labkit.backends.base import RawResult
from labkit.backends.output import MARKER, CappedOutput
from labkit.design import Design
from labkit.errors import TEXT_CAP, shorten
from labkit.store import Store
from tests.support.exec_memory import check_big, exec_in_child


def test_short_output_is_kept_whole_and_counted():
    sink = CappedOutput(head=8, tail=8)
    for chunk in (b"hello ", "wörld\n"):
        sink.write(chunk)
    assert sink.text() == "hello wörld\n"
    assert sink.total == len("hello wörld\n".encode()) and not sink.truncated


def test_long_output_keeps_head_and_tail_with_a_marker():
    sink = CappedOutput(head=4, tail=3)
    data = b"".join(bytes([65 + i % 26]) for i in range(1000))
    for i in range(0, 1000, 7):  # chunks that straddle the head and tail boundaries
        sink.write(data[i : i + 7])
    assert sink.total == 1000 and sink.truncated
    assert sink.text() == "ABCD" + MARKER.format(omitted=993, total=1000) + data[-3:].decode()


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 4096])
def test_a_character_cut_at_either_boundary_is_dropped_whole_never_broken(chunk):
    # "é" is 2 bytes, "€" 3: the head (4 bytes) ends inside a "€", the tail (4) starts inside one
    text = "ab€" + "é" * 100 + "x€€"
    data = text.encode()
    sink = CappedOutput(head=4, tail=4)
    for i in range(0, len(data), chunk):
        sink.write(data[i : i + chunk])
    out = sink.text()
    assert "\ufffd" not in out
    head, rest = out.split("\n... [", 1)
    assert head == "ab" and out.endswith("] ...\n€")
    omitted = int(rest.split(" bytes omitted")[0])
    assert omitted == len(data) - len(b"ab") - len("€".encode())  # every byte accounted for


def test_exact_fit_and_zero_limits():
    sink = CappedOutput(head=3, tail=3)
    sink.write(b"abcdef")
    assert sink.text() == "abcdef" and not sink.truncated
    none = CappedOutput(head=0, tail=0)
    none.write(b"xyz")
    assert none.total == 3 and none.truncated and "3 bytes omitted" in none.text()


def test_sink_memory_stays_bounded_whatever_is_written():
    sink = CappedOutput(head=1024, tail=1024)
    block = os.urandom(10_000)
    for _ in range(2000):  # 20 MB in 10 kB writes
        sink.write(block)
    sink.write(b"z" * 5_000_000)  # and one write far larger than head + tail
    assert sink.total == 25_000_000
    assert len(sink._head) == 1024 and len(sink._tail) <= 2 * 1024
    assert sink.text().endswith("z" * 1024)


def test_shorten_keeps_head_and_tail_of_long_text():
    assert shorten("abc", 10) == "abc"
    text = "A" * 50 + "B" * 50
    out = shorten(text, 10)
    assert out.startswith("AAAAA\n... [90 characters omitted; total 100 characters]") and out.endswith(
        "BBBBB"
    )


def test_raw_result_counts_bytes_of_text_given_whole():
    raw = RawResult(0, "é\n", "")
    assert (raw.stdout_bytes, raw.stderr_bytes, raw.truncated) == (3, 0, False)


@pytest.mark.root
def test_local_exec_of_200_mib_keeps_controller_memory_bounded():
    check_big(exec_in_child("local", "labkit-test-out-"))


@pytest.mark.root
def test_a_failing_run_with_a_50_mb_line_stores_an_error_under_the_cap(tmp_path):
    from labkit.run.campaign import Campaign

    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1})
    cmd = "head -c 50M /dev/zero | tr '\\0' x; echo; echo last words >&2; exit 3"
    st = Campaign(
        d,
        workload="command",
        workload_params={"argv": ["sh", "-c", cmd]},
        campaign_id=f"t-out-{os.getpid()}",
        data_dir=tmp_path,
        progress=False,
    ).run()
    errors = st.runs()["error"].tolist()
    assert len(errors) == 2
    for error in errors:
        assert len(error) <= TEXT_CAP + 200 and "last words" in error and "characters omitted" in error


def test_store_caps_the_error_text_of_a_run(tmp_path):
    run = Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1}).plan()[0]
    huge = "start " + "y" * 10_000_000 + " the end"
    with Store(tmp_path / "s.sqlite") as st:
        st.record_run(run, status="failed", started="t", duration_s=0.1, error=huge)
        (error,) = st.runs()["error"].tolist()
    assert len(error) <= TEXT_CAP + 100
    assert error.startswith("start yyy") and error.endswith("yyy the end") and "omitted" in error


@pytest.mark.root
def test_an_instance_logs_every_command_within_the_first_and_last_mib():
    """Every command an instance ran, in one log bounded to its first and last MiB (what a run's
    output file keeps): the first commands in the head, the end of the last in the tail, the
    byte totals of all of them."""
    from labkit.backends import get_backend, teardown
    from labkit.backends.base import exec_log_text
    from labkit.core.instance import InstanceSpec

    be = get_backend("local")
    (inst,) = be.provision(InstanceSpec(vcpus=1, memory_mb=64), prefix="labkit-test-log-")
    try:
        for i in range(20):
            inst.exec(f"echo run {i}")
        inst.exec("head -c 5M /dev/zero | tr '\\0' q; echo tail-end; echo oops >&2; exit 2", check=False)
    finally:
        teardown([inst])
    log = inst.exec_log
    assert log.commands == 21 and log.printed == sum(len(f"run {i}\n") for i in range(20)) + 5 * 2**20 + 9 + 5
    text = exec_log_text([inst])
    assert text.startswith(
        f"# 1 instance(s), 21 command(s), {log.printed} bytes printed on stdout and stderr\n\n"
        f"=== {inst.name}: 21 command(s), {log.printed} bytes printed on stdout and stderr\n"
    )
    assert "$ sh -c 'echo run 0'" in text and "--- stdout ---\nrun 0\n" in text  # the head
    assert "exit 2 after" in text and "stdout 5242889 bytes" in text and "bytes omitted" in text
    assert text.rstrip().endswith("tail-end\n\n--- stderr ---\noops")  # the tail
    assert len(text.encode()) < 2 * 2**20 + 4096


def test_a_runs_output_file_is_private_capped_and_named_safely(tmp_path):
    from labkit.errors import StoreError
    from labkit.store import OUTPUT_CAP

    with Store(tmp_path / "c" / "store.sqlite") as st:
        path = st.write_run_output("c0001r002", "begin " + "o" * (3 * OUTPUT_CAP) + " end", "ok")
        assert path == tmp_path / "c" / "output" / "c0001r002.log"
        assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
        kept = st.run_output("c0001r002")
        size = 3 * OUTPUT_CAP + 10
        assert kept.startswith(
            f"# labkit: command output of run c0001r002 (ok): {size} bytes; the first 1 MiB "
            "and the last 1 MiB kept\nbegin o"
        ) and kept.endswith("o end")
        assert f"[{size - OUTPUT_CAP} bytes omitted; total {size} bytes]" in kept
        assert len(kept.encode()) <= OUTPUT_CAP + 200
        st.write_run_output("c0001r003", "short")
        assert (
            st.run_output("c0001r003")
            == "# labkit: command output of run c0001r003: 5 bytes; all kept\nshort"
        )
        assert st.run_outputs() == ["c0001r002", "c0001r003"]
        assert st.run_output("c9999r001") is None and st.run_output("../store") is None
        for bad in ("../escape", ".hidden", "a/b", ""):
            with pytest.raises(StoreError, match="not a run id"):
                st.write_run_output(bad, "x")
        os.symlink(tmp_path / "elsewhere", path.parent / "c0002r001.log")
        with pytest.raises(Exception, match="symbolic link"):
            st.write_run_output("c0002r001", "x")
    assert not (tmp_path / "elsewhere").exists()
    with (
        Store(tmp_path / "c" / "store.sqlite", readonly=True) as ro,
        pytest.raises(StoreError, match="read-only"),
    ):
        ro.write_run_output("c0003r001", "x")
