"""labkit's statistics layer: long-format DataFrames in, tidy DataFrames out.

* 2^k·r factorial designs (Jain's allocation of variation, effects, CIs):
  :func:`factorial_effects`, :func:`blocked_effects` (blocks out of the error), :func:`factorial_residuals`,
  :func:`factorial_diagnostics`, :func:`yates_terms`; unreplicated designs:
  :func:`lenth`.
* Multi-level or unbalanced designs: :func:`anova` (cell means when balanced, else statsmodels),
  :func:`oneway_anova`, :func:`tukey_hsd`.
* Random levels (hosts, instances): :func:`mixed_effects` (REML, variance components);
  :func:`level_effects` tests each factor against the level it varies across (EMS or REML),
  :func:`unit_means`, :func:`constant_within`.
* Tests: :func:`ttest`, :func:`ttest_by`, :func:`shapiro`, :func:`shapiro_by`.
* Description: :func:`summarize` (per-configuration mean and CI), :func:`quantile_summary`
  (median, p95, p99 with distribution-free intervals beside the mean), :func:`cv_ci`
  (coefficient of variation, Vangel's interval).
* When assumptions fail: :func:`levene` (Brown-Forsythe), :func:`welch_anova`,
  :func:`games_howell`, :func:`mann_whitney`, :func:`brunner_munzel`,
  :func:`kruskal`, :func:`dunn`, :func:`art_anova` (aligned rank transform),
  :func:`boxcox`; :func:`compare_groups` checks and chooses.
* Intervals by run: :func:`bootstrap_ci` (resamples whole runs), :func:`ratio_ci`
  (ratio of means, e.g. overhead of A over B: Fieller or bootstrap).
* How many runs: :func:`sample_size` (per configuration, for a target CI half-width),
  :func:`n_for_halfwidth`, :func:`n_for_power`, :func:`detectable_effect` (the minimum
  detectable effect of a design); adaptive replication: :mod:`labkit.run.adaptive`;
  per level (instances, runs, iterations) at least cost: :func:`runs_needed`,
  :func:`plan_repetitions`, :func:`kj_estimators` (Kalibera & Jones).
* Campaign against campaign: :func:`config_differences`, :func:`drift_test`,
  :func:`pettitt`, :func:`changepoint` (each with a minimum practical effect).
* Cost: :func:`cost_efficiency` (executions per hour per price per hour).
* Families of tests: :func:`adjust_p`, :func:`correct` (Holm, Bonferroni, BH).
* Decisions: :func:`equivalence`, :func:`equivalence_paired` (TOST: equivalent, different,
  negligible difference, inconclusive); :class:`Rules` and :func:`decide` (family correction
  and practical threshold: matters, does not matter, negligible, not resolved at this n);
  :func:`order_effects` (trend and carry-over in each host's run order).
* Effect sizes: :func:`hedges_g`, :func:`effect_sizes` (omega², partial eta² with CI).
* Quantiles, drift, warm-up: :func:`quantile_ci` (exact order-statistic interval
  or one-sided bound), :func:`runs_for_quantile` (the runs a bound needs, TriScale),
  :func:`change_points` (level changes in a series), :func:`drift_segments` (each host's run-order
  residuals cut at its changes), :func:`warmup` (MSER-5 truncation).

Calls: the data is positional, every other argument keyword-only --
``anova(data, response="rps", factors=["vcpus", "affinity"])``,
``config_differences(a, b, response=..., factors=...)`` (two frames), ``ttest(a, b, alpha=...)``
(two samples); an old positional call (``anova(data, "rps", factors)``) is a TypeError.

Conventions (docs/design.md, "Statistics conventions"): two-level factors coded
-1/+1, terms named ``"A:B"`` in Yates order, q and effect = 2q, SS_x = 2^k·r·q²,
pct_variation = 100·SS_x/SST with SST including error. Every function
validates its input and raises :class:`labkit.errors.ConfigError` naming the
argument or column at fault.
"""

from .anova import anova, oneway_anova, tukey_hsd
from .art import art_aligned, art_anova
from .blocking import blocked_effects
from .bootstrap import FewRunsWarning, bootstrap_ci, ratio_ci
from .choose import Choice, compare_groups
from .compare import changepoint, config_differences, drift_test, pettitt
from .cost import cost_efficiency
from .diagnostics import Diagnostics, factorial_diagnostics
from .drift import change_points, drift_segments
from .effectsize import effect_sizes, hedges_g
from .equivalence import equivalence, equivalence_paired
from .error_terms import LevelEffects, constant_within, level_effects, unit_means
from .factorial import factorial_effects, factorial_residuals, yates_terms
from .inference import shapiro, shapiro_by, ttest, ttest_by
from .lenth import LenthResult, lenth
from .mixed import MixedEffects, mixed_effects
from .multitest import adjust_p, correct
from .order import order_effects
from .overhead import fieller_ratio, overhead_ratios
from .quantile import quantile_ci, runs_for_quantile
from .repetition import kj_estimators, plan_repetitions, runs_needed
from .robust import brunner_munzel, dunn, games_howell, kruskal, levene, mann_whitney, welch_anova
from .rules import Rules, decide
from .samplesize import detectable_effect, n_for_halfwidth, n_for_power, sample_size, stein_ci
from .summary import cv_ci, quantile_summary, summarize
from .transform import boxcox, boxcox_transform
from .warmup import WarmupWarning, warmup

__all__ = [
    "WarmupWarning",
    "change_points",
    "quantile_ci",
    "runs_for_quantile",
    "warmup",  # quantiles
    "Rules",
    "decide",
    "equivalence",
    "equivalence_paired",
    "order_effects",  # decision rules
    "drift_segments",
    "quantile_summary",
    "cv_ci",
    "detectable_effect",
    "kj_estimators",
    "plan_repetitions",
    "runs_needed",  # repetitions per level
    "LevelEffects",
    "constant_within",
    "level_effects",
    "unit_means",  # the right error term
    "Choice",
    "Diagnostics",
    "FewRunsWarning",
    "LenthResult",
    "MixedEffects",
    "adjust_p",
    "anova",
    "art_aligned",
    "art_anova",
    "blocked_effects",
    "bootstrap_ci",
    "boxcox",
    "boxcox_transform",
    "brunner_munzel",
    "changepoint",
    "compare_groups",
    "config_differences",
    "correct",
    "cost_efficiency",
    "drift_test",
    "dunn",
    "effect_sizes",
    "factorial_diagnostics",
    "fieller_ratio",
    "factorial_effects",
    "factorial_residuals",
    "games_howell",
    "hedges_g",
    "kruskal",
    "lenth",
    "levene",
    "mann_whitney",
    "mixed_effects",
    "n_for_halfwidth",
    "n_for_power",
    "oneway_anova",
    "overhead_ratios",
    "pettitt",
    "ratio_ci",
    "sample_size",
    "stein_ci",
    "shapiro",
    "shapiro_by",
    "summarize",
    "ttest",
    "ttest_by",
    "tukey_hsd",
    "welch_anova",
    "yates_terms",
]
