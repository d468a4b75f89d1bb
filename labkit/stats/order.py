"""Order effects: does the response depend on when a run ran, or on the run before it?

A randomized run order spreads a slow trend (a host warming up, a filling disk) and carry-over
(a run leaving caches, page cache or thermal state to the next one) over the configurations, so
that neither biases an effect; but it only *spreads* them: a strong trend or carry-over still
widens the error and, with few runs, can fall unevenly on one level. :func:`order_effects` looks
for both in the residuals of each host's runs (the response minus its configuration's mean, so
the design's effects are out), in the order the host ran them:

* **trend**: Spearman's rank correlation of the residual with the run's position on its host
  (``rho``, two-sided ``p_trend``, scipy's ``spearmanr``), with the least-squares slope of the
  residual on the position (``slope``, in the response's unit per run) to say how large it is;
* **carry-over**: the previous run's configuration on the same host as a factor, the
  Kruskal-Wallis test of the residuals across the previous configurations (``H``, ``p_carry``,
  scipy's ``kruskal``; groups of fewer than 2 runs left out; not tested with fewer than 2
  groups).

The randomization is to be trusted on a host when neither test is significant at ``alpha``
after Holm over the tests made (two per host): ``trusted``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v
from .multitest import adjust_p

__all__ = ["ORDER_COLUMNS", "order_effects"]

ORDER_COLUMNS = [
    "host",
    "n",
    "rho",
    "p_trend",
    "slope",
    "groups",
    "H",
    "p_carry",
    "p_trend_adj",
    "p_carry_adj",
    "trend",
    "carryover",
    "trusted",
]

#: fewest runs on a host for the trend test
MIN_RUNS = 6


def order_effects(
    data: pd.DataFrame,
    *,
    response: str,
    factors: Sequence[str],
    order: str = "run_seq",
    by: str | None = "host",
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Trend and carry-over in each host's run order (module docstring).

    ``data``: one row per run with ``response``, the ``factors`` (a configuration is one
    combination of their levels), ``order`` (the run's position on its host) and ``by`` (the
    host; None: all runs are one series).

    Returns one row per host with at least :data:`MIN_RUNS` runs (in host order):

    * ``host``; ``n`` (runs);
    * ``rho``, ``p_trend``: Spearman's correlation of the residual with ``order`` and its
      two-sided p-value;
    * ``slope``: the least-squares slope of the residual on ``order`` (response unit per run);
    * ``groups``: previous configurations with at least 2 runs (the carry-over test's groups);
    * ``H``, ``p_carry``: Kruskal-Wallis of the residuals across those groups (NaN with fewer
      than 2 groups);
    * ``p_trend_adj``, ``p_carry_adj``: Holm over every test made (both kinds, every host);
    * ``trend``, ``carryover``: the adjusted p below ``alpha``;
    * ``trusted``: neither.

    ``attrs``: ``alpha``, ``response``, ``order``, ``by``, ``short`` (hosts with fewer than
    :data:`MIN_RUNS` runs, not tested), ``tests`` (how many tests Holm corrected over).
    ConfigError for a missing column, a non-numeric order or response, and no host with enough
    runs.
    """
    alpha = v.alpha(alpha)
    data = v.frame(data, "data")
    factors = v.names(factors, "factors")
    need = [response, order, *factors] + ([by] if by is not None else [])
    v.columns(data, need, "columns")
    y = v.response(data, response)
    pos = pd.to_numeric(data[order], errors="coerce").to_numpy(float)
    if not np.isfinite(pos).all():
        raise ConfigError(f"order_effects: column {order!r} must hold each run's position (numbers)")
    d = data[[*factors] + ([by] if by is not None else [])].copy()
    d["_y"], d["_pos"] = y, pos
    # the configuration as a group number (a row-wise string join took 4 s at 100,000 runs)
    d["_config"] = d.groupby(list(factors), sort=True, dropna=False).ngroup() if factors else 0
    d["_res"] = d["_y"] - d.groupby("_config", sort=False)["_y"].transform("mean")
    groups = d.groupby(by, sort=True) if by is not None else [("all", d)]
    rows, short = [], []
    for host, part in groups:
        host = host[0] if isinstance(host, tuple) else host
        part = part.sort_values("_pos", kind="stable")
        if len(part) < MIN_RUNS:
            short.append(host)
            continue
        res, x = part["_res"].to_numpy(float), part["_pos"].to_numpy(float)
        if np.ptp(res) == 0:
            rho, p_trend, slope = 0.0, 1.0, 0.0
        else:
            rho, p_trend = (float(z) for z in sps.spearmanr(x, res))
            slope = float(np.polyfit(x, res, 1)[0])
        prev = part["_config"].shift(1)
        cur = pd.DataFrame({"prev": prev, "res": res}).dropna()
        samples = [g["res"].to_numpy(float) for _, g in cur.groupby("prev", sort=True) if len(g) >= 2]
        if len(samples) >= 2 and np.ptp(np.concatenate(samples)) > 0:
            h, p_carry = (float(z) for z in sps.kruskal(*samples))
        else:
            h, p_carry = np.nan, np.nan
        rows.append(
            {
                "host": host,
                "n": len(part),
                "rho": rho,
                "p_trend": p_trend,
                "slope": slope,
                "groups": len(samples),
                "H": h,
                "p_carry": p_carry,
            }
        )
    if not rows:
        raise ConfigError(
            f"order_effects: no host has {MIN_RUNS} runs or more (runs per host: {len(d)} in all)"
        )
    out = pd.DataFrame(rows)
    ps = np.concatenate([out["p_trend"].to_numpy(float), out["p_carry"].to_numpy(float)])
    ok = np.isfinite(ps)
    adj = np.full(len(ps), np.nan)
    adj[ok] = adjust_p(ps[ok], method="holm")
    out["p_trend_adj"], out["p_carry_adj"] = adj[: len(out)], adj[len(out) :]
    out["trend"] = out["p_trend_adj"] < alpha
    out["carryover"] = out["p_carry_adj"] < alpha  # NaN (not tested) -> False
    out["trusted"] = ~(out["trend"] | out["carryover"])
    out = out[ORDER_COLUMNS]
    out.attrs.update(alpha=alpha, response=response, order=order, by=by, short=short, tests=int(ok.sum()))
    return out
