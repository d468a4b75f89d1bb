"""One campaign's analysis: :func:`analyze` (from a store) and :func:`analyze_results` (from a
tidy table) fit the design (:mod:`labkit.report.design_fit`), decide its terms, check the
measurement's levels, run order and suspect runs (:mod:`labkit.report.robustness`), and return an
:class:`~labkit.report.analysis_result.Analysis` with the conclusions in words."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..errors import ConfigError, did_you_mean
from ..stats import validate as v
from .adaptive import adaptive_pilot, stein_summary
from .analysis_result import Analysis
from .conclude import Conclusions, conclusions
from .decisions import policy_for
from .declared import declared_levels, sorted_as_declared
from .design_fit import fit_design
from .order import order_sentences
from .robustness import suspect_sentences, telemetry_table, treatment_hook

__all__ = ["Analysis", "analyze", "analyze_results"]


def analyze(
    data_dir: str | Path,
    campaign: str,
    *,
    response: str | None = None,
    factors: Sequence[str] | None = None,
    alpha: float = 0.05,
    focus: str | None = None,
    reference: pd.DataFrame | None = None,
    n_boot: int = 1000,
    hosts: str = "block",
    practical: object = None,
    family: str | None = None,
) -> Analysis:
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
    from ..store import Store
    from .catalog import require_campaign

    path = Path(data_dir) / require_campaign(data_dir, campaign) / "store.sqlite"
    with Store(path, readonly=True) as st:  # the runs read once, only what the analysis reads
        meta, fps = st.meta(), st.fingerprints()
        tidy, stored = st.analysis_tables()
    found = analyze_results(
        tidy,
        meta=meta,
        campaign=campaign,
        fingerprints=fps,
        runs=stored,
        response=response,
        factors=factors,
        alpha=alpha,
        focus=focus,
        reference=reference,
        n_boot=n_boot,
        hosts=hosts,
        practical=practical,
        family=family,
    )
    from ..run.runlength import run_length_of

    found.run_length = run_length_of(tidy, stored, meta)  # runs too short to time, counted
    return found


def analyze_results(
    tidy: pd.DataFrame,
    *,
    meta: dict | None = None,
    campaign: str | None = None,
    fingerprints: dict | None = None,
    runs: pd.DataFrame | None = None,
    response: str | None = None,
    factors: Sequence[str] | None = None,
    alpha: float = 0.05,
    focus: str | None = None,
    reference: pd.DataFrame | None = None,
    n_boot: int = 1000,
    hosts: str = "block",
    practical: object = None,
    family: str | None = None,
) -> Analysis:
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
        response, _ = primary_response(meta, tidy)  # the declared response, never a constant
        if response is None:
            if not metrics:
                raise ConfigError(f"campaign {campaign!r} has no measurement to analyse")
            response = metrics[0]
    elif response not in metrics:
        raise ConfigError(
            f"campaign {campaign!r} has no metric {response!r}"
            f"{did_you_mean(response, metrics)}; metrics: {', '.join(map(str, metrics))}"
        )
    if factors is None:
        factors = [f for f in design_factors if tidy[f].nunique() > 1]
    factors = v.names(factors, "factors")
    unknown = [f for f in factors if f not in design_factors and f not in tidy.columns]
    if unknown:
        raise ConfigError(
            f"campaign {campaign!r} has no factor {unknown[0]!r}"
            f"{did_you_mean(unknown[0], design_factors)}; factors: "
            f"{', '.join(map(str, design_factors))}"
        )
    v.columns(tidy, factors, "factors")
    # the design's level order (noise: [none, memory] reads "from none to memory"), kept by every
    # analysis, table and figure below; None when the design declares none of the factors
    order = declared_levels(meta, factors, tidy)
    levels = order or None
    obs, cut = observations(tidy, response, factors)
    runs_table = runs_of(obs, response, factors)
    summary = sorted_as_declared(
        summarize(runs_table, by=factors, response=response, alpha=alpha), factors, order
    )
    quantiles = sorted_as_declared(
        quantile_summary(runs_table, by=factors, response=response, confidence=1 - alpha), factors, order
    )
    plan = level_design(obs, factors, hosts=hosts)
    kind, effects, fit, note, diag, variation, why = fit_design(
        obs, runs_table, response, factors, plan, levels=levels, alpha=alpha, n_boot=n_boot
    )
    effects.attrs.setdefault("response", response)
    try:
        drift = drift_segments(
            runs_table, response=response, order="run_seq", by="host", factors=factors, alpha=alpha
        )
    except ConfigError:
        drift = None
    checks = drift_sentences(drift, response) if drift is not None else []
    try:
        order_check = order_effects(
            runs_table, response=response, factors=factors, order="run_seq", by="host", alpha=alpha
        )
    except ConfigError:
        order_check = None
    checks += order_sentences(order_check, response) if order_check is not None else []
    cut_text = warmup_sentence(cut)
    checks += [cut_text] if cut_text else []
    adaptive = adaptive_pilot(meta)
    if adaptive:
        summary = stein_summary(
            summary, runs_table, by=factors, response=response, pilot=adaptive, confidence=1 - alpha
        )
        quantiles = stein_summary(
            quantiles, runs_table, by=factors, response=response, pilot=adaptive, confidence=1 - alpha
        )
        checks.append(
            f"Adaptive stopping: Stein's two-stage interval for each configuration's mean "
            f"(the standard deviation of the first {adaptive} runs, which the decision to "
            f"stop did not pick; the fixed-n interval covers less than its level after "
            f"adaptive stopping)."
        )
    untaken = treatment_hook(tidy, runs, factors)
    if why:
        shown = "The effects table is shown without tests; the" if kind == "factorial" else "The"
        concl = Conclusions(
            headline="",
            findings=[
                f"No test of significance or share of variation can be computed from these "
                f"{len(runs_table)} runs ({why}). {shown} summary per configuration and the figures are "
                f"descriptive only; replicate the design to test the factors.",
                f"Decision rules: {policy.describe(0)}: nothing is concluded.",
            ],
            assumptions=checks,
        )
    else:
        concl = conclusions(
            effects,
            diagnostics=diag,
            variation=variation,
            rules=policy,
            runs=runs_table,
            focus=focus if focus in factors else None,
            reference=reference,
            error_term=error_term_sentences(kind, plan, effects, fit, note=note),
            checks=checks,
            not_concluded=untaken,
        )
    from ..run.telemetry import measurement_notes

    notes = measurement_notes(runs)  # never "none flagged" for runs that were never measured
    telemetry = telemetry_table(runs, runs_table, notes)
    concl.suspect = suspect_sentences(
        runs_table,
        obs,
        response,
        factors,
        plan,
        policy,
        concl,
        levels=levels,
        n_boot=n_boot,
        why=why,
        focus=focus,
        watched=telemetry is not None,
    )
    if any(n.startswith("telemetry off") for n in notes):
        concl.suspect = [s for s in concl.suspect if not s.startswith("Suspect runs: none of")]
    concl.suspect = [f"Not measured: {n}." for n in notes] + list(concl.suspect)
    runs_out = runs_table[["run_id", "replicate", *factors, response, "run_order"]]
    return Analysis(
        campaign,
        response,
        factors,
        meta,
        status,
        runs_out,
        summary,
        kind,
        effects,
        diag,
        variation,
        concl,
        fingerprint_table(fingerprints or {}),
        observations=obs,
        level_design=plan,
        levels=fit,
        quantiles=quantiles,
        drift=drift,
        warmup=cut,
        telemetry=telemetry,
        level_order=dict(order),
        order_effects=order_check,
        policy=policy,
        suspect_runs=runs_table.loc[
            runs_table["suspect"].astype(bool), ["run_id", *factors, "host", "suspect_reason"]
        ].reset_index(drop=True),
    )
