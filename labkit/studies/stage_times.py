"""The timed stages of a run (the pipeline workload's ``stage_*_s`` metrics): how much of a run
lies outside them (:func:`untimed_share`) and their sum for campaigns stored before the workload
reported it (:func:`with_stages_total`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd


def untimed_share(
    tidy: pd.DataFrame, by: Sequence[str], *, response: str = "wall_time_s", stage_prefix: str = "stage_"
) -> pd.DataFrame:
    """How much of each run lies outside its timed stages, per group of ``by`` (e.g. platform and
    app): ``tidy`` is :func:`labkit.store.load_results`'s long table; a run's ``outside_s`` is
    its ``response`` less the sum of its ``<stage_prefix>*`` metrics (each the mean over the
    run's instances), counted over successful runs only. Returns ``by``, ``runs``, ``wall_s``,
    ``stages_s``, ``outside_s`` (means over the group's runs) and ``outside_pct`` (100 x
    outside_s / wall_s). ConfigError when a column is missing or no run has both the response
    and a stage."""
    import pandas as pd

    keys = list(by)
    missing = [c for c in ("run_id", "status", "metric", "value", *keys) if c not in tidy.columns]
    if missing:
        raise ConfigError(f"untimed_share: the results have no column {', '.join(missing)}")
    ok = tidy[tidy["status"] == "ok"]
    wide = ok.pivot_table(
        index=["run_id", *keys], columns="metric", values="value", aggfunc="mean", observed=True
    )
    stages = [m for m in wide.columns if str(m).startswith(stage_prefix)]
    if response not in wide.columns or not stages:
        raise ConfigError(f"untimed_share: no run reports {response!r} and {stage_prefix}* metrics")
    wide = wide[wide[response].notna() & wide[stages].notna().any(axis=1)]
    runs = pd.DataFrame({"wall_s": wide[response], "stages_s": wide[stages].sum(axis=1)})
    runs["outside_s"] = runs["wall_s"] - runs["stages_s"]
    out = (
        runs.groupby(level=keys, observed=True, sort=False)
        .agg(
            runs=("wall_s", "size"),
            wall_s=("wall_s", "mean"),
            stages_s=("stages_s", "mean"),
            outside_s=("outside_s", "mean"),
        )
        .reset_index()
    )
    if out.empty:
        raise ConfigError(
            f"untimed_share: no successful run reports {response!r} and {stage_prefix}* metrics"
        )
    out["outside_pct"] = 100 * out["outside_s"] / out["wall_s"]
    return out


def with_stages_total(
    tidy: pd.DataFrame, *, metric: str = "stages_s", stage_prefix: str = "stage_"
) -> pd.DataFrame:
    """``tidy`` (:func:`labkit.store.load_results`'s long table) plus a ``metric`` row, the sum of
    its ``<stage_prefix>*_s`` values, for each run instance that reports stage times but no
    ``metric``: the pipeline workload's timed work (``stages_s``) for campaigns stored before it
    reported it (its stages run back to back, so their sum is the time from the first stage's
    start to the last's end, up to rounding). Rows it adds copy the instance's first stage row
    (its run's columns). ConfigError when a column is missing."""
    import pandas as pd

    missing = [c for c in ("run_id", "metric", "value") if c not in tidy.columns]
    if missing:
        raise ConfigError(f"with_stages_total: the results have no column {', '.join(missing)}")
    keys = [c for c in ("campaign", "run_id", "instance") if c in tidy.columns]
    names = tidy["metric"].astype(str)
    stages = tidy[names.str.startswith(stage_prefix) & names.str.endswith("_s") & (names != metric)]
    if stages.empty:
        return tidy
    have = tidy.loc[names == metric, keys].drop_duplicates()
    todo = stages.merge(have, on=keys, how="left", indicator=True)
    todo = todo[todo["_merge"] == "left_only"].drop(columns="_merge")
    if todo.empty:
        return tidy
    grouped = todo.groupby(keys, sort=False, dropna=False)
    added = grouped.head(1).assign(metric=metric).drop(columns="value")
    added = added.merge(grouped["value"].sum(min_count=1).rename("value").reset_index(), on=keys, how="left")
    return pd.concat([tidy, added[tidy.columns]], ignore_index=True)
