"""How a conclusion is earned (docs/conclusions.md; docs/design.md, "Decision rules").

* :class:`Policy`: the rules of one analysis: ``alpha``, the practical threshold the design
  declares (``practical:``, or ``labkit analyze --practical``) and the family correction
  (``family:``, Holm by default; ``none`` allowed and said). :func:`policy_for` reads them from a
  store's metadata.
* :func:`decide_terms`: every term of an effects or ANOVA table decided by
  :func:`labkit.stats.decide`: ``matters`` (significant after the correction and at least the
  threshold), ``does not matter`` (its interval inside ±threshold), ``negligible`` (significant,
  below the threshold), ``not resolved at this n`` (with the runs that would resolve it).
* :func:`suspect_association`: are the runs the telemetry flags suspect concentrated on one
  level of a factor? :func:`empty_cells`: configurations left with no clean run.
* :func:`baseline_table`: each level of a factor against a baseline level, per configuration of
  the other factors: ratio with its interval and the equivalence verdict (TOST) against a margin.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..design.decision import FAMILIES, check_family, practical_rule
from ..errors import ConfigError
from ..stats import Rules, adjust_p, decide, equivalence
from ..stats.equivalence import family_verdicts

__all__ = ["Policy", "baseline_table", "decide_terms", "empty_cells", "policy_for", "suspect_association"]

_FAMILY_NAMES = {"holm": "Holm", "bonferroni": "Bonferroni", "bh": "Benjamini-Hochberg"}


@dataclass(frozen=True)
class Policy:
    """The rules a conclusion is held to (:class:`labkit.stats.Rules` plus ``family="none"``).

    ``alpha``; ``practical`` (a fraction of the response's mean with ``practical_of="mean"``, of
    the total variation with ``"variation"``; None: none declared, then significance alone
    decides and nothing is ever said not to matter); ``family``: ``holm``, ``bonferroni``,
    ``bh`` or ``none`` (each term its own family, said in every conclusion). ConfigError for any
    other value (through :class:`labkit.stats.Rules`)."""

    alpha: float = 0.05
    practical: float | None = None
    practical_of: str = "mean"
    family: str = "holm"

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ConfigError(f"family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        self.rules()

    def rules(self) -> Rules:
        """The :class:`labkit.stats.Rules` (Holm standing in for "none": applied term by term)."""
        return Rules(
            alpha=self.alpha,
            practical=self.practical,
            practical_of=self.practical_of,
            family="holm" if self.family == "none" else self.family,
        )

    def correction(self, terms: int, what: str = "term") -> str:
        """``"Holm over 31 terms"`` (or "no family correction (family: none; 31 terms each
        tested alone)")."""
        many = f"{terms} {what}{'s' * (terms != 1)}"
        if self.family == "none":
            return f"no family correction (family: none; {many} each tested alone)"
        return f"{_FAMILY_NAMES[self.family]} over {many}"

    def threshold_text(self) -> str:
        """``"practical ≥ 5 % of the mean"`` or ``"no practical threshold declared: significance
        only"``."""
        if self.practical is None:
            return "no practical threshold declared: significance only"
        return f"practical ≥ {100 * self.practical:g} % of the {self.practical_of}"

    def describe(self, terms: int, what: str = "term") -> str:
        """The rules in words: ``"Holm over 31 terms, α = 0.05, practical ≥ 5 % of the mean"``."""
        return f"{self.correction(terms, what)}, α = {self.alpha:g}, {self.threshold_text()}"


def policy_for(
    meta: dict | None, *, alpha: float = 0.05, practical: object = None, family: str | None = None
) -> Policy:
    """The :class:`Policy` of a campaign: ``practical`` (a number, ``{share_of_variation: P}``, or
    a text such as ``"0.05"``/``"variation=1"``) and ``family`` override what the stored design
    (``meta["design"]``) declares; ``alpha`` as given. ConfigError for bad values."""
    design = (meta or {}).get("design") or {}
    raw = practical if practical is not None else design.get("practical")
    rule = practical_rule(raw, "practical")
    fam = check_family(family if family is not None else design.get("family"), "family") or "holm"
    return Policy(
        alpha=float(alpha),
        practical=None if rule is None else rule[0],
        practical_of="mean" if rule is None else rule[1],
        family=fam,
    )


def _components(runs: pd.DataFrame, term: str, response: str) -> float:
    """The range (max - min) of a term's component of the cell means: for a main effect the range
    of its level means, for an interaction its inclusion-exclusion contrast (cell mean minus the
    lower-order marginal means, alternating signs), in the response's unit."""
    fs = term.split(":")
    cells = runs.groupby(fs, observed=True)[response].mean()
    total = pd.Series(0.0, index=cells.index)
    for k in range(len(fs) + 1):
        for sub in itertools.combinations(fs, k):
            sign = (-1) ** (len(fs) - k)
            if not sub:
                total += sign * float(cells.mean())
                continue
            marg = cells.groupby(level=list(sub), observed=True).mean()
            key = (
                cells.index.droplevel([f for f in fs if f not in sub]) if len(sub) < len(fs) else cells.index
            )
            total += sign * marg.reindex(key).to_numpy(float)
    return float(total.max() - total.min())


def decide_terms(
    effects: pd.DataFrame, policy: Policy, *, runs: pd.DataFrame | None = None, response: str | None = None
) -> pd.DataFrame:
    """``effects`` (a factorial effects table with ``q``/``effect``/``ci_low``/``ci_high`` of q,
    or an ANOVA table with ``pct_variation``) with each term decided by ``policy``
    (:func:`labkit.stats.decide`).

    The size a term is held to: with a practical threshold of the mean, the effect (2q, the
    change from the low to the high level) against ``practical``·|mean| with the effect's
    interval; of the variation, q against sqrt(practical·SST/n) (SS = n·q², so the test is the
    share of variation against ``practical``), with q's interval. An ANOVA term has no interval:
    its size is the range of its component of the cell means (mean) or sqrt(share) (variation),
    and it is never shown not to matter. ``runs`` (one row per run with ``response``) gives the
    mean and n.

    Returns a copy of ``effects`` with ``size`` (the size compared), ``p_adjusted``,
    ``threshold`` (in the size's unit), ``verdict`` and ``runs_to_resolve`` (NaN where no
    interval says), in the same rows; ``attrs`` as ``effects`` plus ``rules`` (the rules in
    words), ``family`` (terms corrected over), ``policy`` and ``threshold``.
    """
    response = response or effects.attrs.get("response")
    fam = (
        ~effects["term"].isin(["I", "error"]) & np.isfinite(effects["p"].to_numpy(float, na_value=np.nan))
        if "p" in effects.columns
        else pd.Series(False, index=effects.index)
    )
    out = effects.copy()
    m = int(fam.sum())
    if m == 0:
        for c in ("size", "p_adjusted", "threshold", "runs_to_resolve"):
            out[c] = np.nan
        out["verdict"] = None
        out.attrs.update(rules=policy.describe(0), family=0, policy=policy, threshold=np.nan)
        return out
    y = runs[response].to_numpy(float) if runs is not None and response in runs.columns else None
    n = len(y) if y is not None else int(effects.attrs.get("n") or 0) or None
    mean = (
        float(np.mean(y))
        if y is not None
        else (
            float(effects.loc[effects.term == "I", "q"].iloc[0])
            if "q" in effects.columns and (effects.term == "I").any()
            else None
        )
    )
    has_q = (
        "q" in effects.columns
        and "ci_low" in effects.columns
        and np.isfinite(effects.loc[fam, "q"].to_numpy(float)).all()
    )
    work = pd.DataFrame({"term": effects["term"], "p": effects["p"] if "p" in effects.columns else np.nan})
    kw: dict = {}
    if has_q and policy.practical_of == "mean":
        work["size"] = 2 * effects["q"]
        work["lo"], work["hi"] = 2 * effects["ci_low"], 2 * effects["ci_high"]
        kw = {"mean": mean, "n": n}
    elif has_q:
        q = effects.loc[fam, "q"].to_numpy(float)
        pct = effects.loc[fam, "pct_variation"].to_numpy(float)
        ok = pct > 0
        sst_n = float(np.median(100 * q[ok] ** 2 / pct[ok])) if ok.any() else 1.0
        work["size"] = effects["q"]
        work["lo"], work["hi"] = effects["ci_low"], effects["ci_high"]
        kw = {"n": n, "sst": sst_n * (n or 1)}
    else:  # ANOVA: no interval
        if policy.practical_of == "variation":
            work["size"] = np.sqrt(effects["pct_variation"].to_numpy(float) / 100)
            kw = {"n": n or 1, "sst": float(n or 1)}
        else:
            sizes = [
                (_components(runs, t, response) if f and runs is not None else np.nan)
                for t, f in zip(effects["term"], fam)
            ]
            work["size"] = sizes
            kw = {"mean": mean, "n": n}
        work["lo"], work["hi"] = np.nan, np.nan
    if policy.practical is None or policy.practical_of != "mean":
        kw.pop("mean", None)
    rules = policy.rules()
    if policy.family == "none":  # each term its own family of one
        parts = []
        for i in work.index[fam]:
            one = decide(work.loc[[i]], rules, estimate="size", ci_low="lo", ci_high="hi", **kw)
            parts.append(one)
        decided = pd.concat(parts)
        threshold = float(decided["threshold"].iloc[0])
    else:
        decided = decide(work, rules, estimate="size", ci_low="lo", ci_high="hi", **kw)
        threshold = float(decided.loc[fam, "threshold"].iloc[0])
    for c in ("p_adjusted", "threshold", "verdict", "runs_to_resolve"):
        out[c] = (
            decided[c].reindex(out.index) if c != "verdict" else decided[c].reindex(out.index).astype(object)
        )
    out["size"] = work["size"]
    runs_col = out["runs_to_resolve"].to_numpy(float)
    out["runs_to_resolve"] = np.where(np.isfinite(runs_col), runs_col, np.nan)
    out["verdict"] = out["verdict"].where(fam, None)
    # a size that could not be measured (an ANOVA interaction without runs) is not "negligible"
    unsized = fam & ~np.isfinite(out["size"].to_numpy(float)) & (out["p_adjusted"] < policy.alpha)
    out.loc[unsized, "verdict"] = "matters" if policy.practical is None else "not resolved at this n"
    out.attrs.update(rules=policy.describe(m), family=m, policy=policy, threshold=threshold)
    return out


def suspect_association(
    runs: pd.DataFrame, factors: Sequence[str], *, alpha: float = 0.05, family: str = "holm"
) -> pd.DataFrame:
    """Are the suspect runs concentrated on one level of a factor? One row per factor of
    ``factors`` with at least 2 levels, from ``runs`` (one row per run, a boolean ``suspect``).

    The test: Fisher's exact test of the 2 × 2 table suspect × level for a two-level factor
    (scipy's ``fisher_exact``), the chi-square test of independence otherwise
    (``chi2_contingency``); corrected over the factors by ``family`` (Holm by default; "none":
    none). A factor is ``confounded`` when the corrected p is below ``alpha``: the suspect runs
    fall on some levels more than chance would put them, so a difference between those levels
    may be the disturbance rather than the factor.

    Columns: ``factor``, ``test`` ("fisher" or "chi2"), ``p``, ``p_adjusted``, ``confounded``,
    ``level`` (the level holding the largest share of the suspect runs), ``suspect_there`` (suspect
    runs on it), ``suspect`` (all suspect runs), ``runs_there`` (runs on it), ``runs`` (all runs).
    Empty (these columns) when no run is suspect.
    """
    cols = [
        "factor",
        "test",
        "p",
        "p_adjusted",
        "confounded",
        "level",
        "suspect_there",
        "suspect",
        "runs_there",
        "runs",
    ]
    s = runs["suspect"].astype(bool)
    rows = []
    if s.any():
        for f in factors:
            tab = pd.crosstab(runs[f], s)
            if len(tab) < 2 or tab.shape[1] < 2:
                continue
            if len(tab) == 2:
                p = float(sps.fisher_exact(tab.to_numpy())[1])
                test = "fisher"
            else:
                p = float(sps.chi2_contingency(tab.to_numpy())[1])
                test = "chi2"
            share = tab[True] / tab[True].sum()
            level = share.idxmax()
            rows.append(
                {
                    "factor": f,
                    "test": test,
                    "p": p,
                    "level": level,
                    "suspect_there": int(tab.loc[level, True]),
                    "suspect": int(s.sum()),
                    "runs_there": int(tab.loc[level].sum()),
                    "runs": len(runs),
                }
            )
    out = pd.DataFrame(rows, columns=[c for c in cols if c not in ("p_adjusted", "confounded")])
    if len(out):
        ps = out["p"].to_numpy(float)
        out["p_adjusted"] = ps if family == "none" else adjust_p(ps, method=family)
        out["confounded"] = out["p_adjusted"] < alpha
    else:
        out["p_adjusted"], out["confounded"] = pd.Series(dtype=float), pd.Series(dtype=bool)
    out = out[cols]
    out.attrs.update(alpha=alpha, family=family)
    return out


def empty_cells(runs: pd.DataFrame, factors: Sequence[str]) -> pd.DataFrame:
    """The configurations (rows of the ``factors``' levels) all of whose runs are suspect, with
    ``runs`` (how many). Columns: the factors, ``runs``."""
    g = runs.groupby(list(factors), observed=True, sort=True)["suspect"]
    tab = pd.DataFrame({"all": g.all(), "runs": g.size()}).reset_index()
    return tab.loc[tab["all"].astype(bool), [*factors, "runs"]].reset_index(drop=True)


def baseline_table(
    runs: pd.DataFrame,
    *,
    response: str,
    factor: str,
    baseline: object,
    factors: Sequence[str],
    margin: float | None,
    alpha: float = 0.05,
    family: str = "holm",
) -> pd.DataFrame:
    """Each level of ``factor`` against ``baseline``, per configuration of the other ``factors``
    (one row each, when both sides have 2 runs or more): Welch's difference and TOST
    (:func:`labkit.stats.equivalence`, ``margin`` a fraction of the baseline's mean), the
    p-values corrected over the rows by ``family`` (Holm by default) and the verdict read from
    the corrected p-values (``equivalent``, ``different``, ``negligible difference``,
    ``inconclusive``). Without a ``margin`` there is no equivalence test: the verdict is
    ``different`` or ``not shown different``.

    Columns: the other factors, ``level``, ``n``, ``n_base``, ``mean``, ``mean_base``, ``ratio``
    (mean / mean_base), ``ratio_low``, ``ratio_high`` (the difference's 1 - 2·alpha interval over
    the baseline mean, the interval TOST reads; 1 - alpha without a margin), ``p_diff``,
    ``p_diff_adj``, ``p_tost``, ``p_tost_adj`` (NaN without a margin), ``verdict``.
    ConfigError when ``baseline`` is not a level of ``factor`` or no row can be tested."""
    if factor not in runs.columns:
        raise ConfigError(f"--baseline: no factor {factor!r}; factors: {', '.join(map(str, factors))}")
    levels = list(pd.unique(runs[factor]))
    match = [lv for lv in levels if str(lv) == str(baseline)]
    if not match:
        raise ConfigError(
            f"--baseline {factor}={baseline}: not a level of {factor} (levels: {', '.join(map(str, levels))})"
        )
    base = match[0]
    others = [f for f in factors if f != factor]
    groups = runs.groupby(others, observed=True, sort=True) if others else [((), runs)]
    rows = []
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        b = part.loc[part[factor] == base, response].to_numpy(float)
        for lv in levels:
            if lv == base:
                continue
            a = part.loc[part[factor] == lv, response].to_numpy(float)
            if len(a) < 2 or len(b) < 2 or np.var(a) + np.var(b) == 0:
                continue
            mb = float(np.mean(b))
            row = dict(zip(others, key))
            if margin is not None:
                e = equivalence(a, b, margin=margin, relative=True, alpha=alpha).iloc[0]
                lo, hi, p_diff, p_tost = e.ci_low, e.ci_high, e.p_diff, e.p_tost
            else:
                t = sps.ttest_ind(a, b, equal_var=False)
                va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
                df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
                half = float(sps.t.ppf(1 - alpha / 2, df) * np.sqrt(va + vb))
                d = float(np.mean(a)) - mb
                lo, hi, p_diff, p_tost = d - half, d + half, float(t.pvalue), np.nan
            row.update(
                level=lv,
                n=len(a),
                n_base=len(b),
                mean=float(np.mean(a)),
                mean_base=mb,
                ratio=float(np.mean(a)) / mb if mb else np.nan,
                ratio_low=1 + lo / mb if mb else np.nan,
                ratio_high=1 + hi / mb if mb else np.nan,
                p_diff=p_diff,
                p_tost=p_tost,
            )
            rows.append(row)
    if not rows:
        raise ConfigError(
            f"--baseline {factor}={baseline}: no configuration has 2 runs or more of "
            f"both {factor}={baseline} and another level"
        )
    out = pd.DataFrame(rows)

    p_tost_adj, p_diff_adj, verdicts = family_verdicts(
        out["p_tost"], out["p_diff"], alpha=alpha, method=family
    )
    out["p_diff_adj"], out["p_tost_adj"] = p_diff_adj, p_tost_adj
    if margin is not None:
        out["verdict"] = verdicts
    else:
        out["verdict"] = np.where(out["p_diff_adj"] < alpha, "different", "not shown different")
    out = out[
        [
            *others,
            "level",
            "n",
            "n_base",
            "mean",
            "mean_base",
            "ratio",
            "ratio_low",
            "ratio_high",
            "p_diff",
            "p_diff_adj",
            "p_tost",
            "p_tost_adj",
            "verdict",
        ]
    ]
    out.attrs.update(
        factor=factor, baseline=base, margin=margin, alpha=alpha, family=family, response=response
    )
    return out
