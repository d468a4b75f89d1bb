"""A real browser: headless Chromium driven by Playwright against servers the tests start on
127.0.0.1 (one per module, shared by its tests):

* JupyterLab: notebook 01 (view mode, committed data), "Run All Cells", then a rendered figure and
  the conclusions in words; notebook 00, the explorer: pick a campaign, search and filter the
  catalog, filter its runs, compare it with a second campaign, see the figures.
* Voila (``labkit dashboard``): the same explorer as a web app without code cells.

Screenshots: out/browser/ (docs/screenshots/ holds the committed copies shown in the README).
Needs Debian's chromium (scripts/setup-browser.sh) and the playwright package; skipped when either
is missing unless LABKIT_REQUIRE lists "browser".
"""
from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
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


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab serving a temporary directory on 127.0.0.1 with a random token, the kernels'
    channels encrypted; yields (url, token, root)."""
    tmp_path = tmp_path_factory.mktemp("lab")
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "PYTHONPATH": str(REPO), "LABKIT_ROOT": str(REPO),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings")}
    notes = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    notes.mkdir(parents=True)       # no "get notified about Jupyter news?" toast over the page
    (notes / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    log = open(tmp_path / "lab.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         *(["--allow-root"] if os.geteuid() == 0 else []),
         f"--ServerApp.root_dir={tmp_path}", f"--IdentityProvider.token={token}",
         "--ServerApp.allow_remote_access=False", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
         "jupyterlab.NeverCheckForUpdate", "--KernelManager.transport_encryption=auto"],
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
        yield url, token, tmp_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


SHOTS = REPO / "out" / "browser"


@contextlib.contextmanager
def browser_page(name: str):
    """A page of headless Chromium (1400 x 1000); a full-page screenshot ``<name>_failure.png``
    when the test fails in it."""
    from playwright.sync_api import sync_playwright
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            yield page
        except Exception:
            page.screenshot(path=str(SHOTS / f"{name}_failure.png"), full_page=True)
            raise
        finally:
            browser.close()


def run_all(page, url: str) -> None:
    """Open a notebook in JupyterLab, accept the kernel it proposes, and Run All Cells."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    page.goto(url, timeout=90_000)
    page.wait_for_selector(".jp-Notebook", timeout=90_000)
    try:    # JupyterLab may ask which kernel to start: accept its choice (Python 3)
        page.click(".jp-Dialog .jp-mod-accept", timeout=15_000)
    except PlaywrightTimeout:
        pass
    page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=90_000)
    page.click(".lm-MenuBar-item:has-text('Run')", timeout=30_000)      # the Run menu
    page.click(".lm-Menu-content .lm-Menu-itemLabel:text-is('Run All Cells')", timeout=30_000)


def test_notebook_01_renders_figures_and_conclusions(lab):
    _need()
    import papermill as pm
    url, token, tmp_path = lab
    # the notebook with its parameters injected (view mode, committed data), not executed
    pm.execute_notebook(str(NOTEBOOKS / "01_affinity_factorial.ipynb"), str(tmp_path / "01.ipynb"),
                        parameters={"mode": "view", "interactive": False,
                                    "figures_dir": str(tmp_path / "figures")},
                        prepare_only=True, kernel_name="python3")
    with browser_page("01") as page:
        run_all(page, f"{url}/lab/tree/01.ipynb?token={token}")
        img = page.wait_for_selector(".jp-OutputArea-output img", timeout=240_000)
        concl = page.wait_for_selector(".jp-OutputArea-output.jp-RenderedMarkdown:has-text('Does CPU affinity matter? Not resolved at this n')",
                                       timeout=240_000)
        concl.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "01_conclusions.png"))
        assert img.get_attribute("src").startswith("data:image/png;base64,")
        # affinity-local declares no practical threshold: nothing is said not to matter (issue 41)
        assert "Does CPU affinity matter? Not resolved at this n" in concl.inner_text()
        assert "no CPU affinity level is better overall" in concl.inner_text()
        assert page.locator(".jp-OutputArea-output img").count() >= 6
        assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                            ":has-text('Traceback')").count() == 0
        first = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stdout']").first
        first.scroll_into_view_if_needed()
        assert (first.text_content() or "").strip().startswith("mode view (asked for: reading affinity-local")


# -- the explorer (notebook 00) in JupyterLab and under Voila -----------------------------------


def _select(page, css: str, value: str, timeout: int = 60_000) -> None:
    """Choose ``value`` in the <select> of the ipywidgets Dropdown with class ``css``."""
    sel = page.locator(f"{css} select")
    sel.wait_for(timeout=timeout)
    page.wait_for_function("([css, v]) => [...document.querySelectorAll(css + ' select option')]"
                           ".some(o => o.value === v || o.textContent.trim() === v)", arg=[css, value],
                           timeout=timeout)
    sel.select_option(label=value)


def _tab(page, title: str) -> None:
    page.locator(".lk-tabs .lm-TabBar-tab", has_text=title).first.click()


def explore(page, shot: str, first: str, response: str) -> None:
    """Drive the explorer as a reader would and check what it shows at each step; ``first`` is the
    campaign it opens with and ``response`` that campaign's declared response."""
    page.wait_for_selector(".lk-explorer", timeout=240_000)
    # the first campaign's analysis: its declared response (never a constant such as solutions)
    page.wait_for_selector(".lk-analysis img", timeout=240_000)
    heading = page.locator(".lk-analysis h2").first.inner_text()
    assert heading.startswith(f"{first}: {response} on "), heading
    assert page.locator(".lk-analysis img").count() >= 5
    # search: only the platform designs remain, the count says so
    page.locator(".lk-search input").fill("platform nqueens")
    page.wait_for_function("() => /\\b2 of \\d+ campaigns match/.test(document.querySelector('.lk-count').innerText)"
                           " && !document.querySelector('.lk-catalog').innerText.includes('overhead-cpu')",
                           timeout=60_000)
    catalog = page.locator(".lk-catalog").inner_text()
    assert "affinity-platforms" in catalog and "affinity-lxd-libvirt" in catalog and "overhead-cpu" not in catalog
    # pick one: its analysis replaces the first
    _select(page, ".lk-pick", "affinity-platforms")
    page.wait_for_function("() => document.querySelector('.lk-analysis').innerText.includes('affinity-platforms')",
                           timeout=240_000)
    page.wait_for_selector(".lk-analysis img", timeout=240_000)
    # a filter on status (all ok here) and then the runs tab with its own filters
    _select(page, ".lk-status", "complete")
    _tab(page, "Runs")
    _select(page, ".lk-run-status", "ok")
    page.wait_for_function("() => /192 of 192 runs/.test(document.querySelector('.lk-runs').innerText)",
                           timeout=60_000)
    # compare with the other campaign of the same design: verdict, table and a figure
    _tab(page, "Compare")
    _select(page, ".lk-other", "affinity-lxd-libvirt")
    page.wait_for_selector(".lk-compare img", timeout=240_000)
    text = page.locator(".lk-compare").inner_text()
    assert "drifted significantly from affinity-platforms to affinity-lxd-libvirt" in text
    assert "How they differ" in text
    page.locator(".lk-compare").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / f"{shot}_compare.png"))
    _tab(page, "Analysis")
    page.locator(".lk-explorer").scroll_into_view_if_needed()
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=str(SHOTS / f"{shot}.png"))
    assert page.locator("[data-mime-type='application/vnd.jupyter.stderr']:has-text('Traceback')").count() == 0


def test_explorer_in_jupyterlab(lab):
    _need()
    import papermill as pm
    url, token, tmp_path = lab
    pm.execute_notebook(str(NOTEBOOKS / "00_explorer.ipynb"), str(tmp_path / "00.ipynb"),
                        parameters={"campaign": "affinity-local"}, prepare_only=True, kernel_name="python3")
    with browser_page("explorer") as page:
        run_all(page, f"{url}/lab/tree/00.ipynb?token={token}")
        # the picker is the notebook's first output, at the top
        page.wait_for_selector(".lk-explorer", timeout=240_000)
        page.locator(".lk-explorer").scroll_into_view_if_needed()
        explore(page, "explorer", "affinity-local", "wall_time_s")


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """``labkit dashboard`` on a free port; yields the URL it printed (with its token)."""
    import re
    tmp = tmp_path_factory.mktemp("dashboard")
    port = _free_port()
    log = open(tmp / "voila.log", "wb")
    env = {**os.environ, "PYTHONPATH": str(REPO), "LABKIT_ROOT": str(REPO),
           "JUPYTER_CONFIG_DIR": str(tmp / "cfg"), "JUPYTER_RUNTIME_DIR": str(tmp / "rt")}
    proc = subprocess.Popen([sys.executable, "-m", "labkit", "dashboard", f"--port={port}"], cwd=tmp, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        url = None
        while url is None:
            m = re.search(rb"open (http://127\.0\.0\.1:\d+/\?token=\S+)", (tmp / "voila.log").read_bytes())
            if m:
                url = m.group(1).decode()
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("labkit dashboard did not start:\n" + (tmp / "voila.log").read_text()[-3000:])
            time.sleep(0.3)
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2)
            except urllib.error.HTTPError:
                break          # the server answers (403 without the token)
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("Voila did not answer:\n" + (tmp / "voila.log").read_text()[-3000:])
                time.sleep(0.5)
            else:
                break
        yield url, port, tmp / "voila.log"
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()


def test_dashboard_under_voila(dashboard):
    _need()
    url, port, logfile = dashboard
    # without the token: the login page, not the dashboard
    assert "/login" in urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60).geturl()
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    with browser_page("dashboard") as page:
        page.goto(url, timeout=240_000, wait_until="commit")   # Voila streams the page as it runs
        try:
            page.wait_for_selector(".lk-explorer", timeout=150_000)
        except PlaywrightTimeout:
            # once in a CI run the page never opened its kernel's websocket (Voila logged "Kernel
            # started" and nothing after): a reader reloads; a second failure fails the test
            page.reload(timeout=240_000, wait_until="commit")
        explore(page, "dashboard", "affinity-apache-local", "requests_per_s")   # the first campaign
        body = page.locator("body").inner_text()
        assert "from labkit.report.explore import Explorer" not in body    # no code cells
        assert page.locator(".jp-InputArea-editor, .CodeMirror, .cm-editor").count() == 0
    assert "without encryption" not in logfile.read_text()
