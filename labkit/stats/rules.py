"""Decision rules in one place: a family correction and a practical threshold decide every term.

docs/design.md, "Decision rules": a term *matters* only when it is significant after the
family's correction (Holm by default) *and* at least the practical threshold; it *does not
matter* only when its interval lies inside ±threshold (equivalence, Schuirmann's TOST read as
an interval); a significant term below the threshold is *negligible*; anything else is *not
resolved at this n*, with the runs that would resolve it. :class:`Rules` holds the rules,
:func:`decide` applies them to a tidy table of terms (e.g. :func:`labkit.stats.factorial_effects`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v
from .multitest import METHODS, adjust_p

__all__ = ["KINDS", "VERDICTS", "Rules", "decide"]

KINDS = ("mean", "variation")
VERDICTS = ("matters", "does not matter", "negligible", "not resolved at this n")
_FAMILY_NAMES = {"holm": "Holm", "bonferroni": "Bonferroni", "bh": "Benjamini-Hochberg"}


@dataclass(frozen=True)
class Rules:
    """The rules a conclusion is held to.

    * ``alpha``: the family's significance level (0 < alpha < 0.5).
    * ``practical``: the smallest effect that matters, or None (no threshold: nothing can be
      shown not to matter). With ``practical_of="mean"`` a fraction of the response's mean
      (0.05: a term matters from 5 % of the mean, in the estimate's unit); with
      ``practical_of="variation"`` a share of the total variation (0.01: a term matters from
      1 % of SST, Jain's percentage of variation / 100).
    * ``practical_of``: ``"mean"`` or ``"variation"`` (see ``practical``).
    * ``family``: the correction over the terms of one analysis: ``"holm"`` (default),
      ``"bonferroni"`` or ``"bh"`` (:func:`labkit.stats.adjust_p`).

    ConfigError on construction for any value outside these.
    """

    alpha: float = 0.05
    practical: float | None = None
    practical_of: str = "mean"
    family: str = "holm"

    def __post_init__(self) -> None:
        a = v.alpha(self.alpha)
        if a >= 0.5:
            raise ConfigError(f"Rules: alpha must be below 0.5, got {self.alpha!r}")
        if self.practical_of not in KINDS:
            raise ConfigError(
                f"Rules: practical_of must be 'mean' (a fraction of the response's "
                f"mean) or 'variation' (a share of SST), got {self.practical_of!r}"
            )
        p = self.practical
        if p is not None and (
            isinstance(p, bool)
            or not isinstance(p, (int, float, np.floating))
            or not math.isfinite(p)
            or not p > 0
            or (self.practical_of == "variation" and not p < 1)
        ):
            limit = "in (0, 1)" if self.practical_of == "variation" else "> 0"
            raise ConfigError(
                f"Rules: practical must be None or a number {limit} (a fraction of "
                f"the {self.practical_of}, 0.05 = 5 %), got {p!r}"
            )
        if self.family not in METHODS:
            raise ConfigError(
                f"Rules: family must be one of {', '.join(map(repr, METHODS))}, got {self.family!r}"
            )

    def describe(self, terms: int) -> str:
        """The rules in words: ``"Holm over 31 terms, α = 0.05, practical ≥ 5 % of the mean"``."""
        what = (
            "no practical threshold"
            if self.practical is None
            else f"practical ≥ {100 * self.practical:g} % of the "
            f"{'mean' if self.practical_of == 'mean' else 'variation'}"
        )
        return (
            f"{_FAMILY_NAMES[self.family]} over {terms} term{'s' * (terms != 1)}, α = {self.alpha:g}, {what}"
        )


def decide(
    table: pd.DataFrame,
    rules: Rules,
    *,
    estimate: str = "estimate",
    ci_low: str = "ci_low",
    ci_high: str = "ci_high",
    p: str = "p",
    term: str = "term",
    n: int | None = None,
    mean: float | None = None,
    sst: float | None = None,
) -> pd.DataFrame:
    """``table`` (one row per term) with the family correction and a verdict per term.

    The family is the rows with a finite ``p`` except the terms ``"I"`` (the mean) and
    ``"error"``. ``threshold``, the practical threshold in the estimate's unit, is
    ``practical·|mean|`` (``practical_of="mean"``; ``mean`` defaults to the ``estimate`` of the
    ``"I"`` row, the grand mean of a factorial table) or ``sqrt(practical·SST/n)``
    (``"variation"``: the estimate is Jain's q, whose sum of squares is ``n·q²`` in a balanced
    2^k·r design of ``n`` runs; ``sst``, ``n`` default to the table's ``attrs``), 0 without a
    practical threshold. The intervals ``ci_low``/``ci_high`` are read as 1 - alpha intervals.

    Verdicts (``significant``: ``p_adjusted < alpha``):

    * ``"matters"``: significant and ``|estimate| >= threshold``;
    * ``"negligible"``: significant and ``|estimate| < threshold``;
    * ``"does not matter"``: not significant and the interval inside ``(-threshold,
      threshold)`` (equivalence: a 1 - alpha interval inside the margin rejects both one-sided
      tests at alpha/2, so TOST at alpha, conservatively);
    * ``"not resolved at this n"``: the rest.

    ``runs_to_resolve`` (unresolved terms only) is the total runs at which, with the observed
    estimate and variance, the term would be resolved one way or the other. With ``h`` the
    half-width now, ``se = h / z(1 - alpha/2)`` and the standard error shrinking as
    ``1/sqrt(n)``: ``n_sig = n·(z(1 - alpha/(2m))·se / |estimate|)²`` (significant at the
    Bonferroni level of the ``m`` terms, Holm's strictest step) and ``n_eq = n·(h /
    (threshold - |estimate|))²`` (the interval inside ±threshold; only when ``|estimate| <
    threshold``); ``runs_to_resolve = ceil(min(n_sig, n_eq))``. A planning figure: it assumes
    the estimate stays where it is (normal quantiles; at small n the t quantile asks a few more).

    Returns a copy of ``table`` with the columns ``p_adjusted`` (the family's correction; NaN
    outside the family), ``threshold``, ``verdict`` (missing outside the family) and
    ``runs_to_resolve`` (NaN unless not resolved); ``attrs["rules"]`` the rules in words
    (:meth:`Rules.describe`: ``"Holm over 31 terms, α = 0.05, practical ≥ 5 % of the mean"``),
    ``attrs["family"]`` its size. ConfigError for a missing column, a non-Rules ``rules``, a
    missing ``mean``/``sst``/``n`` where the rules need it, and an empty family.
    """
    if not isinstance(rules, Rules):
        raise ConfigError(f"rules must be a labkit.stats.Rules, got {type(rules).__name__}")
    table = v.frame(table, "table")
    v.columns(table, [estimate, ci_low, ci_high, p], "columns")
    out = table.copy()
    pv = out[p].to_numpy(dtype=float, na_value=np.nan)
    fam = np.isfinite(pv)
    if term in out.columns:
        fam &= ~out[term].isin(["I", "error"]).to_numpy()
    m = int(fam.sum())
    if m == 0:
        raise ConfigError(f"decide: no term with a finite p-value in column {p!r}")
    n = n if n is not None else out.attrs.get("n")
    est = out[estimate].to_numpy(dtype=float, na_value=np.nan)
    if rules.practical is None:
        threshold = 0.0
    elif rules.practical_of == "mean":
        if mean is None and term in out.columns and (out[term] == "I").any():
            mean = float(out.loc[out[term] == "I", estimate].iloc[0])
        if mean is None or not np.isfinite(mean):
            raise ConfigError(
                "decide: a practical threshold of the mean needs mean= (the "
                "response's mean) or an 'I' row holding it"
            )
        threshold = rules.practical * abs(float(mean))
    else:
        sst = sst if sst is not None else out.attrs.get("sst")
        if sst is None or n is None:
            raise ConfigError(
                "decide: a practical threshold of the variation needs sst= and n= "
                "(or a factorial_effects table, whose attrs hold them)"
            )
        threshold = math.sqrt(rules.practical * float(sst) / int(n))
    adj = np.full(len(out), np.nan)
    adj[fam] = adjust_p(pv[fam], method=rules.family)
    low = out[ci_low].to_numpy(dtype=float, na_value=np.nan)
    high = out[ci_high].to_numpy(dtype=float, na_value=np.nan)
    size = np.abs(est)
    sig = adj < rules.alpha
    inside = (low > -threshold) & (high < threshold)
    verdict = np.where(
        sig & (size >= threshold),
        "matters",
        np.where(sig, "negligible", np.where(inside, "does not matter", "not resolved at this n")),
    )
    verdict = pd.Series(verdict, dtype=object).where(fam, None).to_numpy()
    runs = np.full(len(out), np.nan)
    todo = fam & (verdict == "not resolved at this n")
    if todo.any():
        if n is None:
            raise ConfigError("decide: runs_to_resolve needs n= (the runs behind the estimates)")
        h = (high - low) / 2
        se = h / sps.norm.ppf(1 - rules.alpha / 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            n_sig = int(n) * (sps.norm.ppf(1 - rules.alpha / (2 * m)) * se / size) ** 2
            n_eq = np.where(size < threshold, int(n) * (h / (threshold - size)) ** 2, np.inf)
        need = np.ceil(np.fmin(n_sig, n_eq))
        runs[todo] = need[todo]
    out["p_adjusted"] = adj
    out["threshold"] = np.where(fam, threshold, np.nan)
    out["verdict"] = verdict
    out["runs_to_resolve"] = runs
    out.attrs.update(rules=rules.describe(m), family=m, alpha=rules.alpha)
    return out
