"""Shape a store's tidy rows into analysis tables (store → stats, never the other way)."""
from __future__ import annotations

from .errors import ConfigError


def responses(tidy, metric: str, factors: list[str], *, how: str = "mean"):
    """One row per successful run: factor columns, ``replicate``, ``run_id`` and ``metric``.

    When ``count`` > 1 instances ran, their values are combined with ``how``
    ("mean", "max" or "min"). Runs that failed or timed out are left out;
    ``attrs["excluded"]`` counts them so notebooks can say so.
    """
    if how not in ("mean", "max", "min"):
        raise ConfigError(f"responses: how={how!r}; use mean, max or min")
    missing = [c for c in factors if c not in tidy.columns]
    if missing:
        raise ConfigError(f"responses: factor column(s) {missing} not in results; have {list(tidy.columns)}")
    ok = tidy[(tidy["status"] == "ok") & (tidy["metric"] == metric)]
    if ok.empty:
        metrics = sorted(m for m in tidy["metric"].dropna().unique())
        raise ConfigError(f"responses: no successful rows for metric {metric!r}; metrics present: {metrics}")
    out = (ok.groupby(["run_id", "replicate", *factors], sort=False, observed=True)["value"]
             .agg(how).rename(metric).reset_index())
    out.attrs["excluded"] = int(tidy.loc[tidy["status"] != "ok", "run_id"].nunique())
    return out
