"""Forgetting stored runs so that they run again: the failed ones (``--retry-failed``, ``retries``)
and, for quarantine, the ones flagged suspect.

Each run forgotten leaves the store's ``runs`` (and with it its measurements) but stays in
:meth:`Store.attempts <labkit.store.Store.attempts>`; the functions return the runs to execute
again, as runs of the plan or, for runs an adaptive round added, rebuilt from the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from ..design import Design, Run
    from .store import Store

__all__ = ["forget_failed", "forget_suspect"]


def forget_failed(store: Store, design: Design, plan: list[Run]) -> list[Run]:
    """Forget the runs stored as failed, timed out or host-lost so they run again (each stays in
    ``store.attempts()``); returns them as runs of ``plan`` or, for runs an adaptive round added,
    rebuilt from the store (configuration, replicate and order as stored)."""
    runs = store.runs()
    if runs.empty:
        return []
    return _forget(store, design, plan, runs[runs.status != "ok"])


def forget_suspect(store: Store, design: Design, plan: list[Run]) -> list[Run]:
    """Quarantine: forget the runs stored ok but flagged suspect (:mod:`labkit.run.guard`) so they run
    again, each first attempt kept in ``store.attempts()`` as :func:`forget_failed` keeps it; a run
    already run again for being suspect (an attempt of it was suspect) is not quarantined twice."""
    runs = store.runs()
    if runs.empty:
        return []
    attempts = store.attempts()
    again = {a.run_id for a in attempts.itertuples() if (a.metadata or {}).get("suspect")}
    return _forget(store, design, plan, runs[(runs.status == "ok") & runs.suspect & ~runs.run_id.isin(again)])


def _forget(store: Store, design: Design, plan: list[Run], bad: pd.DataFrame) -> list[Run]:
    """Forget the stored runs of the frame ``bad`` (rows of ``store.runs()``); returns them as runs
    of ``plan`` (their boots kept) or rebuilt from the store."""
    from ..design import Run

    if bad.empty:
        return []
    known = {r.run_id: r for r in plan}
    configs = design.configurations()
    out = [
        known.get(row.run_id)
        or Run(
            row.run_id,
            int(row.run_order),
            int(row.config),
            int(row.replicate),
            dict(configs[int(row.config)]),
        )
        for row in bad[["run_id", "run_order", "config", "replicate"]].itertuples()
    ]
    store.delete_runs(bad.run_id)
    return out
