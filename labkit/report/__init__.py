"""Results in words: conclusions written from the statistics, and one-file HTML reports.

:func:`conclusions` (:mod:`labkit.report.conclude`) turns a factorial analysis (effects table,
residual diagnostics, bootstrap CIs of the shares of variation, an optional published reference)
into sentences a reader can check against the tables. :func:`analyze`
(:mod:`labkit.report.analysis`) analyses a stored campaign, :func:`compare`
(:mod:`labkit.report.comparison`) sets two beside each other, :func:`html_report` and
:func:`write_report` (:mod:`labkit.report.html`) write a campaign's analysis as one self-contained
HTML file and :func:`write_bundle` (:mod:`labkit.report.bundle`) as a checkable zip. This package
only gathers their public names; each lives in the module named for what it owns.

Its names are imported when first used (PEP 562): ``import labkit.report.catalog`` (``labkit list``,
``labkit show``) does not load the analysis and its statistics stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: public name -> the submodule that owns it
_OWNERS = {
    "Analysis": "analysis_result",
    "analyze": "analysis",
    "analyze_results": "analysis",
    "stein_summary": "adaptive",
    "suspect_sentences": "robustness",
    "treatment_hook": "robustness",
    "write_bundle": "bundle",
    "compare": "comparison",
    "Conclusions": "conclude",
    "conclusions": "conclude",
    "decided_effects": "conclude",
    "focus_answer": "conclude",
    "declared_levels": "declared",
    "sorted_as_declared": "declared",
    "escape_html": "escape",
    "escape_md": "escape",
    "FIGURE_CAPTIONS": "html",
    "REPORT_EFFECT_COLUMNS": "html",
    "html_report": "html",
    "write_report": "html",
    "ORDER_COLUMNS": "order",
    "order_sentences": "order",
    "variation_ci": "variation",
}

if TYPE_CHECKING:
    from .adaptive import stein_summary
    from .analysis import analyze, analyze_results
    from .analysis_result import Analysis
    from .bundle import write_bundle
    from .comparison import compare
    from .conclude import Conclusions, conclusions, decided_effects, focus_answer
    from .declared import declared_levels, sorted_as_declared
    from .escape import escape_html, escape_md
    from .html import FIGURE_CAPTIONS, REPORT_EFFECT_COLUMNS, html_report, write_report
    from .order import ORDER_COLUMNS, order_sentences
    from .robustness import suspect_sentences, treatment_hook
    from .variation import variation_ci


def __getattr__(name: str) -> Any:
    owner = _OWNERS.get(name)
    if owner is None:
        raise AttributeError(f"module 'labkit.report' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{owner}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_OWNERS])


__all__ = [
    "FIGURE_CAPTIONS",
    "ORDER_COLUMNS",
    "REPORT_EFFECT_COLUMNS",
    "Analysis",
    "Conclusions",
    "analyze",
    "analyze_results",
    "compare",
    "conclusions",
    "decided_effects",
    "declared_levels",
    "escape_html",
    "escape_md",
    "focus_answer",
    "html_report",
    "order_sentences",
    "sorted_as_declared",
    "stein_summary",
    "suspect_sentences",
    "treatment_hook",
    "variation_ci",
    "write_bundle",
    "write_report",
]
