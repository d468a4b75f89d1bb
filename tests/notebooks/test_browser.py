"""A real browser: JupyterLab started by the test on 127.0.0.1, notebook 01 (view mode, committed
data) opened in headless Chromium driven by Playwright, "Run All Cells", then the page must show a
rendered figure (an <img> in an output) and the conclusions in words. Screenshot: out/browser/.

Needs Debian's chromium (scripts/setup-browser.sh) and the playwright package; skipped when either
is missing unless LABKIT_REQUIRE lists "browser".
"""
from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from labkit.backends.testing import required

from .conftest import NOTEBOOKS, REPO

pytestmark = pytest.mark.browser
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def _need():
    why = None
    if not os.path.exists(CHROMIUM):
        why = f"{CHROMIUM} missing (bash scripts/setup-browser.sh)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            why = "playwright not installed (pip install -r requirements.txt)"
    if why:
        if "browser" in required():
            pytest.fail(why)
        pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab serving tmp_path on 127.0.0.1 with a random token; yields (url, token)."""
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "PYTHONPATH": str(REPO), "LABKIT_ROOT": str(REPO),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    log = open(tmp_path / "lab.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         *(["--allow-root"] if os.geteuid() == 0 else []),
         f"--ServerApp.root_dir={tmp_path}", f"--IdentityProvider.token={token}",
         "--ServerApp.allow_remote_access=False", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
         "jupyterlab.NeverCheckForUpdate"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield url, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_notebook_01_renders_figures_and_conclusions(lab, tmp_path):
    _need()
    import papermill as pm
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright
    url, token = lab
    # the notebook with its parameters injected (view mode, committed data), not executed
    pm.execute_notebook(str(NOTEBOOKS / "01_affinity_factorial.ipynb"), str(tmp_path / "01.ipynb"),
                        parameters={"mode": "view", "interactive": False,
                                    "figures_dir": str(tmp_path / "figures")},
                        prepare_only=True, kernel_name="python3")
    shots = REPO / "out" / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/lab/tree/01.ipynb?token={token}", timeout=90_000)
            page.wait_for_selector(".jp-Notebook", timeout=90_000)
            try:    # JupyterLab may ask which kernel to start: accept its choice (Python 3)
                page.click(".jp-Dialog .jp-mod-accept", timeout=15_000)
            except PlaywrightTimeout:
                pass
            page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=90_000)
            page.click(".lm-MenuBar-item:has-text('Run')", timeout=30_000)      # the Run menu
            page.click(".lm-Menu-content .lm-Menu-itemLabel:text-is('Run All Cells')", timeout=30_000)
            img = page.wait_for_selector(".jp-OutputArea-output img", timeout=240_000)
            concl = page.wait_for_selector(".jp-OutputArea-output.jp-RenderedMarkdown:has-text('Does CPU affinity matter? No')",
                                           timeout=240_000)
            concl.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "01_conclusions.png"))
            assert img.get_attribute("src").startswith("data:image/png;base64,")
            assert "Does CPU affinity matter? No" in concl.inner_text()
            assert page.locator(".jp-OutputArea-output img").count() >= 6
            assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                                ":has-text('Traceback')").count() == 0
        except Exception:
            page.screenshot(path=str(shots / "01_failure.png"), full_page=True)
            raise
        finally:
            browser.close()
