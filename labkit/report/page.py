"""The HTML report's page: a table of contents, numbered sections, figures with captions, formatted
tables, a width that fits a screen and prints on A4 without cutting a table, and provenance.

:func:`render` builds the page from ``(heading, content)`` sections (used by
:func:`labkit.report.html_report` and :func:`labkit.report.write_report`); :func:`provenance`
is the table that says what made the report from what: labkit's version and commit, Python, the
store's SHA-256, the campaign's creation and design digest, and the hosts it ran on.

Everything from a store is escaped (:func:`labkit.report.escape_html`); the page fetches nothing
(no script, stylesheet, font or image from elsewhere: figures are embedded PNGs).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CSS", "Captioned", "provenance", "render", "sha256_file"]

# A4 portrait at 96 dpi is 794 px wide; 14 mm margins leave 688 px: the page is laid out so that
# every table fits that (cells wrap, numbers are short), on screen it is at most 58rem wide.
CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d1d1d;
 max-width:58rem;margin:2rem auto;padding:0 1rem}
h1{font-size:1.55rem;margin:0 0 .2rem}.subtitle{color:#555;margin:0 0 1rem}
h2{font-size:1.2rem;border-bottom:1px solid #d8d8d8;padding-bottom:.15rem;margin:2rem 0 .6rem}
h3{font-size:1rem;margin:1.2rem 0 .4rem}
nav.toc{border:1px solid #ddd;background:#f8f8f8;padding:.4rem 1rem .5rem;margin:1rem 0 1.5rem}
nav.toc h2{border:0;margin:.2rem 0;font-size:1rem}nav.toc ol{margin:.2rem 0;padding-left:1.5rem}
nav.toc li.appendix{list-style:none}
table.lk-table{border-collapse:collapse;font-size:.78rem;margin:.4rem 0 1rem;max-width:100%}
table.lk-table caption{caption-side:top;text-align:left;font-size:.85rem;color:#444;padding:.2rem 0}
table.lk-table th,table.lk-table td{padding:.12rem .4rem;border-bottom:1px solid #e4e4e4;text-align:left;
 vertical-align:top;overflow-wrap:anywhere;word-break:break-word}
table.lk-table th{background:#f1f1f1;font-weight:600;overflow-wrap:normal;word-break:normal}
table.lk-table td.num{white-space:nowrap}table.lk-table .num{text-align:right;font-variant-numeric:tabular-nums}
table.lk-wide{font-size:.68rem}
figure{margin:1rem 0 1.6rem;break-inside:avoid}figure img{width:100%;max-width:100%;height:auto;display:block}
figcaption{font-size:.85rem;color:#3a3a3a;margin-top:.3rem}
.headline{font-weight:700;font-size:1.08rem}pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:.82rem}
ul{padding-left:1.3rem}li{margin:.15rem 0}
@page{size:A4;margin:14mm}
@media print{body{max-width:none;margin:0;padding:0;font-size:10.5pt}nav.toc{break-inside:avoid}
 h2,h3{break-after:avoid}tr,figure{break-inside:avoid}a{color:inherit;text-decoration:none}
 figure img{max-height:232mm;object-fit:contain}section.appendix{break-before:page}}
"""


@dataclass
class Captioned:
    """A figure with its caption (``Figure N.`` is added in front when the page is built)."""

    figure: Any
    caption: str


def _anchor(heading: str, used: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-") or "section"
    name, i = base, 2
    while name in used:
        name, i = f"{base}-{i}", i + 1
    used.add(name)
    return name


#: the figures' resolution: drawn at their own size in inches and shown the page's full width (on
#: A4, 182 mm), sharp on a laptop's screen and in print
FIGURE_DPI = 150


def _figure(fig, caption: str, number: int) -> str:
    from .escape import escape_html

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    cap = (
        f"<figcaption><b>Figure {number}.</b> {escape_html(caption)}</figcaption>"
        if caption
        else f"<figcaption><b>Figure {number}.</b></figcaption>"
    )
    return f'<figure><img alt="figure" src="data:image/png;base64,{data}">{cap}</figure>'


def render(title: str, sections: Sequence[tuple[str, object]], *, subtitle: str = "") -> str:
    """One self-contained HTML page: ``title``, ``subtitle``, a numbered table of contents, then
    each ``(heading, content)`` as a numbered section. Content is a str (plain text), a
    DataFrame (a formatted table: :func:`labkit.report.tables.html_table`), a
    :class:`labkit.report.Conclusions`, a matplotlib Figure, a :class:`Captioned` figure, or a list
    of those. Every text is escaped. A section whose heading starts with "Appendix"
    (:data:`labkit.report.html.APPENDIX`) is not numbered (its heading says which appendix it is),
    starts a new printed page and is listed in the contents all the same."""
    import pandas as pd
    from matplotlib.figure import Figure

    from .conclude import Conclusions
    from .escape import escape_html
    from .tables import html_table

    used: set[str] = set()
    toc, body = [], []
    n_fig = 0
    i = 0
    for heading, content in sections:
        anchor = _anchor(str(heading), used)
        appendix = str(heading).startswith("Appendix")
        i += not appendix
        toc.append(
            f'<li{" class=appendix" if appendix else ""}><a href="#{anchor}">{escape_html(heading)}</a></li>'
        )
        part = [
            f'<section id="{anchor}" class="appendix"><h2>{escape_html(heading)}</h2>'
            if appendix
            else f'<section id="{anchor}"><h2>{i}. {escape_html(heading)}</h2>'
        ]
        for item in content if isinstance(content, list) else [content]:
            if isinstance(item, pd.DataFrame):
                part.append(html_table(item))
            elif isinstance(item, Captioned | Figure):
                n_fig += 1
                fig, cap = (item.figure, item.caption) if isinstance(item, Captioned) else (item, "")
                part.append(_figure(fig, cap, n_fig))
            elif isinstance(item, Conclusions):
                if item.headline:
                    part.append(f'<p class="headline">{escape_html(item.headline)}</p>')
                for name, sentences in item.sections():
                    part.append(
                        f"<h3>{escape_html(name)}</h3><ul>"
                        + "".join(f"<li>{escape_html(s)}</li>" for s in sentences)
                        + "</ul>"
                    )
            elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                part.append(f"<h3>{escape_html(item[0])}</h3>")
                part.append(
                    html_table(item[1])
                    if isinstance(item[1], pd.DataFrame)
                    else f"<p>{escape_html(item[1])}</p>"
                )
            else:
                part.append(f"<pre>{escape_html(item)}</pre>")
        part.append("</section>")
        body.append("\n".join(part))
    sub = f'<p class="subtitle">{escape_html(subtitle)}</p>' if subtitle else ""
    nav = f'<nav class="toc"><h2>Contents</h2><ol>{"".join(toc)}</ol></nav>' if sections else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape_html(title)}</title><style>{CSS}</style></head><body>\n"
        f"<header><h1>{escape_html(title)}</h1>{sub}</header>\n{nav}\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


#: digests already computed by this process: (path, device, inode, mtime_ns, size) -> hex digest
_DIGESTS: dict[tuple, str] = {}


def sha256_file(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks (the file is only read); computed once per
    version of the file in a process (cached by path, device, inode, mtime and size, so a report
    that names its store three times reads a 1.8 GB store once)."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        key = (os.path.abspath(path), st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        if key in _DIGESTS:
            return _DIGESTS[key]
        h = hashlib.sha256()
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    if len(_DIGESTS) > 256:
        _DIGESTS.clear()
    _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def provenance(data_dir: str | Path, campaign: str, meta: dict, fingerprints: dict) -> pd.DataFrame:
    """``item``/``value`` rows saying what made the report from what: the report's time (UTC),
    labkit's version and git commit (:func:`labkit.core.fingerprint.labkit_commit`), Python, the
    store (its path under the data directory, size and SHA-256: the same digest means the same
    results), the campaign's creation time and design digest, and per host fingerprint the host
    (name, kernel, CPU, CPUs) and the labkit version and commit it was measured with."""
    import platform
    from datetime import UTC, datetime

    import pandas as pd

    from .. import __version__
    from ..core.fingerprint import labkit_commit

    store = Path(data_dir) / campaign / "store.sqlite"
    rows = [
        ("report made", datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")),
        ("by labkit", f"{__version__}, commit {labkit_commit()}"),
        ("Python", platform.python_version()),
        ("store", f"{campaign}/store.sqlite, {store.stat().st_size:,} bytes"),
        ("store SHA-256", sha256_file(store)),
        ("campaign created", str(meta.get("created", "n/a"))),
        ("design digest", str(meta.get("design_digest", "n/a"))),
    ]
    for fid, fp in fingerprints.items():
        host = fp.get("host") or {}
        backend = fp.get("backend") or {}
        facts = [str(host.get(k)) for k in ("hostname", "kernel", "cpu_model") if host.get(k)]
        if host.get("cpus"):
            facts.append(f"{host['cpus']} CPUs")
        if backend.get("backend"):
            facts.append(f"backend {backend['backend']}")
        measured = f"labkit {host.get('labkit', 'n/a')}" + (
            f", commit {host['labkit_commit']}" if host.get("labkit_commit") else ""
        )
        rows.append((f"host {fid}", ", ".join(facts + [measured])))
    return pd.DataFrame(rows, columns=["item", "value"])
