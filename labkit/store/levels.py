"""The levels a run belongs to (host, instance, boot, run_seq) and its suspect flag, read from its metadata.

A campaign records, with each run (:mod:`labkit.run.engine`, :mod:`labkit.run.campaign`), ``host``,
``run_seq`` (1-based order of the run on its host, in execution order; None for a run that never
started because an earlier run of its boot failed), the instances it ran on (``instances``: each
one's ``name``, unique per started instance, its ``index`` in the run and ``boot``, its start count
within the campaign) and ``suspect`` (why the quiet-host guard doubts it, or None:
:mod:`labkit.run.guard`). A store written before levels were recorded holds none of these but
``host`` (and not always that): its runs are read as each having had fresh instances, id
``<run_id>:<index>``, booted once, and ``run_seq`` is the order of their start times on each host.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class RunLevels:
    """One run's levels; :meth:`instance` gives an instance index's id and boot."""
    run_id: str
    host: str | None
    run_seq: int | None
    recorded: bool                                 # False: a store of before (levels inferred)
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
