"""The measurement's own figures (issue 32): each level's share of the variance, drift with change
points, per-run telemetry, and two campaigns of one design side by side."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..errors import ConfigError
from ..stats import validate as v
from .canvas import BAR, BAR_HIGH, REF, figure_axes, new_figure, panel_grid
from .labels import PALETTE, colors, label
from .tables import PER_RUN_ROWS

__all__ = ["SUSPECT", "comparison", "drift", "telemetry", "telemetry_runs", "variance_shares"]

SUSPECT = "#a0322b"
#: runs :func:`telemetry_runs` draws at most: the cap of the report's per-run tables
#: (:data:`labkit.report.tables.PER_RUN_ROWS`)
TELEMETRY_RUNS = PER_RUN_ROWS


def variance_shares(variance: pd.DataFrame, *, ax: Axes | None = None, title: str | None = None) -> Figure:
    """Each level's share of the variance (a :class:`labkit.stats.LevelEffects` ``variance`` table:
    ``component``, ``pct``) as horizontal bars, largest on top (bars ``gid`` "share")."""
    v.frame(variance, "variance")
    v.columns(variance, ["component", "pct"], "variance")
    d = variance.sort_values("pct", kind="stable")
    fig, ax = figure_axes(ax, (6.4, 1.2 + 0.45 * len(d)))
    y = np.arange(len(d))
    pct = d["pct"].to_numpy(float)
    ax.barh(y, np.nan_to_num(pct), color=BAR, height=0.6, gid="share")
    ax.set_yticks(y, [str(c) for c in d["component"]])
    for yy, p in zip(y, pct):
        if np.isfinite(p):
            ax.text(float(p) + 1, float(yy), f"{p:.1f}%", va="center", fontsize=8)
    ax.set_xlim(0, 110)
    ax.set_xlabel("share of the variance left by the design's terms (%)")
    ax.set_title(title or "Variance by level")
    return fig


def drift(
    runs: pd.DataFrame,
    segments: pd.DataFrame,
    response: str,
    *,
    factors: Sequence[str] = (),
    order: str = "run_seq",
    by: str = "host",
    title: str | None = None,
) -> Figure:
    """Each host's runs in order: residuals (response minus its configuration's mean) as dots,
    each segment's median as a horizontal line (gid "level") and the change points of
    :func:`labkit.stats.drift_segments` as dashed vertical lines (gid "change_point"); one
    panel per host."""
    v.frame(runs, "runs")
    factors = list(factors)
    v.columns(runs, factors + [order, by], "runs")
    y = v.response(runs, response)
    d = runs.assign(
        _r=y
        - (
            runs.assign(_y=y).groupby(factors, observed=True)["_y"].transform("mean")
            if factors
            else float(np.mean(y))
        )
    )
    hosts = sorted(d[by].astype(str).unique())
    fig, axes = panel_grid(len(hosts), 2, panel=(5.6, 2.8))
    for ax, host in zip(axes, hosts):
        part = d[d[by].astype(str) == host].sort_values(order)
        ax.scatter(part[order], part["_r"], s=12, color=BAR, alpha=0.8)
        segs = segments[segments[by].astype(str) == host] if by in segments else segments
        for _, s in segs.iterrows():
            ax.hlines(s["level"], s["start"], s["end"], color=PALETTE[2], lw=2, gid="level")
            if s["segment"] > 1:
                ax.axvline(s["start"] - 0.5, color=REF, ls="--", lw=1.2, gid="change_point")
        ax.axhline(0, color="#888888", lw=0.6)
        ax.set_title(f"host {host}", fontsize=9)
        ax.set_xlabel(label(order))
        ax.set_ylabel(f"residual: {label(response)}")
    fig.suptitle(title or f"Drift check: {label(response)} in run order, change points dashed")
    return fig


def telemetry_runs(
    table: pd.DataFrame, *, order: str = "run_order", title: str | None = None, max_runs: int = TELEMETRY_RUNS
) -> Figure:
    """Per-run telemetry (:attr:`labkit.report.Analysis.telemetry`): the campaign's CPU (its
    instances) beside the CPU of other processes, steal, and the CPU frequency range, one point
    per run in ``order``; runs flagged ``suspect`` are drawn as red crosses (gid "suspect").
    Panels without data are left out.

    At most ``max_runs`` runs are drawn (:data:`TELEMETRY_RUNS`, the cap of the report's per-run
    tables: at 10,000 runs the figure was unreadable and slow, issue 45), picked deterministically:
    every suspect run first (what the figure is there to show), the places left filled with the
    other runs spread evenly in ``order``, first and last included (so a drift over the campaign
    keeps its shape, which "the slowest first" would not); the title then says "N of M runs"."""
    v.frame(table, "telemetry")
    v.columns(table, [order], "telemetry")
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise ConfigError(f"telemetry: max_runs must be a whole number of runs >= 1, got {max_runs!r}")
    total = len(table)
    d = _capped_runs(table.sort_values(order, kind="stable"), max_runs)
    panels = [
        (
            ("campaign_cpu_mean_pct", "instances (campaign)"),
            ("cpu_other_mean_pct", "other processes"),
            ("cpu_other_max_pct", "other processes, max"),
        ),
        (("steal_max_pct", "steal, max"), ("iowait_mean_pct", "iowait, mean")),
        (("freq_min_mhz", "lowest"), ("freq_max_mhz", "highest")),
    ]
    ylabels = ["CPU (% of one CPU)", "% of the host's CPU time", "CPU frequency (MHz)"]
    present = [(p, yl) for p, yl in zip(panels, ylabels) if any(c in d and d[c].notna().any() for c, _ in p)]
    if not present:
        raise ConfigError("telemetry: no run has CPU, steal or frequency summaries to draw")
    fig = new_figure((6.8, 2.3 * len(present)))
    axes = fig.subplots(len(present), 1, squeeze=False, sharex=True).ravel()
    suspect = d["suspect"].fillna(False).astype(bool) if "suspect" in d else pd.Series(False, index=d.index)
    for ax, (panel, ylabel) in zip(axes, present):
        for (col, name), colr in zip(panel, PALETTE):
            if col in d and d[col].notna().any():
                ax.plot(d[order], d[col], marker="o", ms=3, lw=0.8, color=colr, label=name)
                if suspect.any():
                    ax.scatter(
                        d.loc[suspect, order],
                        d.loc[suspect, col],
                        marker="x",
                        s=40,
                        color=SUSPECT,
                        zorder=3,
                        gid="suspect",
                    )
        for x in d.loc[suspect, order]:
            ax.axvline(x, color=SUSPECT, alpha=0.15, lw=6, zorder=0, gid="suspect_band")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel(label(order))
    n = int(suspect.sum())
    n_all = int(table["suspect"].fillna(False).astype(bool).sum()) if "suspect" in table else 0
    some = f"{n:,d} of {n_all:,d}" if n < n_all else f"{n:,d}"
    flagged = f" ({some} suspect run{'s' if n_all != 1 else ''}: red crosses)" if n else ""
    shown = f"{len(d):,d} of {total:,d} runs"
    if title:
        fig.suptitle(title + (f" ({shown})" if len(d) < total else ""))
    else:
        fig.suptitle("Telemetry per run" + (f": {shown}" if len(d) < total else "") + flagged)
    return fig


def _capped_runs(table: pd.DataFrame, max_runs: int) -> pd.DataFrame:
    """At most ``max_runs`` rows of ``table`` (one per run, already in run order), in that order:
    all of them when they fit; else every run flagged ``suspect`` (evenly spread among them if
    they alone are more than ``max_runs``), the places left filled with the other runs spread
    evenly in order (first and last included). Deterministic: the same table gives the same runs."""
    n = len(table)
    if n <= max_runs:
        return table
    flag = (
        table["suspect"].fillna(False).astype(bool).to_numpy()
        if "suspect" in table
        else np.zeros(n, dtype=bool)
    )
    sus, other = np.flatnonzero(flag), np.flatnonzero(~flag)
    keep = _spread(sus, max_runs)
    keep = np.concatenate([keep, _spread(other, max_runs - len(keep))])
    return table.iloc[np.sort(keep)]


def _spread(positions: np.ndarray, k: int) -> np.ndarray:
    """``k`` of ``positions`` spread evenly over them (first and last included); all when they fit."""
    if k <= 0:
        return positions[:0]
    if len(positions) <= k:
        return positions
    if k == 1:
        return positions[:1]
    return positions[np.round(np.linspace(0, len(positions) - 1, k)).astype(int)]


def comparison(
    table: pd.DataFrame,
    factors: Sequence[str],
    *,
    a: str = "a",
    b: str = "b",
    response: str | None = None,
    alpha: float = 0.05,
    title: str | None = None,
) -> Figure:
    """Two campaigns of one design side by side, from :func:`labkit.report.compare`'s table.

    Left: each configuration's mean in ``a`` (circle) and ``b`` (triangle). Right: the change
    from ``a`` to ``b`` in percent with its CI (from Fieller's CI of the ratio, ``ratio_low`` /
    ``ratio_high``; the difference's Welch CI when no ratio), a line at 0, and the configurations
    flagged as drift (``drift``) in the accent colour. One row per configuration, labelled with
    its factors' levels."""
    v.frame(table, "table")
    factors = list(factors)
    v.columns(table, [*factors, "mean_a", "mean_b", "diff_pct"], "table")
    alpha = v.alpha(alpha)
    response = response or table.attrs.get("response", "response")
    if table.empty:
        raise ConfigError("comparison: the table has no configuration")
    names = [", ".join(f"{f}={row[f]}" for f in factors) for _, row in table.iterrows()]
    n = len(table)
    fig = new_figure((9.5, 1.1 + 0.32 * n))
    left, right = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [1.2, 1]})
    y = np.arange(n)
    ca, cb = colors([a, b])
    left.scatter(table["mean_a"], y, marker="o", color=ca, label=str(a), zorder=3)
    left.scatter(table["mean_b"], y, marker="^", color=cb, label=str(b), zorder=3)
    for yi, m1, m2 in zip(y, table["mean_a"], table["mean_b"]):
        left.plot([m1, m2], [yi, yi], color="#999999", lw=0.8, zorder=2)
    left.set_yticks(y, names, fontsize=7)
    left.set_ylim(n - 0.5, -0.5)
    left.set_xlabel(f"mean {label(response)}", fontsize=8)
    left.legend(fontsize=7, loc="best")
    pct = table["diff_pct"].to_numpy(float)
    if {"ratio_low", "ratio_high"} <= set(table):
        lo = 100 * (table["ratio_low"].to_numpy(float) - 1)
        hi = 100 * (table["ratio_high"].to_numpy(float) - 1)
    elif {"ci_low", "ci_high"} <= set(table):
        base = table["mean_a"].to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            lo = 100 * table["ci_low"].to_numpy(float) / base
            hi = 100 * table["ci_high"].to_numpy(float) / base
    else:
        lo = hi = pct
    drift = table["drift"].to_numpy(bool) if "drift" in table else np.zeros(n, bool)
    for yi, p, lo_, hi_, d in zip(y, pct, lo, hi, drift):
        col = BAR_HIGH if d else BAR
        if np.isfinite(lo_) and np.isfinite(hi_):
            right.plot([lo_, hi_], [yi, yi], color=col, lw=1.6)
        right.scatter([p], [yi], color=col, zorder=3, gid="drift" if d else "change")
    right.axvline(0, color="black", lw=0.8)
    right.set_xlabel(f"change {a} → {b} (%, {100 * (1 - alpha):g}% CI)", fontsize=8)
    right.tick_params(axis="x", labelsize=8)
    left.tick_params(axis="x", labelsize=8)
    fig.suptitle(title or f"{label(response)}: {a} and {b} (accent: drift)", fontsize=10)
    return fig


def telemetry(
    samples: pd.DataFrame, *, metrics: Sequence[str] | None = None, ncols: int = 3, title: str | None = None
) -> Figure:
    """A run's telemetry (:meth:`labkit.store.Store.samples`: ``t``, ``metric``, ``value``), one
    small panel per metric against time in seconds (at most 12 panels, first ones shown when
    ``metrics`` is not given)."""
    v.frame(samples, "samples")
    v.columns(samples, ["t", "metric", "value"], "samples")
    if samples.empty:
        raise ConfigError("telemetry: no samples to plot")
    names = list(metrics) if metrics is not None else list(dict.fromkeys(samples["metric"].astype(str)))[:12]
    if not names:
        raise ConfigError("telemetry: no metric to plot")
    ncols = max(1, min(int(ncols), len(names)))
    nrows = math.ceil(len(names) / ncols)
    fig = new_figure((3.0 * ncols, 1.9 * nrows + 0.4))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    for ax, m in zip(axes, names):
        part = samples[samples["metric"].astype(str) == m].sort_values("t")
        ax.plot(part["t"], part["value"], color=BAR, lw=1.2)
        ax.set_title(label(m), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("t (s)", fontsize=7)
    fig.suptitle(title or "telemetry during the run", fontsize=10)
    return fig
