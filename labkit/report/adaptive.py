"""Adaptive stopping's intervals: the pilot runs of an adaptive design (:func:`adaptive_pilot`)
and Stein's two-stage interval for each configuration's mean (:func:`stein_summary`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = ["adaptive_pilot", "stein_summary"]


def adaptive_pilot(meta: dict) -> int:
    """The pilot runs (``min``) of an adaptive design's replication, or 0 when not adaptive."""
    reps = ((meta or {}).get("design") or {}).get("replications")
    if isinstance(reps, dict):
        pilot = reps.get("min", 3)
        return int(pilot) if isinstance(pilot, int) and pilot >= 2 else 0
    return 0


def stein_summary(
    summary: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    by: Sequence[str],
    response: str,
    pilot: int,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """``summary`` (:func:`labkit.stats.summarize`, one row per configuration of ``by``) with the
    mean's interval (``ci_low``, ``ci_high``) replaced by Stein's two-stage interval
    (:func:`labkit.stats.stein_ci`, the first ``pilot`` runs of each configuration in run order)
    where a configuration has ``pilot`` runs or more, and a column ``interval`` saying which
    ("stein" or "fixed-n"); ``attrs["interval"]`` = "adaptive stopping: Stein's two-stage interval"."""
    from ..stats import stein_ci

    out = summary.copy()
    out["interval"] = "fixed-n"
    keys = list(by)
    ordered = runs.sort_values("run_order", kind="stable")
    for i, row in out.iterrows():
        sel = np.ones(len(ordered), dtype=bool)
        for f in keys:
            sel &= (ordered[f] == row[f]).to_numpy()
        x = ordered.loc[sel, response].to_numpy(float)
        if len(x) >= pilot and np.std(x[:pilot]) >= 0:
            s = stein_ci(x, pilot=pilot, confidence=confidence).iloc[0]
            out.loc[i, ["ci_low", "ci_high"]] = [s.ci_low, s.ci_high]
            out.loc[i, "interval"] = "stein"
    out.attrs = dict(summary.attrs, interval="adaptive stopping: Stein's two-stage interval")
    return out
