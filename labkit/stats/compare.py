"""Comparing campaigns of the same design: per configuration, overall drift, change points.

Each result carries a minimum practical effect beside its p-value: a change is called
``drift`` only when it is both significant and at least ``min_effect_pct`` percent.

* :func:`config_differences` -- per configuration b - a with a Welch CI, the ratio b/a
  with Fieller's CI, Holm-adjusted p-values (or another method).
* :func:`drift_test` -- one test for a shift between two campaigns: log response
  ~ configuration + campaign (+ their interaction, tested separately), so the shift
  is a ratio common to all configurations, with its CI.
* :func:`pettitt` -- Pettitt's (1979) rank test for one change point in a series;
  :func:`changepoint` applies it to a series of campaigns.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v
from .multitest import adjust_p
from .overhead import fieller_ratio

__all__ = ["changepoint", "config_differences", "drift_test", "pettitt"]


def _min_effect(x) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not np.isfinite(x) or x < 0:
        raise ConfigError(f"min_effect_pct must be a number >= 0 (percent), got {x!r}")
    return float(x)


def config_differences(
    a: pd.DataFrame,
    b: pd.DataFrame,
    *,
    response: str,
    factors: Sequence[str],
    alpha: float = 0.05,
    min_effect_pct: float = 2.0,
    method: str = "holm",
) -> pd.DataFrame:
    """Per configuration, campaign ``b`` against campaign ``a`` (one row per run in each).

    Returns one row per configuration with >= 2 runs in both: the factor columns,
    ``n_a``, ``n_b``, ``mean_a``, ``mean_b``, ``diff`` (mean_b - mean_a),
    ``ci_low``/``ci_high`` (Welch 1 - alpha CI of diff), ``diff_pct`` (100·diff/mean_a),
    ``ratio`` (mean_b/mean_a) with ``ratio_low``/``ratio_high`` (Fieller), ``p``
    (Welch), ``p_adj`` (``method`` over the configurations: holm, bonferroni or bh)
    and ``drift`` (p_adj < alpha and |diff_pct| >= min_effect_pct).
    """
    alpha = v.alpha(alpha)
    min_effect_pct = _min_effect(min_effect_pct)
    factors = v.names(factors, "factors")
    for name, d in (("a", a), ("b", b)):
        v.frame(d, name)
        v.columns(d, factors, f"{name}: factors")
        v.response(d, response)
    gb = {
        k if isinstance(k, tuple) else (k,): g[response].to_numpy(dtype=float)
        for k, g in b.groupby(factors, sort=False, observed=True)
    }
    rows = []
    t_q = {}
    for key, ga in a.groupby(factors, sort=True, observed=True):
        key = key if isinstance(key, tuple) else (key,)
        xa, xb = ga[response].to_numpy(dtype=float), gb.get(key)
        if xb is None or len(xa) < 2 or len(xb) < 2:
            continue
        ma, mb = xa.mean(), xb.mean()
        va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
        se = np.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1)) if se > 0 else np.nan
        if df not in t_q:
            t_q[df] = sps.t.ppf(1 - alpha / 2, df) if np.isfinite(df) else np.nan
        diff = mb - ma
        p = 2 * sps.t.sf(abs(diff) / se, df) if se > 0 else (1.0 if diff == 0 else 0.0)
        fr = fieller_ratio(xb, xa, alpha=alpha)
        rows.append(
            {
                **dict(zip(factors, key)),
                "n_a": len(xa),
                "n_b": len(xb),
                "mean_a": ma,
                "mean_b": mb,
                "diff": diff,
                "ci_low": diff - t_q[df] * se,
                "ci_high": diff + t_q[df] * se,
                "diff_pct": 100 * diff / ma,
                "ratio": fr["ratio"],
                "ratio_low": fr["ci_low"],
                "ratio_high": fr["ci_high"],
                "p": p,
            }
        )
    table = pd.DataFrame(rows)
    if table.empty:
        raise ConfigError("no configuration has >= 2 runs in both campaigns")
    table["p_adj"] = adjust_p(table["p"].fillna(1).to_numpy(), method=method)
    table["drift"] = (table["p_adj"] < alpha) & (table["diff_pct"].abs() >= min_effect_pct)
    table.attrs.update(
        {"response": response, "alpha": alpha, "method": method, "min_effect_pct": min_effect_pct}
    )
    return table


def drift_test(
    a: pd.DataFrame,
    b: pd.DataFrame,
    *,
    response: str,
    factors: Sequence[str],
    alpha: float = 0.05,
    min_effect_pct: float = 2.0,
) -> pd.DataFrame:
    """Did the whole campaign move from ``a`` to ``b``? One-row DataFrame.

    Fits ``log(response) ~ configuration + campaign`` by least squares (configurations
    present in both) and tests the campaign term (F, type-II), then the
    configuration x campaign interaction (does the drift differ between
    configurations?). Columns: ``n_a``, ``n_b``, ``configs``, ``shift_pct``
    (100·(exp(coef) - 1), the common change b over a), ``ci_low_pct``/``ci_high_pct``,
    ``F``, ``df1``, ``df2``, ``p``, ``p_interaction``, ``min_effect_pct`` and ``drift``
    (p < alpha and |shift_pct| >= min_effect_pct). Responses must be > 0.
    """
    alpha = v.alpha(alpha)
    min_effect_pct = _min_effect(min_effect_pct)
    factors = v.names(factors, "factors")
    parts = []
    for name, d, flag in (("a", a, 0.0), ("b", b, 1.0)):
        v.frame(d, name)
        v.columns(d, factors, f"{name}: factors")
        y = v.response(d, response)
        if (y <= 0).any():
            raise ConfigError(f"{name}: response {response!r} must be > 0 for a ratio (log) drift test")
        cfg = (
            pd.MultiIndex.from_frame(d[factors].astype(str))
            if len(factors) > 1
            else d[factors[0]].astype(str)
        )
        parts.append(pd.DataFrame({"cfg": list(cfg), "camp": flag, "ly": np.log(y)}))
    data = pd.concat(parts, ignore_index=True)
    both = set(parts[0]["cfg"]) & set(parts[1]["cfg"])
    data = data[data["cfg"].isin(both)]
    codes, _ = pd.factorize(data["cfg"], sort=True)
    k = codes.max() + 1 if len(codes) else 0
    n = len(data)
    if k == 0 or n - k - 1 < 1:
        raise ConfigError("drift test: too few runs in configurations present in both campaigns")
    y = data["ly"].to_numpy()
    camp = data["camp"].to_numpy()
    cell = codes * 2 + camp.astype(int)
    # full (interaction) model: cell means; additive model: configuration + campaign
    cnt = np.bincount(cell, minlength=2 * k)
    if (cnt == 0).any():
        raise ConfigError("drift test: a configuration has no run in one campaign")
    cm = np.bincount(cell, weights=y, minlength=2 * k) / cnt
    sse_full = float(((y - cm[cell]) ** 2).sum())
    X = np.column_stack([np.eye(k)[codes], camp])
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    res = y - X @ beta
    sse_add = float(res @ res)
    ym = np.bincount(codes, weights=y, minlength=k) / np.bincount(codes, minlength=k)
    sse_cfg = float(((y - ym[codes]) ** 2).sum())
    df_add = n - k - 1
    df_full = n - 2 * k
    # campaign tested against the full model's error when it has df, else the additive one
    df2, mse = (df_full, sse_full / df_full) if df_full > 0 else (df_add, sse_add / df_add)
    F = (sse_cfg - sse_add) / mse if mse > 0 else np.nan
    p = float(sps.f.sf(F, 1, df2)) if np.isfinite(F) else np.nan
    p_int = (
        float(sps.f.sf(((sse_add - sse_full) / (k - 1)) / (sse_full / df_full), k - 1, df_full))
        if df_full > 0 and k > 1 and sse_full > 0
        else np.nan
    )
    cov = mse * np.linalg.pinv(X.T @ X)
    se = float(np.sqrt(cov[-1, -1]))
    tq = sps.t.ppf(1 - alpha / 2, df2)
    coef = float(beta[-1])
    shift = 100 * np.expm1(coef)
    out = pd.DataFrame(
        [
            {
                "n_a": int((camp == 0).sum()),
                "n_b": int((camp == 1).sum()),
                "configs": int(k),
                "shift_pct": shift,
                "ci_low_pct": 100 * np.expm1(coef - tq * se),
                "ci_high_pct": 100 * np.expm1(coef + tq * se),
                "F": F,
                "df1": 1,
                "df2": int(df2),
                "p": p,
                "p_interaction": p_int,
                "min_effect_pct": min_effect_pct,
                "drift": bool(p < alpha and abs(shift) >= min_effect_pct),
            }
        ]
    )
    out.attrs.update({"response": response, "alpha": alpha})
    return out


# below this many pairs the median of the differences is taken from the full difference matrix
_DIRECT_PAIRS = 1 << 20


def _ordered(x: np.ndarray) -> np.ndarray:
    """int64 keys with the order of the float64 values ``x`` (-0.0 and 0.0 equal)."""
    i = (np.asarray(x, dtype=np.float64) + 0.0).view(np.int64)
    return np.where(i < 0, np.int64(-(2**63)) - i, i)


def _from_ordered(k: int) -> float:
    i = np.int64(k) if k >= 0 else np.int64(-(2**63)) - np.int64(k)
    return float(np.array([i]).view(np.float64)[0])


def _count_at_most(after: np.ndarray, before_sorted: np.ndarray, d: float) -> int:
    """How many pairs have ``after[j] - before[i] <= d`` (float subtraction, as the matrix
    would compute it): for each j the differences fall as before[i] grows (rounding is
    monotone), so the pairs at most d are a suffix of ``before_sorted``, found by a binary
    search of all rows at once. O(len(after)) memory."""
    m = len(before_sorted)
    lo = np.zeros(len(after), dtype=np.int64)  # first index with after - before <= d
    hi = np.full(len(after), m, dtype=np.int64)
    while True:
        open_ = lo < hi
        if not open_.any():
            break
        mid = (lo + hi) // 2
        ok = open_ & ((after - before_sorted[np.minimum(mid, m - 1)]) <= d)
        hi = np.where(ok, mid, hi)
        lo = np.where(open_ & ~ok, mid + 1, lo)
    return int((m - lo).sum())


def _kth_difference(after: np.ndarray, before_sorted: np.ndarray, k: int) -> float:
    """The k-th smallest (1-based) of ``after[j] - before[i]`` over all pairs: bisection over
    the float64 values in their integer order (at most 64 steps), each counting the pairs."""
    lo = int(_ordered(np.array([after.min() - before_sorted[-1]]))[0])
    hi = int(_ordered(np.array([after.max() - before_sorted[0]]))[0])
    while lo < hi:  # the smallest value with at least k pairs at or below it
        mid = lo + (hi - lo) // 2
        if _count_at_most(after, before_sorted, _from_ordered(mid)) >= k:
            hi = mid
        else:
            lo = mid + 1
    return _from_ordered(lo)


def median_difference(after: v.Sample, before: v.Sample) -> float:
    """The median of ``after[j] - before[i]`` over all pairs (the Hodges-Lehmann shift, R's
    ``wq::pett`` change.size), equal to ``np.median(after[:, None] - before[None, :])`` without
    the len(after) x len(before) matrix when that is large (O(n) memory, O(n log² n) time)."""
    a = np.asarray(after, dtype=float).ravel()
    b = np.sort(np.asarray(before, dtype=float).ravel())
    pairs = len(a) * len(b)
    if pairs <= _DIRECT_PAIRS:
        return float(np.median(a[:, None] - b[None, :]))
    k = (pairs + 1) // 2
    low = _kth_difference(a, b, k)
    if pairs % 2:
        return low
    return float(np.mean(np.array([low, _kth_difference(a, b, k + 1)])))


def pettitt_u(x: np.ndarray) -> np.ndarray:
    """``U_t`` for t = 1..n-1 in the rank-sum form (Pettitt 1979, eq. 2.2, with the sign of
    sgn(x_j - x_i)): ``U_t = t(n + 1) - 2·sum_{i<=t} r_i`` with average ranks for ties; whole
    or half numbers, exact in float64. O(n) memory."""
    n = len(x)
    t = np.arange(1, n)
    return t * (n + 1) - 2 * np.cumsum(sps.rankdata(x))[:-1]


def pettitt_p(K: float, n: int) -> float:
    """Pettitt's approximate two-sided p of ``K = max |U_t|`` for ``n`` values (1979, eq. 2.4)."""
    return min(1.0, 2 * float(np.exp(-6 * K**2 / (n**3 + n**2))))


def pettitt(values: v.Sample, *, min_effect: float | None = None, alpha: float = 0.05) -> pd.DataFrame:
    """Pettitt's (1979) non-parametric test for one change point in a series (in order).

    ``U_t = sum_{i<=t} sum_{j>t} sgn(x_j - x_i)``, ``K = max |U_t|``, change point ``t``
    (1-based, the last value before the change), approximate two-sided
    ``p = 2·exp(-6K²/(T³ + T²))`` (good for p <= 0.5; capped at 1). ``U_t`` is computed from
    the ranks, ``t(n + 1) - 2·sum_{i<=t} r_i``, and the shift by selection, so memory is O(n)
    (100,000 values take megabytes, not the 74.5 GiB of the sign matrix). Returns one row:
    ``n``, ``K``, ``change_point``, ``p``, ``shift`` (median of x_j - x_i over j after,
    i up to the change; as R's ``wq::pett`` change.size), ``before`` and ``after``
    (medians), ``shift_pct`` (100·shift/|before|), ``min_effect`` and ``change``
    (p < alpha and |shift| >= min_effect, when min_effect is given).
    """
    alpha = v.alpha(alpha)
    x = v.sample(values, "values")
    n = len(x)
    if n < 3:
        raise ConfigError(f"pettitt needs at least 3 values, got {n}")
    u = pettitt_u(x)
    t = int(np.argmax(np.abs(u)))
    K = float(abs(u[t]))
    p = pettitt_p(K, n)
    before, after = x[: t + 1], x[t + 1 :]
    shift = median_difference(after, before)
    b = float(np.median(before))
    min_effect = None if min_effect is None else float(min_effect)
    out = pd.DataFrame(
        [
            {
                "n": n,
                "K": K,
                "change_point": t + 1,
                "p": p,
                "shift": shift,
                "before": b,
                "after": float(np.median(after)),
                "shift_pct": 100 * shift / abs(b) if b else np.nan,
                "min_effect": min_effect,
                "change": bool(p < alpha and (min_effect is None or abs(shift) >= min_effect)),
            }
        ]
    )
    return out


def changepoint(
    data: pd.DataFrame,
    *,
    response: str,
    factors: Sequence[str],
    campaign: str,
    order: Sequence | None = None,
    min_effect_pct: float = 2.0,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Change point over a series of campaigns of the same design.

    Each campaign is summarised by the mean over configurations of log(configuration
    mean / that configuration's mean over all campaigns) -- a level free of the design's
    own effects -- and :func:`pettitt` runs on that series (``order``: campaigns in
    time order; default their order of appearance). Returns pettitt's row with
    ``campaign_before`` (last campaign before the change), ``shift_pct`` as a percent
    change of the level (100·(exp(shift) - 1)) and ``change`` using ``min_effect_pct``;
    ``attrs["series"]``: the per-campaign level (percent from the overall level).
    """
    min_effect_pct = _min_effect(min_effect_pct)
    factors = v.names(factors, "factors")
    v.columns(v.frame(data), [*factors, campaign], "columns")
    y = v.response(data, response)
    if (y <= 0).any():
        raise ConfigError(f"response {response!r} must be > 0")
    d = data.assign(_ly=np.log(y))
    cm = d.groupby([campaign, *factors], observed=True, sort=False)["_ly"].mean().rename("m").reset_index()
    cm["m"] -= cm.groupby(factors, observed=True)["m"].transform("mean")
    level = cm.groupby(campaign, sort=False)["m"].mean()
    order = list(order) if order is not None else list(pd.unique(data[campaign]))
    missing = [c for c in order if c not in level.index]
    if missing or len(order) != len(level):
        raise ConfigError(f"order must list every campaign once; missing or extra: {missing or order}")
    series = level.loc[order]
    res = pettitt(series.to_numpy(), alpha=alpha)
    shift_pct = 100 * np.expm1(res.loc[0, "shift"])
    res["shift_pct"] = shift_pct
    res["min_effect"] = min_effect_pct
    res["change"] = bool(res.loc[0, "p"] < alpha and abs(shift_pct) >= min_effect_pct)
    res.insert(3, "campaign_before", order[int(res.loc[0, "change_point"]) - 1])
    res.attrs["series"] = 100 * np.expm1(series)
    return res
