"""Equivalence of two conditions: Schuirmann's two one-sided tests (TOST) beside the usual test.

"Not significantly different" is not "the same": a wide interval that contains 0 says nothing.
Schuirmann (1987, "A comparison of the two one-sided tests procedure and the power approach for
assessing the equivalence of average bioavailability", J. Pharmacokinet. Biopharm. 15:657) tests
the two null hypotheses ``a - b <= -margin`` and ``a - b >= +margin`` each one-sided at ``alpha``;
rejecting both shows ``|a - b| < margin``. Equivalently (Westlake), the 1 - 2·alpha interval of
the difference lies inside ±margin. Lakens (2017, "Equivalence tests: a practical primer",
Social Psychological and Personality Science 8:355) gives the four verdicts used here, by
crossing TOST with the ordinary two-sided test of a zero difference:

=================  ==================  =================================================
p_tost < alpha     p_diff < alpha      verdict
=================  ==================  =================================================
yes                no                  ``equivalent`` (shown within the margin)
no                 yes                 ``different`` (a difference, not shown small)
yes                yes                 ``negligible difference`` (real but inside the margin)
no                 no                  ``inconclusive`` (too few runs to say either)
=================  ==================  =================================================

:func:`equivalence` uses Welch's t (unequal variances; statsmodels'
``ttost_ind(a, b, -margin, margin, usevar="unequal")``, R's ``equivalence::tost``);
:func:`equivalence_paired` the t of the paired differences (statsmodels' ``ttost_paired``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["VERDICTS", "equivalence", "equivalence_paired", "family_verdicts", "verdict"]

VERDICTS = ("equivalent", "different", "negligible difference", "inconclusive")

COLUMNS = ["diff", "ratio", "ci_low", "ci_high", "p_tost", "p_diff", "margin", "n_a", "n_b", "verdict"]


def verdict(p_tost: float, p_diff: float, alpha: float) -> str:
    """The verdict of a TOST p-value and a two-sided p-value at ``alpha`` (module docstring)."""
    eq, diff = bool(p_tost < alpha), bool(p_diff < alpha)
    return (
        "negligible difference"
        if eq and diff
        else "equivalent"
        if eq
        else "different"
        if diff
        else "inconclusive"
    )


def family_verdicts(
    p_tost: v.Sample, p_diff: v.Sample, *, alpha: float, method: str = "holm"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A family of equivalence tests judged together: ``(p_tost_adj, p_diff_adj, verdicts)``.

    Each p-value column is corrected over the tests that ran (finite p-values; NaN marks a test
    that did not run and stays NaN) by ``method`` (R's ``p.adjust``: ``"holm"``, ``"bonferroni"``,
    ``"bh"``; ``"none"`` leaves them), and each test's :func:`verdict` is read from its two
    corrected p-values (``""`` where either is NaN)."""
    from .multitest import adjust_p

    alpha = _alpha(alpha)
    pt, pd_ = (np.asarray(x, dtype=float).ravel() for x in (p_tost, p_diff))
    if len(pt) != len(pd_):
        raise ConfigError(f"p_tost and p_diff must be as long as each other, got {len(pt)} and {len(pd_)}")
    if method != "none":
        pt, pd_ = adjust_p(pt, method=method), adjust_p(pd_, method=method)
    verdicts = np.array(
        [verdict(t, d, alpha) if np.isfinite(t) and np.isfinite(d) else "" for t, d in zip(pt, pd_)],
        dtype=object,
    )
    return pt, pd_, verdicts


def _alpha(alpha: object) -> float:
    a = v.alpha(alpha)
    if a >= 0.5:
        raise ConfigError(
            f"alpha must be below 0.5 for an equivalence test (its interval has "
            f"confidence 1 - 2·alpha), got {alpha!r}"
        )
    return a


def _margin(margin: object, relative: object, reference: float) -> float:
    """The margin in the response's unit."""
    if not isinstance(relative, bool):
        raise ConfigError(
            f"relative must be True (margin a fraction of mean(b)) or False "
            f"(margin in the response's unit), got {relative!r}"
        )
    if (
        isinstance(margin, bool)
        or not isinstance(margin, (int, float, np.integer, np.floating))
        or not np.isfinite(margin)
        or not margin > 0
    ):
        raise ConfigError(
            f"margin must be a positive number ({'a fraction of mean(b), e.g. 0.05 = 5 %' if relative else 'in the response unit'}), "
            f"got {margin!r}"
        )
    if not relative:
        return float(margin)
    if reference == 0:
        raise ConfigError(
            "a relative margin needs mean(b) != 0 (it is a fraction of mean(b)); "
            "give the margin in the response's unit with relative=False"
        )
    return float(margin) * abs(reference)


def _row(
    diff: float, se: float, df: float, margin: float, alpha: float, ratio: float, n_a: int, n_b: int
) -> dict:
    # H0: diff <= -margin against diff > -margin; H0: diff >= margin against diff < margin
    p_low = float(sps.t.sf((diff + margin) / se, df))
    p_high = float(sps.t.cdf((diff - margin) / se, df))
    p_tost = max(p_low, p_high)
    p_diff = float(2 * sps.t.sf(abs(diff) / se, df))
    half = float(sps.t.ppf(1 - alpha, df)) * se
    return {
        "diff": diff,
        "ratio": ratio,
        "ci_low": diff - half,
        "ci_high": diff + half,
        "p_tost": p_tost,
        "p_diff": p_diff,
        "margin": margin,
        "n_a": n_a,
        "n_b": n_b,
        "verdict": verdict(p_tost, p_diff, alpha),
    }


def _out(row: dict, **attrs: object) -> pd.DataFrame:
    out = pd.DataFrame([row], columns=COLUMNS)
    out.attrs.update(attrs)
    return out


def equivalence(
    a: v.Sample, b: v.Sample, *, margin: float, relative: bool = True, alpha: float = 0.05
) -> pd.DataFrame:
    """Is ``a`` equivalent to ``b`` within ``margin``? Schuirmann's TOST with Welch's t.

    ``margin``: the largest difference ``a - b`` that does not matter, a fraction of
    ``mean(b)`` when ``relative`` (0.05 = 5 % of the baseline ``b``), else in the response's
    unit. Welch's standard error ``se = sqrt(s_a²/n_a + s_b²/n_b)`` and Welch-Satterthwaite
    degrees of freedom ``df``.

    Returns a one-row DataFrame:

    * ``diff``: ``mean(a) - mean(b)``;
    * ``ratio``: ``mean(a) / mean(b)`` (NaN when mean(b) is 0);
    * ``ci_low``, ``ci_high``: the 1 - 2·alpha Welch interval of ``diff`` (inside
      ±margin exactly when ``p_tost < alpha``);
    * ``p_tost``: the larger of the two one-sided p-values (``t = (diff + margin)/se`` upper
      tail, ``t = (diff - margin)/se`` lower tail), equal to statsmodels'
      ``ttost_ind(a, b, -margin, margin, usevar="unequal")[0]``;
    * ``p_diff``: Welch's two-sided p-value of ``diff = 0`` (scipy's
      ``ttest_ind(a, b, equal_var=False)``);
    * ``margin``: the margin in the response's unit;
    * ``n_a``, ``n_b``: the numbers of values;
    * ``verdict``: ``"equivalent"``, ``"different"``, ``"negligible difference"`` or
      ``"inconclusive"`` (module docstring).

    ``attrs``: ``alpha``, ``relative``, ``margin_given``, ``df``, ``se``, ``test`` ("welch").
    ConfigError for fewer than 2 values on a side (saying how many), both sides without
    variation (the standard error is 0), missing or infinite values, a margin that is not a
    positive number, a relative margin with mean(b) = 0, and alpha outside (0, 0.5).
    """
    alpha = _alpha(alpha)
    xa, xb = v.sample(a, "a"), v.sample(b, "b")
    few = [f"{name} has {len(x)}" for name, x in (("a", xa), ("b", xb)) if len(x) < 2]
    if few:
        raise ConfigError(f"an equivalence test needs at least 2 values on each side: {', '.join(few)}")
    ma, mb = float(np.mean(xa)), float(np.mean(xb))
    m = _margin(margin, relative, mb)
    va, vb = float(np.var(xa, ddof=1)) / len(xa), float(np.var(xb, ddof=1)) / len(xb)
    if va + vb == 0:
        raise ConfigError(
            f"an equivalence test needs variation: all {len(xa)} values of a and all "
            f"{len(xb)} values of b are constant (standard error 0)"
        )
    se = float(np.sqrt(va + vb))
    df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1))
    row = _row(ma - mb, se, df, m, alpha, ma / mb if mb else np.nan, len(xa), len(xb))
    return _out(
        row, alpha=alpha, relative=relative, margin_given=float(margin), df=float(df), se=se, test="welch"
    )


def equivalence_paired(
    a: v.Sample, b: v.Sample, *, margin: float, relative: bool = True, alpha: float = 0.05
) -> pd.DataFrame:
    """:func:`equivalence` for paired values: ``a[i]`` and ``b[i]`` measured together (same
    host, same block, same boot), TOST on the differences ``d = a - b`` with the one-sample t
    (``se = sd(d)/sqrt(n)``, ``df = n - 1``): statsmodels' ``ttost_paired(a, b, -margin,
    margin)``.

    Returns the same one-row DataFrame as :func:`equivalence` (``diff`` = mean(d), ``ratio`` =
    mean(a)/mean(b), ``ci_low``/``ci_high`` the 1 - 2·alpha paired interval, ``p_tost``,
    ``p_diff`` the paired two-sided p (scipy's ``ttest_rel``), ``margin`` in the response's unit
    (relative: a fraction of mean(b)), ``n_a`` = ``n_b`` = pairs, ``verdict``); ``attrs`` as
    there with ``test`` = "paired". ConfigError for ``a`` and ``b`` of different lengths, fewer
    than 2 pairs, differences without variation, and the errors of :func:`equivalence`.
    """
    alpha = _alpha(alpha)
    xa, xb = v.sample(a, "a"), v.sample(b, "b")
    if len(xa) != len(xb):
        raise ConfigError(
            f"a paired equivalence test needs as many values in a as in b "
            f"(one pair each), got {len(xa)} and {len(xb)}"
        )
    n = len(xa)
    if n < 2:
        raise ConfigError(f"a paired equivalence test needs at least 2 pairs, got {n}")
    mb = float(np.mean(xb))
    m = _margin(margin, relative, mb)
    d = xa - xb
    sd = float(np.std(d, ddof=1))
    if sd == 0:
        raise ConfigError(
            f"a paired equivalence test needs variation: the {n} differences a - b "
            f"are all {float(d[0]):g} (standard error 0)"
        )
    se = sd / np.sqrt(n)
    row = _row(float(np.mean(d)), se, n - 1, m, alpha, float(np.mean(xa)) / mb if mb else np.nan, n, n)
    return _out(
        row,
        alpha=alpha,
        relative=relative,
        margin_given=float(margin),
        df=float(n - 1),
        se=float(se),
        test="paired",
    )
