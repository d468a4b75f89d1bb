"""The documentation site in a real browser (issue 46): headless Chromium (Debian's, driven by
Playwright as in test_browser.py) opens the built tutorial page and a rendered study page.

The site is built here, as ``make docs`` builds it: the seed notebooks executed in view mode on the
committed data (``docs/gen/notebooks.py``, which skips a notebook whose executed copy is current),
then ``mkdocs build --strict`` (any warning, a broken link or anchor among them, fails) into a
temporary directory, opened from the file system (``file://``). Checks:

* the tutorial page: its title, the `labkit run` command of step 2 as printed, the site's
  navigation with every section, and its link to the rendered notebook 01 leading to that page;
* the rendered study (notebook 01): the view-mode line the notebook prints on the committed
  campaign, its conclusion in words, and figures that the browser decoded (PNG outputs), so the
  notebook was executed and rendered, not shown as source.

Screenshots of both: out/browser/docs_*.png (``docs/gen/screenshots.py`` writes the committed
copies in docs/screenshots/). Skipped without chromium or playwright unless LABKIT_REQUIRE lists
"browser"; skipped without mkdocs unless LABKIT_REQUIRE lists "docs".
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from labkit.backends.testing import required

from .conftest import REPO
from .test_browser import CHROMIUM, FLAGS, _need

pytestmark = pytest.mark.browser
SHOTS = REPO / "out" / "browser"
NAV_SECTIONS = ["Tutorial", "How-to guides", "Reference", "Explanation", "Studies (read-only)", "Results"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built as `make docs` builds it, into a temporary directory."""
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        if "docs" in required():
            pytest.fail("mkdocs not installed (pip install -r requirements.txt)")
        pytest.skip("mkdocs not installed (pip install -r requirements.txt)")
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    res = subprocess.run([sys.executable, "docs/gen/notebooks.py"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stderr[-4000:]}"
    return out


@pytest.fixture
def page():
    _need()
    from playwright.sync_api import sync_playwright
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


def test_tutorial_page(site, page):
    tutorial = site / "tutorial" / "first-study.html"
    page.goto(tutorial.as_uri())
    assert page.locator("h1").first.inner_text().strip().rstrip("¶") == "Your first study in 10 minutes"
    code = page.locator("pre code").all_inner_texts()
    assert any("labkit run design.yaml --backend local --workload nqueens" in c for c in code), code
    assert any("labkit analyze first-study" in c for c in code)
    nav = page.locator("nav.md-nav--primary").first.inner_text()
    for section in NAV_SECTIONS:
        assert section in nav, (section, nav[:500])
    page.screenshot(path=str(SHOTS / "docs_tutorial.png"))
    page.get_by_role("link", name="notebook 01, the affinity factorial of seed 002").click()
    page.wait_for_load_state()
    assert page.url.endswith("/studies/01_affinity_factorial.html"), page.url


def test_rendered_study_page(site, page):
    study = site / "studies" / "01_affinity_factorial.html"
    page.goto(study.as_uri())
    text = page.locator("article").first.inner_text()
    # what notebook 01 prints when it views the committed campaign (labkit.report.notebook.notebook_mode)
    assert "mode view" in text and "affinity-local" in text, text[:2000]
    assert "Does CPU affinity matter?" in text
    # figures: PNG outputs the browser decoded (naturalWidth > 0), not broken images
    decoded = page.evaluate("() => [...document.querySelectorAll('article img')]"
                            ".filter(i => i.src.startsWith('data:image/png') && i.naturalWidth > 0).length")
    assert decoded >= 5, decoded
    page.screenshot(path=str(SHOTS / "docs_study_01.png"))
