"""Store text made safe to show: :func:`escape_md` for Markdown (notebooks, the explorer) and
:func:`escape_html` for HTML (the report), so names and levels from a store are shown literally
and never become markup."""

from __future__ import annotations

import html

__all__ = ["escape_html", "escape_md"]

# always backslash-escaped in Markdown; "<", ">" and "&" become entities; "_" only where it could
# start or end emphasis (not inside a word such as wall_time_s); "#", "+", "-", "=" and "1." only
# at the start, where they would make a heading, a list item or a rule
_MD_ALWAYS = set("\\`*[]$|~{}!")
_MD_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def escape_md(text: object) -> str:
    """``text`` (any value, shown with ``str``) as Markdown that renders as exactly that text.

    For everything a campaign store or a user supplies (campaign, design and factor names,
    levels, error texts, host facts) that goes into Markdown shown by Jupyter: HTML tags and
    entities (``<script>``, ``<img onerror=...>``) become text, links and images
    (``[x](javascript:...)``) cannot form, ``$...$`` is not typeset as math, and line breaks
    become spaces (the text stays inside its line, list item or heading). Plain words,
    numbers and names such as ``wall_time_s`` are left as they are.
    """
    s = " ".join(str(text).splitlines())
    out = []
    for i, c in enumerate(s):
        if c in _MD_ENTITIES:
            out.append(_MD_ENTITIES[c])
        elif c in _MD_ALWAYS or (
            c == "_" and not (0 < i < len(s) - 1 and s[i - 1].isalnum() and s[i + 1].isalnum())
        ):
            out.append("\\" + c)
        else:
            out.append(c)
    s = "".join(out)
    lead = len(s) - len(s.lstrip())
    head = s[lead:]
    if head[:1] in ("#", "+", "-", "="):
        s = s[:lead] + "\\" + head
    else:
        digits = len(head) - len(head.lstrip("0123456789"))
        if digits and head[digits : digits + 1] in (".", ")"):
            s = s[: lead + digits] + "\\" + s[lead + digits :]
    return s


def escape_html(text: object) -> str:
    """``text`` (any value, shown with ``str``) as HTML text or attribute value: ``<``, ``>``,
    ``&`` and both quotes become entities (:func:`html.escape`)."""
    return html.escape(str(text), quote=True)
