"""The measurement's sections of a report: levels, quantiles, drift, telemetry (issue 32).

Each function takes an :class:`labkit.report.Analysis` and returns a ``(title, content)`` pair for
:func:`labkit.report.html_report` (content: text, DataFrames and Figures), or None when the
analysis has nothing to show there. :func:`sections` gives them all, in the order a reader
checks a result: which error term and how the variance splits by level, the quantiles beside the
means, drift in run order, and what the telemetry saw during each run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from ..errors import ConfigError
from . import plots
from .level_analysis import error_term_sentences
from .page import Captioned

CAPTIONS = {
    "levels": "Each level's share of the variance the design's terms leave: a large share at the "
    "instance or host level means runs on one instance (or host) are not independent draws.",
    "drift": "Each host's residuals in run order (the response minus its configuration's mean); "
    "dashed lines are change points, horizontal lines the segments' levels.",
    "telemetry": "Per-run telemetry: the campaign's CPU beside other processes' CPU, steal and the "
    "CPU frequency range; suspect runs are red crosses.",
}

if TYPE_CHECKING:
    from .analysis_result import Analysis

__all__ = [
    "displayable",
    "drift_section",
    "levels_section",
    "quantiles_section",
    "sections",
    "telemetry_section",
]

#: the run's place and flag, shown beside the telemetry in a table of their own
RUN_COLUMNS = ["run_order", "host", "run_seq", "suspect", "suspect_reason"]
#: telemetry columns shown per run, when present
TELEMETRY_COLUMNS = [
    "run_order",
    "host",
    "run_seq",
    "suspect",
    "suspect_reason",
    "campaign_cpu_mean_pct",
    "cpu_other_mean_pct",
    "cpu_other_max_pct",
    "steal_max_pct",
    "iowait_mean_pct",
    "throttled_periods",
    "freq_min_mhz",
    "freq_max_mhz",
    "sampler_cpu_pct",
]


def levels_section(a: Analysis) -> tuple[str, list] | None:
    """The error term the tests used and each level's share of the variance (a table and bars)."""
    if a.level_design is None:
        return None
    text = " ".join(error_term_sentences(a.kind, a.level_design, a.effects, a.levels))
    content: list = [text] if text else []
    if a.levels is not None:
        content += [
            a.levels.variance,
            Captioned(plots.variance_shares(a.levels.variance), CAPTIONS["levels"]),
        ]
    return ("Error term and variance by level", content) if content else None


def quantiles_section(a: Analysis) -> tuple[str, list] | None:
    """Median, p95 and p99 per configuration with their distribution-free intervals, beside the mean."""
    q = a.quantiles
    if q is None or q.empty:
        return None
    needs = ", ".join(f"{name}: {n} runs" for name, n in q.attrs.get("needs", {}).items())
    upper = ", ".join(
        f"{name}: {n}" for name, n in q.attrs.get("needs_upper", {}).items() if name in ("p95", "p99")
    )
    conf = 100 * q.attrs.get("confidence", 0.95)
    return (
        "Quantiles per configuration",
        [
            f"Mean with its t interval, and quantiles with their exact order-statistic intervals "
            f"({conf:g} %); a quantile's interval needs at least "
            f"({needs}) per configuration, else it is left empty."
            + (
                f' The tail KPIs\' one-sided bounds ("p95 at most": the p95 is at most that value with '
                f"{conf:g} % confidence, an order statistic by the binomial definition) need {upper} runs "
                "(TriScale, Jacob et al. 2021; Wilks 1941)."
                if upper
                else ""
            ),
            quantiles_display(q),
        ],
    )


def quantiles_display(q: pd.DataFrame) -> pd.DataFrame:
    """:func:`labkit.stats.quantile_summary`'s table narrowed for a page: one column per statistic
    (mean, p50, p95, p99), each ``estimate [low, high]`` to 4 significant digits (``[—]`` when the
    interval needs more runs), beside the configuration's levels and ``n``; then the tail KPIs'
    one-sided upper bounds (``p95 at most``, ``p99 at most``: a column only when some configuration
    has the runs it needs, ``—`` in the others)."""
    from .tables import format_number

    stats = [
        ("mean", "ci_low", "ci_high"),
        ("p50", "p50_low", "p50_high"),
        ("p95", "p95_low", "p95_high"),
        ("p99", "p99_low", "p99_high"),
    ]
    tails = ("p95", "p99")  # the tail KPIs: their one-sided upper bounds shown too ("p95 at most")
    parts = {name for st in stats for name in st} | {f"{n}_upper" for n, _, _ in stats}
    keep = [c for c in q.columns if c not in parts]
    out = q[keep].copy()
    for name in tails:  # only where some configuration has the runs for it (else the text says how many)
        if f"{name}_upper" in q and q[f"{name}_upper"].notna().any():
            out[f"{name} at most"] = q[f"{name}_upper"].map(lambda x: "—" if pd.isna(x) else format_number(x))
    for est, lo, hi in stats:
        if est not in q:
            continue

        def cell(row, est=est, lo=lo, hi=hi):
            low, high = row.get(lo), row.get(hi)
            band = (
                "[—]" if pd.isna(low) or pd.isna(high) else f"[{format_number(low)}, {format_number(high)}]"
            )
            return f"{format_number(row[est])} {band}"

        out[est] = q.apply(cell, axis=1)
    return out


def drift_section(a: Analysis) -> tuple[str, list] | None:
    """Each host's run-order residuals with their change points, and the segments table."""
    d = a.drift
    if d is None or d.empty:
        return None
    obs = a.observations
    runs = (
        a.runs.merge(obs.drop_duplicates("run_id")[["run_id", "host", "run_seq"]], on="run_id")
        if obs is not None
        else None
    )
    content: list = []
    changes = d.attrs.get("changes", 0)
    content.append(
        f"{changes} change point{'s' if changes != 1 else ''} in "
        f"{d.attrs.get('series', 0)} host series (residuals after the design's effects, "
        f"α = {d.attrs.get('alpha', 0.05):g}); a host without change is one segment."
    )
    if runs is not None:
        content.append(Captioned(plots.drift(runs, d, a.response, factors=a.factors), CAPTIONS["drift"]))
    content.append(d)
    return "Drift in run order", content


def telemetry_section(a: Analysis) -> tuple[str, list] | None:
    """Per-run telemetry: the instances' CPU beside other processes, steal, frequency; suspect
    runs marked in the figure and listed."""
    t = a.telemetry
    if t is None or t.empty:
        return None
    content: list = []
    try:
        content.append(Captioned(plots.telemetry_runs(t), CAPTIONS["telemetry"]))
    except ConfigError:
        pass
    suspect = t[t["suspect"].fillna(False).astype(bool)] if "suspect" in t else t.iloc[:0]
    off = t.attrs.get("unmeasured") or []
    if off:  # runs never measured are not "0 flagged": say why nothing is known about them
        content.extend(f"{note}." for note in off)
    if not off or len(suspect):
        content.append(
            f"{len(suspect)} of {len(t)} runs flagged suspect"
            + (": listed first below." if len(suspect) else ".")
        )
    cols = [c for c in TELEMETRY_COLUMNS if c in t]
    shown = (
        t.assign(_s=~t["suspect"].fillna(False).astype(bool)).sort_values(["_s", "run_order"])
        if "suspect" in t
        else t
    )
    # two tables that each fit a page: what was measured, then where each run sat and why it is
    # suspect (both with the suspect runs first)
    where = [c for c in RUN_COLUMNS if c in cols]
    measured = [c for c in cols if c not in where]
    from .tables import capped

    if measured:
        content.extend(capped(shown[["run_id"] + measured]))
    content.extend(capped(shown[["run_id"] + where]))
    return "Telemetry per run", content


def sections(a: Analysis) -> list[tuple[str, list]]:
    """Every measurement section the analysis has, in reading order."""
    out = [levels_section(a), quantiles_section(a), drift_section(a), telemetry_section(a)]
    return [s for s in out if s is not None]


def displayable(parts: list[tuple[str, list]], *, heading: str = "###", html_tables: bool = False) -> list:
    """The sections (:func:`sections`, or any of them) as objects IPython displays, in order: each
    title a Markdown heading (``heading`` its level), text as Markdown (escaped: names and
    levels from a store are shown literally), tables as DataFrames (or, ``html_tables``, as
    escaped HTML tables with numbers to 4 significant digits, as the explorer shows tables),
    figures as they are, each caption in italics under its figure. What notebook 01 and the
    explorer show of a campaign's levels, drift and telemetry."""
    from IPython.display import HTML, Markdown
    from matplotlib.figure import Figure

    from .escape import escape_md
    from .tables import html_table

    out: list = []
    for title, content in parts:
        out.append(Markdown(f"{heading} {escape_md(title)}"))
        for item in content:
            if isinstance(item, pd.DataFrame):
                out.append(HTML(html_table(item)) if html_tables else item)
            elif isinstance(item, Captioned):
                out += [item.figure, Markdown(f"*{escape_md(item.caption)}*")]
            elif isinstance(item, Figure):
                out.append(item)
            else:
                out.append(Markdown(escape_md(item)))
    return out
