"""Treatments that did not take, from the runs' manipulation checks (issue 41, item 4).

Each run stores, in its metadata, what :mod:`labkit.run.treatments` read of its treatments:
``treatments: {factor: {"level", "verified" (true | false | null), "observed", "how"}}``. A
factor with runs whose treatment did not take (``verified`` false) is not concluded on: its
"no difference" may only say that the treatment never happened. :func:`untaken` counts them per
factor and level and says so in a sentence ("KSM on merged no pages in 30 of 30 runs: the
treatment did not take"). Pure: it reads the ``runs`` table (:meth:`Store.runs
<labkit.store.Store.runs>`), nothing else.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["COLUMNS", "untaken"]

COLUMNS = ["factor", "level", "runs", "failed", "verified", "unknown", "sentence"]

#: what a failed check of a factor means, in words ("<factor> <level> <what> in k of n runs")
WHAT_FAILED = {
    "ksm": "merged no pages",
    "affinity": "was not seen inside the instance (its allowed CPUs differed)",
    "vcpus": "was not seen inside the instance (its CPU limit differed)",
    "memory_mb": "was not seen inside the instance (its memory limit differed)",
    "noise": "had no neighbour using the CPU",
    "neighbours": "had fewer neighbours using the CPU than asked for",
    "count": "ran another number of instances",
    "link": "was not what the link carried (its qdisc was missing or another, or traffic beat its rate)",
}
NAMES = {"ksm": "KSM", "memory_mb": "memory_mb", "vcpus": "vcpus"}


def _level_text(level: Any) -> str:
    return str(level)


def untaken(runs: pd.DataFrame) -> pd.DataFrame:
    """Per factor and level with manipulation checks in ``runs`` (a store's runs table, column
    ``metadata``): ``runs`` (runs checked), ``failed`` (``verified`` false: "treatment not
    applied"), ``verified`` (true), ``unknown`` (null: not readable on that run or backend) and
    ``sentence``: for a level with failed runs, "KSM on merged no pages in 30 of 30 runs: the
    treatment did not take" (", in part" when some runs took it); else None. Sorted by factor,
    then level as first seen. Runs without checks (older stores, ``treatment_checks: false``,
    runs not run) are left out; an empty frame with :data:`COLUMNS` when none has any."""
    if runs is None or runs.empty or "metadata" not in runs:
        return pd.DataFrame(columns=COLUMNS)
    counts: dict[tuple[str, str], dict[str, int]] = {}
    order: dict[tuple[str, str], int] = {}
    for md in runs["metadata"]:
        checks = (md or {}).get("treatments") if isinstance(md, dict) else None
        if not isinstance(checks, dict):
            continue
        for factor, rec in checks.items():
            if not isinstance(rec, dict) or factor.startswith("_"):
                continue
            key = (str(factor), _level_text(rec.get("level")))
            c = counts.setdefault(key, {"runs": 0, "failed": 0, "verified": 0, "unknown": 0})
            order.setdefault(key, len(order))
            c["runs"] += 1
            v = rec.get("verified")
            c["failed" if v is False else "verified" if v is True else "unknown"] += 1
    rows = []
    for (factor, level), c in counts.items():
        sentence = None
        if c["failed"]:
            what = WHAT_FAILED.get(factor, "failed its check")
            took = "did not take" if c["failed"] == c["runs"] else "did not take in part"
            sentence = (
                f"{NAMES.get(factor, factor)} {level} {what} in {c['failed']} of {c['runs']} runs: "
                f"the treatment {took}"
            )
        rows.append(
            {"factor": factor, "level": level, **c, "sentence": sentence, "_order": order[(factor, level)]}
        )
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.DataFrame(rows).sort_values(["factor", "_order"], kind="stable").drop(columns="_order")
    out = out[COLUMNS].reset_index(drop=True)
    out["sentence"] = pd.Series(
        [r["sentence"] for r in sorted(rows, key=lambda r: (r["factor"], r["_order"]))], dtype=object
    )
    return out
