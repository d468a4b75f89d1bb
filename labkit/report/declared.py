"""The factor levels in the order the stored design declares them (:func:`declared_levels`), and
tables sorted that way (:func:`sorted_as_declared`)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ..stats import validate as v

__all__ = ["declared_levels", "sorted_as_declared"]


def declared_levels(
    meta: dict | None, factors: Sequence[str], data: pd.DataFrame | None = None
) -> dict[str, v.DesignOrder]:
    """``{factor: its levels in the order the stored design declares them}`` for each of
    ``factors`` that ``meta["design"]["factors"]`` (a store's metadata) lists with a list of
    levels: the order every analysis, table and figure of a campaign keeps (the first level is the
    low level of a two-level factor, so ``noise: [none, memory]`` reads "from none to memory").
    Given ``data`` (rows with the factor columns), a factor whose column holds a level the design
    does not list is left out, and its levels then sort as :func:`labkit.stats.validate.level_order`
    sorts them. Factors the design does not declare are left out too."""
    declared = ((meta or {}).get("design") or {}).get("factors") or {}
    out: dict[str, v.DesignOrder] = {}
    if not isinstance(declared, dict):
        return out
    for f in factors:
        levels = declared.get(f)
        if not isinstance(levels, list) or not levels:
            continue
        if data is not None and f in data.columns:
            listed = set(levels) if all(isinstance(x, str | int | float | bool) for x in levels) else None
            if listed is None or any(v.scalar(x) not in listed for x in pd.unique(data[f].dropna())):
                continue
        out[f] = v.DesignOrder(levels)
    return out


def sorted_as_declared(table: pd.DataFrame, by: Sequence[str], order: dict) -> pd.DataFrame:
    """``table`` (one row per configuration of ``by``) with its rows in the declared level order of
    ``order`` (:func:`declared_levels`; other columns of ``by`` keep their sorted order); ``attrs``
    kept."""
    keys = [f for f in by if f in table.columns]
    if table.empty or not any(f in order for f in keys):
        return table
    pos = {f: {lv: i for i, lv in enumerate(order[f])} for f in keys if f in order}
    out = table.sort_values(
        keys, key=lambda s: s.map(pos[s.name]) if s.name in pos else s, kind="stable"
    ).reset_index(drop=True)
    out.attrs = dict(table.attrs)
    return out
