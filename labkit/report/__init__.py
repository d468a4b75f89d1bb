"""Results in words: conclusions written from the statistics, and one-file HTML reports.

:func:`conclusions` (:mod:`labkit.report.conclusions`) turns a factorial analysis (effects table,
residual diagnostics, bootstrap CIs of the shares of variation, an optional published reference)
into sentences a reader can check against the tables. :func:`analyze`
(:mod:`labkit.report.analysis`) analyses a stored campaign, :func:`compare`
(:mod:`labkit.report.comparison`) sets two beside each other, :func:`html_report` and
:func:`write_report` (:mod:`labkit.report.html`) write a campaign's analysis as one self-contained
HTML file and :func:`write_bundle` (:mod:`labkit.report.bundle`) as a checkable zip. This package
only gathers their public names; each lives in the module named for what it owns.
"""
from __future__ import annotations

from .analysis import Analysis, analyze, analyze_results, stein_summary, suspect_sentences, treatment_hook
from .bundle import write_bundle
from .comparison import compare
from .conclusions import Conclusions, conclusions, decided_effects, focus_answer
from .declared import declared_levels, sorted_as_declared
from .escape import escape_html, escape_md
from .html import FIGURE_CAPTIONS, REPORT_EFFECT_COLUMNS, html_report, write_report
from .order import ORDER_COLUMNS, order_sentences
from .variation import variation_ci

__all__ = ["FIGURE_CAPTIONS", "ORDER_COLUMNS", "REPORT_EFFECT_COLUMNS", "Analysis", "Conclusions", "analyze",
           "analyze_results", "compare", "conclusions", "decided_effects", "declared_levels", "escape_html",
           "escape_md", "focus_answer", "html_report", "order_sentences", "sorted_as_declared", "stein_summary",
           "suspect_sentences", "treatment_hook", "variation_ci", "write_bundle", "write_report"]
