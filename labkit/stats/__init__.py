"""labkit's statistics layer: long-format DataFrames in, tidy DataFrames out.

* 2^k·r factorial designs (Jain's allocation of variation, effects, CIs):
  :func:`factorial_effects`, :func:`factorial_residuals`,
  :func:`factorial_diagnostics`, :func:`yates_terms`; unreplicated designs:
  :func:`lenth`.
* Multi-level or unbalanced designs: :func:`anova` (statsmodels),
  :func:`oneway_anova`, :func:`tukey_hsd`.
* Tests: :func:`ttest`, :func:`ttest_by`, :func:`shapiro`, :func:`shapiro_by`.
* Description: :func:`summarize` (per-configuration mean and CI).

Conventions (DESIGN.md, "Statistics conventions"): two-level factors coded
-1/+1, terms named ``"A:B"`` in Yates order, q and effect = 2q, SS_x = 2^k·r·q²,
pct_variation = 100·SS_x/SST with SST including error. Every function
validates its input and raises :class:`labkit.errors.ConfigError` naming the
argument or column at fault.
"""
from .anova import anova, oneway_anova, tukey_hsd
from .diagnostics import Diagnostics, factorial_diagnostics
from .factorial import factorial_effects, factorial_residuals, yates_terms
from .inference import shapiro, shapiro_by, ttest, ttest_by
from .lenth import LenthResult, lenth
from .summary import summarize

__all__ = ["Diagnostics", "LenthResult", "anova", "factorial_diagnostics", "factorial_effects",
           "factorial_residuals", "lenth", "oneway_anova", "shapiro", "shapiro_by",
           "summarize", "ttest", "ttest_by", "tukey_hsd", "yates_terms"]
from .overhead import fieller_ratio, overhead_ratios  # noqa: E402,F401
