"""``labkit dashboard``'s first page (issue 46): fetched over HTTP as a reader's browser first gets
it (tests/support/dashboard.py), it names no server path (the absolute data directory), shows no
developer text (papermill, module paths, code) and no Python dict repr. How long it takes is
measured by benchmarks/bench_dashboard.py, never asserted here."""
from __future__ import annotations

import html
import re

import pytest

from tests.support.dashboard import running_dashboard

from .conftest import REPO

pytest.importorskip("voila")


def _text(page: str) -> str:
    """The page as text: tags, scripts and styles dropped, entities and JSON escapes decoded."""
    page = re.sub(r"<(script|style)\b.*?</\1>", lambda m: m.group(0) if "widget-view" in m.group(0) else "",
                  page, flags=re.S)
    page = page.replace("\\u0027", "'").replace("\\u003c", "<").replace("\\u003e", ">")
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_the_first_page_shows_no_server_path_developer_text_or_dict_repr(tmp_path):
    with running_dashboard(tmp_path) as dash:
        status, page = dash.load()
    assert status == 200, page[-2000:]
    text = _text(page)
    assert "Explore the stored campaigns" in text and "campaigns  in data/ (read-only)" in text
    for server in (str(REPO / "data"), str(REPO)):
        assert server not in page, f"the page names the server path {server}"
    for developer in ("papermill", "labkit/report/explore.py", "from labkit", "interactive ="):
        assert developer not in text, f"developer text on the first page: {developer!r}"
    assert not re.search(r"\{'[a-z_]+': ", text), "a Python dict repr on the first page"
