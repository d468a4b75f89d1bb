"""One-file HTML reports: :func:`html_report` writes sections as one self-contained page and
:func:`write_report` writes a campaign's analysis that way."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError
from .analysis import analyze
from .order import ORDER_COLUMNS, order_sentences
from .tables import EFFECT_COLUMNS

__all__ = [
    "APPENDIX",
    "FIGURE_CAPTIONS",
    "REPORT_EFFECT_COLUMNS",
    "data_notes",
    "figure_caption",
    "html_report",
    "write_report",
]


def html_report(title: str, sections: Sequence[tuple[str, object]], *, subtitle: str = "") -> str:
    """One self-contained HTML page (:func:`labkit.report.page.render`): title, a numbered table of
    contents, then ``sections``, a list of (heading, content), content a str (plain text, shown
    as is), a DataFrame (a table, numbers to 4 significant digits), a :class:`Conclusions`, a
    matplotlib Figure or a :class:`labkit.report.page.Captioned` figure (embedded as base64 PNG,
    numbered, with its caption), or a list of those. Every text, heading, table cell and sentence
    is escaped with :func:`escape_html`, so names and levels from a store are shown literally
    and never become markup. No script, stylesheet or font is fetched; the page fits a screen and
    prints on A4 without cutting a table."""
    from .page import render

    return render(title, sections, subtitle=subtitle)


REPORT_EFFECT_COLUMNS = EFFECT_COLUMNS

#: the report's caption of each figure of :meth:`Analysis.figures`
FIGURE_CAPTIONS = {
    "pareto": "Pareto chart of the effects: |t| of each term with the critical t line (replicated "
    "designs), or |effect| with Lenth's margin of error (unreplicated); bars past the line "
    "are significant.",
    "main_effects": "Main effects: the mean response at each level of each factor, with confidence "
    "intervals and the runs as dots.",
    "interactions": "Interactions: the mean response for each pair of factors' levels; lines that "
    "are not parallel show an interaction.",
    "run_order": "The response in the order the runs executed, with a rolling median: runs were "
    "randomized, so a trend is drift (warm-up, a neighbour), not a factor's effect.",
    "qq": "Normal Q-Q plot of the residuals (the Shapiro-Wilk test is in the residual diagnostics).",
}


def write_report(
    data_dir: str | Path,
    campaign: str,
    out: str | Path,
    *,
    response: str | None = None,
    alpha: float = 0.05,
    practical: object = None,
    family: str | None = None,
) -> Path:
    """Analyse ``campaign`` (:func:`analyze`) and write one self-contained HTML file to ``out``
    with :func:`labkit.core.files.atomic_write` (mode 0600, also when it replaces an older report:
    results are private until shared; a symbolic link at ``out`` is refused). Returns the path.

    The page (:func:`html_report`) reads from the answer to the evidence (issue 46): a table of
    contents; the conclusions; every figure (:func:`figure_caption`: what it shows, its n, and a
    note when runs are suspect or the data is a stand-in's); the analysis tables: the design with
    the campaign's settings, the summary per configuration, the effects
    (:func:`labkit.report.tables.effects_table`: Jain's q and the effect 2q, each beside its own
    CI; or the ANOVA), decisions, residual diagnostics, the error term, quantiles, drift, order
    effects, run length, the host fingerprints and the provenance
    (:func:`labkit.report.page.provenance`: labkit version and commit, the store's SHA-256, the
    hosts); then, titled "Appendix", the per-run tables (telemetry per run, suspect runs). Numbers
    to 4 significant digits; it fits a screen and prints on A4 without cutting a table."""
    from ..core.files import atomic_write
    from .catalog import design_table, settings_table
    from .page import Captioned, provenance

    a = analyze(data_dir, campaign, response=response, alpha=alpha, practical=practical, family=family)
    from ..store import Store

    with Store(Path(data_dir) / campaign / "store.sqlite", readonly=True) as st:
        fps, runs = st.fingerprints(), st.runs()
    domain_types = (
        {i.get("domain_type") for m in runs.metadata for i in (m or {}).get("instances", [])} - {None}
        if "metadata" in runs
        else set()
    )
    notes = data_notes(a, domain_types)
    # the columns a reader needs (the whole table is in the bundle): q and the effect (2q) with the
    # effect's CI and the test, then the share of variation with its CI (two tables, so that both
    # fit an A4 page); an ANOVA's df, F, p and share in one
    from .tables import effects_table

    table = effects_table(a.effects, a.variation)
    shares = [c for c in ("pct_variation", "pct_low", "pct_high") if c in table.columns]
    effects: object = table
    if "effect" in table.columns and shares:
        effects = [
            (
                f"Estimates: Jain's q and the effect (2q) with the effect's {100 * (1 - alpha):g} % CI",
                table.drop(columns=shares),
            ),
            (
                "Share of the variation (%)"
                + (f" with its {100 * (1 - alpha):g} % bootstrap CI" if "pct_low" in shares else ""),
                table[["term", *shares]],
            ),
        ]
    n_runs = f"n = {len(a.runs)} runs in {len(a.summary)} configurations"
    figures: list = [
        Captioned(fig, figure_caption(FIGURE_CAPTIONS.get(name, name), n_runs, notes))
        for name, fig in a.figures(alpha=alpha).items()
    ]
    from .measurement import drift_section, levels_section, quantiles_section, telemetry_section

    tables: list[tuple[str, object]] = [
        (
            "Design",
            [
                (
                    "Factors and levels (the first level is the low level of a two-level factor)",
                    design_table(a.meta),
                ),
                ("Settings", settings_table(a.meta, a.status)),
            ],
        ),
        ("Summary per configuration", a.summary),
        (
            {"factorial": "Effects", "anova": "ANOVA", "none": "Effects", "levels": "Effects"}[a.kind],
            "none can be computed (see the conclusions)" if a.kind == "none" else effects,
        ),
    ]
    from .tables import capped, decisions_table

    if a.conclusions.decided is not None and a.conclusions.decided["verdict"].notna().any():
        tables.append(
            (
                "Decisions",
                [
                    f"Each term decided by the rules: {a.conclusions.rules}.",
                    decisions_table(a.conclusions.decided),
                ],
            )
        )
    if a.diagnostics is not None:
        tables.append(("Residual diagnostics", [a.diagnostics.table, a.diagnostics.message]))
    # the measurement's sections (issue 32): their figures join the others, their tables stay here
    n_measured = {
        "drift": n_runs,
        "telemetry": f"n = {len(a.telemetry)} runs with telemetry" if a.telemetry is not None else n_runs,
    }
    for part, kind in (
        (levels_section(a), "levels"),
        (quantiles_section(a), ""),
        (drift_section(a), "drift"),
    ):
        if part is not None:
            title, content = part
            figures += [
                Captioned(c.figure, figure_caption(c.caption, n_measured.get(kind, n_runs), notes))
                for c in content
                if isinstance(c, Captioned)
            ]
            rest = [c for c in content if not isinstance(c, Captioned)]
            if rest:
                tables.append((title, rest))
    if a.order_effects is not None:
        shown = [c for c in ORDER_COLUMNS if c in a.order_effects]  # the decision's columns: A4-wide
        tables.append(
            ("Order effects", [order_sentences(a.order_effects, a.response)[0], a.order_effects[shown]])
        )
    if a.run_length is not None:
        tables.append(("Run length", [f"{a.run_length.sentence()}. Why: {a.run_length.why}."]))
    tables += [
        ("Host fingerprints", a.fingerprints),
        ("Provenance", provenance(data_dir, campaign, a.meta, fps)),
    ]
    # the per-run tables: an appendix at the end (issue 46: they filled pages 6-14 of 19)
    appendix: list[tuple[str, object]] = []
    tele = telemetry_section(a)
    if tele is not None:
        figures += [
            Captioned(c.figure, figure_caption(c.caption, n_measured["telemetry"], notes))
            for c in tele[1]
            if isinstance(c, Captioned)
        ]
        appendix.append((f"{APPENDIX} A. {tele[0]}", [c for c in tele[1] if not isinstance(c, Captioned)]))
    if a.suspect_runs is not None and len(a.suspect_runs):
        appendix.append(
            (
                f"{APPENDIX} {'AB'[len(appendix)]}. Suspect runs",
                [
                    f"{len(a.suspect_runs)} of {len(a.runs)} runs flagged by the telemetry (the "
                    "conclusions are computed with and without them).",
                    *capped(a.suspect_runs, what="suspect runs"),
                ],
            )
        )
    sections: list[tuple[str, object]] = [("Conclusions", a.conclusions)]
    if figures:
        sections.append(("Figures", figures))
    sections += tables + appendix
    design = a.meta.get("design", {})
    subtitle = (
        f"campaign {campaign} · response {a.response} · {a.kind} analysis of "
        f"{len(a.runs)} successful runs · design {design.get('name', '')}"
    )
    page = html_report(f"labkit report: {campaign} ({a.response})", sections, subtitle=subtitle)
    return atomic_write(out, page)


#: a section whose heading starts with this is an appendix: after the others, unnumbered
#: (:func:`labkit.report.page.render`), listed in the table of contents
APPENDIX = "Appendix"


def data_notes(a: object, domain_types: set | None = None) -> list[str]:
    """Notes every figure of a report carries about its data: the suspect runs it includes (of
    :attr:`Analysis.suspect_runs`), a stand-in workload (the design's or workload's description
    says "stand-in" or "not PARSEC") and libvirt guests emulated by QEMU TCG (``domain_types``
    holds "qemu"). Empty when the data is what it claims to be."""
    notes = []
    suspect, runs = getattr(a, "suspect_runs", None), getattr(a, "runs", None)
    if suspect is not None and len(suspect) and runs is not None:
        notes.append(
            f"Includes the {len(suspect)} runs flagged suspect by the telemetry (listed in the appendix; "
            "the conclusions say whether the answer holds without them)."
        )
    meta = getattr(a, "meta", {}) or {}
    described = " ".join(
        str((meta.get(k) or {}).get("description", ""))
        for k in ("design", "workload")
        if isinstance(meta.get(k), dict)
    )
    if "stand-in" in described.lower() or "not parsec" in described.lower():
        notes.append(f"Stand-in data: {described.strip()}; not the original benchmark's numbers.")
    if "qemu" in (domain_types or set()):
        notes.append(
            "Stand-in platform: libvirt guests ran under QEMU TCG (software emulation), so "
            "libvirt's times are the emulator's, not a hypervisor's."
        )
    return notes


def figure_caption(what: str, n: str, notes: Sequence[str] = ()) -> str:
    """A report figure's caption: ``what`` it shows, its ``n`` ("n = 32 runs in 16
    configurations") and each of ``notes`` (:func:`data_notes`), as sentences."""
    if not isinstance(what, str) or not what.strip():
        raise ConfigError("figure_caption needs the text of what the figure shows")
    text = what.strip()
    text += "" if text.endswith(".") else "."
    return " ".join(part for part in (text, f"{n}." if n else "", *notes) if part)
