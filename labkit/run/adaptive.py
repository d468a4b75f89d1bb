"""Adaptive replication: add replicates to the configurations whose CI is still too wide.

A design with ``replications: {target_ci: 0.02, min: 3, max: 20}`` runs ``min``
replicates of every configuration (its ordinary plan), then in rounds: from the
runs stored so far, each configuration whose t confidence interval of the mean
(``confidence``, default 0.95) is wider than ``target_ci`` (relative to its mean
unless ``relative: false``) gets one more replicate (``batch``, default 1: at most
that many, and never more than its standard deviation says it still needs,
:func:`labkit.stats.samplesize.n_for_halfwidth`) and never beyond ``max`` runs of
that configuration (failed runs count: ``max`` is a hard cap on attempts). With
``balanced: true`` a round gives every configuration as many replicates as the neediest
one gets (each still capped at ``max``), so the cells stay equal, as a 2^k analysis
(:func:`labkit.stats.factorial_effects`) needs; the campaign then stops when every
configuration has reached the target or the cap. So each
configuration stops as soon as its own interval is narrow enough, and the runs go
to the configurations in proportion to their need. The new runs of a round run in
a random order drawn from the design's seed and the round number.

Determinism and resume: a round is computed from the stored runs only and written
to the store's meta (``adaptive_round``, ``adaptive_pending``) before any of its runs
starts; a resumed campaign first finishes the pending round, so no run is duplicated
or lost. Added replicates are numbered after the configuration's highest stored
replicate, so their run ids (``c0003r004``) are stable.

Bounds: ``max`` is at most :data:`labkit.design.structure.MAX_ADAPTIVE` runs per
configuration, and before its rounds start the campaign logs what it commits to at worst
(:func:`worst_case`): "adaptive: at most N more run(s) (M configuration(s) x max K, ...),
about H h at the pilot's mean run time of S s".
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..design import Design, Run, run_id
from ..errors import ConfigError, StoreError
from ..stats.samplesize import n_for_halfwidth
from ..store import Store

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = [
    "next_round",
    "pending_runs",
    "run_adaptive",
    "stored_values",
    "worst_case",
    "worst_fixed_equivalent",
]

log = logging.getLogger("labkit.run.adaptive")


def stored_values(store: Store, metric: str) -> pd.DataFrame:
    """One row per stored run: ``run_id``, ``run_order``, ``config``, ``replicate``,
    ``status`` and ``value`` (the run's ``metric`` averaged over its instances; NaN
    for a failed run or one without that metric)."""
    tidy = store.tidy()
    cols = ["run_id", "run_order", "config", "replicate", "status"]
    if tidy.empty:
        return pd.DataFrame(columns=cols + ["value"])
    runs = tidy.groupby("run_id", sort=False)[cols[1:]].first().reset_index()
    ok = tidy[(tidy["status"] == "ok") & (tidy["metric"] == metric)]
    values = ok.groupby("run_id")["value"].mean()
    return runs.assign(value=runs["run_id"].map(values).astype(float))


def _spec(design: Design) -> dict:
    """The design's adaptive replication settings; ConfigError if it has fixed replication."""
    if design.adaptive is None:
        raise ConfigError(
            "adaptive replication needs a design with replications: {target_ci: ...}; "
            "this one has a fixed number of replications"
        )
    return design.adaptive


def _needs(design: Design, runs: pd.DataFrame) -> dict[int, int]:
    """config -> replicates to add in the next round (only configurations that need some)."""
    spec = _spec(design)
    n_cfg = design.n_configurations
    attempts = np.bincount(runs["config"].to_numpy(dtype=int), minlength=n_cfg)
    ok = runs.dropna(subset=["value"])
    g = ok.groupby("config")["value"]
    n = np.zeros(n_cfg)
    mean = np.full(n_cfg, np.nan)
    sd = np.full(n_cfg, np.nan)
    idx = g.count().index.to_numpy(dtype=int)
    n[idx] = g.count().to_numpy()
    mean[idx] = g.mean().to_numpy()
    sd[idx] = g.std().to_numpy()
    goal = spec["target_ci"] * np.abs(mean) if spec["relative"] else np.full(n_cfg, spec["target_ci"])
    needed = n_for_halfwidth(sd, goal, confidence=spec["confidence"])
    room = spec["max"] - attempts
    out = {}
    for c in range(n_cfg):
        if room[c] <= 0:
            continue
        if n[c] < 2 or not np.isfinite(needed[c]):
            extra = 2 - int(n[c]) if n[c] < 2 else 1  # too few successes to judge: one more
        elif needed[c] <= n[c]:
            continue
        else:
            extra = min(spec["batch"], int(needed[c] - n[c]))
        out[c] = int(min(extra, room[c]))
    if spec.get("balanced") and out:
        # every configuration gets as many as the neediest, so that the cells stay equal (a 2^k
        # analysis needs that); each still stops at its cap
        most = max(out.values())
        out = {c: int(min(most, room[c])) for c in range(n_cfg) if room[c] > 0}
    return out


def next_round(design: Design, runs: pd.DataFrame, round_no: int) -> list[Run]:
    """The runs of adaptive round ``round_no`` (1-based) given the stored ``runs``
    (:func:`stored_values`), in their random order; [] when every configuration has
    reached the target or its cap."""
    needs = _needs(design, runs)
    if not needs:
        return []
    configs = design.configurations()
    last = runs.groupby("config")["replicate"].max()
    slots = [(c, int(last.get(c, 0)) + i + 1) for c, extra in sorted(needs.items()) for i in range(extra)]
    random.Random(f"{design.seed}:adaptive:{round_no}").shuffle(slots)
    start = int(runs["run_order"].max()) + 1 if len(runs) else 0
    return [Run(run_id(c, r), start + i, c, r, dict(configs[c])) for i, (c, r) in enumerate(slots)]


def pending_runs(design: Design, value: object, campaign: str) -> list[Run]:
    """The runs of the pending adaptive round as the store's meta ``adaptive_pending`` holds them
    (a list of :class:`~labkit.design.Run` fields); StoreError, naming the campaign and the entry, for
    one labkit did not write: not a run's fields, or a run that is not this design's (its run id,
    configuration and levels must agree), so a tampered store never runs what the design does not."""
    if value is None:
        return []
    where = f"campaign {campaign}: meta adaptive_pending"
    fix = (
        "; the pending adaptive round cannot be resumed: restore the store from a copy "
        f"(labkit check {campaign} lists every problem)"
    )
    if not isinstance(value, list):
        raise StoreError(f"{where}: a JSON {type(value).__name__} where a list of runs is expected{fix}")
    fields = {f.name for f in dataclasses.fields(Run)}
    required = {
        f.name
        for f in dataclasses.fields(Run)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    configs = design.configurations()
    out = []
    for i, entry in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(entry, dict):
            raise StoreError(f"{at}: a JSON {type(entry).__name__} where a run's fields are expected{fix}")
        unknown, missing = sorted(set(entry) - fields), sorted(required - set(entry))
        if unknown or missing:
            said = [f"unknown field(s) {', '.join(map(repr, unknown))[:120]}"] if unknown else []
            said += [f"missing {', '.join(missing)}"] if missing else []
            raise StoreError(
                f"{at}: not a run ({'; '.join(said)}; a run has {', '.join(sorted(fields))}){fix}"
            )
        ints = ("order", "config", "replicate", "block", "boot")
        bad = [
            k for k in ints if k in entry and (isinstance(entry[k], bool) or not isinstance(entry[k], int))
        ]
        if bad or not isinstance(entry["run_id"], str) or not isinstance(entry["levels"], dict):
            what = (
                f"{bad[0]} {str(entry[bad[0]])[:40]!r} is not a whole number"
                if bad
                else "run_id must be text and levels an object"
            )
            raise StoreError(f"{at}: {what}{fix}")
        run = Run(**entry)
        if (
            not 0 <= run.config < len(configs)
            or run.replicate < 1
            or run.run_id != run_id(run.config, run.replicate)
            or run.levels != dict(configs[run.config])
        ):
            raise StoreError(
                f"{at}: run {run.run_id[:40]!r} (configuration {run.config}, replicate "
                f"{run.replicate}) is not a run of this design{fix}"
            )
        out.append(run)
    return out


def run_adaptive(
    design: Design,
    store: Store,
    execute: Callable[[list[Run]], None],
    *,
    response: str,
    bar: tqdm | None = None,
    budget: int | None = None,
) -> int:
    """Run adaptive rounds until every configuration meets the target or its cap; returns the
    number of runs handed to ``execute`` (at most ``budget``).

    ``execute(runs)`` runs and stores the runs of a round (or of its first ``budget`` runs), in
    their order: the campaign's loop on one backend, the fleet's workers on a testbed, so
    adaptive replication works the same on both. ``response`` is the workload's response, the
    metric judged when the design names none. Does nothing until the design's initial plan is
    fully stored; then logs (a warning, so it shows without logging set up) the worst case it
    commits to (:func:`worst_case`: every configuration run ``max`` times, in hours at the
    stored runs' mean run time) before any round starts, and again on each resume."""
    if design.adaptive is None:
        return 0
    if not {r.run_id for r in design.plan()} <= store.completed():
        return 0
    log.warning("%s", worst_case(design, store.runs(), budget=budget)["message"])
    metric = design.adaptive["metric"] or response
    meta = store.meta()
    round_no = int(meta.get("adaptive_round") or 0)
    pending = pending_runs(design, meta.get("adaptive_pending"), store.campaign)
    done = 0
    while True:
        stored = store.completed()
        todo = [r for r in pending if r.run_id not in stored]
        if not todo:
            pending = next_round(design, stored_values(store, metric), round_no + 1)
            if not pending:
                store.set_meta(adaptive_pending=[])
                return done
            round_no += 1
            store.set_meta(adaptive_round=round_no, adaptive_pending=[dataclasses.asdict(r) for r in pending])
            todo = pending
            if bar is not None and getattr(bar, "total", None) is not None:
                bar.total += len(todo)
                bar.refresh()
        if budget is not None:
            todo = todo[: max(0, budget - done)]
            if not todo:
                return done
        execute(todo)
        done += len(todo)
        if len([r for r in todo if r.run_id not in store.completed()]) == len(todo):
            return done  # none of them could run (no live host offers them): resume later


def worst_case(design: Design, runs: pd.DataFrame, *, budget: int | None = None) -> dict:
    """What an adaptive campaign commits to at worst, from its stored ``runs``
    (:meth:`Store.runs <labkit.store.Store.runs>`: ``config`` and ``duration_s`` of each; the pilot,
    i.e. the initial plan of ``min`` replicates, once it is stored): every configuration run
    ``max`` times (a ``target_ci`` never met). Returns ``configurations``, ``max``,
    ``stored`` (runs so far), ``runs_left`` (at most, within ``budget`` when one is given),
    ``mean_run_s`` (the stored runs' mean duration, NaN without any), ``hours_left`` (runs_left x
    mean_run_s, one run at a time) and ``message``, the line :func:`run_adaptive` logs before its
    rounds start."""
    spec = _spec(design)
    n_cfg, mx = design.n_configurations, spec["max"]
    attempts = (
        np.bincount(runs["config"].to_numpy(dtype=int), minlength=n_cfg)[:n_cfg]
        if len(runs)
        else np.zeros(n_cfg, dtype=int)
    )
    left = int(np.clip(mx - attempts, 0, None).sum())
    if budget is not None:
        left = min(left, max(0, budget))
    durations = (
        pd.to_numeric(runs["duration_s"], errors="coerce").dropna() if len(runs) else pd.Series(dtype=float)
    )
    mean = float(durations.mean()) if len(durations) else float("nan")
    hours = left * mean / 3600
    span = f"{hours:.1f} h" if hours >= 1 else f"{hours * 60:.0f} min"
    when = (
        f"about {span} at the pilot's mean run time of {mean:.1f} s, one run at a time"
        if np.isfinite(hours)
        else "time unknown (no run time stored)"
    )
    cap = "" if budget is None else f", within max_runs {budget}"
    message = (
        f"adaptive: at most {left} more run(s) ({n_cfg} configuration(s) x max {mx}, "
        f"{len(runs)} stored{cap}), {when}"
    )
    return {
        "configurations": n_cfg,
        "max": mx,
        "stored": int(len(runs)),
        "runs_left": left,
        "mean_run_s": mean,
        "hours_left": hours,
        "message": message,
    }


def worst_fixed_equivalent(design: Design, runs: pd.DataFrame) -> dict:
    """Compare an adaptive campaign with fixed replication: the worst (largest) CI
    half-width the adaptive runs reached over the configurations, and the replicates per
    configuration a fixed design would need for every configuration to reach that same
    worst case, from each configuration's measured sd. Returns ``adaptive_runs``,
    ``worst_half_width`` (relative when the design's target is), ``fixed_replicates``,
    ``fixed_runs`` and ``saving`` (1 - adaptive/fixed)."""
    from scipy import stats as sps

    spec = _spec(design)
    ok = runs.dropna(subset=["value"])
    g = ok.groupby("config")["value"].agg(["count", "mean", "std"])
    c = spec["confidence"]
    hw = sps.t.ppf(0.5 + c / 2, g["count"] - 1) * g["std"] / np.sqrt(g["count"])
    scale = g["mean"].abs() if spec["relative"] else 1.0
    worst = float((hw / scale).max())
    # the worst configuration needs exactly its own count: the tolerance keeps rounding
    # (t quantile recomputed at that count) from asking one replicate more
    need = n_for_halfwidth(
        g["std"].to_numpy(),
        (worst * scale if spec["relative"] else worst) * np.full(len(g), 1 + 1e-9),
        confidence=c,
    )
    fixed_r = int(max(np.nanmax(need), design.replications))
    fixed = fixed_r * design.n_configurations
    return {
        "adaptive_runs": int(len(runs)),
        "worst_half_width": worst,
        "fixed_replicates": fixed_r,
        "fixed_runs": fixed,
        "saving": 1 - len(runs) / fixed,
    }
