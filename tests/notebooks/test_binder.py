"""Binder without Binder: what repo2docker would build, and every notebook in that environment.

1. ``jupyter-repo2docker --no-build`` on this repository (no image is built, nothing is
   fetched but the tool itself from PyPI) must pick the Python of ``binder/runtime.txt``
   and install ``binder/requirements.txt``.
2. A fresh venv made from ``binder/requirements.txt`` alone, plus ``binder/postBuild``'s
   ``pip install --no-deps -e .``, must execute every notebook as a Binder user runs it: the
   default ``mode="auto"`` (which must choose view mode there, the committed campaigns being
   stored, and say so in its first output) and widgets on (``interactive=True``, the ipywidgets
   controls rendered), display figures, and leave the committed data unchanged.
3. Voila is installed there and enabled as a Jupyter server extension, so Binder serves the
   explorer as the dashboard (``?urlpath=voila/render/notebooks/00_explorer.ipynb``).
"""
from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import NOTEBOOKS, REPO, images, widget_outputs

pytestmark = pytest.mark.slow
REPO2DOCKER = "jupyter-repo2docker==2026.4.0"


def sh(*argv, cwd=None, timeout=900) -> str:
    res = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{argv}: exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout + res.stderr


@pytest.fixture(scope="module")
def binder_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("binder") / "venv"
    sh(sys.executable, "-m", "venv", venv)
    py = venv / "bin" / "python"
    sh(py, "-m", "pip", "install", "-q", "-r", REPO / "binder" / "requirements.txt")
    sh(py, "-m", "pip", "install", "-q", "--no-deps", "-e", REPO)      # binder/postBuild
    return venv


def test_repo2docker_picks_the_runtime_python(binder_venv):
    py = binder_venv / "bin" / "python"
    sh(py, "-m", "pip", "install", "-q", REPO2DOCKER)
    want = (REPO / "binder" / "runtime.txt").read_text().strip().removeprefix("python-")
    out = sh(binder_venv / "bin" / "jupyter-repo2docker", "--no-build", "--no-run", "--debug", REPO)
    assert f"python={want}" in out, out[-3000:]
    assert 'pip install --no-cache-dir -r "binder/requirements.txt"' in out
    assert want.startswith("3.") and int(want.split(".")[1]) >= 11


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_every_notebook_runs_as_binder_runs_it(binder_venv, tmp_path, name):
    """Default mode (auto), widgets on: as a Binder user's Run All."""
    import nbformat
    before = digest(REPO / "data")
    out = tmp_path / name
    sh(binder_venv / "bin" / "python", "-m", "papermill", "--engine", "labkit", NOTEBOOKS / name, out,
       "-p", "interactive", "True", "-p", "figures_dir", tmp_path / "figures", "--cwd", tmp_path,
       "--no-progress-bar")
    nb = nbformat.read(str(out), as_version=4)
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    widgets = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    if name == "00_explorer.ipynb":
        assert len(widgets) == 1, "the explorer's application did not render"
        assert sum("image/png" in o.get("data", {}) for o in widget_outputs(nb)) >= 1
    else:
        first = next(o for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout")
        assert first["text"].startswith("mode view ("), first["text"][:300]   # auto -> view, said first
        assert images(nb) >= 1, f"{name} displayed no figure"
    assert digest(REPO / "data") == before, f"{name} changed the committed data/"


def test_voila_is_a_server_extension_on_binder(binder_venv):
    out = sh(binder_venv / "bin" / "jupyter", "server", "extension", "list")
    assert re.search(r"voila\b.*enabled", out), out[-2000:]
