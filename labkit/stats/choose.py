"""Check the assumptions of a one-factor comparison and run the test they allow.

Normality: Shapiro-Wilk in every group (Holm-corrected across groups).
Equal variances: Brown-Forsythe (:func:`levene`, median-centred). Then:

=========  ==========  ==============================  ====================================
normal     equal var   two groups                      three or more
=========  ==========  ==============================  ====================================
yes        yes         Student t                       ANOVA + Tukey HSD
yes        no          Welch t                         Welch ANOVA + Games-Howell
no         yes         Mann-Whitney U                  Kruskal-Wallis + Dunn (Holm)
no         no          Brunner-Munzel                  Kruskal-Wallis + Dunn (Holm), caveat
=========  ==========  ==============================  ====================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from . import validate as v
from .anova import oneway_anova, tukey_hsd
from .inference import shapiro_by, ttest
from .multitest import correct
from .robust import brunner_munzel, dunn, games_howell, kruskal, levene, mann_whitney, welch_anova

__all__ = ["Choice", "compare_groups"]


@dataclass(frozen=True, eq=False)
class Choice:
    """What :func:`compare_groups` checked, chose and found.

    ``test`` (name of the test run), ``reason`` (why, in words), ``table``
    (the omnibus or two-sample result), ``posthoc`` (pairwise table for
    three or more groups, else None), ``normality`` (:func:`shapiro_by` per
    group with Holm ``p_adj``), ``variances`` (:func:`levene`).
    """

    test: str
    reason: str
    table: pd.DataFrame = field(repr=False)
    posthoc: pd.DataFrame | None = field(repr=False)
    normality: pd.DataFrame = field(repr=False)
    variances: pd.DataFrame = field(repr=False)

    def __str__(self) -> str:
        return f"{self.test}: {self.reason}"


def compare_groups(data: pd.DataFrame, *, response: str, factor: str, alpha: float = 0.05) -> Choice:
    """Compare ``response`` across the levels of ``factor`` with the test the data allow.

    Returns a :class:`Choice` naming the test run and the reason.
    """
    alpha = v.alpha(alpha)
    levels, samples = v.groups(data, response, factor)
    sw = correct(shapiro_by(data, by=factor, response=response, alpha=alpha), alpha=alpha)
    bf = levene(data, response=response, factor=factor, alpha=alpha)
    untestable = sw["p"].isna()
    rejected = sw.loc[sw["reject"], factor].tolist()
    normal = not rejected
    equal = bool(bf["equal_var"].iloc[0]) if bf["equal_var"].iloc[0] is not pd.NA else True
    why = []
    if rejected:
        why.append(f"values are not normal in {rejected!r} (Shapiro-Wilk, Holm-corrected p <= {alpha})")
    else:
        why.append(
            "normality is not rejected in any group"
            + (
                f" ({sw.loc[untestable, factor].tolist()!r} too small or constant to test)"
                if untestable.any()
                else ""
            )
        )
    p_bf = bf["p"].iloc[0]
    why.append(
        f"variances are {'equal' if equal else 'unequal'} (Brown-Forsythe p = {p_bf:.3g})"
        if pd.notna(p_bf)
        else "variances cannot be compared"
    )
    posthoc = None
    if len(levels) == 2:
        x, y = samples
        if normal and equal:
            test, table = "student t-test", ttest(x, y, equal_var=True, alpha=alpha)
        elif normal:
            test, table = "welch t-test", ttest(x, y, alpha=alpha)
        elif equal:
            test, table = "mann-whitney U", mann_whitney(data, response=response, factor=factor)
        else:
            test, table = "brunner-munzel", brunner_munzel(data, response=response, factor=factor)
    elif normal and equal:
        test = "anova + tukey hsd"
        table = oneway_anova(data, response=response, factor=factor)
        posthoc = tukey_hsd(data, response=response, factor=factor, alpha=alpha)
    elif normal:
        test = "welch anova + games-howell"
        table = welch_anova(data, response=response, factor=factor)
        posthoc = games_howell(data, response=response, factor=factor, alpha=alpha)
    else:
        test = "kruskal-wallis + dunn (holm)"
        table = kruskal(data, response=response, factor=factor)
        posthoc = dunn(data, response=response, factor=factor, alpha=alpha)
        if not equal:
            why.append(
                "Kruskal-Wallis then tests stochastic dominance, not medians, since the spreads differ"
            )
    return Choice(test, "; ".join(why), table, posthoc, sw, bf)
