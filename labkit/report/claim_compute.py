"""Computing a :class:`~labkit.report.claim_sources.Measured` claim from the store.

:func:`compute` recomputes a claim's numbers (value, interval, runs behind it, invalid runs
left out) from the stored campaigns it names, without the notebook's code; :func:`measured_claim`
makes the :class:`~labkit.report.claims.Claim` from them; :func:`run_values` gives the per-run
values both rest on and :func:`with_fixed_params` lets a claim select on a campaign's fixed
workload parameters (or its one platform). :mod:`labkit.report.claims` says what each statistic
and verdict means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ConfigError
from .claim_sources import Measured
from .claim_verdicts import mean_interval
from .claims import Claim

__all__ = ["compute", "measured_claim", "run_values", "with_fixed_params"]


def run_values(
    data_dir: str | Path, measured: Measured, *, tidy: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, int]:
    """``(runs, excluded)``: one row per successful run of ``measured.campaigns`` with a value
    of ``measured.metric`` (the mean over the run's instances, column ``value``) and the run's
    columns (campaign, factors), after ``measured.exclude``; ``excluded`` counts the runs that
    rule left out. ``tidy``: the campaigns' tidy results, if already loaded."""
    from ..store import load_results
    from .validity import rule, screen

    if tidy is None:
        tidy = pd.concat(
            [
                with_fixed_params(
                    load_results(data_dir, c), data_dir, c, {**measured.select, **(measured.baseline or {})}
                )
                for c in measured.campaigns
            ],
            ignore_index=True,
        )
    tidy = tidy[tidy.status == "ok"]
    if "campaign" in tidy.columns and tidy.campaign.nunique() > 1:  # run ids repeat across campaigns
        tidy = tidy.assign(run_id=tidy.campaign.astype(str) + "/" + tidy.run_id.astype(str))
    excluded = 0
    all_runs = tidy.drop_duplicates("run_id")
    if measured.exclude:
        tidy, bad = screen(tidy, [rule(measured.exclude)])
        excluded = int(bad.run_id.nunique())
        # only the runs the claim selects count
        if excluded:
            runs = all_runs[all_runs.run_id.isin(bad.run_id)]
            excluded = int(len(_select(runs, measured.select)))
    rows = tidy[tidy.metric == measured.metric]
    keep = [
        c
        for c in rows.columns
        if c
        not in ("metric", "value", "unit", "instance", "error", "started", "duration_s", "fingerprint_id")
    ]
    per_run = (
        rows.groupby("run_id", sort=True)
        .value.mean()
        .rename("value")
        .reset_index()
        .merge(rows[keep].drop_duplicates("run_id"), on="run_id")
    )
    return per_run, excluded


def with_fixed_params(
    tidy: pd.DataFrame, data_dir: str | Path, campaign: str, keys: Mapping[str, Any]
) -> pd.DataFrame:
    """``tidy`` with a constant column for each of ``keys`` that is not a factor of ``campaign``
    but one of its fixed workload parameters (a one-level ``app`` set in the workload's
    parameters instead of the design), or ``platform`` in a campaign without that factor (one
    platform: its backend, as :func:`labkit.store.results.load_campaigns` labels its rows), so
    a claim selects on it either way: a claim on another platform then selects no run and is
    ``not measured`` instead of failing on a missing column."""
    from ..store import Store

    missing = [k for k in keys if k not in tidy.columns]
    if not missing:
        return tidy
    with Store(Path(data_dir) / campaign / "store.sqlite", readonly=True) as st:
        meta = st.meta()
    params = dict((meta.get("workload") or {}).get("params") or {})
    if "platform" not in params and meta.get("backend"):
        params["platform"] = meta["backend"]
    fixed = {k: params[k] for k in missing if params.get(k) is not None}
    return tidy.assign(**fixed) if fixed else tidy


def _select(runs: pd.DataFrame, where: Mapping[str, Any]) -> pd.DataFrame:
    for k, v in where.items():
        if k not in runs.columns:
            raise ConfigError(f"claims: the runs have no column {k!r} (have {list(runs.columns)})")
        runs = runs[runs[k].astype(str) == str(v)]
    return runs


def compute(
    measured: Measured, data_dir: str | Path, *, alpha: float = 0.05, tidy: pd.DataFrame | None = None
) -> dict:
    """``value``, ``low``, ``high``, ``n``, ``n_base`` and ``excluded`` of ``measured`` from
    the store under ``data_dir`` (see :class:`Measured` for each statistic)."""
    from ..stats import fieller_ratio

    runs, excluded = run_values(data_dir, measured, tidy=tidy)
    sel = _select(runs, measured.select)
    out: dict[str, Any] = {
        "value": math.nan,
        "low": math.nan,
        "high": math.nan,
        "n": int(len(sel)),
        "n_base": None,
        "excluded": excluded,
    }
    st = measured.statistic
    if st == "runs":
        out["value"] = float(len(sel))
    elif st == "excluded":
        out["value"] = float(excluded)
    elif st == "mean":
        m = mean_interval(sel.value, alpha=alpha)
        out.update(value=m["mean"], low=m["low"], high=m["high"])
        out["spread"] = {"kind": "mean", "x": [float(x) for x in sel.value]}
    elif st in ("slowdown_pct", "change_pct"):
        base = _select(runs, measured.baseline or {})
        out["n_base"] = int(len(base))
        if len(sel) and len(base):
            num, den = sel.value.to_numpy(float), base.value.to_numpy(float)
            if st == "slowdown_pct" and not measured.lower_is_better:
                num, den = den, num
            f = fieller_ratio(num, den, alpha=alpha)
            out.update(
                value=100 * (f["ratio"] - 1), low=100 * (f["ci_low"] - 1), high=100 * (f["ci_high"] - 1)
            )
            out["spread"] = {"kind": st, "x": [float(x) for x in num], "y": [float(x) for x in den]}
    elif st == "rank":
        col, ranked = next(iter(measured.select.items()))
        groups = {lvl: [float(x) for x in _select(runs, {col: lvl}).value] for lvl in measured.levels}
        groups = {k: g for k, g in groups.items() if g}
        higher = not measured.lower_is_better
        if (
            str(ranked) in groups and len(groups) > 1
        ):  # a ranking of one level (one platform run) is not measured
            order = sorted(groups, key=lambda k: float(np.mean(groups[k])), reverse=higher)
            out["value"] = float(order.index(str(ranked)) + 1)
        out["spread"] = {"kind": "rank", "groups": groups, "level": str(ranked), "higher_is_better": higher}
    elif st == "share":
        from ..stats import factorial_effects

        eff = factorial_effects(sel, factors=list(measured.factors), response="value", alpha=alpha)
        pct = eff.set_index("term")["pct_variation"]
        out["value"] = float(sum(pct.get(t, 0.0) for t in measured.terms))
    return out


def measured_claim(
    key: str,
    what: str,
    measured: Measured,
    data_dir: str | Path,
    *,
    unit: str,
    alpha: float = 0.05,
    tidy: pd.DataFrame | None = None,
    **kwargs: Any,
) -> Claim:
    """A :class:`Claim` whose numbers :func:`compute` takes from the store; ``kwargs`` go to
    :class:`Claim` (``paper``, ``comparable``, ``why``, ``note``)."""
    c = compute(measured, data_dir, alpha=alpha, tidy=tidy)
    kwargs.setdefault("spread", c.get("spread"))
    kwargs.setdefault("alpha", alpha)
    return Claim(
        key=key,
        what=what,
        value=c["value"],
        low=c["low"],
        high=c["high"],
        n=c["n"],
        n_base=c["n_base"],
        unit=unit,
        source=measured,
        excluded=c["excluded"],
        **kwargs,
    )
