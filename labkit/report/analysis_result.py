"""What one campaign's analysis found: :class:`Analysis` (:func:`labkit.report.analysis.analyze`
returns it), with its design in words, the explorer's Markdown and the figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from ..stats.diagnostics import Diagnostics
from ..stats.error_terms import LevelEffects
from .conclude import Conclusions
from .decisions import Policy
from .escape import escape_md
from .level_analysis import LevelDesign
from .tables import count_words

if TYPE_CHECKING:
    from ..run.runlength import RunLength

__all__ = ["Analysis"]


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
        listed = (
            "; ".join(
                f"{name} ({', '.join(map(str, levels)) if isinstance(levels, list) else levels})"
                for name, levels in factors.items()
            )
            if isinstance(factors, dict)
            else str(factors)
        )
        return (
            f"{design.get('name', '')}: factors {listed}, "
            f"{design.get('replications')} replications, seed {design.get('seed')}; "
            f"backend {self.meta.get('backend')}, workload "
            f"{(self.meta.get('workload') or {}).get('name')}; runs: " + count_words(self.status)
        )

    def markdown(self) -> dict[str, str]:
        """The explorer's Markdown, every value from the store escaped with :func:`escape_md`:
        ``title`` (a heading: campaign, response, factors), ``design`` (:meth:`design_text`),
        ``effects`` (the heading of the effects table) and ``conclusions``."""
        effects = {
            "factorial": "Effects (2^k factorial, Jain)",
            "anova": "ANOVA (type 2)",
            "levels": "Effects, each tested against the level it varies across",
            "none": "Effects: none can be computed (see the conclusions)",
        }[self.kind]
        return {
            "title": f"## {escape_md(self.campaign)}: {escape_md(self.response)} on "
            f"{escape_md(', '.join(map(str, self.factors)))}",
            "design": f"**Design**: {escape_md(self.design_text())}",
            "effects": f"**{escape_md(effects)}**",
            "conclusions": "**Conclusions**\n\n" + self.conclusions.markdown(),
        }

    def figures(self, alpha: float = 0.05) -> dict:
        """name -> Figure: pareto (factorial, unless one factor without replications), main_effects, interactions (>= 2 factors),
        run_order and qq (when residuals exist). Levels are drawn in the design's declared order
        (``level_order``), else in the effects' coding (low level first), else sorted."""
        from . import plots

        figs = {}
        levels = {**(self.effects.attrs.get("levels") or {}), **self.level_order}
        if self.kind in ("factorial", "levels") and (
            len(self.factors) >= 2 or self.diagnostics is not None or self.kind == "levels"
        ):
            figs["pareto"] = plots.pareto(self.effects, diagnostics=self.diagnostics)
        figs["main_effects"] = plots.main_effects(
            self.runs, self.factors, self.response, alpha=alpha, levels=levels
        )
        if len(self.factors) >= 2:
            figs["interactions"] = plots.interactions(
                self.runs, self.factors, self.response, alpha=alpha, levels=levels
            )
        hue = self.factors[0] if self.runs[self.factors[0]].nunique() <= 8 else None
        figs["run_order"] = plots.run_order(self.runs, self.response, hue=hue, levels=levels)
        if self.diagnostics is not None and self.diagnostics.normal is not None:
            figs["qq"] = plots.qq(self.diagnostics, alpha=alpha)
        return figs
