"""Helpers to execute notebooks with papermill into a temporary directory."""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"


@pytest.fixture
def run_notebook(tmp_path):
    """run_notebook(name, **parameters) -> executed notebook (nbformat), data and figures in tmp_path.

    The kernel's working directory is tmp_path (not notebooks/): paths must resolve from the
    repository root by themselves. papermill's ``labkit`` engine (the kernel's channels encrypted,
    :mod:`labkit.report.papermill_engine`) runs them, as the Makefile and the README do."""
    import nbformat
    import papermill as pm

    def _run(name: str, **parameters):
        params = {"data_dir": str(tmp_path / "data"), "figures_dir": str(tmp_path / "figures"),
                  "interactive": False, **parameters}
        out = tmp_path / f"out-{name}"
        pm.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=params, cwd=str(tmp_path),
                            kernel_name="python3", progress_bar=False, engine_name="labkit",
                            start_timeout=300)   # a kernel on a loaded 2-core machine can take > 60 s
        return nbformat.read(str(out), as_version=4)
    return _run


def outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            parts.append(o.get("text", ""))
            data = o.get("data", {})
            parts.append(data.get("text/plain", ""))
    return "\n".join(parts)


def images(nb) -> int:
    """How many PNG images the executed notebook displays."""
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def markdown_outputs(nb) -> str:
    return "\n".join(o["data"]["text/markdown"] for c in nb.cells for o in c.get("outputs", [])
                     if "text/markdown" in o.get("data", {}))


def widget_outputs(nb) -> list[dict]:
    """Outputs captured by the notebook's Output widgets (the widget state nbclient saves)."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    return [o for m in state.values() if m.get("model_name") == "OutputModel"
            for o in m.get("state", {}).get("outputs", [])]
