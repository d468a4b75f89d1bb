"""Issue 28, escaping and written files: real attack trials against labkit's renderers and writers.

``rows()`` returns (section, row, count, must-be) for reliability/run.py. Markup payloads
(``<script>``, ``<img onerror>``, ``[x](javascript:...)``, ``$...$``, headings, lists) go
through every renderer of data (``escape_md``, ``Conclusions.markdown``, the explorer's
``Analysis.markdown``, the HTML report) on a campaign store that carries them everywhere;
the Markdown is rendered as JupyterLab does (CommonMark, raw HTML allowed) and what
became markup is counted. Every writer (report, bundle, export, figures, atomic_write)
is pointed at a symbolic link planted in another directory and at a file left 0644.
"""
from __future__ import annotations

import os
import stat
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXTRA = ["# heading", "1. item", "- item", "**b** _e_ `c`", "a | b", "x\n\n<script>y</script>",
         "<iframe src=javascript:alert(1)>", "<a href=\"javascript:alert(1)\">x</a>",
         "![i](javascript:alert(1))", "[x](https://example.org)", "<https://example.org>", "&lt;script&gt;", "\\<script>"]
SECTION_MARKUP = "escaping (markup from data)"
SECTION_FILES = "written files"


def _markup_rows(tmp: Path) -> list[tuple[str, str, object, str]]:
    import matplotlib
    matplotlib.use("Agg")
    from labkit.report import Conclusions, analyze, escape_md, write_report
    from tests.support.payloads import CAMPAIGN, PAYLOADS, markup_left, payload_store, rendered_markdown

    texts = list(PAYLOADS) + EXTRA
    pages = [rendered_markdown(escape_md(t)) for t in texts]
    pages += [rendered_markdown(Conclusions(headline=t, findings=[t, f"{t}: {t}"]).markdown()) for t in texts]
    data = tmp / "data"
    payload_store(data)
    crashed = 0
    try:
        a = analyze(data, CAMPAIGN)
        pages += [rendered_markdown(m) for m in a.markdown().values()]
        pages.append(write_report(data, CAMPAIGN, tmp / "report.html").read_text())
    except Exception:          # a crash is a finding too ("$x^$" in a figure raised before)
        crashed += 1
    left = sum(len(markup_left(p)) + p.count("<a ") for p in pages)
    return [(SECTION_MARKUP, f"{len(pages)} renderings of {len(texts)} payloads: markup left", left, "0"),
            (SECTION_MARKUP, "hostile campaign: explorer Markdown or HTML report failed", crashed, "0")]


def _writers(data: Path, campaign: str):
    """name -> write(path) for every writer of a user-chosen path."""
    import pandas as pd

    from labkit.core.files import atomic_write
    from labkit.report import plots, write_bundle, write_report
    from labkit.store import Store

    def export(path):
        with Store(data / campaign / "store.sqlite", readonly=True) as st:
            # export writes fixed names into a directory: plant there
            st.export(path.parent, formats=("csv",))

    def figure(path):
        fig = plots.run_order(pd.DataFrame({"run_order": [0, 1], "y": [1.0, 2.0]}), "y")
        plots.save_figure(fig, path.stem, path.parent, formats=("png",))

    return {"report": (lambda p: write_report(data, campaign, p), "report.html", 0o600),
            "bundle": (lambda p: write_bundle(data, campaign, p), "bundle.zip", 0o600),
            "export": (export, "results.csv", 0o600),
            "figure": (figure, "fig.png", 0o600),
            "atomic_write": (lambda p: atomic_write(p, "x"), "file", 0o600)}


def _file_rows(tmp: Path) -> list[tuple[str, str, object, str]]:
    from labkit.errors import ConfigError
    from tests.support.payloads import payload_store

    data = tmp / "data"
    payload_store(data, "files")
    through = refused = wrong_mode = 0
    writers = _writers(data, "files")
    for name, (write, target, declared) in writers.items():
        victim = tmp / f"victim-{name}"
        victim.write_text("precious\n")
        planted = tmp / f"other-{name}"
        planted.mkdir()
        (planted / target).symlink_to(victim)
        try:
            write(planted / target)
        except ConfigError as exc:
            refused += str(planted / target) in str(exc)
        through += victim.read_text() != "precious\n"
        fresh = tmp / f"old-{name}"
        fresh.mkdir()
        (fresh / target).write_text("old")
        os.chmod(fresh / target, 0o644)
        write(fresh / target)
        wrong_mode += stat.S_IMODE(os.lstat(fresh / target).st_mode) != declared
    names = zipfile.ZipFile(tmp / "old-bundle" / "bundle.zip").namelist()
    bad_names = sum("/" in n or "\\" in n or n.startswith(".") for n in names)
    return [(SECTION_FILES, f"writes through a planted link ({len(writers)} writers)", through, "0"),
            (SECTION_FILES, "planted links refused naming the path", refused, ""),
            (SECTION_FILES, "files left with a mode other than declared (was 0644)", wrong_mode, "0"),
            (SECTION_FILES, "bundle members with a path component", bad_names, "0")]


def _one_factor_rows(tmp: Path) -> list[tuple[str, str, object, str]]:
    from labkit.report import write_report
    from tests.support.payloads import payload_store
    failed = 0
    for i, factors in enumerate(({"size": [1, 2, 3]}, {"size": ["a", "b"]})):
        data = tmp / f"one-{i}"
        payload_store(data, "one", factors, replications=1)
        try:
            write_report(data, "one", tmp / f"one-{i}.html")
        except Exception:
            failed += 1
    return [(SECTION_FILES, "one-factor unreplicated campaigns without a report", failed, "0")]


def rows() -> list[tuple[str, str, object, str]]:
    with tempfile.TemporaryDirectory(prefix="labkit-rel-sec-") as d:
        tmp = Path(d)
        out = []
        for part, make in (("m", _markup_rows), ("f", _file_rows), ("o", _one_factor_rows)):
            (tmp / part).mkdir()
            out += make(tmp / part)
        return out


if __name__ == "__main__":
    for row in rows():
        print(*row, sep=" | ")
