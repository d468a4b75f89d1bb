"""The pipeline stand-in for PARSEC Dedup/Ferret (seed 001) and the per-instance LINPACK (seed 000).

The pipeline script runs here under /bin/sh with coreutils and gzip (as in an instance): its
counts follow from how the input is built (``copies`` repeats of one block of whole chunks).
"""
import shutil
import subprocess

import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads import get_workload
from labkit.workloads.pipeline import parse, script


@pytest.mark.parametrize("app", ["dedup", "ferret"])
def test_script_runs_and_counts_chunks(app, tmp_path):
    if not shutil.which("gzip"):
        pytest.skip("gzip missing")
    text = script(app, size_mb=4, chunk_kb=256, copies=4, compressor="gzip", level=1, threads=2,
                  wdir=str(tmp_path / "w"))
    res = subprocess.run(["sh", "-c", text], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = {m.metric: m.value for m in parse(res.stdout, app, 1.5)}
    assert rows["chunks"] == 16 and rows["unique_chunks"] == 4      # 4 MiB / 256 KiB; 1 MiB block x 4
    assert rows["wall_time_s"] == 1.5
    assert all(rows[f"stage_{s}_s"] >= 0 for s in ("fragment", "hash", "deduplicate", "compress", "reassemble")
               if app == "dedup")
    if app == "dedup":
        assert rows["compression_ratio"] > 4                         # dedup alone gives 4x
    assert not (tmp_path / "w").exists()                             # cleaned up


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
