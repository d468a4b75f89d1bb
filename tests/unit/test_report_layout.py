"""The HTML report's reading order (issue 46: per-run tables filled pages 6-14 of 19 and small
figures came last): conclusions, then every figure with a caption that says what it shows, its n
and what is suspect or a stand-in about its data, then the analysis tables, and the per-run
tables in appendices at the end, linked from the contents. On a committed campaign with
telemetry and suspect runs (affinity-platforms), opened read-only."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

from labkit.errors import ConfigError  # noqa: E402
from labkit.report.html import data_notes, figure_caption, html_report, write_report  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CAMPAIGN = "affinity-platforms"  # 1 of its 192 runs is suspect


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    return write_report(REPO / "data", CAMPAIGN, tmp_path_factory.mktemp("report") / "r.html").read_text()


def _sections(page: str) -> list[tuple[str, str]]:
    """(heading, body) of each section, in page order."""
    return [
        (h, body)
        for h, body in re.findall(r'<section id="[^"]+"[^>]*><h2>(.*?)</h2>(.*?)</section>', page, re.S)
    ]


def _per_run(table: str) -> bool:
    """A table with one row per run: a run_id column."""
    return bool(re.search(r"<th[^>]*>run_(<wbr>)?id</th>", table))


def test_conclusions_then_figures_then_tables_then_the_per_run_appendix(page):
    heads = [h for h, _ in _sections(page)]
    assert heads[0] == "1. Conclusions" and heads[1] == "2. Figures"
    appendix = [i for i, h in enumerate(heads) if h.startswith("Appendix")]
    assert appendix and appendix == list(range(appendix[0], len(heads))), heads  # the appendices come last
    assert page.index("<h2>1. Conclusions") < page.index("<h2>2. Figures") < page.index("<h2>Appendix")
    # every appendix is linked from the contents, unnumbered there as in its heading
    toc = re.search(r'<nav class="toc">(.*?)</nav>', page, re.S).group(1)
    for h in (heads[i] for i in appendix):
        anchor = re.search(rf'<section id="([^"]+)" class="appendix"><h2>{re.escape(h)}</h2>', page).group(1)
        assert f'<li class=appendix><a href="#{anchor}">{h}</a></li>' in toc


def test_every_figure_is_in_the_figures_section_with_a_caption_and_its_n(page):
    sections = dict(_sections(page))
    figures = sections["2. Figures"]
    assert page.count("<figure>") == figures.count("<figure>") >= 7  # none left among the tables
    caps = re.findall(
        r"<figure><img [^>]+><figcaption><b>Figure (\d+)\.</b> (.*?)</figcaption></figure>", figures
    )
    assert len(caps) == figures.count("<figure>") and [int(n) for n, _ in caps] == list(
        range(1, len(caps) + 1)
    )
    analysed = re.search(r"analysis of (\d+) successful runs", page).group(1)  # the subtitle's n
    for _, text in caps:
        assert len(text) > 60 and re.search(r"\bn = \d+ runs\b", text), text
        # the campaign has suspect runs: every figure says it includes them
        assert "flagged suspect" in text, text
    assert f"n = {analysed} runs in " in caps[0][1]  # the Pareto chart: the analysed runs


def test_the_per_run_tables_are_in_the_appendix_only(page):
    appendix, body = [], []
    for heading, text in _sections(page):
        tables = re.findall(r"<table.*?</table>", text, re.S)
        (appendix if heading.startswith("Appendix") else body).extend(tables)
    assert appendix and all(_per_run(t) for t in appendix)
    assert not any(_per_run(t) for t in body)


def test_data_notes_name_suspect_runs_stand_ins_and_emulation():
    a = SimpleNamespace(
        suspect_runs=pd.DataFrame({"run_id": ["r1", "r2"]}),
        runs=pd.DataFrame({"run_id": range(10)}),
        meta={"design": {"description": "seed 001 stand-in: pipeline-shaped dedup (NOT PARSEC)"}},
    )
    notes = data_notes(a, {"kvm", "qemu"})
    assert len(notes) == 3 and "the 2 runs flagged suspect" in notes[0]
    assert notes[1].startswith("Stand-in data: seed 001 stand-in") and "QEMU TCG" in notes[2]
    assert data_notes(SimpleNamespace(suspect_runs=None, runs=None, meta={}), {"kvm"}) == []
    assert (
        figure_caption("Main effects", "n = 8 runs in 4 configurations", ["A note."])
        == "Main effects. n = 8 runs in 4 configurations. A note."
    )
    with pytest.raises(ConfigError, match="what the figure shows"):
        figure_caption(" ", "n = 1 runs")


def test_an_appendix_section_is_unnumbered_and_listed():
    page = html_report(
        "t", [("One", "x"), ("Two", "y"), ("Appendix A. Runs", pd.DataFrame({"run_id": ["a"]}))]
    )
    assert re.findall(r"<h2>(.*?)</h2>", page) == ["Contents", "1. One", "2. Two", "Appendix A. Runs"]
    assert '<li class=appendix><a href="#appendix-a-runs">Appendix A. Runs</a></li>' in page
