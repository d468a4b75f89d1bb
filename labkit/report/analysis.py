"""One campaign's analysis: :func:`analyze` (from a store) and :func:`analyze_results` (from a
tidy table) fit the design, decide its terms, check the measurement's levels, run order and
suspect runs, and return an :class:`Analysis` with the conclusions in words."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..errors import ConfigError, did_you_mean
from ..stats import validate as v
from ..stats.diagnostics import Diagnostics
from ..stats.error_terms import LevelEffects
from .conclude import Conclusions, conclusions, decided_effects, focus_answer
from .decisions import Policy, policy_for
from .declared import declared_levels, sorted_as_declared
from .escape import escape_md
from .labels import term_label
from .level_analysis import LevelDesign
from .order import order_sentences
from .tables import count_words
from .variation import variation_ci

if TYPE_CHECKING:
    from ..run.runlength import RunLength

__all__ = ["Analysis", "analyze", "analyze_results", "stein_summary", "suspect_sentences", "treatment_hook"]


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
    host, instance, boot, run_seq, suspect: :func:`labkit.report.level_analysis.observations`),
    ``level_design`` (which levels are random, :func:`labkit.report.level_analysis.level_design`),
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
    #: the runs shorter than the workload's minimum (:mod:`labkit.run.runlength`; None: not judged)
    run_length: RunLength | None = None

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
                f"{(self.meta.get('workload') or {}).get('name')}; runs: " + count_words(self.status))

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

    The right error term by itself (issue 32, :mod:`labkit.report.level_analysis`): when runs share
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
    found = analyze_results(tidy, meta=meta, campaign=campaign, fingerprints=fps, runs=stored,
                            response=response, factors=factors, alpha=alpha, focus=focus,
                            reference=reference, n_boot=n_boot, hosts=hosts, practical=practical,
                            family=family)
    from ..run.runlength import run_length_of
    found.run_length = run_length_of(tidy, stored, meta)   # runs too short to time, counted
    return found


def _fit(obs: pd.DataFrame, runs_table: pd.DataFrame, response: str, factors: list, plan: LevelDesign, *,
         levels: v.Levels, alpha: float, n_boot: int, extras: bool = True) -> tuple:
    """The analysis the data allow (:func:`analyze`): ``(kind, effects, fit, note, diagnostics,
    variation, why)``; ``why`` says why no test is possible (or None). Without ``extras`` the
    residual diagnostics and the bootstrap shares are skipped (the analysis without the suspect
    runs needs the verdicts only)."""
    from ..stats import anova, blocked_effects, factorial_diagnostics, factorial_effects
    from .level_analysis import level_analysis
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
    from .level_analysis import (
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
    from ..run.telemetry import measurement_notes
    notes = measurement_notes(runs)   # never "none flagged" for runs that were never measured
    telemetry = _telemetry(runs, runs_table, notes)
    concl.suspect = suspect_sentences(runs_table, obs, response, factors, plan, policy,
                                      concl, levels=levels, n_boot=n_boot, why=why, focus=focus,
                                      watched=telemetry is not None)
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
    from .level_analysis import level_design
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


def _telemetry(stored: pd.DataFrame | None, runs_table: pd.DataFrame, notes: list[str]) -> pd.DataFrame | None:
    """One row per analysed run: run_id, run_order, host, run_seq, suspect, suspect_reason and the
    runs' telemetry summaries (:func:`labkit.run.telemetry.covariates`), or None without them;
    ``notes``: :func:`labkit.run.telemetry.measurement_notes` of ``stored``."""
    if stored is None or not len(stored) or "metadata" not in stored:
        return None
    from ..run.telemetry import covariates
    cov = covariates(stored)
    if len(cov.columns) <= 1:
        return None
    keep = ["run_id", "run_order", "host", "run_seq", "suspect", "suspect_reason"]
    out = runs_table[keep].merge(cov, on="run_id", how="left")
    # what was not measured ("telemetry off: psutil missing: suspect runs unknown"): never "0 flagged"
    out.attrs["unmeasured"] = [n for n in notes if n.startswith("telemetry off")]
    return out
