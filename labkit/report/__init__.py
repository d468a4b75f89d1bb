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
from .decisions import Policy, decide_terms, policy_for
from .labels import label, term_label
from .levels import LevelDesign
from .tables import EFFECT_COLUMNS

__all__ = ["Analysis", "Conclusions", "analyze", "analyze_results", "compare", "conclusions", "declared_levels",
           "escape_html", "escape_md", "html_report", "variation_ci", "write_bundle", "write_report"]

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


def declared_levels(meta: dict | None, factors: Sequence[str],
                    data: pd.DataFrame | None = None) -> dict[str, v.DesignOrder]:
    """``{factor: its levels in the order the stored design declares them}`` for each of
    ``factors`` that ``meta["design"]["factors"]`` (a store's metadata) lists with a list of
    levels: the order every analysis, table and figure of a campaign keeps (the first level is the
    low level of a two-level factor, so ``noise: [none, memory]`` reads "from none to memory").
    Given ``data`` (rows with the factor columns), a factor whose column holds a level the design
    does not list is left out, and its levels then sort as :func:`labkit.stats.validate.level_order`
    sorts them. Factors the design does not declare are left out too."""
    declared = ((meta or {}).get("design") or {}).get("factors") or {}
    out: dict[str, v.DesignOrder] = {}
    if not isinstance(declared, dict):
        return out
    for f in factors:
        levels = declared.get(f)
        if not isinstance(levels, list) or not levels:
            continue
        if data is not None and f in data.columns:
            listed = set(levels) if all(isinstance(x, str | int | float | bool) for x in levels) else None
            if listed is None or any(v.scalar(x) not in listed for x in pd.unique(data[f].dropna())):
                continue
        out[f] = v.DesignOrder(levels)
    return out


def sorted_as_declared(table: pd.DataFrame, by: Sequence[str], order: dict) -> pd.DataFrame:
    """``table`` (one row per configuration of ``by``) with its rows in the declared level order of
    ``order`` (:func:`declared_levels`; other columns of ``by`` keep their sorted order); ``attrs``
    kept."""
    keys = [f for f in by if f in table.columns]
    if table.empty or not any(f in order for f in keys):
        return table
    pos = {f: {lv: i for i, lv in enumerate(order[f])} for f in keys if f in order}
    out = table.sort_values(keys, key=lambda s: s.map(pos[s.name]) if s.name in pos else s,
                            kind="stable").reset_index(drop=True)
    out.attrs = dict(table.attrs)
    return out


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
    lists the terms significant after the family correction; ``suspect`` the sentences about
    the runs the telemetry flags suspect (how many, the analysis without them, confounding,
    cells with no clean run). ``decided`` is the effects table with each term's verdict
    (:func:`decided_effects`), ``rules`` the rules in words, ``answer`` the focus answer ("Yes",
    "No", "Negligible", "Not resolved at this n", or "" without a focus). The sentences are plain
    text (they carry names and levels from the data); :meth:`markdown` escapes them with
    :func:`escape_md` and :func:`html_report` with :func:`escape_html`. Displays as Markdown in
    Jupyter; ``str()`` is the plain text."""
    headline: str
    findings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    reference: list[str] = field(default_factory=list)
    significant: list[str] = field(default_factory=list)
    suspect: list[str] = field(default_factory=list)
    decided: pd.DataFrame | None = field(default=None, repr=False)
    rules: str = ""
    answer: str = ""

    def _sections(self):
        return [(title, items) for title, items in (
            ("Findings", self.findings), ("Suspect runs", self.suspect), ("Assumptions", self.assumptions),
            ("Compared with the published study", self.reference)) if items]

    def sections(self) -> list[tuple[str, list[str]]]:
        """``(title, sentences)`` for each non-empty part: Findings, Suspect runs, Assumptions, Compared with the
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


def _method(effects: pd.DataFrame) -> str:
    """The test behind the p-values of an effects or ANOVA table, in words."""
    test = "t-test of each effect" if "t" in effects else "ANOVA F-test of each term"
    return {"ems": "F-test of each term against the unit means (expected mean squares)",
            "reml": "mixed-model t-test of each effect (REML, Satterthwaite df)",
            "unit means": "ANOVA F-test of each term on the unit means"}.get(effects.attrs.get("method"), test)


def _lenth_decided(effects: pd.DataFrame, policy: Policy, mean: float | None) -> pd.DataFrame:
    """An unreplicated 2^k table decided by Lenth's method: significant after the correction =
    beyond the simultaneous margin of error SME (family-wise over the effects; the margin ME
    with ``family: none``); no interval, so nothing is shown not to matter."""
    rows = effects[~effects["term"].isin(["I", "error"])]
    res = lenth(rows, alpha=policy.alpha)
    active = set(res.table.loc[res.table["active" if policy.family == "none" else "sme_active"], "term"])
    out = effects.copy()
    fam = ~out["term"].isin(["I", "error"])
    size = out["effect"].to_numpy(float)
    threshold = 0.0
    if policy.practical is not None:
        if policy.practical_of == "mean":
            threshold = policy.practical * abs(mean or 0.0)
        else:
            size = np.sqrt(out["pct_variation"].to_numpy(float) / 100)
            threshold = float(np.sqrt(policy.practical))
    sig = out["term"].isin(active).to_numpy()
    big = np.abs(size) >= threshold
    out["size"] = size
    out["p_adjusted"] = np.nan
    out["threshold"] = np.where(fam, threshold, np.nan)
    out["verdict"] = pd.Series(np.where(sig & big, "matters", np.where(sig, "negligible", "not resolved at this n")),
                               index=out.index, dtype=object).where(fam, None)
    out["runs_to_resolve"] = np.nan
    m = int(fam.sum())
    how = ("Lenth's margin of error ME, each effect alone" if policy.family == "none"
           else f"Lenth's simultaneous margin of error SME over {m} effects")
    out.attrs.update(rules=f"{how} (unreplicated design), α = {policy.alpha:g}, {policy.threshold_text()}",
                     family=m, policy=policy, threshold=threshold, lenth=True)
    return out


def decided_effects(effects: pd.DataFrame, policy: Policy, *, runs: pd.DataFrame | None = None,
                    response: str | None = None) -> pd.DataFrame:
    """:func:`labkit.report.decisions.decide_terms` of an effects table, or Lenth's decision
    (:func:`_lenth_decided`) for an unreplicated 2^k table (no p-values)."""
    if "p" in effects and np.isfinite(effects.loc[~effects["term"].isin(["I", "error"]), "p"]
                                      .to_numpy(float, na_value=np.nan)).any():
        return decide_terms(effects, policy, runs=runs, response=response)
    mean = None
    if runs is not None and response in runs:
        mean = float(runs[response].mean())
    elif "q" in effects and (effects.term == "I").any():
        mean = float(effects.loc[effects.term == "I", "q"].iloc[0])
    return _lenth_decided(effects, policy, mean)


def _verdict_list(decided: pd.DataFrame, verdict: str) -> list[str]:
    rows = decided[decided["verdict"] == verdict]
    if "pct_variation" in rows:
        rows = rows.sort_values("pct_variation", ascending=False, kind="stable")
    return rows["term"].tolist()


def _names(terms: list[str], limit: int = 8) -> str:
    shown = ", ".join(term_label(t) for t in terms[:limit])
    return shown + (f" and {len(terms) - limit} more" if len(terms) > limit else "")


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


def _resolve_text(decided: pd.DataFrame, terms: list[str]) -> str:
    rows = decided.set_index("term")
    parts = []
    for t in terms:
        need = rows.loc[t, "runs_to_resolve"]
        parts.append(term_label(t) + (f" (about {int(need):,} runs would resolve it)"
                                      if np.isfinite(need) else ""))
    return ", ".join(parts)


def focus_answer(decided: pd.DataFrame, focus: str) -> tuple[str, str]:
    """``(answer, sentence)``: the answer to "Does ``focus`` matter?" from a decided table
    (:func:`decided_effects`) over the terms with the factor: "Yes" (one of them matters),
    "No" (all shown not to matter), "Negligible" (significant ones all below the practical
    threshold, the rest shown not to matter), else "Not resolved at this n"; the sentence says
    which terms and the rules."""
    terms = decided[~decided["term"].isin(["I", "error"])]
    with_focus = [t for t in terms["term"] if focus in str(t).split(":")]
    if not with_focus:
        raise ConfigError(f"focus {focus!r} is not a factor of the effects table "
                          f"(terms: {list(terms['term'])})")
    part = terms.set_index("term").loc[with_focus]
    share = float(part["pct_variation"].sum())
    verdicts = part["verdict"]
    name = term_label(focus)
    rules = decided.attrs.get("rules", "")
    hit = [t for t in with_focus if verdicts[t] == "matters"]
    if hit:
        return "Yes", (f"Yes: {_names(hit)} {'matters' if len(hit) == 1 else 'matter'} ({rules}); "
                       f"terms with {name} explain {_pct(share)} of the variation.")
    if (verdicts == "does not matter").all():
        return "No", (f"No: {name} and every interaction with it are shown within the practical "
                      f"threshold ({rules}); together they explain {_pct(share)} of the variation.")
    neg = [t for t in with_focus if verdicts[t] == "negligible"]
    if neg and verdicts.isin(["negligible", "does not matter"]).all():
        return "Negligible", (f"Negligible: {_names(neg)} {'is' if len(neg) == 1 else 'are'} significant "
                              f"but below the practical threshold ({rules}); terms with {name} explain "
                              f"{_pct(share)} of the variation.")
    open_ = [t for t in with_focus if verdicts[t] == "not resolved at this n"]
    sig_raw = [t for t in with_focus if float(part.loc[t, "p"] if "p" in part else np.nan) < decided.attrs[
        "policy"].alpha and verdicts[t] != "matters"] if "p" in part else []
    s = (f"Not resolved at this n ({rules}): no term with {name} matters after the correction"
         + (", and none can be said not to matter without a practical threshold"
            if decided.attrs["policy"].practical is None else "")
         + f"; open: {_resolve_text(decided, open_[:4])}" + (f" and {len(open_) - 4} more" if len(open_) > 4 else "")
         + f". Terms with {name} explain {_pct(share)} of the variation.")
    if sig_raw:
        s += (" Significant before the correction only: " + ", ".join(
            f"{term_label(t)} (p = {part.loc[t, 'p']:.2g}, adjusted {part.loc[t, 'p_adjusted']:.2g})"
            for t in sig_raw) + ".")
    return "Not resolved at this n", s


def conclusions(effects: pd.DataFrame, *, diagnostics: Diagnostics | None = None,
                variation: pd.DataFrame | None = None, focus: str | None = None,
                reference: pd.DataFrame | None = None, alpha: float | None = None,
                rules: Policy | None = None, runs: pd.DataFrame | None = None,
                error_term: Sequence[str] | None = None,
                checks: Sequence[str] | None = None,
                not_concluded: dict[str, str] | None = None) -> Conclusions:
    """Conclusions in words from a :func:`labkit.stats.factorial_effects` table (or an ANOVA or
    level-effects table), every term decided by the declared rules (docs/conclusions.md).

    * ``rules``: the :class:`labkit.report.decisions.Policy` (alpha, practical threshold,
      family correction); default Holm at ``alpha`` without a practical threshold (then
      significance alone decides, it is said, and nothing is said not to matter). A term
      *matters* when significant after the correction and at least the threshold; *does not
      matter* when its interval lies within ±threshold; *negligible* when significant but below;
      else *not resolved at this n*, with the runs that would resolve it.
    * ``runs``: one row per run with the response (the mean the threshold is a fraction of, n).
    * ``diagnostics``: the :class:`labkit.stats.Diagnostics` of the same data; when the
      residuals fail Shapiro-Wilk the sentences say so and, if the log model was fitted,
      which terms are significant (after the same correction) on the log scale.
    * ``variation``: :func:`variation_ci` output, giving each share a CI.
    * ``focus``: a factor to answer for ("Does CPU affinity matter?") from the verdicts of the
      terms with it (:func:`focus_answer`).
    * ``reference``: a published allocation of variation, columns ``source``, ``term`` (our
      term names) and ``pct_variation``: the largest term and the focus factor's share there
      beside ours.
    * ``error_term``: sentences saying which error term the tests used, among the findings.
    * ``checks``: sentences of the measurement checks (drift, order effects, warm-up), among the
      assumptions.
    * ``not_concluded``: ``{factor: why}`` for factors whose treatment did not take
      (:func:`treatment_hook`): every term with them gets the verdict "not concluded on" and the
      reason is said; a focus on such a factor is answered "Not concluded on".

    Returns a :class:`Conclusions` (``decided``: the effects with ``p_adjusted``, ``threshold``,
    ``verdict``, ``runs_to_resolve``; ``significant``: the terms significant after correction).
    """
    v.frame(effects, "effects")
    v.columns(effects, ["term", "effect", "pct_variation"], "effects")
    alpha = v.alpha(effects.attrs.get("alpha", 0.05) if alpha is None else alpha)
    policy = rules if rules is not None else Policy(alpha=alpha)
    alpha = policy.alpha
    response = effects.attrs.get("response", "response")
    ci = {}
    if variation is not None:
        v.columns(variation, ["term", "pct_low", "pct_high"], "variation")
        ci = {t: (lo, hi) for t, lo, hi in variation[["term", "pct_low", "pct_high"]].itertuples(
            index=False, name=None)}
    decided = decided_effects(effects, policy, runs=runs, response=response)
    skip = dict(not_concluded or {})
    if skip:
        hit = decided["verdict"].notna() & decided["term"].map(
            lambda t: any(f in str(t).split(":") for f in skip))
        decided.loc[hit, "verdict"] = "not concluded on"
    fam = decided[decided["verdict"].notna()]
    sig = fam.loc[fam["verdict"].isin(["matters", "negligible"]), "term"].tolist()
    rules_text = decided.attrs["rules"]
    method = "Lenth's method" if decided.attrs.get("lenth") else _method(effects)
    out = Conclusions(headline="", significant=sig, decided=decided, rules=rules_text)
    threshold = decided.attrs.get("threshold")
    for factor, why_not in skip.items():
        out.findings.append(f"{term_label(factor)} is not concluded on (the treatment did not take): {why_not}")
    out.findings.append(f"Decision rules: {rules_text}"
                        + (f" (threshold {threshold:.3g} in the unit of the "
                           f"{'effect' if policy.practical_of == 'mean' else 'q'})"
                           if policy.practical is not None and np.isfinite(threshold or np.nan)
                           and not decided.attrs.get("lenth") and policy.practical_of == "mean" else "")
                        + f"; test: {method}.")
    matters = _verdict_list(decided, "matters")
    if matters:
        out.findings.append(f"Matters ({'significant after the correction' if policy.practical is None else 'significant after the correction and at least the practical threshold'}): "
                            + _names(matters, 20) + ".")
        out.findings += _describe_terms(effects, matters, ci, response)
    else:
        out.findings.append("No factor or interaction matters under these rules.")
    neg = _verdict_list(decided, "negligible")
    if neg:
        out.findings.append("Negligible (significant after the correction but below the practical "
                            "threshold: real, too small to matter): " + _names(neg, 20) + ".")
    same = _verdict_list(decided, "does not matter")
    if same:
        out.findings.append("Does not matter (interval within the practical threshold, equivalence): "
                            + _names(same, 20) + ".")
    open_ = _verdict_list(decided, "not resolved at this n")
    if open_:
        out.findings.append("Not resolved at this n" + (" (no practical threshold declared: a term that is "
                                                         "not significant is never said not to matter)"
                                                         if policy.practical is None else "")
                            + ": " + _resolve_text(decided, open_[:8])
                            + (f" and {len(open_) - 8} more" if len(open_) > 8 else "") + ".")
    if "p" in decided and "p_adjusted" in decided:
        raw_only = fam[(fam["p"] < alpha) & ~(fam["p_adjusted"] < alpha)]
        if len(raw_only):
            out.findings.append("Significant before the correction only (not after "
                                + policy.correction(int(decided.attrs["family"])) + "): "
                                + ", ".join(f"{term_label(t)} (p = {p:.2g}, adjusted {pa:.2g})"
                                            for t, p, pa in raw_only[["term", "p", "p_adjusted"]]
                                            .itertuples(index=False, name=None)) + ".")
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
                log_dec = decided_effects(diagnostics.log_effects, Policy(alpha=alpha, family=policy.family))
                log_sig = log_dec.loc[log_dec["verdict"].isin(["matters", "negligible"]), "term"].tolist()
                verdict = ("they look normal" if second["normal"] is not pd.NA and bool(second["normal"])
                           else "they are still not normal")
                s += (f" What was done: the analysis was repeated on log({label(response)}), where "
                      f"{verdict} (W = {second['W']:.3f}, p = {second['p']:.2g}); there the "
                      f"significant terms after the correction are "
                      + (", ".join(term_label(t) for t in log_sig) or "none") + ".")
                s += (" The conclusions do not change on the log scale." if set(log_sig) == set(sig)
                      else " The two scales disagree on "
                      + ", ".join(term_label(t) for t in sorted(set(log_sig) ^ set(sig)))
                      + ": treat those terms with care.")
            else:
                s += " The log model could not be fitted (values <= 0)."
            out.assumptions.append(s)
    out.assumptions += list(checks or [])

    if focus is not None and focus in skip:
        out.answer = "Not concluded on"
        out.headline = f"Does {term_label(focus)} matter? Not concluded on: {skip[focus]}"
    elif focus is not None:
        answer, sentence = focus_answer(decided, focus)
        out.answer = answer
        out.headline = f"Does {term_label(focus)} matter? {sentence}"
        with_focus = [t for t in decided["term"] if focus in str(t).split(":")]
        if log_sig is not None and bool([t for t in with_focus if t in log_sig]) != bool(
                [t for t in with_focus if t in sig]):
            out.headline += " (On the log scale the answer differs: see the assumptions.)"

    if reference is not None:
        terms = effects[~effects["term"].isin(["I", "error"])]
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
                s += (" Reported there with >= 5 % but not significant here (after the correction): "
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

    ``level_order`` maps each factor whose levels the design declares to them in that order
    (:func:`declared_levels`): the effects' coding (first = low), the rows of ``summary`` and
    ``quantiles`` and the axes of :meth:`figures` follow it.

    Decision rules (issue 41): ``policy`` (the :class:`labkit.report.decisions.Policy` every
    conclusion was decided by), ``order_effects`` (:func:`labkit.stats.order_effects`: trend and
    carry-over in each host's run order, or None with too few runs), ``suspect_runs`` (run_id,
    the factors, host, suspect_reason of the runs the telemetry flags). With an adaptive design
    ``summary``'s mean intervals are Stein's (:func:`stein_summary`).
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
    level_order: dict = field(default_factory=dict)
    order_effects: pd.DataFrame | None = None
    policy: Policy | None = None
    suspect_runs: pd.DataFrame | None = None

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
        run_order and qq (when residuals exist). Levels are drawn in the design's declared order
        (``level_order``), else in the effects' coding (low level first), else sorted."""
        from . import plots
        figs = {}
        levels = {**(self.effects.attrs.get("levels") or {}), **self.level_order}
        if self.kind in ("factorial", "levels") and (len(self.factors) >= 2 or self.diagnostics is not None
                                                      or self.kind == "levels"):
            figs["pareto"] = plots.pareto(self.effects, diagnostics=self.diagnostics)
        figs["main_effects"] = plots.main_effects(self.runs, self.factors, self.response,
                                                  alpha=alpha, levels=levels)
        if len(self.factors) >= 2:
            figs["interactions"] = plots.interactions(self.runs, self.factors, self.response,
                                                      alpha=alpha, levels=levels)
        hue = self.factors[0] if self.runs[self.factors[0]].nunique() <= 8 else None
        figs["run_order"] = plots.run_order(self.runs, self.response, hue=hue, levels=levels)
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
            n_boot: int = 1000, hosts: str = "block", practical: object = None,
            family: str | None = None) -> Analysis:
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
    telemetry. Every conclusion is decided by the design's rules (``practical:``, ``family:``;
    ``practical``/``family`` override them, ``alpha`` is the level) and computed with and without
    the suspect runs (docs/conclusions.md). Returns an :class:`Analysis`; :func:`analyze_results`
    does the same from a tidy DataFrame.
    """
    from ..store import Store, load_results
    from .catalog import require_campaign
    path = Path(data_dir) / require_campaign(data_dir, campaign) / "store.sqlite"
    with Store(path, readonly=True) as st:
        meta, fps, stored = st.meta(), st.fingerprints(), st.runs()
    tidy = load_results(data_dir, campaign)
    return analyze_results(tidy, meta=meta, campaign=campaign, fingerprints=fps, runs=stored,
                           response=response, factors=factors, alpha=alpha, focus=focus,
                           reference=reference, n_boot=n_boot, hosts=hosts, practical=practical,
                           family=family)


def _fit(obs: pd.DataFrame, runs_table: pd.DataFrame, response: str, factors: list, plan: LevelDesign, *,
         levels: v.Levels, alpha: float, n_boot: int, extras: bool = True) -> tuple:
    """The analysis the data allow (:func:`analyze`): ``(kind, effects, fit, note, diagnostics,
    variation, why)``; ``why`` says why no test is possible (or None). Without ``extras`` the
    residual diagnostics and the bootstrap shares are skipped (the analysis without the suspect
    runs needs the verdicts only)."""
    from ..stats import anova, blocked_effects, factorial_diagnostics, factorial_effects
    from .levels import level_analysis
    diag: Diagnostics | None = None
    variation: pd.DataFrame | None = None
    fit = None
    why: str | None = None
    note = ""
    r = _is_full_two_level(runs_table, factors)
    if plan.random:
        kind, effects, fit, note = level_analysis(obs, response, factors, plan, levels=levels,
                                                  alpha=alpha)
        if fit is not None and fit.unit is not None:
            # the error term's units: their means are a 2^k·r design when balanced, whose residuals
            # and bootstrap shares are those of the model's whole-unit stratum
            from ..stats import unit_means
            means = unit_means(obs, response=response, unit=fit.unit, keep=factors)
            if extras and _is_full_two_level(means, factors) >= 2:
                diag = factorial_diagnostics(means, factors=factors, response=response, alpha=alpha,
                                             levels=levels)
                variation = variation_ci(means, factors, response, levels=levels, alpha=alpha,
                                         n_boot=n_boot)
    elif r:
        kind = "factorial"
        if plan.blocks and r >= 2:
            table = blocked_effects(runs_table, factors=factors, response=response, block="host",
                                    alpha=alpha, levels=levels)
            block = table.loc[table.term == "block", "pct_variation"]
            effects = table[table.term != "block"].drop(columns="confounded").reset_index(drop=True)
            effects.attrs.update(table.attrs, block_pct=float(block.iloc[0]) if len(block) else None)
        else:
            effects = factorial_effects(runs_table, factors=factors, response=response, alpha=alpha,
                                        levels=levels)
        if r >= 2 and extras:
            diag = factorial_diagnostics(runs_table, factors=factors, response=response, alpha=alpha,
                                         levels=levels)
            variation = variation_ci(runs_table, factors, response, levels=levels, alpha=alpha,
                                     n_boot=n_boot)
        elif r < 2 and len(factors) < 2:
            why = ("one two-level factor without replications: no error estimate, and Lenth's "
                   "method needs at least 2 effects")
    else:
        kind = "anova"
        cells = runs_table.groupby(factors, observed=True).size()
        full = bool((cells >= 2).all())
        if not extras:   # the analysis without the suspect runs: no interaction over a cell they emptied
            full = full and len(cells) == int(np.prod([runs_table[f].nunique() for f in factors]))
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
    return kind, effects, fit, note, diag, variation, why


def analyze_results(tidy: pd.DataFrame, *, meta: dict | None = None, campaign: str | None = None,
                    fingerprints: dict | None = None, runs: pd.DataFrame | None = None,
                    response: str | None = None, factors: Sequence[str] | None = None,
                    alpha: float = 0.05, focus: str | None = None,
                    reference: pd.DataFrame | None = None, n_boot: int = 1000,
                    hosts: str = "block", practical: object = None,
                    family: str | None = None) -> Analysis:
    """:func:`analyze` of tidy rows (:meth:`labkit.store.Store.tidy`, long format: one row per
    measurement with the factor and level columns); ``meta`` is the store's metadata (design,
    workload), ``fingerprints`` its host fingerprints and ``runs`` its :meth:`Store.runs
    <labkit.store.Store.runs>` (for the telemetry summaries), each optional; ``practical`` and
    ``family`` override the design's decision rules (:func:`labkit.report.decisions.policy_for`)."""
    from ..core.fingerprint import fingerprint_table
    from ..stats import drift_segments, order_effects, quantile_summary, summarize
    from .catalog import primary_response
    from .levels import (
        drift_sentences,
        error_term_sentences,
        level_design,
        observations,
        runs_of,
        warmup_sentence,
        with_levels,
    )
    meta = meta or {}
    campaign = campaign or str(meta.get("campaign_id") or "campaign")
    policy = policy_for(meta, alpha=alpha, practical=practical, family=family)
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
    # the design's level order (noise: [none, memory] reads "from none to memory"), kept by every
    # analysis, table and figure below; None when the design declares none of the factors
    order = declared_levels(meta, factors, tidy)
    levels = order or None
    obs, cut = observations(tidy, response, factors)
    runs_table = runs_of(obs, response, factors)
    summary = sorted_as_declared(summarize(runs_table, by=factors, response=response, alpha=alpha),
                                  factors, order)
    quantiles = sorted_as_declared(quantile_summary(runs_table, by=factors, response=response,
                                                     confidence=1 - alpha), factors, order)
    plan = level_design(obs, factors, hosts=hosts)
    kind, effects, fit, note, diag, variation, why = _fit(obs, runs_table, response, factors, plan, levels=levels,
                                                          alpha=alpha, n_boot=n_boot)
    effects.attrs.setdefault("response", response)
    try:
        drift = drift_segments(runs_table, response=response, order="run_seq", by="host",
                               factors=factors, alpha=alpha)
    except ConfigError:
        drift = None
    checks = (drift_sentences(drift, response) if drift is not None else [])
    try:
        order_check = order_effects(runs_table, response=response, factors=factors, order="run_seq",
                                    by="host", alpha=alpha)
    except ConfigError:
        order_check = None
    checks += order_sentences(order_check, response) if order_check is not None else []
    cut_text = warmup_sentence(cut)
    checks += [cut_text] if cut_text else []
    adaptive = _adaptive_pilot(meta)
    if adaptive:
        summary = stein_summary(summary, runs_table, by=factors, response=response, pilot=adaptive,
                                confidence=1 - alpha)
        quantiles = stein_summary(quantiles, runs_table, by=factors, response=response, pilot=adaptive,
                                  confidence=1 - alpha)
        checks.append(f"Adaptive stopping: Stein's two-stage interval for each configuration's mean "
                      f"(the standard deviation of the first {adaptive} runs, which the decision to "
                      f"stop did not pick; the fixed-n interval covers less than its level after "
                      f"adaptive stopping).")
    untaken = treatment_hook(tidy, runs, factors)
    if why:
        shown = "The effects table is shown without tests; the" if kind == "factorial" else "The"
        concl = Conclusions(headline="", findings=[
            f"No test of significance or share of variation can be computed from these "
            f"{len(runs_table)} runs ({why}). {shown} summary per configuration and the figures are "
            f"descriptive only; replicate the design to test the factors.",
            f"Decision rules: {policy.describe(0)}: nothing is concluded."], assumptions=checks)
    else:
        concl = conclusions(effects, diagnostics=diag, variation=variation, rules=policy,
                            runs=runs_table, focus=focus if focus in factors else None, reference=reference,
                            error_term=error_term_sentences(kind, plan, effects, fit, note=note),
                            checks=checks, not_concluded=untaken)
    telemetry = _telemetry(runs, runs_table)
    concl.suspect = suspect_sentences(runs_table, obs, response, factors, plan, policy,
                                      concl, levels=levels, n_boot=n_boot, why=why, focus=focus,
                                      watched=telemetry is not None)
    from ..run.telemetry import measurement_notes
    notes = measurement_notes(runs)   # never "none flagged" for runs that were never measured
    if any(n.startswith("telemetry off") for n in notes):
        concl.suspect = [s for s in concl.suspect if not s.startswith("Suspect runs: none of")]
    concl.suspect = [f"Not measured: {n}." for n in notes] + list(concl.suspect)
    runs_out = runs_table[["run_id", "replicate", *factors, response, "run_order"]]
    return Analysis(campaign, response, factors, meta, status, runs_out, summary, kind, effects,
                    diag, variation, concl, fingerprint_table(fingerprints or {}),
                    observations=obs, level_design=plan, levels=fit, quantiles=quantiles,
                    drift=drift, warmup=cut, telemetry=telemetry,
                    level_order=dict(order), order_effects=order_check, policy=policy,
                    suspect_runs=runs_table.loc[runs_table["suspect"].astype(bool),
                                                ["run_id", *factors, "host", "suspect_reason"]]
                    .reset_index(drop=True))


def _adaptive_pilot(meta: dict) -> int:
    """The pilot runs (``min``) of an adaptive design's replication, or 0 when not adaptive."""
    reps = ((meta or {}).get("design") or {}).get("replications")
    if isinstance(reps, dict):
        pilot = reps.get("min", 3)
        return int(pilot) if isinstance(pilot, int) and pilot >= 2 else 0
    return 0


def stein_summary(summary: pd.DataFrame, runs: pd.DataFrame, *, by: Sequence[str], response: str,
                  pilot: int, confidence: float = 0.95) -> pd.DataFrame:
    """``summary`` (:func:`labkit.stats.summarize`, one row per configuration of ``by``) with the
    mean's interval (``ci_low``, ``ci_high``) replaced by Stein's two-stage interval
    (:func:`labkit.stats.stein_ci`, the first ``pilot`` runs of each configuration in run order)
    where a configuration has ``pilot`` runs or more, and a column ``interval`` saying which
    ("stein" or "fixed-n"); ``attrs["interval"]`` = "adaptive stopping: Stein's two-stage interval"."""
    from ..stats import stein_ci
    out = summary.copy()
    out["interval"] = "fixed-n"
    keys = list(by)
    ordered = runs.sort_values("run_order", kind="stable")
    for i, row in out.iterrows():
        sel = np.ones(len(ordered), dtype=bool)
        for f in keys:
            sel &= (ordered[f] == row[f]).to_numpy()
        x = ordered.loc[sel, response].to_numpy(float)
        if len(x) >= pilot and np.std(x[:pilot]) >= 0:
            s = stein_ci(x, pilot=pilot, confidence=confidence).iloc[0]
            out.loc[i, ["ci_low", "ci_high"]] = [s.ci_low, s.ci_high]
            out.loc[i, "interval"] = "stein"
    out.attrs = dict(summary.attrs, interval="adaptive stopping: Stein's two-stage interval")
    return out


def treatment_hook(tidy: pd.DataFrame, runs: pd.DataFrame | None, factors: Sequence[str]) -> dict[str, str]:
    """``{factor: why it is not concluded on}`` for the factors of the analysis whose treatment did
    not take on some runs (issue 41, item 4: :func:`labkit.report.treatments.untaken` reads the
    per-run manipulation checks from the store's ``runs`` metadata): "KSM on merged no pages in 30
    of 30 runs: the treatment did not take". Empty without checks (``runs`` None, older stores)."""
    from .treatments import untaken
    if runs is None:
        return {}
    table = untaken(runs)
    bad = table[(table["failed"] > 0) & table["factor"].isin([str(f) for f in factors])]
    return {str(f): "; ".join(str(x) for x in g["sentence"].dropna()) + "."
            for f, g in bad.groupby("factor", sort=False)}


#: the order-effects table as the report prints it (the adjusted p-values decide; the raw ones, the
#: slope and the carry-over groups stay in :attr:`Analysis.order_effects` and the export)
ORDER_COLUMNS = ("host", "n", "rho", "p_trend_adj", "H", "p_carry_adj", "trend", "carryover", "trusted")


def order_sentences(order: pd.DataFrame, response: str) -> list[str]:
    """The order-effects check (:func:`labkit.stats.order_effects`) in words: per host, trend
    (Spearman) and carry-over (Kruskal-Wallis on the previous run's configuration), and whether
    the randomization is to be trusted."""
    alpha = order.attrs.get("alpha", 0.05)
    tests = order.attrs.get("tests", 0)
    parts, bad = [], []
    for r in order.itertuples(index=False):
        carry = (f"carry-over H = {r.H:.3g}, p = {r.p_carry:.2g}" if np.isfinite(r.p_carry)
                 else "carry-over not tested (fewer than 2 previous configurations with 2 runs)")
        parts.append(f"host {r.host} ({r.n} runs): trend ρ = {r.rho:+.2f}, p = {r.p_trend:.2g} "
                     f"(slope {r.slope:+.3g} per run), {carry}")
        if not r.trusted:
            bad.append(f"host {r.host}: " + " and ".join(
                x for x, flag in (("a trend in run order", r.trend), ("carry-over from the previous run",
                                                                      r.carryover)) if flag))
    head = (f"Order effects (residuals of {label(response)} after the configuration means, in each "
            f"host's run order; Spearman for a trend, Kruskal-Wallis on the previous run's "
            f"configuration for carry-over; Holm over {tests} tests, α = {alpha:g}): " + "; ".join(parts) + ".")
    if bad:
        head += (" Found: " + "; ".join(bad) + ". The randomization spreads it over the configurations "
                 "but does not remove it: trust the effects only as far as the error term absorbs it "
                 "(block by time or re-run to be sure).")
    else:
        head += " No trend and no carry-over: the randomization can be trusted."
    short = order.attrs.get("short") or []
    if short:
        head += f" Not checked on {', '.join(map(str, short))} (fewer than 6 runs)."
    return [head]


def suspect_sentences(runs_table: pd.DataFrame, obs: pd.DataFrame, response: str, factors: list,
                      plan: LevelDesign, policy: Policy, concl: Conclusions, *, levels: v.Levels,
                      n_boot: int, why: str | None, focus: str | None = None,
                      watched: bool = True) -> list[str]:
    """The suspect runs in the answer (issue 41, item 3): how many, which configurations are left
    with no clean run, whether the flags concentrate on a level of a factor
    (:func:`labkit.report.decisions.suspect_association`), and every verdict recomputed without
    them: the same, or "not robust to the N suspect runs" with both verdicts shown (``watched``:
    False when no telemetry is stored, said so instead of "none flagged"). Says in
    ``concl.headline`` whether the answer about ``focus`` is the same without them."""
    from .decisions import empty_cells, suspect_association
    from .levels import level_design
    sus = runs_table["suspect"].astype(bool)
    n_sus, n = int(sus.sum()), len(runs_table)
    if not n_sus:
        return [f"Suspect runs: none of the {n} runs is flagged by the telemetry." if watched else
                f"Suspect runs: none flagged, but no telemetry is stored for these {n} runs (campaigns "
                f"run before telemetry was kept): they were not checked for a busy host."]
    reasons = runs_table.loc[sus, "suspect_reason"].dropna().astype(str)
    # the kind of reason: its words up to the first number ("... used 35.1 % of a CPU" -> "... used")
    top = reasons.map(lambda r: re.split(r"\d", r)[0].strip(" ,:(") or r).value_counts().head(2)
    ids = runs_table.loc[sus, "run_id"].astype(str).tolist()
    out = [f"Suspect runs: {n_sus} of {n} runs are flagged by the telemetry"
           + (f" (reasons: {'; '.join(f'{k} … ({c} run{chr(115) * (c != 1)})' for k, c in top.items())})" if len(top) else "")
           + f": {', '.join(ids[:12])}" + (f" and {len(ids) - 12} more" if len(ids) > 12 else "") + "."]
    empty = empty_cells(runs_table, factors)
    if len(empty):
        cells = ["; ".join(f"{f}={row[f]}" for f in factors) for _, row in empty.iterrows()]
        out.append(f"Configurations with no clean run ({len(empty)}): " + " | ".join(cells[:8])
                   + (f" and {len(cells) - 8} more" if len(cells) > 8 else "") + ".")
    assoc = suspect_association(runs_table, factors, alpha=policy.alpha,
                                family="none" if policy.family == "none" else policy.family)
    if len(assoc) and not assoc["confounded"].any():
        out.append(f"The suspect runs are not concentrated on a level of any factor (Fisher's exact test, "
                   f"chi-square for more than two levels; {policy.correction(len(assoc), 'factor')}: "
                   f"smallest adjusted p = {float(assoc['p_adjusted'].min()):.2g}).")
    for r in assoc[assoc["confounded"]].itertuples(index=False):
        test = "Fisher's exact test" if r.test == "fisher" else "chi-square test"
        out.append(f"The suspect runs are confounded with {term_label(r.factor)}: {r.suspect_there} of the "
                   f"{r.suspect} suspect runs are at {r.factor}={r.level}, which holds {r.runs_there} of "
                   f"the {r.runs} runs ({test}, {policy.correction(len(assoc), 'factor')}, adjusted "
                   f"p = {r.p_adjusted:.2g}): a difference between its levels may be the disturbance, "
                   f"not {term_label(r.factor)}.")
    if why or concl.decided is None:
        return out
    clean_runs = runs_table[~sus].reset_index(drop=True)
    clean_obs = obs[~obs["run_id"].isin(ids)].reset_index(drop=True)
    verdict_all = concl.decided.set_index("term")["verdict"].dropna()
    verdict_all = verdict_all[verdict_all != "not concluded on"]
    try:
        if len(clean_runs) < 3:
            raise ConfigError(f"{len(clean_runs)} clean runs")
        clean_plan = level_design(clean_obs, factors, hosts=plan.host_mode)
        k2, eff2, _, _, _, _, why2 = _fit(clean_obs, clean_runs, response, factors, clean_plan, levels=levels,
                                          alpha=policy.alpha, n_boot=n_boot, extras=False)
        if why2:
            raise ConfigError(why2)
        dec2 = decided_effects(eff2, policy, runs=clean_runs, response=response)
    except (ConfigError, ValueError, np.linalg.LinAlgError) as exc:
        out.append(f"Without the {n_sus} suspect runs no analysis is possible ({exc}): every conclusion "
                   f"above rests on suspect runs; not robust to the {n_sus} suspect runs.")
        if concl.headline:
            concl.headline += f" Not robust to the {n_sus} suspect runs (without them nothing can be tested)."
        return out
    verdict_clean = dec2.set_index("term")["verdict"].dropna()
    changed = [(t, verdict_all[t], verdict_clean.get(t, "not tested")) for t in verdict_all.index
               if verdict_clean.get(t, "not tested") != verdict_all[t]]
    head = f"Without the {n_sus} suspect runs ({len(clean_runs)} clean runs, {dec2.attrs['rules']})"
    if not changed:
        out.append(head + ": every verdict is the same; the conclusions are robust to the suspect runs.")
    else:
        out.append(head + f": not robust to the {n_sus} suspect runs: "
                   + "; ".join(f"{term_label(t)} {a!r} with them, {b!r} without" for t, a, b in changed[:10])
                   + (f"; and {len(changed) - 10} more" if len(changed) > 10 else "") + ".")
    if focus is not None and focus in factors and concl.answer not in ("", "Not concluded on"):
        answer2, _ = focus_answer(dec2, focus)
        if answer2 != concl.answer:
            concl.headline += (f" Not robust to the {n_sus} suspect runs: with them {concl.answer}, "
                               f"without them {answer2}.")
        else:
            concl.headline += f" The same without the {n_sus} suspect runs."
    return out


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
    out = runs_table[keep].merge(cov, on="run_id", how="left")
    # what was not measured ("telemetry off: psutil missing: suspect runs unknown"): never "0 flagged"
    from ..run.telemetry import measurement_notes
    out.attrs["unmeasured"] = [n for n in measurement_notes(stored) if n.startswith("telemetry off")]
    return out


def compare(data_dir: str | Path, a: str, b: str, *, response: str | None = None, alpha: float = 0.05,
            min_effect_pct: float = 2.0, margin: float | None = None) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Same design measured twice (two hosts, two dates): per-configuration drift from ``a`` to ``b``.

    Returns ``(table, fingerprint_diff, verdict)``. ``table`` is
    :func:`labkit.stats.compare.config_differences` (one row per configuration present in
    both, in the level order ``a``'s design declares: factor columns, ``n_a``, ``n_b``,
    ``mean_a``, ``mean_b``, ``diff`` (b - a), ``ci_low``/``ci_high`` (Welch), ``diff_pct``, ``ratio`` with Fieller's
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

    Each configuration also gets an equivalence verdict (:func:`labkit.stats.equivalence` of b
    against a, TOST at ``alpha``) against ``margin`` (a fraction of a's mean; default the
    practical threshold of the mean ``a``'s design declares; none: not tested, said so), the
    p-values Holm-corrected over the configurations: columns ``p_tost``, ``p_tost_holm`` (NaN
    without a margin) and ``equivalence`` ("equivalent", "different", "negligible difference",
    "inconclusive", or "not tested"); ``table.attrs["margin"]``.

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
    # configurations in the design's declared level order (as the analysis and its figures)
    table = sorted_as_declared(table, fa, declared_levels(metas[0], fa, table))
    if (ra[response] > 0).all() and (rb[response] > 0).all():
        try:
            table.attrs["overall"] = drift_test(ra, rb, response=response, factors=fa, alpha=alpha,
                                                min_effect_pct=min_effect_pct)
        except ConfigError:
            pass
    if margin is None:
        rule = policy_for(metas[0]).practical, policy_for(metas[0]).practical_of
        margin = rule[0] if rule[1] == "mean" else None
    table = _equivalence_columns(table, ra, rb, response=response, factors=fa, margin=margin, alpha=alpha)
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
    if margin is not None:
        counts = table["equivalence"].value_counts()
        verdict += (f". Equivalence of {b} to {a} within ±{100 * margin:g} % of {a}'s mean (TOST, Holm over "
                    f"{len(table)} configurations, α = {alpha:g}): "
                    + ", ".join(f"{c} {k}" for k, c in counts.items()))
    else:
        verdict += (". No equivalence margin declared (practical: in the design, or --margin): a "
                    "configuration that did not drift is not shown the same")
    verdict += ". " + fingerprint_summary(fpd, a, b)
    table.attrs.update({"response": response, "alpha": alpha, "notes": notes, "a": a, "b": b,
                        "factors": fa, "margin": margin})
    return table, fpd, verdict


def _equivalence_columns(table: pd.DataFrame, ra: pd.DataFrame, rb: pd.DataFrame, *, response: str,
                         factors: Sequence[str], margin: float | None, alpha: float) -> pd.DataFrame:
    """``table`` (one row per configuration of ``factors``) with ``p_tost``, ``p_tost_holm`` and
    ``equivalence``: TOST of ``rb`` against ``ra`` within ``margin`` (a fraction of ra's mean),
    Holm over the rows, the verdict from the Holm-corrected TOST and Welch p-values."""
    from ..stats import adjust_p, equivalence
    from ..stats.equivalence import verdict as tost_verdict
    out = table.copy()
    out.attrs = dict(table.attrs)
    if margin is None:
        out["p_tost"], out["p_tost_holm"], out["equivalence"] = np.nan, np.nan, "not tested"
        return out
    p_tost, p_diff = [], []
    for _, row in out.iterrows():
        sa, sb = np.ones(len(ra), dtype=bool), np.ones(len(rb), dtype=bool)
        for f in factors:
            sa &= (ra[f] == row[f]).to_numpy()
            sb &= (rb[f] == row[f]).to_numpy()
        try:
            e = equivalence(rb.loc[sb, response], ra.loc[sa, response], margin=margin, alpha=alpha).iloc[0]
            p_tost.append(e.p_tost)
            p_diff.append(e.p_diff)
        except ConfigError:
            p_tost.append(np.nan)
            p_diff.append(np.nan)
    pt, pd_ = np.asarray(p_tost, float), np.asarray(p_diff, float)
    ok = np.isfinite(pt) & np.isfinite(pd_)
    adj_t, adj_d = np.full(len(pt), np.nan), np.full(len(pt), np.nan)
    if ok.any():
        adj_t[ok], adj_d[ok] = adjust_p(pt[ok], method="holm"), adjust_p(pd_[ok], method="holm")
    out["p_tost"], out["p_tost_holm"] = pt, adj_t
    out["equivalence"] = [tost_verdict(t, d, alpha) if k else "not tested"
                          for t, d, k in zip(adj_t, adj_d, ok)]
    return out


#: the effects table's columns a report shows, in this order (:func:`labkit.report.tables.effects_table`:
#: each estimate beside its own interval)
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


def write_report(data_dir: str | Path, campaign: str, out: str | Path, *, response: str | None = None,
                 alpha: float = 0.05, practical: object = None, family: str | None = None) -> Path:
    """Analyse ``campaign`` (:func:`analyze`) and write one self-contained HTML file to ``out``
    with :func:`labkit.core.files.atomic_write` (mode 0600, also when it replaces an older report:
    results are private until shared; a symbolic link at ``out`` is refused). Returns the path.

    The page (:func:`html_report`): the conclusions first, a table of contents, the design as a
    table (one row per factor) with the campaign's settings, the summary per configuration, the
    effects (:func:`labkit.report.tables.effects_table`: Jain's q and the effect 2q, each beside its
    own CI; or the ANOVA), residual diagnostics, the figures with captions, the host
    fingerprints and the provenance (:func:`labkit.report.page.provenance`: labkit version and
    commit, the store's SHA-256, the hosts). Numbers to 4 significant digits; it fits a screen and
    prints on A4 without cutting a table."""
    from ..core.files import atomic_write
    from .catalog import design_table, settings_table
    from .page import Captioned, provenance
    a = analyze(data_dir, campaign, response=response, alpha=alpha, practical=practical, family=family)
    from ..store import Store
    with Store(Path(data_dir) / campaign / "store.sqlite", readonly=True) as st:
        fps = st.fingerprints()
    # the columns a reader needs (the whole table is in the bundle): q and the effect (2q) with the
    # effect's CI and the test, then the share of variation with its CI (two tables, so that both
    # fit an A4 page); an ANOVA's df, F, p and share in one
    from .tables import effects_table
    table = effects_table(a.effects, a.variation)
    shares = [c for c in ("pct_variation", "pct_low", "pct_high") if c in table.columns]
    effects: object = table
    if "effect" in table.columns and shares:
        effects = [("Estimates: Jain's q and the effect (2q) with the effect's "
                    f"{100 * (1 - alpha):g} % CI", table.drop(columns=shares)),
                   ("Share of the variation (%)" + (f" with its {100 * (1 - alpha):g} % bootstrap CI"
                                                     if "pct_low" in shares else ""),
                    table[["term", *shares]])]
    sections: list[tuple[str, object]] = [
        ("Conclusions", a.conclusions),
        ("Design", [("Factors and levels (the first level is the low level of a two-level factor)",
                     design_table(a.meta)),
                    ("Settings", settings_table(a.meta, a.status))]),
        ("Summary per configuration", a.summary),
        ({"factorial": "Effects", "anova": "ANOVA", "none": "Effects", "levels": "Effects"}[a.kind],
         "none can be computed (see the conclusions)" if a.kind == "none" else effects),
    ]
    from .tables import capped, decisions_table
    if a.conclusions.decided is not None and a.conclusions.decided["verdict"].notna().any():
        sections.append(("Decisions", [f"Each term decided by the rules: {a.conclusions.rules}.",
                                       decisions_table(a.conclusions.decided)]))
    if a.diagnostics is not None:
        sections.append(("Residual diagnostics", [a.diagnostics.table, a.diagnostics.message]))
    from .measurement import sections as measurement_sections
    sections += measurement_sections(a)     # levels, quantiles, drift, telemetry (issue 32)
    if a.order_effects is not None:
        shown = [c for c in ORDER_COLUMNS if c in a.order_effects]   # the decision's columns: A4-wide
        sections.append(("Order effects", [order_sentences(a.order_effects, a.response)[0], a.order_effects[shown]]))
    if a.suspect_runs is not None and len(a.suspect_runs):
        sections.append(("Suspect runs", [f"{len(a.suspect_runs)} of {len(a.runs)} runs flagged by the "
                                          f"telemetry (the conclusions are computed with and without them).",
                                          *capped(a.suspect_runs, what="suspect runs")]))
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


def write_bundle(data_dir: str | Path, campaign: str, out: str | Path, *, response: str | None = None,
                 alpha: float = 0.05, n_boot: int = 1000, licence: str | None = None) -> Path:
    """A zip with the campaign's ``results.csv``, ``results.parquet``, ``runs.csv``, a copy of
    ``store.sqlite``, ``fingerprints.json``, ``campaign.json`` (the campaign id) and
    ``environment.json`` (Python, installed package versions, this host's fingerprint), and, so
    that anyone can check it (:mod:`labkit.report.bundle`, ``labkit verify``): the report's
    tables and claims as data (``summary.csv``, ``effects.csv``, ``variation.csv``, ``claims.json``) computed from the bundled store
    with the settings in ``settings.json`` (``response``, ``alpha``, ``n_boot``), a Frictionless
    ``datapackage.json`` and RO-Crate 1.1 ``ro-crate-metadata.json`` (every file's SHA-256, labkit's
    version and code state, the hosts, the ``licence``: an SPDX id, CC-BY-4.0 by default).
    Member names are plain relative names (no ``..``, nothing unpacks outside where it is
    unpacked), and every member is 0600 (``ZipInfo.external_attr``: unpacked, no member is
    readable by others, whatever the files it was made from). Written with
    :func:`labkit.core.files.atomic_write` (0600, a symbolic link at ``out`` or at its directory
    refused). The store is read, never written (opened by its URI: a path holding ``?`` or ``#``
    is that path). Returns the path."""
    import shutil
    import sqlite3
    import stat
    import tempfile
    import time
    import zipfile
    from importlib import metadata

    from ..core.fingerprint import host_fingerprint
    from ..store import sqlite_uri
    from .bundle import DEFAULT_LICENCE, bundle_members
    src = Path(data_dir) / campaign / "store.sqlite"
    if not src.is_file():
        from ..errors import StoreError
        raise StoreError(f"no result store at {src}")
    env = {"packages": {d.metadata["Name"]: d.version for d in metadata.distributions()},
           "host": host_fingerprint()}
    settings = {"response": response, "alpha": alpha, "n_boot": n_boot}
    from ..core.files import atomic_write
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        copy = tmp / "data" / campaign / "store.sqlite"
        copy.parent.mkdir(parents=True, mode=0o700)
        s = sqlite3.connect(sqlite_uri(src, readonly=True), uri=True)
        d = sqlite3.connect(sqlite_uri(copy), uri=True)
        try:
            s.backup(d)   # a consistent copy, made through SQLite's read-only connection
        finally:
            s.close()
            d.close()
        # everything else is derived from the copy: what is bundled is what verify re-derives from
        members = bundle_members(copy, campaign, settings, env=env, licence=licence or DEFAULT_LICENCE)
        stamp = time.localtime()[:6]

        def member(z: zipfile.ZipFile, name: str, data: bytes | Path) -> None:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (stat.S_IFREG | 0o600) << 16    # unpacked: the owner's alone
            big = isinstance(data, Path) and data.stat().st_size > (1 << 30)   # zip64 ahead of a large store
            with z.open(info, "w", force_zip64=big) as dst:
                if isinstance(data, Path):
                    with open(data, "rb") as src_fh:
                        shutil.copyfileobj(src_fh, dst, 1 << 20)
                else:
                    dst.write(data)

        def write(fh):
            with zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as z:
                for name, data in members.items():
                    member(z, name, data)
        return atomic_write(out, write)
