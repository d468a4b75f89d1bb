"""The HTML report printed to PDF by headless Chromium (``--print-to-pdf``): no table cut off.

Two checks per report (committed campaigns: the 2^4 and the 2^5 platform design, whose tables are
the widest, and a one-factor ANOVA): (1) the PDF, read back with ``pdftotext``, holds every table's
last header and the text of every table's last row, and no word lies past the page's right
edge; (2) laid out at the A4 printable width (688 px, ``--dump-dom`` with a small script appended
to a copy of the page) and at a laptop's 1280 px, no table is wider than its section. A page
with one over-wide table must fail both checks (so the checks can fail). Also: conclusions
first, then the figures, a table of contents, figure captions, provenance with the store's SHA-256,
the per-run tables in appendices at the end.

Needs Debian's chromium and poppler-utils (scripts/setup-browser.sh); skipped when missing
unless LABKIT_REQUIRE lists "browser".
"""
from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from labkit.backends.testing import required

from .conftest import REPO

pytestmark = pytest.mark.browser
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--mute-audio"]
CHECK = """<script>
(function () {
  var W = document.documentElement.clientWidth, bad = [], tables = document.querySelectorAll('table');
  tables.forEach(function (t, i) {
    var r = t.getBoundingClientRect(), box = t.parentElement.getBoundingClientRect();
    if (r.right > Math.min(W, box.right) + 0.5) bad.push({table: i, right: r.right, limit: Math.min(W, box.right)});
  });
  var pre = document.createElement('pre');
  pre.id = 'lk-layout';
  pre.textContent = JSON.stringify({width: W, tables: tables.length, overflow: bad});
  document.body.appendChild(pre);
})();
</script>"""


def _need():
    missing = [p for p in (CHROMIUM, shutil.which("pdftotext") or "/usr/bin/pdftotext") if not Path(p).exists()]
    if missing:
        why = f"{', '.join(missing)} missing (bash scripts/setup-browser.sh)"
        if "browser" in required():
            pytest.fail(why)
        pytest.skip(why)


def chromium(*args: str, timeout: int = 120) -> str:
    res = subprocess.run([CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def print_pdf(page: Path) -> Path:
    pdf = page.with_suffix(".pdf")
    chromium("--no-pdf-header-footer", f"--print-to-pdf={pdf}", page.as_uri())
    assert pdf.stat().st_size > 1000
    return pdf


def layout(page: Path, width: int) -> dict:
    probe = page.with_name(page.stem + f"-probe-{width}.html")
    probe.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
    dom = chromium(f"--window-size={width},1200", "--dump-dom", probe.as_uri())
    m = re.search(r'<pre id="lk-layout">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    return json.loads(html.unescape(m.group(1)))


def _cell_text(cell: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", cell)).split())


def table_edges(page_html: str) -> list[tuple[str, str]]:
    """Per table: its last header's text and its last row's last cell text."""
    out = []
    for t in re.findall(r"<table.*?</table>", page_html, re.S):
        heads = re.findall(r"<th[^>]*>(.*?)</th>", t, re.S)
        rows = re.findall(r"<tr>(.*?)</tr>", t, re.S)
        cells = re.findall(r"<td[^>]*>(.*?)</td>", rows[-1], re.S) if rows else []
        out.append((_cell_text(heads[-1]) if heads else "", _cell_text(cells[-1]) if cells else ""))
    return out


def pdf_problems(page: Path) -> list[str]:
    """What the printed PDF lost: table edges missing from its text, words past the page's edge."""
    pdf = print_pdf(page)
    text = subprocess.run(["pdftotext", "-raw", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout
    flat = re.sub(r"\s+", "", text)
    problems = [f"table {i}: {what!r} not in the PDF" for i, edge in enumerate(table_edges(page.read_text()))
                for what in edge if what and re.sub(r"\s+", "", what)[:40] not in flat]
    bbox = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    for p in re.finditer(r'<page width="([\d.]+)"(.*?)</page>', bbox, re.S):
        width = float(p.group(1))
        for x, word in re.findall(r'xMax="([\d.]+)"[^>]*>([^<]*)<', p.group(2)):
            if float(x) > width + 0.5:
                problems.append(f"{word!r} ends at {x} > page width {width}")
    return problems


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    from labkit.report import write_report
    out = tmp_path_factory.mktemp("reports")
    return {cid: write_report(REPO / "data", cid, out / f"{cid}.html")
            for cid in ("affinity-local", "affinity-platforms", "deployments-cpu")}


@pytest.mark.parametrize("cid", ["affinity-local", "affinity-platforms", "deployments-cpu"])
def test_report_prints_on_a4_without_cutting_a_table(reports, cid):
    _need()
    page = reports[cid]
    assert pdf_problems(page) == []
    for width in (688, 1280):
        got = layout(page, width)
        assert got["tables"] >= 6 and got["overflow"] == [], got


def test_an_over_wide_table_is_caught(tmp_path):
    """The checks above can fail: one table of 16 unbreakable cells in the report's own style."""
    _need()
    import pandas as pd

    from labkit.report import html_report
    wide = pd.DataFrame({f"column_{i}": [float(10 ** 7 + i) * 1.5] for i in range(16)})
    page = tmp_path / "wide.html"
    page.write_text(html_report("wide", [("A table", wide)]).replace(
        "table.lk-wide{font-size:.68rem}", "table.lk-wide{font-size:1.2rem}"))
    assert pdf_problems(page)
    assert layout(page, 688)["overflow"]


def test_report_reads_conclusions_first_with_contents_captions_and_provenance(reports):
    page = reports["affinity-local"].read_text()
    h2 = re.findall(r"<h2>(.*?)</h2>", page)
    # issue 46: the answer, then the figures, the analysis tables, and the per-run tables last
    assert h2[:4] == ["Contents", "1. Conclusions", "2. Figures", "3. Design"]
    from labkit.store import Store
    with Store(REPO / "data" / "affinity-local" / "store.sqlite", readonly=True) as st:
        stored = st.runs()
        telemetry, hosts = not st.samples().empty, set(stored.fingerprint_id)
        suspect = bool(stored.suspect.fillna(False).astype(bool).any())
    # the suspect runs' appendix only when the store has some (none since the re-run of 2026-11-29)
    appendices = ["Appendix A. Telemetry per run"] + (["Appendix B. Suspect runs"] if suspect else [])
    assert h2[-len(appendices) - 1].endswith(". Provenance") and h2[-len(appendices):] == appendices
    # pareto, main effects, interactions, run order, Q-Q; variance by level, drift and, when the
    # store has it, per-run telemetry (issue 32)
    assert page.count("<figcaption><b>Figure ") == 7 + telemetry and "Pareto chart of the effects" in page
    digest = hashlib.sha256((REPO / "data" / "affinity-local" / "store.sqlite").read_bytes()).hexdigest()
    assert digest in page and "by labkit" in page and all(f"host {h}" in page for h in hosts)
    assert "<td>vcpus</td><td>1, 2</td>" in page            # the design as a table, not a dict
    # numbers to a few significant digits: tiny p-values in short scientific notation, never 1.209442e-49
    assert re.search(r"\d\.\de-\d+", page) and not re.search(r"\d\.\d{5,}e[-+]?\d+", page)
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")
