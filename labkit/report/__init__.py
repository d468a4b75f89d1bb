"""Results in words: conclusions written from the statistics, and one-file HTML reports.

:func:`conclusions` turns a factorial analysis (effects table, residual
diagnostics, bootstrap CIs of the shares of variation, an optional published
reference) into sentences a reader can check against the tables.
:func:`html_report` writes a campaign's analysis as one self-contained HTML file.
"""
from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ConfigError, did_you_mean
from ..stats import validate as v
from ..stats.diagnostics import Diagnostics
from ..stats.factorial import sign_table, yates_terms
from ..stats.lenth import lenth
from ..stats.levels import LevelEffects
from .labels import label, term_label
from .levels import LevelDesign

__all__ = ["Analysis", "Conclusions", "analyze", "analyze_results", "compare", "conclusions", "escape_html", "escape_md",
           "html_report", "variation_ci", "write_bundle", "write_report"]

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
        elif c in _MD_ALWAYS or (c == "_" and not (0 < i < len(s) - 1 and s[i - 1].isalnum()
                                                    and s[i + 1].isalnum())):
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
        if digits and head[digits:digits + 1] in (".", ")"):
            s = s[:lead + digits] + "\\" + s[lead + digits:]
    return s


def escape_html(text: object) -> str:
    """``text`` (any value, shown with ``str``) as HTML text or attribute value: ``<``, ``>``,
    ``&`` and both quotes become entities (:func:`html.escape`)."""
    return html.escape(str(text), quote=True)


def variation_ci(data: pd.DataFrame, factors: Sequence[str], response: str, *, levels: v.Levels = None,
                 n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> pd.DataFrame:
    """Bootstrap percentile CIs of each term's share of variation in a balanced 2^k·r design.

    Runs are resampled with replacement within each configuration (so every
    bootstrap design stays a balanced 2^k·r), and Jain's allocation of variation
    (SS_term = 2^k·r·q², share = SS_term/SST) is recomputed each time, with the
    resampled error sum of squares corrected by r/(r-1) for the duplicates a
    resample holds. Returns one
    row per term (Yates order, "I" left out) and "error": ``term``, ``pct_low``,
    ``pct_high`` (percentiles alpha/2 and 1 - alpha/2 of ``n_boot`` resamples).
    Needs r >= 2.
    """
    alpha = v.alpha(alpha)
    factors = v.names(factors, "factors")
    v.columns(data, factors, "factors")
    y = v.response(data, response)
    if not isinstance(n_boot, int) or not 100 <= n_boot <= 100_000:
        raise ConfigError(f"n_boot must be an integer in [100, 100000], got {n_boot!r}")
    lmap = v.level_map(levels)
    k = len(factors)
    cell = np.zeros(len(data), dtype=np.int64)
    for j, f in enumerate(factors):
        low, high = v.two_levels(data[f], lmap.get(f), arg="levels")
        col = data[f].to_numpy()
        cell |= (col == high).astype(np.int64) << j
    counts = np.bincount(cell, minlength=2 ** k)
    r = int(counts[0])
    if r < 2 or not np.all(counts == r):
        raise ConfigError(f"variation_ci needs a balanced 2^k·r design with r >= 2; "
                          f"runs per configuration: {sorted(set(counts.tolist()))}")
    cube = y[np.argsort(cell, kind="stable")].reshape(2 ** k, r)      # (cells, r)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, r, size=(n_boot, 2 ** k, r))
    boot = np.take_along_axis(np.broadcast_to(cube, (n_boot, 2 ** k, r)), idx, axis=2)
    means = boot.mean(axis=2)                                          # (B, cells)
    q = means @ sign_table(k).T.astype(float) / 2 ** k                 # (B, terms)
    ss = 2 ** k * r * q[:, 1:] ** 2
    # a resample of r values keeps on average (r-1)/r of their sum of squares about the cell mean
    # (duplicates): undo that bias, or the error share's interval misses its own estimate (r = 2)
    sse = ((boot - means[:, :, None]) ** 2).sum(axis=2).sum(axis=1) * r / (r - 1)
    sst = ss.sum(axis=1) + sse                     # balanced 2^k·r: SST = sum of SS_terms + SSE
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = 100 * np.column_stack([ss, sse]) / sst[:, None]
    lo, hi = np.nanpercentile(pct, [100 * alpha / 2, 100 * (1 - alpha / 2)], axis=0)
    terms = yates_terms(factors)[1:] + ["error"]
    out = pd.DataFrame({"term": terms, "pct_low": lo, "pct_high": hi})
    out.attrs.update({"n_boot": n_boot, "alpha": alpha, "seed": seed})
    return out


@dataclass
class Conclusions:
    """Sentences about one analysis. ``headline`` answers the focus question (or is empty);
    ``findings``, ``assumptions`` and ``reference`` are lists of sentences; ``significant``
    lists the significant terms. The sentences are plain text (they carry names and levels from
    the data); :meth:`markdown` escapes them with :func:`escape_md` and :func:`html_report` with
    :func:`escape_html`. Displays as Markdown in Jupyter; ``str()`` is the plain text."""
    headline: str
    findings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    reference: list[str] = field(default_factory=list)
    significant: list[str] = field(default_factory=list)

    def _sections(self):
        return [(title, items) for title, items in (
            ("Findings", self.findings), ("Assumptions", self.assumptions),
            ("Compared with the published study", self.reference)) if items]

    def sections(self) -> list[tuple[str, list[str]]]:
        """``(title, sentences)`` for each non-empty part: Findings, Assumptions, Compared with the
        published study (plain text: escape before showing)."""
        return self._sections()

    def markdown(self) -> str:
        """The headline in bold and one bulleted list per section, every sentence escaped."""
        parts = [f"**{escape_md(self.headline)}**"] if self.headline else []
        parts += [f"*{title}.*\n\n" + "\n".join(f"- {escape_md(s)}" for s in items)
                  for title, items in self._sections()]
        return "\n\n".join(parts)

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def __str__(self) -> str:
        parts = [self.headline] if self.headline else []
        parts += [f"{title}.\n\n" + "\n".join(f"- {s}" for s in items) for title, items in self._sections()]
        return "\n\n".join(parts)


def _pct(x: float) -> str:
    return "< 0.1 %" if 0 < x < 0.05 else f"{x:.1f} %"


def _share(row, ci: dict) -> str:
    s = _pct(row["pct_variation"])
    if row["term"] in ci:
        lo, hi = ci[row["term"]]
        s += f" (95 % CI {lo:.1f}–{hi:.1f} %)" if np.isfinite(lo) else ""
    return s


def _significant(effects: pd.DataFrame, alpha: float) -> tuple[list[str], str]:
    rows = effects[~effects["term"].isin(["I", "error"])]
    if "p" in rows and np.isfinite(rows["p"].to_numpy(float)).any():
        sig = rows.loc[rows["p"] < alpha, "term"].tolist()
        test = "t-test of each effect" if "t" in rows else "ANOVA F-test of each term"
        test = {"ems": "F-test of each term against the unit means (expected mean squares)",
                "reml": "mixed-model t-test of each effect (REML, Satterthwaite df)",
                "unit means": "ANOVA F-test of each term on the unit means"}.get(
            effects.attrs.get("method"), test)
        return sig, f"{test}, α = {alpha:g}"
    res = lenth(rows, alpha=alpha)
    return list(res.active), f"Lenth's method (unreplicated design), α = {alpha:g}"


def _describe_terms(effects: pd.DataFrame, terms: list[str], ci: dict, response: str) -> list[str]:
    out = []
    rows = effects.set_index("term")
    for t in sorted(terms, key=lambda t: -rows.loc[t, "pct_variation"]):
        row = rows.loc[t]
        direction = "raises" if row["effect"] > 0 else "lowers"
        lv = effects.attrs.get("levels", {})
        if not np.isfinite(row["effect"]):     # from an ANOVA table: no single direction
            change = f"F = {row['F']:.3g}, p = {row['p']:.2g}"
        elif ":" not in t and t in lv:
            low, high = lv[t]
            change = (f"going from {low} to {high} {direction} {label(response)} by "
                      f"{abs(row['effect']):.3g} on average")
        else:
            change = f"an interaction (effect {row['effect']:+.3g})"
        share = _share({"term": t, "pct_variation": row["pct_variation"]}, ci)
        out.append(f"{term_label(t)}: {change}; it explains {share} of the variation.")
    return out


def conclusions(effects: pd.DataFrame, *, diagnostics: Diagnostics | None = None,
                variation: pd.DataFrame | None = None, focus: str | None = None,
                reference: pd.DataFrame | None = None, alpha: float | None = None,
                practical_pct: float = 1.0, error_term: Sequence[str] | None = None,
                checks: Sequence[str] | None = None) -> Conclusions:
    """Conclusions in words from a :func:`labkit.stats.factorial_effects` table.

    * ``diagnostics``: the :class:`labkit.stats.Diagnostics` of the same data; when the
      residuals fail Shapiro-Wilk the sentences say so and, if the log model was fitted,
      which terms are significant on the log scale and whether that changes the answer.
    * ``variation``: :func:`variation_ci` output, giving each share a CI.
    * ``focus``: a factor to answer for ("Does CPU affinity matter?"): significant alone or in
      an interaction, and whether its share reaches ``practical_pct`` % of the variation.
    * ``reference``: a published allocation of variation, columns ``source``, ``term`` (our
      term names) and ``pct_variation``: the largest term and the focus factor's share there
      beside ours.
    * ``error_term``: sentences saying which error term the tests used and each level's share
      of the variance (:func:`labkit.report.levels.error_term_sentences`), among the findings.
    * ``checks``: sentences of the measurement checks (drift in run order, warm-up cut:
      :func:`labkit.report.levels.drift_sentences`, ``warmup_sentence``), among the assumptions.

    Returns a :class:`Conclusions`.
    """
    v.frame(effects, "effects")
    v.columns(effects, ["term", "effect", "pct_variation"], "effects")
    alpha = v.alpha(effects.attrs.get("alpha", 0.05) if alpha is None else alpha)
    response = effects.attrs.get("response", "response")
    ci = {}
    if variation is not None:
        v.columns(variation, ["term", "pct_low", "pct_high"], "variation")
        ci = {t: (lo, hi) for t, lo, hi in variation[["term", "pct_low", "pct_high"]].itertuples(
            index=False, name=None)}
    sig, method = _significant(effects, alpha)
    terms = effects[~effects["term"].isin(["I", "error"])]
    out = Conclusions(headline="", significant=sig)
    if sig:
        out.findings.append(f"Significant ({method}): " + ", ".join(term_label(t) for t in sorted(
            sig, key=lambda t: -float(terms.set_index("term").loc[t, "pct_variation"]))) + ".")
        out.findings += _describe_terms(effects, sig, ci, response)
    else:
        out.findings.append(f"No factor or interaction is significant ({method}).")
    small = [t for t in sig if float(terms.set_index("term").loc[t, "pct_variation"]) < practical_pct]
    if small:
        out.findings.append("Significant but below " + _pct(practical_pct) + " of the variation "
                            "(statistically detectable, practically negligible): "
                            + ", ".join(term_label(t) for t in small) + ".")
    err = effects.loc[effects["term"] == "error"]
    if len(err) and np.isfinite(float(err["pct_variation"].iloc[0])):
        out.findings.append(f"Unexplained {'' if error_term else '(run-to-run) '}variation: "
                            f"{_share(err.iloc[0], ci)} of the total.")
    out.findings += list(error_term or [])

    log_sig = None
    if diagnostics is not None:
        normal = getattr(diagnostics, "normal", None)
        first = diagnostics.table.iloc[0]
        if normal is None:
            out.assumptions.append(f"Residual normality could not be tested: {first['note']}.")
        elif normal:
            out.assumptions.append(f"Residuals look normal (Shapiro-Wilk W = {first['W']:.3f}, "
                                   f"p = {first['p']:.2g}): the t-based CIs and p-values hold.")
        else:
            s = (f"Residuals are not normal (Shapiro-Wilk W = {first['W']:.3f}, p = {first['p']:.2g}),"
                 f" so the p-values above are approximate.")
            if diagnostics.log_effects is not None:
                second = diagnostics.table.iloc[1]
                log_sig, _ = _significant(diagnostics.log_effects, alpha)
                verdict = ("they look normal" if second["normal"] is not pd.NA and bool(second["normal"])
                           else "they are still not normal")
                s += (f" What was done: the analysis was repeated on log({label(response)}), where "
                      f"{verdict} (W = {second['W']:.3f}, p = {second['p']:.2g}); there the "
                      f"significant terms are "
                      + (", ".join(term_label(t) for t in log_sig) or "none") + ".")
                s += (" The conclusions do not change on the log scale." if set(log_sig) == set(sig)
                      else " The two scales disagree on "
                      + ", ".join(term_label(t) for t in sorted(set(log_sig) ^ set(sig)))
                      + ": treat those terms with care.")
            else:
                s += " The log model could not be fitted (values <= 0)."
            out.assumptions.append(s)
    out.assumptions += list(checks or [])

    if focus is not None:
        with_focus = [t for t in terms["term"] if focus in t.split(":")]
        if not with_focus:
            raise ConfigError(f"focus {focus!r} is not a factor of the effects table "
                              f"(terms: {list(terms['term'])})")
        hit = [t for t in with_focus if t in sig]
        share = float(terms.set_index("term").loc[with_focus, "pct_variation"].sum())
        name = term_label(focus)
        if not hit:
            out.headline = (f"Does {name} matter? No: neither {name} nor any interaction with it "
                            f"is significant; together they explain {_pct(share)} of the variation.")
        elif share < practical_pct:
            out.headline = (f"Does {name} matter? Barely: "
                            + ", ".join(term_label(t) for t in hit)
                            + f" is significant, but all terms with {name} explain only "
                            f"{_pct(share)} of the variation.")
        else:
            out.headline = (f"Does {name} matter? Yes: " + ", ".join(term_label(t) for t in hit)
                            + f" significant; terms with {name} explain {_pct(share)} of the variation.")
        if log_sig is not None and bool([t for t in with_focus if t in log_sig]) != bool(hit):
            out.headline += (" (On the log scale the answer differs: see the assumptions.)")

    if reference is not None:
        v.columns(reference, ["source", "term", "pct_variation"], "reference")
        ours = terms.set_index("term")["pct_variation"]
        top_ours = ours.idxmax()
        for src, ref in reference.groupby("source", sort=False):
            ref = ref.set_index("term")["pct_variation"]
            top = ref.idxmax()
            s = (f"{src}: the largest term was {term_label(top)} ({_pct(ref[top])}); here it is "
                 f"{term_label(top_ours)} ({_pct(ours[top_ours])})"
                 + (", the same." if top == top_ours else ", a different one."))
            if focus is not None:
                listed = [t for t in ref.index if focus in t.split(":")]
                here = float(ours[[t for t in ours.index if focus in t.split(":")]].sum())
                if listed:
                    there = _pct(float(ref[listed].sum()))
                else:   # the paper lists only its influential terms: absent is not 0 %
                    there = (f"none listed (together at most {_pct(max(0.0, 100 - float(ref.sum())))}, "
                             "what the listed terms leave)")
                s += f" Terms with {term_label(focus)}: {there} there, {_pct(here)} here."
            missing = [t for t in ref.index if t in ours.index and ref[t] >= 5 and t not in sig]
            if missing:
                s += (" Reported there with >= 5 % but not significant here: "
                      + ", ".join(term_label(t) for t in missing) + ".")
            out.reference.append(s)
    return out


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


@dataclass
class Analysis:
    """What :func:`analyze` found for one campaign and response (every field may be shown).

    ``meta`` (store metadata), ``status`` (run counts by status), ``runs`` (one row per
    successful run: factors, ``run_id``, ``run_order``, response), ``summary``
    (:func:`labkit.stats.summarize` per configuration), ``kind`` ("factorial", "anova" or
    "none" when no test is possible, e.g. one factor without replications), ``effects``
    (factorial effects, or the ANOVA table with ``pct_variation`` = 100·eta² and ``effect``
    NaN; no rows for "none"), ``diagnostics`` (factorial residual checks or None),
    ``variation`` (bootstrap CIs of the shares or None), ``conclusions``,
    ``fingerprints`` (:func:`labkit.core.fingerprint.fingerprint_table`).

    The measurement's levels (issue 32): ``observations`` (one row per run and instance, with
    host, instance, boot, run_seq, suspect: :func:`labkit.report.levels.observations`),
    ``level_design`` (which levels are random, :func:`labkit.report.levels.level_design`),
    ``levels`` (the :class:`labkit.stats.LevelEffects` when runs are not independent units, else
    None; ``kind`` is then "levels"), ``quantiles`` (:func:`labkit.stats.quantile_summary` per
    configuration), ``drift`` (:func:`labkit.stats.drift_segments` of each host's runs),
    ``warmup`` (the iterations cut per run) and ``telemetry`` (one row per run: host,
    run_seq, suspect, suspect_reason and the telemetry summaries of
    :func:`labkit.run.telemetry.covariates`).
    """
    campaign: str
    response: str
    factors: list
    meta: dict
    status: dict
    runs: pd.DataFrame
    summary: pd.DataFrame
    kind: str
    effects: pd.DataFrame
    diagnostics: Diagnostics | None
    variation: pd.DataFrame | None
    conclusions: Conclusions
    fingerprints: pd.DataFrame
    observations: pd.DataFrame | None = None
    level_design: LevelDesign | None = None
    levels: LevelEffects | None = None
    quantiles: pd.DataFrame | None = None
    drift: pd.DataFrame | None = None
    warmup: pd.DataFrame | None = None
    telemetry: pd.DataFrame | None = None

    def design_text(self) -> str:
        """One plain-text sentence: design name, factors, replications, seed, backend, workload
        and run counts by status (from the store: show it escaped)."""
        design = self.meta.get("design", {})
        factors = design.get("factors") or {}
        listed = "; ".join(f"{name} ({', '.join(map(str, levels)) if isinstance(levels, list) else levels})"
                           for name, levels in factors.items()) if isinstance(factors, dict) else str(factors)
        return (f"{design.get('name', '')}: factors {listed}, "
                f"{design.get('replications')} replications, seed {design.get('seed')}; "
                f"backend {self.meta.get('backend')}, workload "
                f"{(self.meta.get('workload') or {}).get('name')}; runs: "
                + (", ".join(f"{k} {v}" for k, v in self.status.items()) or "none"))

    def markdown(self) -> dict[str, str]:
        """The explorer's Markdown, every value from the store escaped with :func:`escape_md`:
        ``title`` (a heading: campaign, response, factors), ``design`` (:meth:`design_text`),
        ``effects`` (the heading of the effects table) and ``conclusions``."""
        effects = {"factorial": "Effects (2^k factorial, Jain)", "anova": "ANOVA (type 2)",
                   "levels": "Effects, each tested against the level it varies across",
                   "none": "Effects: none can be computed (see the conclusions)"}[self.kind]
        return {"title": f"## {escape_md(self.campaign)}: {escape_md(self.response)} on "
                         f"{escape_md(', '.join(map(str, self.factors)))}",
                "design": f"**Design**: {escape_md(self.design_text())}",
                "effects": f"**{escape_md(effects)}**",
                "conclusions": "**Conclusions**\n\n" + self.conclusions.markdown()}

    def figures(self, alpha: float = 0.05) -> dict:
        """name -> Figure: pareto (factorial, unless one factor without replications), main_effects, interactions (>= 2 factors),
        run_order and qq (when residuals exist)."""
        from . import plots
        figs = {}
        levels = self.effects.attrs.get("levels")
        if self.kind in ("factorial", "levels") and (len(self.factors) >= 2 or self.diagnostics is not None
                                                      or self.kind == "levels"):
            figs["pareto"] = plots.pareto(self.effects, diagnostics=self.diagnostics)
        figs["main_effects"] = plots.main_effects(self.runs, self.factors, self.response,
                                                  alpha=alpha, levels=levels)
        if len(self.factors) >= 2:
            figs["interactions"] = plots.interactions(self.runs, self.factors, self.response,
                                                      alpha=alpha, levels=levels)
        hue = self.factors[0] if self.runs[self.factors[0]].nunique() <= 8 else None
        figs["run_order"] = plots.run_order(self.runs, self.response, hue=hue)
        if self.diagnostics is not None and self.diagnostics.normal is not None:
            figs["qq"] = plots.qq(self.diagnostics, alpha=alpha)
        return figs


def _is_full_two_level(runs: pd.DataFrame, factors: list) -> int:
    """r when ``runs`` is a balanced 2^k·r design over ``factors``, else 0."""
    if any(runs[f].nunique() != 2 for f in factors):
        return 0
    sizes = runs.groupby(factors, observed=True).size()
    return int(sizes.iloc[0]) if len(sizes) == 2 ** len(factors) and sizes.nunique() == 1 else 0


def analyze(data_dir: str | Path, campaign: str, *, response: str | None = None,
            factors: Sequence[str] | None = None, alpha: float = 0.05, focus: str | None = None,
            reference: pd.DataFrame | None = None,
            n_boot: int = 1000, hosts: str = "block") -> Analysis:
    """Analyse a stored campaign (opened read-only) as its design allows.

    ``response`` defaults to the workload's response (else the first metric);
    ``factors`` to the design's factors that vary. A balanced two-level full factorial
    gets Jain's allocation of variation with residual diagnostics and bootstrap CIs of
    the shares (r >= 2); anything else an n-way ANOVA (type 2, interactions when the
    data allow). When no test is possible (an ANOVA without residual degrees of freedom:
    one factor, or no replications) the analysis still returns, with ``kind`` "none", an
    empty effects table and conclusions that say what cannot be computed and why.

    The right error term by itself (issue 32, :mod:`labkit.report.levels`): when runs share
    instances (``runs_per_instance`` > 1), a run has several instances, or ``hosts="random"``
    on a fleet, the runs are not independent units and each factor is tested against the level
    it varies across (``kind`` "levels": the exact EMS test for balanced designs, else a REML
    mixed model; hosts of a fleet are fixed blocks by default, ``hosts="random"`` makes them a
    random level). Every analysis also checks each host's run order for drift, cuts the
    warm-up of iterations, gives median, p95 and p99 with their intervals, and reads the runs'
    telemetry. Returns an :class:`Analysis`; :func:`analyze_results` does the same from a
    tidy DataFrame.
    """
    from ..store import Store, load_results
    from .catalog import require_campaign
    path = Path(data_dir) / require_campaign(data_dir, campaign) / "store.sqlite"
    with Store(path, readonly=True) as st:
        meta, fps, stored = st.meta(), st.fingerprints(), st.runs()
    tidy = load_results(data_dir, campaign)
    return analyze_results(tidy, meta=meta, campaign=campaign, fingerprints=fps, runs=stored,
                           response=response, factors=factors, alpha=alpha, focus=focus,
                           reference=reference, n_boot=n_boot, hosts=hosts)


def analyze_results(tidy: pd.DataFrame, *, meta: dict | None = None, campaign: str | None = None,
                    fingerprints: dict | None = None, runs: pd.DataFrame | None = None,
                    response: str | None = None, factors: Sequence[str] | None = None,
                    alpha: float = 0.05, focus: str | None = None,
                    reference: pd.DataFrame | None = None, n_boot: int = 1000,
                    hosts: str = "block") -> Analysis:
    """:func:`analyze` of tidy rows (:meth:`labkit.store.Store.tidy`, long format: one row per
    measurement with the factor and level columns); ``meta`` is the store's metadata (design,
    workload), ``fingerprints`` its host fingerprints and ``runs`` its :meth:`Store.runs
    <labkit.store.Store.runs>` (for the telemetry summaries), each optional."""
    from ..core.fingerprint import fingerprint_table
    from ..stats import (
        anova,
        blocked_effects,
        drift_segments,
        factorial_diagnostics,
        factorial_effects,
        quantile_summary,
        summarize,
    )
    from .catalog import primary_response
    from .levels import (
        drift_sentences,
        error_term_sentences,
        level_analysis,
        level_design,
        observations,
        runs_of,
        warmup_sentence,
        with_levels,
    )
    meta = meta or {}
    campaign = campaign or str(meta.get("campaign_id") or "campaign")
    tidy = with_levels(v.frame(tidy, "tidy"))
    status = tidy.drop_duplicates("run_id").status.value_counts().to_dict()
    design_factors = list(meta.get("design", {}).get("factors", {}))
    metrics = sorted(tidy.metric.dropna().unique())
    if response is None:
        response, _ = primary_response(meta, tidy)     # the declared response, never a constant
        if response is None:
            if not metrics:
                raise ConfigError(f"campaign {campaign!r} has no measurement to analyse")
            response = metrics[0]
    elif response not in metrics:
        raise ConfigError(f"campaign {campaign!r} has no metric {response!r}"
                          f"{did_you_mean(response, metrics)}; metrics: {', '.join(map(str, metrics))}")
    if factors is None:
        factors = [f for f in design_factors if tidy[f].nunique() > 1]
    factors = v.names(factors, "factors")
    unknown = [f for f in factors if f not in design_factors and f not in tidy.columns]
    if unknown:
        raise ConfigError(f"campaign {campaign!r} has no factor {unknown[0]!r}"
                          f"{did_you_mean(unknown[0], design_factors)}; factors: "
                          f"{', '.join(map(str, design_factors))}")
    v.columns(tidy, factors, "factors")
    obs, cut = observations(tidy, response, factors)
    runs_table = runs_of(obs, response, factors)
    summary = summarize(runs_table, by=factors, response=response, alpha=alpha)
    quantiles = quantile_summary(runs_table, by=factors, response=response, confidence=1 - alpha)
    plan = level_design(obs, factors, hosts=hosts)
    diag: Diagnostics | None = None
    variation: pd.DataFrame | None = None
    fit = None
    why: str | None = None
    note = ""
    r = _is_full_two_level(runs_table, factors)
    if plan.random:
        kind, effects, fit, note = level_analysis(obs, response, factors, plan, alpha=alpha)
        if fit is not None and fit.unit is not None:
            # the error term's units: their means are a 2^k·r design when balanced, whose residuals
            # and bootstrap shares are those of the model's whole-unit stratum
            from ..stats import unit_means
            means = unit_means(obs, response=response, unit=fit.unit, keep=factors)
            if _is_full_two_level(means, factors) >= 2:
                diag = factorial_diagnostics(means, factors=factors, response=response, alpha=alpha)
                variation = variation_ci(means, factors, response, alpha=alpha, n_boot=n_boot)
    elif r:
        kind = "factorial"
        if plan.blocks and r >= 2:
            table = blocked_effects(runs_table, factors=factors, response=response, block="host",
                                    alpha=alpha)
            block = table.loc[table.term == "block", "pct_variation"]
            effects = table[table.term != "block"].drop(columns="confounded").reset_index(drop=True)
            effects.attrs.update(table.attrs, block_pct=float(block.iloc[0]) if len(block) else None)
        else:
            effects = factorial_effects(runs_table, factors=factors, response=response, alpha=alpha)
        if r >= 2:
            diag = factorial_diagnostics(runs_table, factors=factors, response=response, alpha=alpha)
            variation = variation_ci(runs_table, factors, response, alpha=alpha, n_boot=n_boot)
        elif len(factors) < 2:
            why = ("one two-level factor without replications: no error estimate, and Lenth's "
                   "method needs at least 2 effects")
    else:
        kind = "anova"
        cells = runs_table.groupby(factors, observed=True).size()
        full = bool((cells >= 2).all())
        try:
            table = anova(runs_table, response=response, factors=factors,
                          interactions=full and len(factors) > 1)
        except ConfigError as exc:    # no residual degrees of freedom: say so, report the rest
            kind, why = "none", str(exc)
            effects = pd.DataFrame(columns=["term", "effect", "pct_variation"])
        else:
            effects = table.assign(pct_variation=100 * table["eta_sq"], effect=np.nan)
        effects.attrs.update({} if why else table.attrs, response=response, alpha=alpha)
    effects.attrs.setdefault("response", response)
    try:
        drift = drift_segments(runs_table, response=response, order="run_seq", by="host",
                               factors=factors, alpha=alpha)
    except ConfigError:
        drift = None
    checks = (drift_sentences(drift, response) if drift is not None else [])
    cut_text = warmup_sentence(cut)
    checks += [cut_text] if cut_text else []
    if why:
        shown = "The effects table is shown without tests; the" if kind == "factorial" else "The"
        concl = Conclusions(headline="", findings=[
            f"No test of significance or share of variation can be computed from these "
            f"{len(runs_table)} runs ({why}). {shown} summary per configuration and the figures are "
            f"descriptive only; replicate the design to test the factors."], assumptions=checks)
    else:
        concl = conclusions(effects, diagnostics=diag, variation=variation, alpha=alpha,
                            focus=focus if focus in factors else None, reference=reference,
                            error_term=error_term_sentences(kind, plan, effects, fit, note=note),
                            checks=checks)
    runs_out = runs_table[["run_id", "replicate", *factors, response, "run_order"]]
    return Analysis(campaign, response, factors, meta, status, runs_out, summary, kind, effects,
                    diag, variation, concl, fingerprint_table(fingerprints or {}),
                    observations=obs, level_design=plan, levels=fit, quantiles=quantiles,
                    drift=drift, warmup=cut, telemetry=_telemetry(runs, runs_table))


def _telemetry(stored: pd.DataFrame | None, runs_table: pd.DataFrame) -> pd.DataFrame | None:
    """One row per analysed run: run_id, run_order, host, run_seq, suspect, suspect_reason and the
    runs' telemetry summaries (:func:`labkit.run.telemetry.covariates`), or None without them."""
    if stored is None or not len(stored) or "metadata" not in stored:
        return None
    from ..run.telemetry import covariates
    cov = covariates(stored)
    if len(cov.columns) <= 1:
        return None
    keep = ["run_id", "run_order", "host", "run_seq", "suspect", "suspect_reason"]
    return runs_table[keep].merge(cov, on="run_id", how="left")


def compare(data_dir: str | Path, a: str, b: str, *, response: str | None = None, alpha: float = 0.05,
            min_effect_pct: float = 2.0) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Same design measured twice (two hosts, two dates): per-configuration drift from ``a`` to ``b``.

    Returns ``(table, fingerprint_diff, verdict)``. ``table`` is
    :func:`labkit.stats.compare.config_differences` (one row per configuration present in
    both: factor columns, ``n_a``, ``n_b``, ``mean_a``, ``mean_b``, ``diff`` (b - a),
    ``ci_low``/``ci_high`` (Welch), ``diff_pct``, ``ratio`` with Fieller's
    ``ratio_low``/``ratio_high``, ``p`` (Welch), ``p_holm`` (Holm over the configurations)
    and ``drift`` (p_holm < alpha and |diff_pct| >= ``min_effect_pct``, a minimum practical
    effect)); ``table.attrs["overall"]`` is :func:`labkit.stats.compare.drift_test` (one
    shift common to all configurations, as a percent with its CI) when the response is
    positive; ``table.attrs["notes"]`` lists how the two campaigns' settings differ
    (:func:`labkit.report.comparison.setting_differences`: workloads, parameters, levels,
    replications, backends). ``fingerprint_diff`` lists host facts that differ
    (:func:`labkit.report.comparison.fingerprint_groups`: ``fact``, ``a``, ``b``, ``kind``;
    facts missing on both sides left out, facts only one side recorded marked so);
    ``verdict`` says the notes, the drift and the host facts in words.

    Campaigns whose factors differ cannot be compared configuration by configuration: ConfigError
    saying how the designs (and workloads) differ. A response only one of them measured (other
    workloads) is a ConfigError too.
    """
    from ..core.fingerprint import fingerprint_diff
    from ..stats.compare import config_differences, drift_test
    from ..store import Store, load_results
    from ..store.results import responses
    from .catalog import primary_response, require_campaign
    from .comparison import fingerprint_groups, fingerprint_summary, setting_differences
    metas: list[dict] = []
    tidies: list[pd.DataFrame] = []
    fps: list[dict] = []
    for cid in (a, b):
        with Store(Path(data_dir) / require_campaign(data_dir, cid) / "store.sqlite", readonly=True) as st:
            metas.append(st.meta())
            fps.append(next(iter(st.fingerprints().values()), {}))
        tidies.append(load_results(data_dir, cid))
    notes = setting_differences(metas[0], metas[1], a, b)
    fa, fb = (list(m.get("design", {}).get("factors", {})) for m in metas)
    if fa != fb:
        raise ConfigError(f"compare: {a!r} and {b!r} have different factors ({fa} vs {fb}): "
                          + "; ".join(notes) + ". Compare campaigns of one design.")
    if response is None:
        response = primary_response(metas[0], tidies[0])[0] or "wall_time_s"
    for cid, tidy in zip((a, b), tidies):
        have = sorted(tidy.metric.dropna().unique())
        if response not in have:
            why = next((n for n in notes if n.startswith("the workloads differ")), "")
            raise ConfigError(f"compare: {cid!r} has no metric {response!r}{did_you_mean(response, have)}"
                              + (f" ({why})" if why else "") + f"; its metrics: {', '.join(map(str, have))}")
    ra, rb = (responses(t, response, fa) for t in tidies)
    try:
        table = config_differences(ra, rb, response=response, factors=fa, alpha=alpha,
                                   min_effect_pct=min_effect_pct)
    except ConfigError:
        raise ConfigError(f"compare: no configuration has >= 2 successful runs in both {a!r} and {b!r}"
                          + (f" ({'; '.join(notes)})" if notes else "")) from None
    table = table.rename(columns={"p_adj": "p_holm"})
    if (ra[response] > 0).all() and (rb[response] > 0).all():
        try:
            table.attrs["overall"] = drift_test(ra, rb, response=response, factors=fa, alpha=alpha,
                                                min_effect_pct=min_effect_pct)
        except ConfigError:
            pass
    n = int(table.drift.sum())
    fpd = fingerprint_groups(fingerprint_diff(fps[0], fps[1]), a, b)
    kinds = list(dict.fromkeys(re.sub(r"^the ", "", n_.split(" differ")[0]) for n_ in notes))
    verdict = (f"Note: the {', '.join(kinds[:-1]) + ' and ' + kinds[-1] if len(kinds) > 1 else kinds[0]} "
               f"differ (see the notes). " if kinds else "")
    verdict += (f"{response}: {n} of {len(table)} configurations drifted significantly from {a} to {b} "
                f"(Welch, Holm-adjusted, α = {alpha:g}, |change| >= {min_effect_pct:g} %)")
    if n:
        verdict += f"; median change {table.loc[table.drift, 'diff_pct'].median():+.1f} %"
    overall = table.attrs.get("overall")
    if overall is not None:
        o = overall.iloc[0]
        verdict += (f"; overall shift {o.shift_pct:+.1f} % [{o.ci_low_pct:+.1f}, {o.ci_high_pct:+.1f}] "
                    f"(p = {o.p:.2g})")
    verdict += ". " + fingerprint_summary(fpd, a, b)
    table.attrs.update({"response": response, "alpha": alpha, "notes": notes, "a": a, "b": b,
                        "factors": fa})
    return table, fpd, verdict


#: the effects table's columns a report shows, in this order (those the table has)
REPORT_EFFECT_COLUMNS = ["term", "effect", "ci_low", "ci_high", "df", "t", "F", "p", "pct_variation",
                         "pct_low", "pct_high"]

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


def write_report(data_dir: str | Path, campaign: str, out: str | Path, *, response: str | None = None,
                 alpha: float = 0.05) -> Path:
    """Analyse ``campaign`` (:func:`analyze`) and write one self-contained HTML file to ``out``
    with :func:`labkit.core.files.atomic_write` (mode 0600, also when it replaces an older report:
    results are private until shared; a symbolic link at ``out`` is refused). Returns the path.

    The page (:func:`html_report`): the conclusions first, a table of contents, the design as a
    table (one row per factor) with the campaign's settings, the summary per configuration, the
    effects (or ANOVA) with their CIs, residual diagnostics, the figures with captions, the host
    fingerprints and the provenance (:func:`labkit.report.page.provenance`: labkit version and
    commit, the store's SHA-256, the hosts). Numbers to 4 significant digits; it fits a screen and
    prints on A4 without cutting a table."""
    from ..core.files import atomic_write
    from .catalog import design_table, settings_table
    from .page import Captioned, provenance
    a = analyze(data_dir, campaign, response=response, alpha=alpha)
    from ..store import Store
    with Store(Path(data_dir) / campaign / "store.sqlite", readonly=True) as st:
        fps = st.fingerprints()
    effects = (a.effects if a.variation is None else a.effects.merge(a.variation, on="term", how="left"))
    # the columns a reader needs (the whole table is in the bundle): the effect with its CI and
    # test, and the share of variation with its CI; an ANOVA's df, F and p
    effects = effects[[c for c in REPORT_EFFECT_COLUMNS if c in effects.columns
                       and not (c == "F" and "t" in effects.columns) and effects[c].notna().any()]]
    sections: list[tuple[str, object]] = [
        ("Conclusions", a.conclusions),
        ("Design", [("Factors and levels (the first level is the low level of a two-level factor)",
                     design_table(a.meta)),
                    ("Settings", settings_table(a.meta, a.status))]),
        ("Summary per configuration", a.summary),
        ({"factorial": "Effects", "anova": "ANOVA", "none": "Effects", "levels": "Effects"}[a.kind],
         "none can be computed (see the conclusions)" if a.kind == "none" else effects),
    ]
    if a.diagnostics is not None:
        sections.append(("Residual diagnostics", [a.diagnostics.table, a.diagnostics.message]))
    from .measurement import sections as measurement_sections
    sections += measurement_sections(a)     # levels, quantiles, drift, telemetry (issue 32)
    sections += [
        ("Figures", [Captioned(fig, FIGURE_CAPTIONS.get(name, name))
                     for name, fig in a.figures(alpha=alpha).items()]),
        ("Host fingerprints", a.fingerprints),
        ("Provenance", provenance(data_dir, campaign, a.meta, fps)),
    ]
    design = a.meta.get("design", {})
    subtitle = (f"campaign {campaign} · response {a.response} · {a.kind} analysis of "
                f"{len(a.runs)} successful runs · design {design.get('name', '')}")
    page = html_report(f"labkit report: {campaign} ({a.response})", sections, subtitle=subtitle)
    return atomic_write(out, page)


def write_bundle(data_dir: str | Path, campaign: str, out: str | Path) -> Path:
    """A zip with the campaign's ``results.csv``, ``results.parquet``, ``runs.csv``, a copy of
    ``store.sqlite``, ``fingerprints.json``, ``campaign.json`` (the campaign id) and
    ``environment.json`` (Python, installed package versions, this host's fingerprint). Member
    names are plain file names (no directory, so nothing unpacks outside where it is
    unpacked). Written with :func:`labkit.core.files.atomic_write` (0600, a symbolic link at
    ``out`` refused). The store is read, never written. Returns the path."""
    import json
    import sqlite3
    import tempfile
    import zipfile
    from importlib import metadata

    from ..core.fingerprint import host_fingerprint
    from ..store import Store
    src = Path(data_dir) / campaign / "store.sqlite"
    with Store(src, readonly=True) as st:
        tidy, runs, fps = st.tidy(), st.runs(), st.fingerprints()
    runs["metadata"] = runs["metadata"].map(lambda d: json.dumps(d, default=str)) if len(runs) else []
    env = {"packages": {d.metadata["Name"]: d.version for d in metadata.distributions()},
           "host": host_fingerprint()}
    from ..core.files import atomic_write
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        pq = tmp / "results.parquet"
        tidy.to_parquet(pq, index=False)
        copy = tmp / "store.sqlite"
        with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as s, sqlite3.connect(copy) as d:
            s.backup(d)   # a consistent copy, made through SQLite's read-only connection
        def write(fh):
            with zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("results.csv", tidy.to_csv(index=False))
                z.write(pq, "results.parquet")
                z.writestr("runs.csv", runs.to_csv(index=False))
                z.write(copy, "store.sqlite")
                z.writestr("fingerprints.json", json.dumps(fps, indent=2, default=str))
                z.writestr("campaign.json", json.dumps({"campaign": campaign}))
                z.writestr("environment.json", json.dumps(env, indent=2, sort_keys=True, default=str))
        return atomic_write(out, write)
