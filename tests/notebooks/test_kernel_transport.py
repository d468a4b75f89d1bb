"""No "Kernel is running over TCP without encryption" in executed notebooks' runs.

ipykernel logs that warning when the kernel manager gives it no CurveZMQ keys, which papermill's
default engine never does (jupyter_client's ``transport_encryption`` defaults to "disabled").
papermill's ``labkit`` engine (:mod:`labkit.report.papermill_engine`, used by the Makefile, the
README and the notebook tests) sets it to "auto", so the kernel's channels are encrypted and the
warning has no cause. The default engine is run beside it to show the check can fail.
"""
from __future__ import annotations

import subprocess
import sys

import nbformat

WARNING = "running over TCP without encryption"


def _run(tmp_path, *engine: str) -> subprocess.CompletedProcess:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(6 * 7)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src = tmp_path / "in.ipynb"
    nbformat.write(nb, str(src))
    return subprocess.run([sys.executable, "-m", "papermill", *engine, str(src), str(tmp_path / "out.ipynb"),
                           "--no-progress-bar", "--start-timeout", "300"],
                          capture_output=True, text=True, timeout=600)


def test_labkit_engine_encrypts_the_kernel_channels(tmp_path):
    res = _run(tmp_path, "--engine", "labkit")
    assert res.returncode == 0, res.stderr[-2000:]
    assert WARNING not in res.stderr + res.stdout
    out = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    assert out.cells[0].outputs[0]["text"] == "42\n" and WARNING not in str(out)
    default = _run(tmp_path)           # papermill's own engine: the warning the labkit engine removes
    assert default.returncode == 0 and WARNING in default.stderr
