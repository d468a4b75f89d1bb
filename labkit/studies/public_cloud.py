"""Seed 003's public-cloud analyses (notebook 05a), from the thesis's own tables.

* :func:`cluster_cost_efficiency`: Table 5.1 run times and Table 4.1 prices -> performance and
  cost efficiency per instance type.
* :func:`stated_gains`: the performance gains section 5.2.2 states, recomputed from Table 5.1 with
  a confidence interval and a Welch test each.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd


def cluster_cost_efficiency(times: pd.DataFrame, prices: pd.DataFrame) -> pd.DataFrame:
    """Performance and cost efficiency per application and instance type (Maliszewski 2021,
    Figures 5.1-5.4), from Table 5.1 (``app``, ``instance``, ``mean_s``, ``ci_s``) and Table 4.1
    (``instance``, ``instances``, ``price_per_hour_usd``).

    Returns one row per app and instance: the ``times`` columns, ``cluster_price`` (US$/h of all
    the instances of a cluster), ``speedup_vs_slowest`` (slowest mean time of the app / this
    one), ``perf_rank`` (1 = fastest), ``relative_ci`` (ci_s / mean_s), and from
    :func:`labkit.stats.cost_efficiency`: ``executions_per_hour``, ``cost_efficiency``
    (executions per US$), ``rank`` (1 = most cost-efficient) and ``vs_best``.
    """
    from ..stats import cost_efficiency

    for name, frame, cols in (
        ("times", times, ("app", "instance", "mean_s", "ci_s")),
        ("prices", prices, ("instance", "instances", "price_per_hour_usd")),
    ):
        missing = sorted(set(cols) - set(frame.columns))
        if missing:
            raise ConfigError(f"cluster_cost_efficiency: {name} lacks columns {missing}")
    unknown = sorted(set(times.instance) - set(prices.instance))
    if unknown:
        raise ConfigError(f"cluster_cost_efficiency: no price for instance type(s) {unknown}")
    p = prices[["instance", "instances", "price_per_hour_usd"]].copy()
    p["cluster_price"] = p.price_per_hour_usd * p.instances
    data = times.merge(p[["instance", "cluster_price"]], on="instance")
    g = data.groupby("app")["mean_s"]
    data["speedup_vs_slowest"] = g.transform("max") / data.mean_s
    data["perf_rank"] = g.rank(method="min").astype(int)
    data["relative_ci"] = data.ci_s / data.mean_s
    return cost_efficiency(data, time="mean_s", price="cluster_price", by="app")


def stated_gains(
    times: pd.DataFrame, gains: pd.DataFrame, *, n: int = 30, ci_z: float = 3.0, alpha: float = 0.05
) -> pd.DataFrame:
    """Seed 003's stated performance gains (section 5.2.2) recomputed from Table 5.1, with
    what the thesis did not report: a confidence interval for each gain and a Welch test.

    ``times``: Table 5.1 (``app``, ``instance``, ``mean_s``, ``ci_s``: half-width of a
    Gaussian interval at ``ci_z`` standard errors, 3 for the thesis's 99.7 %); ``gains``:
    ``app``, ``faster``, ``slower``, ``stated_pct``; ``n`` replications per mean (30).
    Returns ``gains`` plus ``computed_pct`` (100 (t_slower / t_faster - 1)), ``diff_pp``
    (computed - stated, percentage points), ``ci_low``/``ci_high`` (1 - alpha interval of the
    gain in %, from the log ratio's standard error by the delta method), ``t``, ``df``, ``p``
    (Welch's test of equal means from the summary statistics, SD = ci_s / ci_z x sqrt(n)).
    """
    import numpy as np
    import pandas as pd
    from scipy import stats as sps

    t = times.set_index(["app", "instance"])
    rows = []
    for g in gains.itertuples(index=False):
        try:
            slow, fast = t.loc[(g.app, g.slower)], t.loc[(g.app, g.faster)]
        except KeyError as exc:
            raise ConfigError(f"stated_gains: no Table 5.1 row for {exc.args[0]}") from None
        se_s, se_f = slow.ci_s / ci_z, fast.ci_s / ci_z
        r = slow.mean_s / fast.mean_s
        se_log = math.hypot(se_s / slow.mean_s, se_f / fast.mean_s)
        zq = sps.norm.ppf(1 - alpha / 2)
        w = sps.ttest_ind_from_stats(
            slow.mean_s, se_s * math.sqrt(n), n, fast.mean_s, se_f * math.sqrt(n), n, equal_var=False
        )
        df = (se_s**2 + se_f**2) ** 2 / (se_s**4 / (n - 1) + se_f**4 / (n - 1))
        rows.append(
            {
                **g._asdict(),
                "computed_pct": 100 * (r - 1),
                "diff_pp": 100 * (r - 1) - g.stated_pct,
                "ci_low": 100 * (r * np.exp(-zq * se_log) - 1),
                "ci_high": 100 * (r * np.exp(zq * se_log) - 1),
                "t": float(w.statistic),
                "df": df,
                "p": float(w.pvalue),
            }
        )
    return pd.DataFrame(rows)


__all__ = ["cluster_cost_efficiency", "stated_gains"]
