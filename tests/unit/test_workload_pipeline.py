"""The pipeline stand-in for PARSEC Dedup/Ferret (seed 001) and the per-instance LINPACK (seed 000).

The pipeline script runs here under /bin/sh with coreutils and gzip (as in an instance): its
counts follow from how the input is built (``copies`` repeats of one block of whole chunks).
"""

import shutil
import subprocess

import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads import get_workload
from labkit.workloads.pipeline import STAGES, parse, script


@pytest.mark.parametrize("app", ["dedup", "ferret"])
def test_script_runs_and_counts_chunks(app, tmp_path):
    if not shutil.which("gzip"):
        pytest.skip("gzip missing")
    text = script(
        app,
        size_mb=4,
        chunk_kb=256,
        copies=4,
        compressor="gzip",
        level=1,
        threads=2,
        wdir=str(tmp_path / "w"),
    )
    res = subprocess.run(["sh", "-c", text], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = {m.metric: m.value for m in parse(res.stdout, app, 1.5)}
    assert rows["chunks"] == 16 and rows["unique_chunks"] == 4  # 4 MiB / 256 KiB; 1 MiB block x 4
    assert rows["wall_time_s"] == 1.5
    # the timed stages: first stage's start to last stage's end, so the stage times (back to back) sum to it
    stages = [v for k, v in rows.items() if k.startswith("stage_")]
    assert len(stages) == len(STAGES[app]) and rows["stages_s"] == pytest.approx(sum(stages), abs=1e-3)
    assert all(
        rows[f"stage_{s}_s"] >= 0
        for s in ("fragment", "hash", "deduplicate", "compress", "reassemble")
        if app == "dedup"
    )
    if app == "dedup":
        assert rows["compression_ratio"] > 4  # dedup alone gives 4x
    assert not (tmp_path / "w").exists()  # cleaned up


def test_parse_missing_stage_is_an_error():
    with pytest.raises(BenchmarkError, match="no result"):
        parse("labkit-pipeline fragment 0.1\n", "dedup", 1.0)


def test_parameters_are_checked():
    with pytest.raises(ConfigError, match="app"):
        get_workload("pipeline", app="blackscholes")
    with pytest.raises(ConfigError, match="compressor"):
        get_workload("pipeline", compressor="rm -rf /")
    w = get_workload("linpack", n=500)
    assert w.params["n"] == 500 and w.response == "hpl_gflops"
    with pytest.raises(ConfigError, match="n"):
        get_workload("linpack", n=10)


def test_parse_reports_the_timed_stages_and_the_whole_process():
    """``stages_s`` is the script's own first-to-last-stage time, ``wall_time_s`` the process: the
    response and the run-length measure are the stages (PARSEC times its region of interest)."""
    text = "".join(
        f"labkit-pipeline {k} {v}\n"
        for k, v in (
            ("fragment", 0.1),
            ("hash", 0.2),
            ("deduplicate", 0.05),
            ("compress", 0.4),
            ("reassemble", 0.25),
            ("stages", 1.0),
            ("chunks", 16),
            ("unique_chunks", 4),
            ("output_bytes", 2**20),
            ("input_bytes", 2**22),
        )
    )
    rows = {m.metric: m.value for m in parse(text, "dedup", 2.5)}
    assert rows["stages_s"] == 1.0 and rows["wall_time_s"] == 2.5 and rows["stage_compress_s"] == 0.4
    assert rows["compression_ratio"] == 4.0
    w = get_workload("pipeline")
    assert w.response == "stages_s" and w.timed_metrics == ("stages_s",)
    with pytest.raises(BenchmarkError, match="stages"):
        parse(text.replace("labkit-pipeline stages 1.0\n", ""), "dedup", 2.5)


def test_measured_seconds_of_a_run_stored_before_stages_s_is_the_stages_sum():
    from labkit.workloads.pipeline import Pipeline

    old = {"wall_time_s": 3.0, "stage_segment_s": 0.5, "stage_extract_s": 1.25, "chunks": 16.0}
    assert Pipeline.measured_seconds(old, {}) == 1.75
    assert Pipeline.measured_seconds({**old, "stages_s": 1.8}, {}) is None  # its own metric counts
    assert Pipeline.measured_seconds({"wall_time_s": 3.0}, {}) is None
