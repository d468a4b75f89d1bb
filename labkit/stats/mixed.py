"""Linear mixed models: two-level fixed factors beside random levels (hosts, instances, boots).

:func:`mixed_effects` fits ``response ~ full factorial of the fixed factors + one random
intercept per random column`` by REML with statsmodels' MixedLM. The fixed factors are coded
-1/+1 and their terms named in Yates order as :func:`labkit.stats.factorial_effects` names them,
so ``estimate`` is Jain's q. A random column's labels identify units: nested units carry unique
labels (instance ``"host1-vm2"``, not ``"vm2"`` on every host), and several random columns are
variance components, crossed or nested alike.

The fit is checked: the optimizers are tried from two starting points (statsmodels' default and
the ANOVA, method-of-moments estimates of the components) and the converged fit with the
highest REML likelihood is kept, so one optimizer stopping at a wrong point does not decide the
result; a component that ends near zero is refitted without it (at zero: the boundary, where a
singular fit lies) and kept at zero when that fits at least as well. Standard errors are
lme4's, ``sqrt(diag((X'V^-1 X)^-1))`` at the REML estimates; the degrees of freedom of each
fixed term are Satterthwaite's (lmerTest's, from the observed REML information of the
variance components), so a factor that is constant within an instance is tested against the
instance-level variance with about as many df as there are instances, not runs.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import _numeric as num
from . import validate as v
from .factorial import yates_terms

__all__ = ["MixedEffects", "mixed_effects"]

#: optimizers tried in turn (statsmodels ``fit(method=...)``) from each starting point
OPTIMIZERS = ("lbfgs", "bfgs", "cg", "powell", "nm")
#: a component is singular when its standard deviation relative to the residual one is below
#: this (lme4's ``isSingular`` tolerance)
SINGULAR_TOL = 1e-4
#: components whose relative standard deviation is below this are also tried at zero
BOUNDARY_TRY = 0.1


@dataclass(frozen=True, eq=False)
class MixedEffects:
    """The REML fit of :func:`mixed_effects`.

    * ``fixed`` -- one row per fixed term in Yates order (``I``, ``A``, ``B``, ``A:B``, ...):
      ``term``, ``estimate`` (the coefficient q of the -1/+1 coding; the mean for ``I``),
      ``se``, ``df`` (Satterthwaite), ``t`` (estimate/se) and ``p`` (two-sided, t with ``df``).
    * ``variance`` -- one row per random column, then ``residual``: ``component``,
      ``variance`` (REML estimate) and ``pct`` (share of the total variance, in per cent).
    * ``singular`` -- a component's standard deviation is below ``1e-4`` of the residual one
      (lme4's rule): the data hold no evidence of that level's variance.
    * ``optimizer`` -- the statsmodels method that gave the kept fit; ``start`` -- where it
      started (``"default"``, ``"anova"`` or ``"boundary"`` for a refit with components at 0).
    * ``converged`` -- always True (no converged fit is a ConfigError); ``reml_llf`` -- its
      REML log-likelihood; ``levels`` -- the (low, high) coding of each fixed factor;
      ``note`` -- "" or what the caller should know (a singular fit).
    """

    fixed: pd.DataFrame
    variance: pd.DataFrame
    singular: bool
    optimizer: str
    start: str
    reml_llf: float
    converged: bool = True
    levels: dict = field(default_factory=dict)
    note: str = ""


def mixed_effects(
    data: pd.DataFrame,
    *,
    response: str,
    random: v.Columns,
    fixed: v.Columns = None,
    levels: v.Levels = None,
    blocks: v.Columns = None,
) -> MixedEffects:
    """REML fit of a linear mixed model with two-level fixed factors and random levels.

    Parameters
    ----------
    data : long-format DataFrame, one row per observation (e.g. one per run).
    response : the numeric response column.
    random : one or more columns whose labels identify the units of a random level (a host,
        an instance); each gets a random intercept (a variance component). Nested units must
        carry unique labels; crossed columns are fine.
    fixed : the two-level fixed factor columns (None or [] for the mean only); the model holds
        their full factorial, terms in Yates order (the first factor varies fastest).
    levels : the low/high level of each fixed factor, as in :func:`factorial_effects`
        (a Design, ``{factor: (low, high)}`` or ``{factor: {level: -1/+1}}``); default:
        Categorical order, else sorted.
    blocks : fixed nuisance columns with any number of levels (hosts of a fleet whose
        conclusions stay with those hosts): each enters the model with sum-to-zero contrasts
        (R's ``contr.sum``), so the intercept stays the mean over blocks; their coefficients are
        not reported.

    Returns
    -------
    :class:`MixedEffects` (``.fixed``, ``.variance``, ``.singular``, ``.optimizer``, ...).
    Unbalanced data are fine (REML); the estimates equal lme4's ``lmer(..., REML = TRUE)``
    and the df lmerTest's Satterthwaite df. A random column in whose units all the others are
    nested (hosts holding instances) is fitted as statsmodels' groups, which keeps the fit fast
    on thousands of rows; crossed columns share one group. The standard errors and df use a
    few dense n x n matrices (n rows): some 300 MB at 3,000 rows.

    Raises
    ------
    ConfigError for missing columns, a non-numeric or missing response, a column listed twice
    (response, fixed, random), missing labels, fixed factors without exactly two levels, a
    random column with fewer than two units or one unit per observation, fixed terms the data
    cannot separate (empty cells), and when no optimizer converges.
    """
    data = v.frame(data)
    fixed_cols = v.names(fixed, "fixed", allow_empty=True)
    random_cols = v.names(random, "random")
    v.columns(data, fixed_cols, "fixed")
    v.columns(data, random_cols, "random")
    y = v.response(data, response)
    block_cols = v.names(blocks, "blocks", allow_empty=True)
    v.columns(data, block_cols, "blocks")
    _no_overlap(response, fixed_cols + block_cols, random_cols)
    both = [c for c in block_cols if c in fixed_cols]
    if both:
        raise ConfigError(f"{', '.join(map(repr, both))} listed in both fixed and blocks")
    v.no_missing(data, fixed_cols + block_cols, "fixed")
    X, terms, coding = _fixed_matrix(data, fixed_cols, levels)
    if block_cols:
        X = _with_blocks(X, data, block_cols)
    Z = [_units(data, c, len(y)) for c in random_cols]
    y, offset = num.shift(y)
    fit = _best_fit(y, X, Z, random_cols)
    var_c, var_e = fit["vcomp"], fit["scale"]
    beta = fit["fe"]
    beta[0] += offset
    se, df = _inference(y, X, Z, var_c, var_e)
    p = len(terms)
    beta, se, df = beta[:p], se[:p], df[:p]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = beta / se
    fixed_table = pd.DataFrame(
        {"term": terms, "estimate": beta, "se": se, "df": df, "t": t, "p": 2 * sps.t.sf(np.abs(t), df)}
    )
    var = np.append(var_c, var_e)
    total = var.sum()
    variance = pd.DataFrame(
        {
            "component": random_cols + ["residual"],
            "variance": var,
            "pct": 100 * var / total if total > 0 else np.full(len(var), np.nan),
        }
    )
    rel_sd = np.sqrt(var_c / var_e) if var_e > 0 else np.zeros(len(var_c))
    zero = [c for c, r in zip(random_cols, rel_sd) if r < SINGULAR_TOL]
    note = (
        f"singular fit: the variance of {', '.join(map(repr, zero))} is estimated as 0 "
        f"(no evidence of variation between its units)"
        if zero
        else ""
    )
    return MixedEffects(
        fixed_table, variance, bool(zero), fit["optimizer"], fit["start"], fit["llf"], True, coding, note
    )


def _no_overlap(response: str, fixed: list[str], random: list[str]) -> None:
    for name, where in ((response, "fixed"), (response, "random")):
        if name in (fixed if where == "fixed" else random):
            raise ConfigError(f"response {response!r} is also listed in {where}")
    both = [c for c in fixed if c in random]
    if both:
        raise ConfigError(
            f"{', '.join(map(repr, both))} listed in both fixed and random; "
            f"a column is either a fixed factor or a random level"
        )


def _fixed_matrix(data: pd.DataFrame, fixed: list[str], levels: v.Levels):
    """The -1/+1 model matrix of the full factorial (Yates order), term names, the coding."""
    level_map = v.level_map(levels)
    unknown = [f for f in level_map if f not in fixed]
    if unknown and isinstance(levels, dict):
        raise ConfigError(f"levels: {', '.join(map(repr, unknown))} not in fixed {fixed!r}")
    coding, signs = {}, []
    for f in fixed:
        low, high = v.two_levels(data[f], level_map.get(f))
        coding[f] = (low, high)
        signs.append(np.where((data[f] == high).to_numpy(dtype=bool, na_value=False), 1.0, -1.0))
    terms = yates_terms(fixed)
    X = np.ones((len(data), len(terms)))
    for i in range(1, len(terms)):
        for j in range(len(fixed)):
            if i >> j & 1:
                X[:, i] *= signs[j]
    rank = np.linalg.matrix_rank(X)
    if rank < X.shape[1]:
        raise ConfigError(
            f"fixed: the data cannot separate the {len(terms)} terms of the full "
            f"factorial of {fixed!r} (rank {rank}): some combinations of levels "
            f"have no observation"
        )
    return X, terms, coding


def _with_blocks(X: np.ndarray, data: pd.DataFrame, blocks: list[str]) -> np.ndarray:
    """``X`` with the sum-to-zero contrast columns of each block column appended; ConfigError when
    the blocks cannot be told apart from the factors (a block holding one configuration)."""
    cols = [X]
    for b in blocks:
        codes, labels = v.factorize(data, b, "blocks")
        m = len(labels)
        if m < 2:
            continue  # one block: nothing to remove
        c = np.zeros((len(data), m - 1))
        for j in range(m - 1):
            c[codes == j, j] = 1.0
        c[codes == m - 1, :] = -1.0
        cols.append(c)
    out = np.hstack(cols)
    rank = np.linalg.matrix_rank(out)
    if rank < out.shape[1]:
        raise ConfigError(
            f"blocks {blocks!r} are confounded with the fixed factors (rank {rank} of "
            f"{out.shape[1]}): every block must hold several configurations"
        )
    return out


def _units(data: pd.DataFrame, col: str, n: int) -> np.ndarray:
    """The 0/1 indicator matrix (observation x unit) of a random column."""
    codes, labels = v.factorize(data, col, "random")
    if len(labels) < 2:
        raise ConfigError(
            f"random: column {col!r} has {len(labels)} unit(s); a random level "
            f"needs at least two units to estimate its variance"
        )
    if len(labels) >= n:
        raise ConfigError(
            f"random: column {col!r} has a unit for every observation "
            f"({len(labels)} units, {n} rows): its variance cannot be told "
            f"apart from the residual one"
        )
    Z = np.zeros((n, len(labels)))
    Z[np.arange(n), codes] = 1.0
    return Z


def _outer(Z: list[np.ndarray]) -> int | None:
    """The random column in whose units every other one is nested (e.g. host), or None."""
    for c, zc in enumerate(Z):
        if all(((zo.T @ zc) > 0).sum(axis=1).max() == 1 for o, zo in enumerate(Z) if o != c):
            return c
    return None


def _model(y: np.ndarray, X: np.ndarray, Z: list[np.ndarray], names: list[str]):
    """statsmodels' MixedLM and the index of the random column used as its groups (or None).

    When one random column holds all the others nested in it, its units are the groups (a
    random intercept) and the others variance components inside them: small blocks, fast.
    Otherwise (crossed columns) one group holds every observation with a component per column.
    A VCSpec keeps the order of ``names`` (statsmodels sorts a dict's).
    """
    from statsmodels.regression.mixed_linear_model import MixedLM, VCSpec

    outer = _outer(Z)
    if outer is None:
        vc = VCSpec(list(names), [[[str(j) for j in range(z.shape[1])]] for z in Z], [[z] for z in Z])
        return MixedLM(y, X, np.zeros(len(y)), exog_vc=vc), None
    groups = np.argmax(Z[outer], axis=1)
    inner = [i for i in range(len(Z)) if i != outer]
    if not inner:
        return MixedLM(y, X, groups), outer
    mats = []
    for i in inner:
        per_group = []
        for g in range(Z[outer].shape[1]):
            block = Z[i][groups == g]
            per_group.append(block[:, block.any(axis=0)])
        mats.append(per_group)
    colnames = [[[str(j) for j in range(m.shape[1])] for m in per_group] for per_group in mats]
    vc = VCSpec([names[i] for i in inner], colnames, mats)
    return MixedLM(y, X, groups, exog_re=np.ones((len(y), 1)), exog_vc=vc), outer


def _anova_start(y: np.ndarray, X: np.ndarray, Z: list[np.ndarray]) -> np.ndarray:
    """Method-of-moments variance ratios (component / residual) from OLS residuals.

    For each random column, the one-way ANOVA of the residuals by its units gives
    ``(MS_between - MS_within) / n0``; the residual variance is what the components leave.
    """
    resid = y - X @ np.linalg.lstsq(X, y, rcond=None)[0]
    total = max(float(resid @ resid) / max(len(y) - X.shape[1], 1), 1e-300)
    comps = np.zeros(len(Z))
    for c, z in enumerate(Z):
        n_i = z.sum(axis=0)
        a, n = len(n_i), len(y)
        means = (z.T @ resid) / n_i
        ssb = float(n_i @ (means - resid.mean()) ** 2)
        ssw = float(resid @ resid) - float(n_i @ means**2)
        msb, msw = ssb / (a - 1), ssw / max(n - a, 1)
        n0 = (n - float(n_i @ n_i) / n) / (a - 1)
        comps[c] = max((msb - msw) / n0, 0.0)
    resid_var = max(total - comps.sum(), 0.1 * total)
    return np.sqrt(np.maximum(comps / resid_var, 1e-4))  # packed: square roots of ratios


def _components(result, outer: int | None) -> np.ndarray:
    """The component variances of a statsmodels fit, in the order of the random columns."""
    vcomp = np.atleast_1d(np.asarray(result.vcomp, dtype=float))
    if outer is None:
        return vcomp
    return np.insert(vcomp, outer, float(np.asarray(result.cov_re)[0, 0]))


def _fits(model, outer: int | None, start: np.ndarray | None, label: str):
    """The first converged fit of the optimizers from ``start``, or None."""
    for method in OPTIMIZERS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                res = model.fit(start_params=start, reml=True, method=[method])
            except (np.linalg.LinAlgError, ValueError, FloatingPointError):
                continue
        if res.converged and np.isfinite(res.llf):
            return {
                "fe": np.asarray(res.fe_params, dtype=float).copy(),
                "vcomp": np.maximum(_components(res, outer), 0.0),
                "scale": float(res.scale),
                "optimizer": method,
                "start": label,
            }
    return None


def _converged(y, X, Z, names) -> list[dict]:
    """The converged fits from statsmodels' default start and from the ANOVA estimates."""
    if not Z:  # no component left: ordinary least squares
        beta = np.linalg.lstsq(X, y, rcond=None)[0]
        r = y - X @ beta
        return [
            {
                "fe": beta,
                "vcomp": np.zeros(0),
                "scale": float(r @ r) / (len(y) - X.shape[1]),
                "optimizer": "ols",
                "start": "boundary",
            }
        ]
    model, outer = _model(y, X, Z, names)
    anova = _anova_start(y, X, Z)
    if outer is not None:  # statsmodels' packed order: the groups' first
        anova = np.append(anova[outer], np.delete(anova, outer))
    starts = ((None, "default"), (anova, "anova"))
    return [f for f in (_fits(model, outer, s, label) for s, label in starts) if f]


def _best_fit(y, X, Z, names) -> dict:
    """The converged fit with the highest REML likelihood, near-zero components tried at 0."""
    fits = _converged(y, X, Z, names)
    if not fits:
        raise ConfigError(
            f"mixed_effects: no optimizer ({', '.join(OPTIMIZERS)}) converged, "
            f"from the default or the ANOVA start; check that the random columns "
            f"{names!r} label units with several observations each"
        )
    for f in fits:
        f["llf"] = reml_loglik(y, X, Z, f["vcomp"], f["scale"])
    best = max(fits, key=lambda f: f["llf"])
    rel = np.sqrt(best["vcomp"] / best["scale"]) if best["scale"] > 0 else np.zeros(len(Z))
    near = rel < BOUNDARY_TRY
    if not near.any():
        return best
    keep = np.flatnonzero(~near)  # the boundary: the near-zero components removed
    edges = _converged(y, X, [Z[i] for i in keep], [names[i] for i in keep])
    for edge in edges:
        vcomp = np.zeros(len(Z))
        vcomp[keep] = edge["vcomp"]
        edge.update(vcomp=vcomp, start="boundary", llf=reml_loglik(y, X, Z, vcomp, edge["scale"]))
        if edge["llf"] >= best["llf"] - 1e-9 * max(1.0, abs(best["llf"])):
            best = edge
    return best


def _covariance(Z: Sequence[np.ndarray], var_c: np.ndarray, var_e: float) -> np.ndarray:
    n = len(Z[0]) if len(Z) else 0
    V = var_e * np.eye(n)
    for z, s in zip(Z, var_c):
        V += s * (z @ z.T)
    return V


def reml_loglik(
    y: np.ndarray, X: np.ndarray, Z: Sequence[np.ndarray], var_c: np.ndarray, var_e: float
) -> float:
    """The REML log-likelihood at the given variances (lme4's ``-REMLcrit / 2``).

    ``-(log|V| + log|X'V^-1X| + r'V^-1r + (n-p) log 2 pi) / 2``, ``r`` the GLS residuals.
    """
    n, p = X.shape
    V = var_e * np.eye(n) if not len(Z) else _covariance(Z, var_c, var_e)
    L = np.linalg.cholesky(V)
    Li_X = np.linalg.solve(L, X)
    Li_y = np.linalg.solve(L, y)
    xtvx = Li_X.T @ Li_X
    beta = np.linalg.solve(xtvx, Li_X.T @ Li_y)
    r = Li_y - Li_X @ beta
    logdet_v = 2 * np.sum(np.log(np.diag(L)))
    logdet_x = np.linalg.slogdet(xtvx)[1]
    return float(-0.5 * (logdet_v + logdet_x + r @ r + (n - p) * np.log(2 * np.pi)))


def _inference(
    y: np.ndarray, X: np.ndarray, Z: Sequence[np.ndarray], var_c: np.ndarray, var_e: float
) -> tuple[np.ndarray, np.ndarray]:
    """Standard errors and Satterthwaite df of the fixed effects at the REML estimates.

    ``C = (X'V^-1X)^-1``; ``df_j = 2 C_jj^2 / (g_j' A g_j)`` with ``g_j`` the gradient of
    ``C_jj`` over the variance parameters (the positive components and the residual; a
    component at 0 is held there) and ``A`` the inverse of their observed REML information
    ``I_kl = y'P G_k P G_l P y - tr(P G_k P G_l) / 2``, ``G_k = Z_k Z_k'`` (the identity for
    the residual), as lmerTest computes it (there by numerical derivatives).
    """
    Vi = np.linalg.inv(_covariance(Z, var_c, var_e))
    ViX = Vi @ X
    C = np.linalg.inv(X.T @ ViX)
    se = np.sqrt(np.diag(C))
    P = Vi - ViX @ C @ ViX.T
    # G_k = F_k F_k': F_k = Z_k, or None for the residual's identity
    F = [z for s, z in zip(var_c, Z) if s > 0] + [None]
    PF = [P if f is None else P @ f for f in F]

    def left(f, m):  # F' m
        return m if f is None else f.T @ m

    Py = P @ y
    u = [left(f, Py) for f in F]  # F_k' P y
    M = [[left(fk, pfl) for pfl in PF] for fk in F]  # F_k' P F_l
    info = np.array(
        [[u[k] @ M[k][j] @ u[j] - 0.5 * np.sum(M[k][j] ** 2) for j in range(len(F))] for k in range(len(F))]
    )
    grads = np.array([np.sum((left(f, ViX) @ C) ** 2, axis=0) for f in F])  # d C_jj / d theta_k
    denom = np.einsum("kj,kl,lj->j", grads, np.linalg.pinv(info), grads)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(denom > 0, 2 * np.diag(C) ** 2 / denom, np.inf)
    return se, df
