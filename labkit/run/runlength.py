"""Runs long enough to time: each run's measured work against its workload's minimum.

Every workload states how long a run must work for its timing to be trustworthy
(:attr:`labkit.workloads.Workload.min_measured_s`, 1 s unless the workload says otherwise, with its
reason in ``min_measured_why``). A run's *measured work* is, in this order:

1. the timing the workload derives from the run's metrics, when it has one
   (:meth:`~labkit.workloads.Workload.measured_seconds`: LINPACK's and HPCC's HPL seconds from
   ``hpl_gflops`` and ``n``, as the hpcc process also runs five other benchmarks);
2. else the workload's own timing of its work (:attr:`~labkit.workloads.Workload.timed_metrics`, the
   first one the run reports: N-queens' ``wall_time_s``, sysbench's ``total_time_s``, PARSEC's
   ``roi_time_s``, NPB's ``time_s``), the median over the run's instances and iterations (each is
   one timing);
3. else the seconds the workload's ``run`` took in the run's instances (``workload_s`` in the run's
   metadata: the benchmark's process, without provisioning and preparing), their median
   (STREAM, fio, iperf3, ab, Bonnie++, sysbench OLTP);
4. else the run's ``duration_s`` (a store from before ``workload_s`` was kept).

:func:`run_length` counts the successful runs below the minimum; :meth:`RunLength.warning` is the
line a campaign logs once when it ends (with the parameter that makes a run longer,
:attr:`~labkit.workloads.Workload.length_param`, and a level of it this campaign measured long
enough, when there is one); :meth:`RunLength.sentence` is what ``labkit analyze`` and the HTML
report say. Imported campaigns (another tool's numbers, no run of ours timed) are not judged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..errors import ConfigError, LabkitError
from ..workloads import Workload, workload_class

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["RunLength", "measured_work", "run_length", "run_length_of", "short_run_warnings"]


@dataclass(frozen=True)
class RunLength:
    """The runs of one campaign against their workload's minimum: ``workload`` (its name),
    ``minimum_s`` and ``why`` (the workload's), ``measured`` (seconds of measured work of each
    successful run, by run id), ``source`` (run id -> what was counted: a metric name,
    ``workload_s`` or ``duration_s``), ``param`` (the parameter that makes a run longer, or None)
    and ``by_level`` ((level, shortest, longest) measured work of each level of ``param`` this
    campaign ran)."""

    workload: str
    minimum_s: float
    why: str
    measured: pd.Series
    source: pd.Series
    param: str | None = None
    by_level: tuple[tuple[Any, float, float], ...] = ()

    @property
    def short(self) -> pd.Series:
        """The measured work of the runs below the minimum."""
        return self.measured[self.measured < self.minimum_s]

    def hint(self) -> str:
        """How to make runs long enough: ``raise `board` (e.g. board=14 takes 1.3-2.1 s here)``, with
        the smallest level of the parameter whose every run was long enough in this campaign, else
        the level whose runs were longest and their times."""
        if self.param is None:
            return "give each run more work (this workload has no parameter that lengthens it)"
        enough = [b for b in self.by_level if b[1] >= self.minimum_s]
        if enough:
            lv, lo, hi = min(enough, key=lambda b: b[1])
            return f"raise `{self.param}` (e.g. {self.param}={lv} takes {_span(lo, hi)} s here)"
        if self.by_level:
            lv, lo, hi = max(self.by_level, key=lambda b: b[2])
            return f"raise `{self.param}` ({self.param}={lv} takes {_span(lo, hi)} s here)"
        return f"raise `{self.param}`"

    def warning(self) -> str | None:
        """The campaign's one warning (None when no run is short), e.g. ``nqueens: 96 runs of
        0.014-0.042 s, below the 1 s this workload needs for a trustworthy timing; raise `board`
        (e.g. board=14 takes ~1.3 s here)``."""
        short = self.short
        if short.empty:
            return None
        lo, hi = _below(short.min(), self.minimum_s), _below(short.max(), self.minimum_s)
        return (
            f"{self.workload}: {len(short)} run{'s' if len(short) != 1 else ''} of "
            f"{lo if lo == hi else f'{lo}-{hi}'} s, below the {_s(self.minimum_s)} s this workload needs for a "
            f"trustworthy timing; {self.hint()}"
        )

    def sentence(self) -> str:
        """``N of M runs shorter than the workload's minimum (X s)``, with what was counted and the
        hint when some are."""
        n, m = len(self.short), len(self.measured)
        text = (
            f"{n} of {m} runs shorter than the workload's minimum ({_s(self.minimum_s)} s of measured "
            f"work{self._counted()})"
        )
        return text + (f": {self.hint()}" if n else "")

    def _counted(self) -> str:
        kinds = list(dict.fromkeys(self.source))
        return f"; counted as {', '.join(kinds)}" if kinds else ""


def _s(x: float) -> str:
    """Seconds with two significant digits (0.014, 1.3, 42)."""
    return f"{float(x):.2g}" if abs(float(x)) < 100 else f"{float(x):.0f}"


def _below(x: float, minimum: float) -> str:
    """``x`` (below ``minimum``) with as few significant digits as show it below (0.99, not 1)."""
    for digits in range(2, 7):
        text = f"{float(x):.{digits}g}"
        if float(text) < minimum:
            return text
    return repr(float(x))


def _span(lo: float, hi: float) -> str:
    """``0.014-0.042`` (or one number when both show the same)."""
    return _s(lo) if _s(lo) == _s(hi) else f"{_s(lo)}-{_s(hi)}"


def measured_work(
    tidy: pd.DataFrame, runs: pd.DataFrame, timed_metrics: Sequence[str] = ()
) -> tuple[pd.Series, pd.Series]:
    """``(seconds, source)`` by run id for the successful runs of ``runs`` (:meth:`Store.runs
    <labkit.store.Store.runs>`: ``run_id``, ``status``, ``duration_s``, ``metadata``): the first of
    ``timed_metrics`` the run reports in ``tidy`` (median over its rows), else the median of its
    metadata's ``workload_s``, else its ``duration_s`` (see the module docstring). ``source`` names
    which, per run."""
    if not {"run_id", "status", "duration_s"} <= set(runs.columns):
        raise ConfigError("measured_work: runs must have run_id, status and duration_s (Store.runs())")
    ok = runs[runs["status"] == "ok"]
    seconds: dict[str, float] = {}
    source: dict[str, str] = {}
    if len(tidy) and {"run_id", "metric", "value"} <= set(tidy.columns):
        for metric in timed_metrics:
            rows = tidy[
                (tidy["metric"] == metric)
                & tidy["run_id"].isin(ok["run_id"])
                & ~tidy["run_id"].isin(list(seconds))
            ]
            for rid, v in (
                pd.to_numeric(rows["value"], errors="coerce").groupby(rows["run_id"]).median().items()
            ):
                if math.isfinite(v):
                    seconds[str(rid)], source[str(rid)] = float(v), metric
    for r in ok.itertuples(index=False):
        rid = str(r.run_id)
        if rid in seconds:
            continue
        md = r.metadata if "metadata" in ok.columns and isinstance(r.metadata, dict) else {}
        took = [
            float(x)
            for x in md.get("workload_s") or []
            if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
        ]
        if took:
            seconds[rid], source[rid] = float(pd.Series(took).median()), "workload_s"
        elif isinstance(r.duration_s, (int, float)) and math.isfinite(r.duration_s):
            seconds[rid], source[rid] = float(r.duration_s), "duration_s"
    return pd.Series(seconds, dtype=float), pd.Series(source, dtype=object)


def run_length_of(
    tidy: pd.DataFrame, runs: pd.DataFrame, meta: dict, workload: type[Workload] | Workload | None = None
) -> RunLength | None:
    """:class:`RunLength` of a campaign from its tidy results, runs and meta (``workload``: the
    workload, default the class the meta names); None for an imported campaign, a workload this
    labkit does not know, or no successful run."""
    if "imported" in meta:
        return None
    wl = _dict(meta.get("workload"))
    if workload is None:
        try:
            workload = workload_class(wl.get("name"))
        except ConfigError:
            return None
    seconds, source = measured_work(tidy, runs, tuple(workload.timed_metrics))
    if seconds.empty:
        return None
    for rid, secs in _derived(tidy, runs, _dict(wl.get("params")), workload, seconds.index).items():
        seconds[rid], source[rid] = secs, DERIVED
    param = workload.length_param
    by_level: tuple[tuple[Any, float, float], ...] = ()
    if param is not None:
        params = _dict(wl.get("params"))
        factors = _dict(_dict(meta.get("design")).get("factors"))
        if param in factors and param in runs.columns:  # a factor: each run's level
            level = runs.set_index(runs["run_id"].astype(str))[param].reindex(seconds.index)
        else:
            level = pd.Series([params.get(param)] * len(seconds), index=seconds.index, dtype=object)
        if level.notna().any():
            keys = level.astype(str)
            first = {str(v): v for v in level.dropna()}
            by_level = tuple(
                (first[k], float(g.min()), float(g.max()))
                for k, g in seconds.groupby(keys, sort=False)
                if k in first
            )
    return RunLength(
        str(wl.get("name") or workload.name),
        float(workload.min_measured_s),
        str(workload.min_measured_why),
        seconds,
        source.reindex(seconds.index),
        param,
        by_level,
    )


#: what :attr:`RunLength.source` says of a run whose measured work the workload derived
#: (:meth:`~labkit.workloads.Workload.measured_seconds`: LINPACK's HPL time from its Gflops and n)
DERIVED = "the workload's own time derived from its metrics"


def _derived(
    tidy: pd.DataFrame, runs: pd.DataFrame, params: dict, workload: type[Workload] | Workload, ids: pd.Index
) -> dict[str, float]:
    """run id -> :meth:`~labkit.workloads.Workload.measured_seconds` of each run of ``ids`` the
    workload derives one for (its metrics' medians over instances; its parameters: the campaign's,
    with the run's levels of factors that are parameters)."""
    base = getattr(Workload.measured_seconds, "__func__", None)
    if (
        getattr(workload.measured_seconds, "__func__", None) is base
        or not len(tidy)
        or not {"run_id", "metric", "value"} <= set(tidy.columns)
    ):
        return {}
    rows = tidy[tidy["run_id"].astype(str).isin(ids)]
    medians = (
        pd.to_numeric(rows["value"], errors="coerce")
        .groupby([rows["run_id"].astype(str), rows["metric"]])
        .median()
    )
    keys = [k for k in workload.defaults if k in runs.columns]
    levels = runs.set_index(runs["run_id"].astype(str))[keys] if keys else None
    by_run: dict[str, dict[str, float]] = {}
    for (r, m), v in medians.items():
        if math.isfinite(v):
            by_run.setdefault(str(r), {})[str(m)] = float(v)
    out = {}
    for rid in ids:
        metrics = by_run.get(str(rid), {})
        run_params = dict(params)
        if levels is not None and rid in levels.index:
            run_params.update({k: v for k, v in levels.loc[rid].items() if pd.notna(v)})
        secs = workload.measured_seconds(metrics, run_params)
        if secs is not None and math.isfinite(secs):
            out[str(rid)] = float(secs)
    return out


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def run_length(store: Store, workload: type[Workload] | Workload | None = None) -> RunLength | None:
    """:func:`run_length_of` a stored campaign."""
    return run_length_of(store.tidy(), store.runs(), store.meta(), workload)


def short_run_warnings(store: Store, workload: type[Workload] | Workload | None = None) -> list[str]:
    """The campaign's warning about runs too short to time (:meth:`RunLength.warning`), as a list
    of zero or one line. A store this cannot read says so in the line instead (the campaign's
    runs are stored: counting them must not stop it)."""
    try:
        found = run_length(store, workload)
    except (LabkitError, ValueError, KeyError, TypeError) as exc:
        return [f"the runs' length could not be counted ({type(exc).__name__}: {str(exc)[:200]})"]
    line = found.warning() if found is not None else None
    return [line] if line else []
