"""The explorer's first page (issue 46: the dashboard took 32 s to it, named the server's data path
and showed developer text): with ``defer`` the application is returned before the first analysis
is computed, a line says it is being computed, and a background thread fills it; the page names
no absolute path and shows no Python dict repr. Durations are measured by
benchmarks/bench_dashboard.py, never asserted here."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Copies of two committed stores of the same design (opened read-only by the explorer); figures
    shown as PNG, as in a kernel with ``%matplotlib inline``."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.pylabtools import select_figure_formats

    select_figure_formats(InteractiveShell.instance(), {"png"})
    out = tmp_path_factory.mktemp("data")
    for cid in ("affinity-local", "affinity-apache-local"):
        shutil.copytree(REPO / "data" / cid, out / cid)
    return out


def _wait_for_first_analysis(timeout: float = 300) -> None:
    from labkit.report.deferred import THREAD_NAME

    for t in threading.enumerate():
        if t.name == THREAD_NAME:
            t.join(timeout)
            assert not t.is_alive(), "the first analysis did not finish"


def _texts(root) -> list[str]:
    """Every HTML widget value and every output the application's Output widgets hold."""
    import ipywidgets as W

    out, todo = [], [root]
    while todo:
        w = todo.pop()
        todo.extend(getattr(w, "children", ()))
        if isinstance(w, W.HTML):
            out.append(w.value)
        if isinstance(w, W.Output):
            out.append(json.dumps(w.outputs))
    return out


def _outputs(root, css: str):
    import ipywidgets as W

    todo = [root]
    while todo:
        w = todo.pop()
        todo.extend(getattr(w, "children", ()))
        if isinstance(w, W.Output) and css in w._dom_classes:
            return w.outputs
    raise AssertionError(f"no Output widget {css}")


def test_deferred_first_analysis_is_filled_after_the_application_is_returned(data):
    from labkit.report.explore import Explorer

    ex = Explorer(data, campaign="affinity-local")
    gate = threading.Lock()
    gate.acquire()  # the analysis waits until the application was returned
    analysis = ex.analysis

    def held(*args, **kw):
        with gate:
            return analysis(*args, **kw)

    ex.analysis = held  # type: ignore[method-assign]
    root = ex.app(defer=True)
    first = _outputs(root, "lk-analysis")
    assert len(first) == 1 and "Computing the analysis of affinity-local" in first[0]["data"]["text/markdown"]
    assert "Computing the telemetry" in json.dumps(_outputs(root, "lk-telemetry"))
    gate.release()
    _wait_for_first_analysis()
    filled = _outputs(root, "lk-analysis")
    assert sum("image/png" in o["data"] for o in filled) >= 5
    assert any("affinity-local: wall_time_s on" in o["data"].get("text/markdown", "") for o in filled)
    assert "Computing" not in json.dumps(_outputs(root, "lk-telemetry"))


def test_a_newer_pick_drops_the_deferred_analysis(data):
    """A reader who picks another campaign before the first analysis is done sees the one picked."""
    from labkit.report.explore import Explorer

    ex = Explorer(data, campaign="affinity-local")
    gate = threading.Lock()
    gate.acquire()
    analysis = ex.analysis

    def held(*args, **kw):
        with gate:
            return analysis(*args, **kw)

    ex.analysis = held  # type: ignore[method-assign]
    root = ex.app(defer=True)
    pick = next(w for w in root.children if hasattr(w, "children") and len(w.children) == 2).children[0]
    threading.Timer(0.5, gate.release).start()  # the pick below waits for the lock the thread holds
    pick.value = "affinity-apache-local"
    _wait_for_first_analysis()
    # the new pick's views are displayed by the callback (captured by a kernel's front end, not
    # here); the thread's analysis of the first campaign never reached the widget
    shown = json.dumps(_outputs(root, "lk-analysis"))
    assert pick.value == "affinity-apache-local"
    assert "affinity-local: wall_time_s" not in shown and "image/png" not in shown


def test_the_first_page_names_no_server_path_and_no_dict_repr(data):
    from labkit.report.explore import Explorer

    root = Explorer(data, campaign="affinity-local").app(defer=True)
    _wait_for_first_analysis()  # its analysis and telemetry, held as the widgets' state
    text = "\n".join(_texts(root))
    assert f"campaigns</b> in {data.name}/" in text and "image/png" in text
    assert str(data) not in text and str(REPO) not in text
    assert "{'" not in text.replace("\\'", "'") and "{&#x27;" not in text


def test_the_data_folder_is_named_relative_to_the_checkout_or_by_its_name(tmp_path):
    from labkit.report.deferred import shown_path

    assert shown_path(REPO / "data") == "data/"
    assert shown_path(tmp_path / "mine") == "mine/"
