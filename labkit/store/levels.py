"""The levels a run belongs to (host, instance, boot, run_seq) and its suspect flag, read from its metadata.

A campaign records, with each run (:mod:`labkit.run.engine`, :mod:`labkit.run.campaign`), ``host``,
``run_seq`` (1-based order of the run on its host, in execution order; None for a run that never
started because an earlier run of its boot failed), the instances it ran on (``instances``: each
one's ``name``, unique per started instance, its ``index`` in the run and ``boot``, its start count
within the campaign) and ``suspect`` (why the quiet-host guard doubts it, or None:
:mod:`labkit.run.guard`). A store written before levels were recorded holds none of these but
``host`` (and not always that): its runs are read as each having had fresh instances, id
``<run_id>:<index>``, booted once, and ``run_seq`` is the order of their start times on each host.
:func:`fill_levels` does the same for a results table without those columns (a ``results.csv``
exported before them): the one place stores and tables of before get their levels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

#: the level columns of :meth:`Store.tidy <labkit.store.Store.tidy>` besides ``host`` and the
#: instance's id (``instance``)
LEVEL_COLUMNS = ("instance_index", "boot", "run_seq", "iteration", "suspect", "suspect_reason")


@dataclass
class RunLevels:
    """One run's levels; :meth:`instance` gives an instance index's id and boot."""

    run_id: str
    host: str | None
    run_seq: int | None
    recorded: bool  # False: a store of before (levels inferred)
    names: dict[int, str] = field(default_factory=dict)
    boots: dict[int, int] = field(default_factory=dict)
    suspect_reason: str | None = None

    def instance(self, index: int | None) -> tuple[str | None, int | None]:
        """(instance id, boot) of the run's instance ``index`` (None, None for a row without one)."""
        if index is None:
            return None, None
        index = int(index)
        return self.names.get(index, f"{self.run_id}:{index}"), self.boots.get(index, 1)


def _int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    with contextlib.suppress(TypeError, ValueError):
        if isinstance(value, float) and value.is_integer():
            return int(value)
    return None


def run_levels(runs: Iterable[tuple[str, int, str, dict]]) -> dict[str, RunLevels]:
    """``run_id -> RunLevels`` from ``(run_id, run_order, started, metadata)`` of every stored run
    (see the module docstring for stores of before)."""
    out: dict[str, RunLevels] = {}
    inferred: dict[str | None, list[tuple[str, int, str]]] = {}
    for rid, order, started, md in runs:
        md = md if isinstance(md, dict) else {}
        host = md.get("host") if isinstance(md.get("host"), str) else None
        reason = md.get("suspect")
        lv = RunLevels(rid, host, None, "run_seq" in md, suspect_reason=str(reason) if reason else None)
        if lv.recorded:
            lv.run_seq = _int(md.get("run_seq"))
            for inst in md.get("instances") or []:
                index = _int(inst.get("index")) if isinstance(inst, dict) else None
                if index is None or not isinstance(inst.get("name"), str):
                    continue
                lv.names[index] = inst["name"]
                lv.boots[index] = _int(inst.get("boot")) or 1
        else:
            inferred.setdefault(host, []).append((str(started), int(order), rid))
        out[rid] = lv
    for rows in inferred.values():
        for seq, (_, _, rid) in enumerate(sorted(rows), start=1):
            out[rid].run_seq = seq
    return out


def fill_levels(tidy: pd.DataFrame) -> pd.DataFrame:
    """``tidy`` (rows of :meth:`Store.tidy <labkit.store.Store.tidy>`) with every level column, those
    it lacks filled as :func:`run_levels` reads a store of before: a table without
    ``instance_index`` holds the instance's index in ``instance``, which becomes ``instance_index``
    and the id ``<run_id>:<index>``; boot 1; ``run_seq`` the order of the runs' start times (ties by
    run order) on each ``host``; iteration NA; nothing suspect. Columns it has are kept as they are."""
    import pandas as pd

    t = tidy.copy()
    if "instance_index" not in t.columns:
        t["instance_index"] = (
            pd.to_numeric(t["instance"], errors="coerce") if "instance" in t.columns else pd.NA
        )
        t = t.drop(columns=["instance"], errors="ignore")
    t["instance_index"] = t["instance_index"].astype("Int64")
    missing = [c for c in ("instance", "boot", "run_seq") if c not in t.columns]
    if missing:
        hosts = t["host"] if "host" in t.columns else pd.Series([None] * len(t), index=t.index)
        started = t["started"] if "started" in t.columns else pd.Series([""] * len(t), index=t.index)
        runs = pd.DataFrame(
            {"run_id": t["run_id"], "run_order": t["run_order"], "started": started, "host": hosts}
        ).drop_duplicates("run_id")
        levels = run_levels(
            (rid, order, st, {"host": h} if isinstance(h, str) else {})
            for rid, order, st, h in runs.itertuples(index=False, name=None)
        )
        found = [
            levels[rid].instance(None if pd.isna(i) else int(i))
            for rid, i in zip(t["run_id"], t["instance_index"])
        ]
        if "instance" in missing:
            t["instance"] = [name for name, _ in found]
        if "boot" in missing:
            t["boot"] = [boot for _, boot in found]
        if "run_seq" in missing:
            t["run_seq"] = [levels[rid].run_seq for rid in t["run_id"]]
    if "iteration" not in t.columns:
        t["iteration"] = pd.NA
    for col in ("boot", "run_seq", "iteration"):
        t[col] = t[col].astype("Int64")
    t["suspect"] = t["suspect"] if "suspect" in t.columns else False
    t["suspect"] = t["suspect"].astype("boolean").fillna(False).astype(bool)
    if "suspect_reason" not in t.columns:
        t["suspect_reason"] = None
    return t


def boot_key(run_id: str, metadata: dict) -> str:
    """The boot a run's instances belong to: its ``boot_group`` (the runs of one boot share it,
    :attr:`labkit.design.Run.boot_group`), else its own run id (a run of before: its own boot)."""
    group = metadata.get("boot_group") if isinstance(metadata, dict) else None
    return group if isinstance(group, str) and group else run_id


def key_instances(names: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """``(boot key, name) -> instance id``: the name itself when only one boot used it, else
    ``<name>@<boot key>``, so that an instance name drawn twice (:func:`labkit.backends.base.new_name`
    makes that all but impossible) never joins two boots' runs into one instance in the level
    analysis or in the ``instance`` column. ``names``: the (boot key, name) of every recorded
    instance of the store."""
    boots: dict[str, set[str]] = {}
    for key, name in names:
        boots.setdefault(name, set()).add(key)
    return {
        (key, name): name if len(keys) == 1 else f"{name}@{key}"
        for name, keys in boots.items()
        for key in keys
    }


def rekey(levels: dict[str, RunLevels], boot_keys: dict[str, str]) -> dict[str, RunLevels]:
    """``levels`` (of :func:`run_levels`) with each instance's id made unique per boot
    (:func:`key_instances`); ``boot_keys``: run id -> :func:`boot_key`."""
    ids = key_instances((boot_keys[rid], name) for rid, lv in levels.items() for name in lv.names.values())
    for rid, lv in levels.items():
        lv.names = {i: ids[(boot_keys[rid], name)] for i, name in lv.names.items()}
    return levels
