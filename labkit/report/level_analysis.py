"""The levels of a campaign's measurements and the error term they call for (issue 32).

A stored campaign's tidy rows carry, besides the factors, the levels a measurement belongs to:
``host``, ``instance`` (a unique id per started instance), ``instance_index`` (its position in
its run), ``boot``, ``run_seq`` (the run's order on its host), ``iteration`` and ``suspect``.
Stores written before those columns existed are read with them filled from what they hold
(:mod:`labkit.store.levels`: each run had its own instances, one boot, runs in start order per
host, no iterations, nothing suspect), and so are results tables without them (:func:`with_levels`).

:func:`observations` makes the analysis table: one row per run and instance (the instances of a
run are kept as a level, not averaged away), a workload's iterations reduced to the mean of their
steady part (MSER-5 warm-up cut, :func:`labkit.stats.warmup`); :func:`level_design` decides from
the data which levels are random (runs sharing instances: ``runs_per_instance`` > 1; several
instances per run; hosts of a fleet as a random level when asked), and :func:`level_analysis`
tests the factors against the right error term with :func:`labkit.stats.level_effects`. The
sentence builders say which error term was used, each level's share, drift and warm-up.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..stats.error_terms import LevelEffects, level_effects, unit_means
from ..stats.warmup import WarmupWarning, warmup
from ..store.levels import fill_levels
from .labels import label

__all__ = [
    "HOSTS",
    "LevelDesign",
    "drift_sentences",
    "error_term_sentences",
    "level_analysis",
    "level_design",
    "observations",
    "runs_of",
    "warmup_sentence",
    "with_levels",
]

#: how hosts of a fleet enter the analysis: fixed blocks (conclusions about these hosts) or a
#: random level (conclusions about hosts like these)
HOSTS = ("block", "random")
#: the host label of a campaign run without a testbed (this machine)
LOCAL_HOST = "local"
#: fewest iterations of one run that warm-up detection takes (4 batches of 5: MSER-5)
MIN_ITERATIONS = 20
#: the most observations the REML mixed model is fitted to (its dense n x n matrices); larger
#: designs use the exact EMS test when balanced, else the ANOVA of the unit means
MAX_MIXED_ROWS = 3000


def with_levels(tidy: pd.DataFrame) -> pd.DataFrame:
    """``tidy`` with every level column present: ``host`` (None -> ``"local"``), ``instance``
    (unique id, text), ``instance_index``, ``boot``, ``run_seq``, ``iteration``, ``suspect``,
    ``suspect_reason``: the store's own columns where it has them (:meth:`Store.tidy
    <labkit.store.Store.tidy>`, which fills a store of before itself), else filled as a store of
    before is read (:func:`labkit.store.levels.fill_levels`: per run its own instances
    ``<run_id>:<index>``, boot 1, ``run_seq`` by start time on each host, no iterations, nothing
    suspect)."""
    t = tidy.copy()
    host = t["host"] if "host" in t.columns else pd.Series([None] * len(t), index=t.index)
    t["host"] = host.astype(object).where(host.notna(), LOCAL_HOST).astype(str)
    return fill_levels(t)


RUN_COLUMNS = ["run_id", "run_order", "replicate", "host", "boot", "run_seq", "suspect", "suspect_reason"]


def observations(
    tidy: pd.DataFrame, response: str, factors: Sequence[str], *, cut_warmup: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(obs, cut)``: the successful measurements of ``response``, one row per run and instance.

    ``obs`` columns: the factors, ``run_id``, ``run_order``, ``replicate``, ``host``, ``boot``,
    ``run_seq``, ``suspect``, ``suspect_reason``, ``instance``, ``instance_index``, ``response``.
    Where a run's instance reports iterations (rows with ``iteration`` set), its value is the
    mean of the steady part: MSER-5 (:func:`labkit.stats.warmup`) cuts the warm-up of series of at
    least 20 iterations when ``cut_warmup``. ``cut`` has one row per such series: ``run_id``,
    ``instance``, ``iterations``, ``cut``, ``note`` ("" or why nothing was cut: too short, or
    the transient may outlast the series). ConfigError when no successful row has the metric.
    """
    t = with_levels(tidy)
    ok = t[(t["status"] == "ok") & (t["metric"] == response) & t["value"].notna()]
    if ok.empty:
        metrics = sorted(m for m in t["metric"].dropna().unique())
        raise ConfigError(f"no successful measurement of {response!r}; metrics present: {metrics}")
    keys = ["run_id", "instance"]
    has_it = ok["iteration"].notna()
    series_keys = set(map(tuple, ok.loc[has_it, keys].itertuples(index=False, name=None)))
    plain = ok[
        ~has_it
        & ~pd.Series(
            [k in series_keys for k in zip(ok["run_id"], ok["instance"])], index=ok.index, dtype=bool
        )
    ]
    value = plain.groupby(keys, sort=False)["value"].mean()
    cuts = []
    for (rid, inst), part in ok[has_it].groupby(keys, sort=False):
        x = part.sort_values("iteration")["value"].to_numpy(float)
        cut, note = 0, ""
        if not cut_warmup:
            note = "warm-up not cut (cut_warmup=False)"
        elif len(x) < MIN_ITERATIONS:
            note = f"{len(x)} iterations: too few to detect warm-up (MSER-5 needs {MIN_ITERATIONS})"
        else:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", WarmupWarning)
                cut = warmup(x)
            if any(issubclass(w.category, WarmupWarning) for w in caught):
                note = "the warm-up may last longer than the series (MSER's minimum at half of it)"
        cuts.append({"run_id": rid, "instance": inst, "iterations": len(x), "cut": cut, "note": note})
        value.loc[(rid, inst)] = float(np.mean(x[cut:]))
    value = value.rename(response).reset_index()
    meta = ok.drop_duplicates(keys)[
        keys + [c for c in factors if c not in keys] + RUN_COLUMNS[1:] + ["instance_index"]
    ]
    obs = value.merge(meta, on=keys, how="left")
    cols = list(factors) + RUN_COLUMNS + ["instance", "instance_index", response]
    obs = obs[cols].sort_values(["run_order", "instance_index"], kind="stable").reset_index(drop=True)
    cut_table = pd.DataFrame(cuts, columns=["run_id", "instance", "iterations", "cut", "note"])
    return obs, cut_table


def runs_of(obs: pd.DataFrame, response: str, factors: Sequence[str]) -> pd.DataFrame:
    """One row per run: the factors, the run columns (``run_id``, ``run_order``, ``replicate``,
    ``host``, ``boot``, ``run_seq``, ``suspect``, ``suspect_reason``), ``instances`` (how many
    measured it) and ``response`` (the mean over its instances)."""
    cols = list(factors) + RUN_COLUMNS
    g = obs.groupby("run_id", sort=False)
    out = g[cols[len(factors) :][1:] + list(factors)].first().reset_index()
    out["instances"] = g["instance"].nunique().to_numpy()
    out[response] = g[response].mean().to_numpy()
    return out[cols + ["instances", response]].sort_values("run_order", kind="stable").reset_index(drop=True)


@dataclass
class LevelDesign:
    """Which levels the data hold and how they enter the analysis.

    ``runs_per_instance`` and ``instances_per_run`` (the most seen), ``hosts`` (number),
    ``host_mode`` ("block" or "random"), ``random`` (the random columns of the observations, in
    order), ``blocks`` (fixed nuisance columns), ``needed`` (True when runs are not the
    independent units: then :func:`level_analysis` applies) and ``reasons`` (why, in words)."""

    runs_per_instance: int
    instances_per_run: int
    hosts: int
    host_mode: str
    random: list[str] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def needed(self) -> bool:
        return bool(self.random)


HOST_CONFIG = "host_config"


def level_design(obs: pd.DataFrame, factors: Sequence[str], *, hosts: str = "block") -> LevelDesign:
    """The levels of ``obs`` (:func:`observations`) and the random ones the analysis needs:
    ``instance`` when runs share instances, ``run_id`` when a run has several instances, and on a
    fleet, with ``hosts="random"``, ``host`` and (when a configuration is repeated on a host)
    ``host_config``, the host-by-configuration interaction, so that a factor whose effect
    differs between hosts is tested against that difference (conclusions about hosts like
    these); with ``hosts="block"`` (default) the hosts are fixed blocks (conclusions about these
    hosts). Adds the ``host_config`` column to ``obs`` when used."""
    if hosts not in HOSTS:
        raise ConfigError(f"hosts must be one of {', '.join(HOSTS)}, got {hosts!r}")
    rpi = int(obs.groupby("instance")["run_id"].nunique().max())
    ipr = int(obs.groupby("run_id")["instance"].nunique().max())
    n_hosts = int(obs["host"].nunique())
    d = LevelDesign(rpi, ipr, n_hosts, hosts)
    if n_hosts > 1:
        if hosts == "random":
            d.random.append("host")
            d.reasons.append(f"the {n_hosts} hosts are a random level (conclusions about hosts like these)")
            cfg = obs[list(factors)].astype(str).agg("|".join, axis=1) if factors else ""
            obs[HOST_CONFIG] = obs["host"].astype(str) + "|" + cfg
            if obs[HOST_CONFIG].nunique() < len(obs):
                d.random.append(HOST_CONFIG)
        else:
            d.blocks.append("host")
            d.reasons.append(f"the {n_hosts} hosts are fixed blocks (conclusions about these hosts)")
    if rpi > 1:
        d.random.append("instance")
        d.reasons.append(f"runs share instances (up to {rpi} runs per instance)")
    if ipr > 1:
        d.random.append("run_id")
        d.reasons.append(f"runs have several instances (up to {ipr}), kept as a level")
    if not d.random and not d.blocks:
        d.reasons.append("each run on its own instances: the runs are the independent units")
    return d


def _two_level(obs: pd.DataFrame, factors: Sequence[str]) -> bool:
    return all(obs[f].nunique() == 2 for f in factors)


def level_analysis(
    obs: pd.DataFrame,
    response: str,
    factors: Sequence[str],
    design: LevelDesign,
    *,
    levels=None,
    alpha: float = 0.05,
) -> tuple[str, pd.DataFrame, LevelEffects | None, str]:
    """``(kind, effects, fit, note)`` for a design whose runs are not independent units.

    Two-level factors: :func:`labkit.stats.level_effects` (``kind`` "levels"; EMS or REML, hosts
    as blocks through :func:`labkit.stats.mixed_effects`). Otherwise, or when the model cannot be
    fitted, the unit means (the innermost random level within which the factors are constant)
    analysed by :func:`labkit.stats.anova` (``kind`` "anova", ``note`` says so)."""
    from ..stats import anova
    from ..stats.error_terms import constant_within

    note = ""
    if factors and _two_level(obs, factors):
        # REML holds a few dense n x n matrices (some 300 MB at 3,000 rows): above MAX_MIXED_ROWS
        # only the exact EMS test (balanced designs) runs, else the unit means below
        big = len(obs) > MAX_MIXED_ROWS
        try:
            fit = level_effects(
                obs,
                response=response,
                factors=factors,
                random=design.random,
                levels=levels,
                alpha=alpha,
                blocks=design.blocks,
                method="ems" if big else "auto",
            )
            return "levels", fit.effects, fit, fit.note
        except ConfigError as exc:
            note = (
                f"{len(obs)} observations are more than the mixed model takes here "
                f"({MAX_MIXED_ROWS}) and the design is not balanced for the exact test; "
                if big
                else f"the mixed model could not be fitted ({exc}); "
            )
    unit = next(
        (
            c
            for c in reversed(design.random)
            if c != "host" and constant_within(obs, factors=list(factors), unit=c)
        ),
        None,
    )
    if unit is None:
        raise ConfigError(
            note + "no level within which every factor is constant: "
            "the factors cannot be tested against a unit level"
        )
    means = unit_means(obs, response=response, unit=unit, keep=list(factors))
    cells = means.groupby(list(factors), observed=True).size()
    table = anova(
        means,
        response=response,
        factors=list(factors),
        interactions=bool((cells >= 2).all()) and len(factors) > 1,
    )
    effects = table.assign(pct_variation=100 * table["eta_sq"], effect=np.nan)
    effects.attrs.update(table.attrs, response=response, alpha=alpha, method="unit means", error_term=unit)
    return "anova", effects, None, note + f"ANOVA of the {len(means)} {unit} means"


def _pct(x: float) -> str:
    return "< 0.1 %" if 0 < x < 0.05 else f"{x:.1f} %"


def _residual_label(random: Sequence[str]) -> str:
    if "run_id" in random and "instance" in random:
        return "residual (one instance in one run)"
    if "run_id" in random:
        return "residual (between the instances of a run)"
    return "residual (run to run)"


def _component_label(name: str, random: Sequence[str]) -> str:
    return {"residual": _residual_label(random), "run_id": "run", HOST_CONFIG: "host x configuration"}.get(
        name, name
    )


def error_term_sentences(
    kind: str, design: LevelDesign, effects: pd.DataFrame, fit: LevelEffects | None, *, note: str = ""
) -> list[str]:
    """Which error term the tests used and why, and each level's share of the variance."""
    why = "; ".join(design.reasons)
    n = effects.attrs.get("n")
    if kind == "levels" and fit is not None:
        terms = fit.effects[~fit.effects["term"].isin(["I", "error"])]
        if fit.method == "ems":
            unit = fit.error_term
            df = float(terms["df"].iloc[0]) if len(terms) else float("nan")
            out = [
                f"Error term: the variation between {unit}s ({why}). Every factor is constant "
                f"within a{'n' if unit[:1] in 'aeiou' else ''} {unit}, so each is tested against "
                f"the {fit.units} {unit} means (exact expected-mean-squares F-test, df = {df:g}), "
                f"not against the {n} observations."
            ]
        else:
            df = terms["df"].to_numpy(float)
            span = (
                (
                    f"{df.min():.3g}"
                    if np.allclose(df.min(), df.max(), rtol=1e-3)
                    else f"{df.min():.3g}-{df.max():.3g}"
                )
                if len(df)
                else "-"
            )
            target = (
                " and ".join(_component_label(c, design.random) for c in fit.error_term.split(" and "))
                if fit.error_term != "residual"
                else "the residual"
            )
            out = [
                f"Error term: the variance of {target} ({why}): a linear mixed model (REML) with "
                f"random levels {', '.join(_component_label(c, design.random) for c in design.random)}"
                + (" and the hosts as fixed blocks" if design.blocks else "")
                + f"; Satterthwaite df {span}."
            ]
        shares = ", ".join(
            f"{_component_label(c, design.random)} {_pct(p)}"
            for c, p in zip(fit.variance["component"], fit.variance["pct"])
        )
        out.append(
            f"Share of the variance the design's terms leave, by level "
            f"({'ANOVA estimates' if fit.method == 'ems' else 'REML'}): {shares}."
        )
        if fit.note:
            out.append(f"Note: {fit.note}.")
        return out
    if kind == "anova" and effects.attrs.get("method") == "unit means":
        unit = _component_label(effects.attrs["error_term"], design.random)
        return [
            f"Error term: the variation between {unit} means ({why}); "
            f"{note.replace(effects.attrs['error_term'] + ' means', unit + ' means')}."
        ]
    df = effects.attrs.get("df_error")
    if df is None:
        return (
            [
                "Error term: none (an unreplicated design: effects are judged by Lenth's "
                "pseudo standard error)."
            ]
            if kind == "factorial"
            else []
        )
    out = [
        f"Error term: the run-to-run variation between runs of the same configuration ({why}; "
        f"df = {float(df):g})."
    ]
    block = effects.attrs.get("block_pct")
    if block is not None:
        out[0] = (
            f"Error term: the run-to-run variation within hosts ({why}): the host differences "
            f"({_pct(block)} of the variation) are taken out of the error (df = {float(df):g})."
        )
    return out


def drift_sentences(drift: pd.DataFrame, response: str) -> list[str]:
    """Drift in each host's run order (:func:`labkit.stats.drift_segments`), with run ranges."""
    alpha = drift.attrs.get("alpha", 0.05)
    out = []
    by = drift.attrs.get("by") or []
    groups = drift.groupby(by, sort=True) if by else [("all", drift)]
    moved = []
    for key, part in groups:
        host = key[0] if isinstance(key, tuple) else key
        if len(part) < 2:
            continue
        ranges = []
        for _, s in part.iterrows():
            shift = "" if s["segment"] == 1 else f" ({s['shift_pct']:+.1f} % of the mean)"
            ranges.append(f"runs {s['start']:g}-{s['end']:g}{shift}")
        moved.append(
            f"on host {host} the level of {label(response)} changes "
            f"{len(part) - 1} time{'s' if len(part) > 2 else ''}: " + ", then ".join(ranges)
        )
    if moved:
        out.append(
            "Drift (each host's run order, residuals after the design's effects, change "
            f"points at α = {alpha:g}): "
            + "; ".join(moved)
            + ". Runs before and after a change were not measured under the same conditions; "
            "the random run order spreads that over the configurations, but it widens "
            "the error and may bias a comparison."
        )
    else:
        tested = drift.attrs.get("series", 0) - len(drift.attrs.get("short", []))
        if tested:
            out.append(
                f"No drift: the run-order residuals of {'each of the ' + str(tested) + ' hosts' if tested > 1 else 'the host'} "
                f"are stationary (change points at α = {alpha:g})."
            )
    short = drift.attrs.get("short") or []
    if short:
        out.append(
            f"Drift not checked on {', '.join(map(str, short))}: fewer than "
            f"{2 * drift.attrs.get('min_size', 5)} runs."
        )
    return out


def warmup_sentence(cut: pd.DataFrame) -> str | None:
    """How much warm-up was cut from the runs' iterations, or None without iterations."""
    if cut is None or cut.empty:
        return None
    tested = cut[cut["note"].eq("") | cut["note"].str.startswith("the warm-up may")]
    s = []
    if len(tested):
        c, n = tested["cut"].to_numpy(), tested["iterations"].to_numpy()
        s.append(
            f"Warm-up: MSER-5 cut a median of {np.median(c):g} of {np.median(n):g} iterations "
            f"per run (range {c.min():g}-{c.max():g}; {100 * c.sum() / n.sum():.1f} % of the "
            f"iterations); the steady part is analysed."
        )
    longer = int(cut["note"].str.startswith("the warm-up may").sum())
    if longer:
        s.append(f"In {longer} run(s) the warm-up may last longer than the run: run longer.")
    few = int(cut["note"].str.contains("too few").sum())
    if few:
        s.append(f"{few} run(s) had fewer than {MIN_ITERATIONS} iterations: nothing was cut there.")
    return " ".join(s) or None
