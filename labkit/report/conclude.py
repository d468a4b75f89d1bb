"""Results in words: :func:`conclusions` turns a factorial analysis (effects table, residual
diagnostics, bootstrap CIs of the shares of variation, an optional published reference) into
sentences a reader can check against the tables (:class:`Conclusions`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..stats import validate as v
from ..stats.diagnostics import Diagnostics
from ..stats.lenth import lenth
from .decisions import Policy, decide_terms
from .escape import escape_md
from .labels import label, term_label

__all__ = ["Conclusions", "conclusions", "decided_effects", "focus_answer"]


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
        return [
            (title, items)
            for title, items in (
                ("Findings", self.findings),
                ("Suspect runs", self.suspect),
                ("Assumptions", self.assumptions),
                ("Compared with the published study", self.reference),
            )
            if items
        ]

    def sections(self) -> list[tuple[str, list[str]]]:
        """``(title, sentences)`` for each non-empty part: Findings, Suspect runs, Assumptions, Compared with the
        published study (plain text: escape before showing)."""
        return self._sections()

    def markdown(self) -> str:
        """The headline in bold and one bulleted list per section, every sentence escaped."""
        parts = [f"**{escape_md(self.headline)}**"] if self.headline else []
        parts += [
            f"*{title}.*\n\n" + "\n".join(f"- {escape_md(s)}" for s in items)
            for title, items in self._sections()
        ]
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
    return {
        "ems": "F-test of each term against the unit means (expected mean squares)",
        "reml": "mixed-model t-test of each effect (REML, Satterthwaite df)",
        "unit means": "ANOVA F-test of each term on the unit means",
    }.get(effects.attrs.get("method"), test)


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
    out["verdict"] = pd.Series(
        np.where(sig & big, "matters", np.where(sig, "negligible", "not resolved at this n")),
        index=out.index,
        dtype=object,
    ).where(fam, None)
    out["runs_to_resolve"] = np.nan
    m = int(fam.sum())
    how = (
        "Lenth's margin of error ME, each effect alone"
        if policy.family == "none"
        else f"Lenth's simultaneous margin of error SME over {m} effects"
    )
    out.attrs.update(
        rules=f"{how} (unreplicated design), α = {policy.alpha:g}, {policy.threshold_text()}",
        family=m,
        policy=policy,
        threshold=threshold,
        lenth=True,
    )
    return out


def decided_effects(
    effects: pd.DataFrame, policy: Policy, *, runs: pd.DataFrame | None = None, response: str | None = None
) -> pd.DataFrame:
    """:func:`labkit.report.decisions.decide_terms` of an effects table, or Lenth's decision
    (:func:`_lenth_decided`) for an unreplicated 2^k table (no p-values)."""
    if (
        "p" in effects
        and np.isfinite(
            effects.loc[~effects["term"].isin(["I", "error"]), "p"].to_numpy(float, na_value=np.nan)
        ).any()
    ):
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
        if not np.isfinite(row["effect"]):  # from an ANOVA table: no single direction
            change = f"F = {row['F']:.3g}, p = {row['p']:.2g}"
        elif ":" not in t and t in lv:
            low, high = lv[t]
            change = (
                f"going from {low} to {high} {direction} {label(response)} by "
                f"{abs(row['effect']):.3g} on average"
            )
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
        parts.append(
            term_label(t) + (f" (about {int(need):,} runs would resolve it)" if np.isfinite(need) else "")
        )
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
        raise ConfigError(
            f"focus {focus!r} is not a factor of the effects table (terms: {list(terms['term'])})"
        )
    part = terms.set_index("term").loc[with_focus]
    share = float(part["pct_variation"].sum())
    verdicts = part["verdict"]
    name = term_label(focus)
    rules = decided.attrs.get("rules", "")
    hit = [t for t in with_focus if verdicts[t] == "matters"]
    if hit:
        return "Yes", (
            f"Yes: {_names(hit)} {'matters' if len(hit) == 1 else 'matter'} ({rules}); "
            f"terms with {name} explain {_pct(share)} of the variation."
        )
    if (verdicts == "does not matter").all():
        return "No", (
            f"No: {name} and every interaction with it are shown within the practical "
            f"threshold ({rules}); together they explain {_pct(share)} of the variation."
        )
    neg = [t for t in with_focus if verdicts[t] == "negligible"]
    if neg and verdicts.isin(["negligible", "does not matter"]).all():
        return "Negligible", (
            f"Negligible: {_names(neg)} {'is' if len(neg) == 1 else 'are'} significant "
            f"but below the practical threshold ({rules}); terms with {name} explain "
            f"{_pct(share)} of the variation."
        )
    open_ = [t for t in with_focus if verdicts[t] == "not resolved at this n"]
    skipped = [t for t in with_focus if verdicts[t] == "not concluded on"]
    sig_raw = (
        [
            t
            for t in with_focus
            if float(part.loc[t, "p"] if "p" in part else np.nan) < decided.attrs["policy"].alpha
            and verdicts[t] != "matters"
        ]
        if "p" in part
        else []
    )
    s = (
        f"Not resolved at this n ({rules}): no term with {name} matters after the correction"
        + (
            ", and none can be said not to matter without a practical threshold"
            if decided.attrs["policy"].practical is None
            else ""
        )
        + (f"; open: {_resolve_text(decided, open_[:4])}" if open_ else "")
        + (f" and {len(open_) - 4} more" if len(open_) > 4 else "")
        + (
            "; not concluded on (another factor's treatment did not take): "
            + ", ".join(term_label(t) for t in skipped[:4])
            + (f" and {len(skipped) - 4} more" if len(skipped) > 4 else "")
            if skipped
            else ""
        )
        + f". Terms with {name} explain {_pct(share)} of the variation."
    )
    if sig_raw:
        s += (
            " Significant before the correction only: "
            + ", ".join(
                f"{term_label(t)} (p = {part.loc[t, 'p']:.2g}, adjusted {part.loc[t, 'p_adjusted']:.2g})"
                for t in sig_raw
            )
            + "."
        )
    return "Not resolved at this n", s


def conclusions(
    effects: pd.DataFrame,
    *,
    diagnostics: Diagnostics | None = None,
    variation: pd.DataFrame | None = None,
    focus: str | None = None,
    reference: pd.DataFrame | None = None,
    alpha: float | None = None,
    rules: Policy | None = None,
    runs: pd.DataFrame | None = None,
    error_term: Sequence[str] | None = None,
    checks: Sequence[str] | None = None,
    not_concluded: dict[str, str] | None = None,
) -> Conclusions:
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
        ci = {
            t: (lo, hi)
            for t, lo, hi in variation[["term", "pct_low", "pct_high"]].itertuples(index=False, name=None)
        }
    decided = decided_effects(effects, policy, runs=runs, response=response)
    skip = dict(not_concluded or {})
    if skip:
        hit = decided["verdict"].notna() & decided["term"].map(
            lambda t: any(f in str(t).split(":") for f in skip)
        )
        decided.loc[hit, "verdict"] = "not concluded on"
    fam = decided[decided["verdict"].notna()]
    sig = fam.loc[fam["verdict"].isin(["matters", "negligible"]), "term"].tolist()
    rules_text = decided.attrs["rules"]
    method = "Lenth's method" if decided.attrs.get("lenth") else _method(effects)
    out = Conclusions(headline="", significant=sig, decided=decided, rules=rules_text)
    threshold = decided.attrs.get("threshold")
    for factor, why_not in skip.items():
        out.findings.append(
            f"{term_label(factor)} is not concluded on (the treatment did not take): {why_not}"
        )
    out.findings.append(
        f"Decision rules: {rules_text}"
        + (
            f" (threshold {threshold:.3g} in the unit of the "
            f"{'effect' if policy.practical_of == 'mean' else 'q'})"
            if policy.practical is not None
            and np.isfinite(threshold or np.nan)
            and not decided.attrs.get("lenth")
            and policy.practical_of == "mean"
            else ""
        )
        + f"; test: {method}."
    )
    matters = _verdict_list(decided, "matters")
    if matters:
        out.findings.append(
            f"Matters ({'significant after the correction' if policy.practical is None else 'significant after the correction and at least the practical threshold'}): "
            + _names(matters, 20)
            + "."
        )
        out.findings += _describe_terms(effects, matters, ci, response)
    else:
        out.findings.append("No factor or interaction matters under these rules.")
    neg = _verdict_list(decided, "negligible")
    if neg:
        out.findings.append(
            "Negligible (significant after the correction but below the practical "
            "threshold: real, too small to matter): " + _names(neg, 20) + "."
        )
    same = _verdict_list(decided, "does not matter")
    if same:
        out.findings.append(
            "Does not matter (interval within the practical threshold, equivalence): "
            + _names(same, 20)
            + "."
        )
    open_ = _verdict_list(decided, "not resolved at this n")
    if open_:
        out.findings.append(
            "Not resolved at this n"
            + (
                " (no practical threshold declared: a term that is "
                "not significant is never said not to matter)"
                if policy.practical is None
                else ""
            )
            + ": "
            + _resolve_text(decided, open_[:8])
            + (f" and {len(open_) - 8} more" if len(open_) > 8 else "")
            + "."
        )
    if "p" in decided and "p_adjusted" in decided:
        raw_only = fam[(fam["p"] < alpha) & ~(fam["p_adjusted"] < alpha)]
        if len(raw_only):
            out.findings.append(
                "Significant before the correction only (not after "
                + policy.correction(int(decided.attrs["family"]))
                + "): "
                + ", ".join(
                    f"{term_label(t)} (p = {p:.2g}, adjusted {pa:.2g})"
                    for t, p, pa in raw_only[["term", "p", "p_adjusted"]].itertuples(index=False, name=None)
                )
                + "."
            )
    err = effects.loc[effects["term"] == "error"]
    if len(err) and np.isfinite(float(err["pct_variation"].iloc[0])):
        out.findings.append(
            f"Unexplained {'' if error_term else '(run-to-run) '}variation: "
            f"{_share(err.iloc[0], ci)} of the total."
        )
    out.findings += list(error_term or [])

    log_sig = None
    if diagnostics is not None:
        normal = getattr(diagnostics, "normal", None)
        first = diagnostics.table.iloc[0]
        if normal is None:
            out.assumptions.append(f"Residual normality could not be tested: {first['note']}.")
        elif normal:
            out.assumptions.append(
                f"Residuals look normal (Shapiro-Wilk W = {first['W']:.3f}, "
                f"p = {first['p']:.2g}): the t-based CIs and p-values hold."
            )
        else:
            s = (
                f"Residuals are not normal (Shapiro-Wilk W = {first['W']:.3f}, p = {first['p']:.2g}),"
                f" so the p-values above are approximate."
            )
            if diagnostics.log_effects is not None:
                second = diagnostics.table.iloc[1]
                log_dec = decided_effects(diagnostics.log_effects, Policy(alpha=alpha, family=policy.family))
                log_sig = log_dec.loc[log_dec["verdict"].isin(["matters", "negligible"]), "term"].tolist()
                verdict = (
                    "they look normal"
                    if second["normal"] is not pd.NA and bool(second["normal"])
                    else "they are still not normal"
                )
                s += (
                    f" What was done: the analysis was repeated on log({label(response)}), where "
                    f"{verdict} (W = {second['W']:.3f}, p = {second['p']:.2g}); there the "
                    f"significant terms after the correction are "
                    + (", ".join(term_label(t) for t in log_sig) or "none")
                    + "."
                )
                s += (
                    " The conclusions do not change on the log scale."
                    if set(log_sig) == set(sig)
                    else " The two scales disagree on "
                    + ", ".join(term_label(t) for t in sorted(set(log_sig) ^ set(sig)))
                    + ": treat those terms with care."
                )
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
            [t for t in with_focus if t in sig]
        ):
            out.headline += " (On the log scale the answer differs: see the assumptions.)"

    if reference is not None:
        terms = effects[~effects["term"].isin(["I", "error"])]
        v.columns(reference, ["source", "term", "pct_variation"], "reference")
        ours = terms.set_index("term")["pct_variation"]
        top_ours = ours.idxmax()
        for src, ref in reference.groupby("source", sort=False):
            ref = ref.set_index("term")["pct_variation"]
            top = ref.idxmax()
            # terms whose share's interval overlaps the largest one's are tied with it
            tied = [
                t
                for t in ours.index
                if t != top_ours
                and t in ci
                and top_ours in ci
                and np.isfinite(ci[t][1])
                and np.isfinite(ci[top_ours][0])
                and ci[t][1] >= ci[top_ours][0]
            ]
            if tied:
                firsts = [top_ours, *tied]
                s = (
                    f"{src}: the largest term was {term_label(top)} ({_pct(ref[top])}); here "
                    + " and ".join(
                        f"{term_label(t)} ({_share({'term': t, 'pct_variation': ours[t]}, ci)})"
                        for t in firsts
                    )
                    + " are tied (their intervals overlap: no largest term is resolved)"
                    + (
                        f", {term_label(top)} among them."
                        if top in firsts
                        else f", {term_label(top)} not among them."
                    )
                )
            else:
                s = (
                    f"{src}: the largest term was {term_label(top)} ({_pct(ref[top])}); here it is "
                    f"{term_label(top_ours)} ({_pct(ours[top_ours])})"
                    + (", the same." if top == top_ours else ", a different one.")
                )
            if focus is not None:
                listed = [t for t in ref.index if focus in t.split(":")]
                here = float(ours[[t for t in ours.index if focus in t.split(":")]].sum())
                if listed:
                    there = _pct(float(ref[listed].sum()))
                else:  # the paper lists only its influential terms: absent is not 0 %
                    there = (
                        f"none listed (together at most {_pct(max(0.0, 100 - float(ref.sum())))}, "
                        "what the listed terms leave)"
                    )
                s += f" Terms with {term_label(focus)}: {there} there, {_pct(here)} here."
            missing = [t for t in ref.index if t in ours.index and ref[t] >= 5 and t not in sig]
            if missing:
                s += (
                    " Reported there with >= 5 % but not significant here (after the correction): "
                    + ", ".join(term_label(t) for t in missing)
                    + "."
                )
            out.reference.append(s)
    return out
