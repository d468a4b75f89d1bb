"""Campaign stores whose names, levels and texts carry markup and mathtext payloads (issue 28).

A shared campaign is data from someone else: its campaign id, design name and description,
factor names, levels, metric names and error texts reach Markdown (the explorer), HTML
(reports) and figures. :func:`payload_store` writes such a store the way a hostile copy
would look (the store is written directly, not through :class:`labkit.design.Design`,
which a forged store never passed); :func:`rendered_markdown` renders Markdown as
JupyterLab does (raw HTML allowed) and :func:`markup_left` finds what became markup.
"""

from __future__ import annotations

import html
import itertools
import re
from pathlib import Path
from types import SimpleNamespace

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
LINK = "[x](javascript:alert(1))"
MATH = "$\\alpha$"
BAD_MATH = "$x^$"  # not even valid mathtext: matplotlib raises on it
PAYLOADS = (SCRIPT, IMG, LINK, MATH, BAD_MATH)

CAMPAIGN = "<img src=x onerror=alert(2)> $x^$"  # a directory name: no "/"
# factor names hold no ":" (labkit joins interaction terms with it)
FACTORS = {SCRIPT: [IMG, LINK], f"[x](#) {IMG[:-1]} {BAD_MATH}>": [MATH, BAD_MATH]}
METRIC = "t_s"


def payload_store(data_dir, campaign: str = CAMPAIGN, factors=None, *, replications: int = 2) -> Path:
    """Write ``data_dir/campaign/store.sqlite`` (2 x 2 levels x ``replications`` by default) with
    payloads in the campaign id, design name and description, factor names, levels, backend and
    workload names and one failed run's error text. Returns the store's path."""
    from labkit.design import Run
    from labkit.store import Store

    factors = FACTORS if factors is None else factors
    path = Path(data_dir) / campaign / "store.sqlite"
    names = list(factors)
    configs = list(itertools.product(*factors.values()))
    with Store(path) as st:
        st.set_meta(
            campaign_id=f"{campaign} {SCRIPT}",
            design={
                "name": f"{SCRIPT} {LINK}",
                "description": f"{IMG} {MATH}",
                "factors": factors,
                "replications": replications,
                "seed": 1,
            },
            backend=IMG,
            workload={"name": LINK, "response": METRIC},
        )
        order = 0
        for c, levels in enumerate(configs):
            for rep in range(1, replications + 1):
                run = Run(f"c{c:04d}r{rep:03d}", order, c, rep, dict(zip(names, levels)))
                value = 10.0 + 3 * c + 0.1 * rep + 0.01 * order
                st.record_run(
                    run,
                    status="ok",
                    started="2026-01-01T00:00:00+00:00",
                    duration_s=1.0,
                    measurements=[SimpleNamespace(instance=0, metric=METRIC, value=value, unit="s")],
                )
                order += 1
        st.record_run(
            Run("c0000r099", order, 0, 99, dict(zip(names, configs[0]))),
            status="failed",
            started="2026-01-01T00:00:00+00:00",
            duration_s=1.0,
            error=f"{SCRIPT}\n{IMG} {LINK} {MATH}",
        )
    return path


def rendered_markdown(text: str) -> str:
    """HTML of ``text`` rendered as CommonMark with raw HTML allowed (what JupyterLab shows)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).render(text)


_OWN_IMG = '<img alt="figure" src="data:image/png;base64,'


def markup_left(page: str) -> list[str]:
    """Tags in an HTML page that a payload made: ``script``, ``iframe``, ``object``, ``embed``,
    ``svg`` and ``img`` tags (other than labkit's own embedded figures), and any tag with an
    ``on...=`` handler or a ``javascript:`` URL. Empty when every payload stayed text."""
    found = []
    for m in re.finditer(r"<\s*([a-zA-Z][\w-]*)([^>]*)>", page):
        tag, attrs = m.group(1).lower(), m.group(2).lower()
        if m.group(0).startswith(_OWN_IMG):
            continue
        if (
            tag in ("script", "iframe", "object", "embed", "svg", "img")
            or re.search(r"\bon\w+\s*=", attrs)
            or "javascript:" in attrs
        ):
            found.append(m.group(0))
    return found


def visible_text(page: str) -> str:
    """The text a browser shows for ``page``: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]*>", "", page))
