"""Figures for labkit studies: Pareto charts of effects, main effects, interactions, Q-Q, CIs,
overhead ratios, run order (drift), and the measurement's own: variance by level, drift with change
points, per-run telemetry.

Every axis is labelled through :mod:`labkit.report.labels` (names with units) and every
level or platform gets its colour from the one palette there. Where a group has
few values (``points="auto"``: at most ``RAW_POINTS_MAX``), the raw runs are
drawn beside the means.

Every function returns a :class:`matplotlib.figure.Figure` and never calls
``plt.show()``: figures are created through pyplot (so they get the current
backend's canvas and Jupyter's inline display) and closed at once, so pyplot
neither shows them a second time at the end of a cell nor keeps them alive.
A returned Figure displays once in Jupyter; :func:`save_figure` writes it to
``figures/`` as PNG and SVG. Pass ``ax=`` to draw into an existing Axes instead (the function
then returns that Axes' figure).

Text shows literally: names and levels come from stores, so a level ``$\\alpha$`` or
``$x^$`` is drawn as those characters, never parsed as matplotlib mathtext (which would
typeset it or fail the whole figure); the figures these functions create
(:class:`LiteralTextFigure`) draw every text with ``parse_math`` off.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from scipy import stats as sps

from ..errors import ConfigError
from ..stats import validate as v
from ..stats.diagnostics import Diagnostics
from ..stats.lenth import lenth
from ..stats.summary import summarize
from .canvas import (
    BAR,
    BAR_HIGH,
    REF,
    LiteralTextFigure,
    figure_axes,
    figures_written,
    new_figure,
    panel_grid,
    save_figure,
)
from .labels import colors, label, term_label
from .measurement_plots import comparison, drift, telemetry, telemetry_runs, variance_shares
from .small_n import data_limits, draw_interval, interval_table, log_ticks

__all__ = [
    "LiteralTextFigure",
    "comparison",
    "drift",
    "figures_written",
    "interactions",
    "main_effects",
    "overhead",
    "pareto",
    "qq",
    "response_by_config",
    "run_order",
    "save_figure",
    "telemetry",
    "telemetry_runs",
    "variance_shares",
]

RAW_POINTS_MAX = 10


def _show_points(points, n_max: int) -> bool:
    if points == "auto":
        return n_max <= RAW_POINTS_MAX
    if isinstance(points, bool):
        return points
    raise ConfigError(f"points must be True, False or 'auto', got {points!r}")


def _raw(ax, x, y, color, *, seed: int = 0, width: float = 0.12) -> None:
    """Raw values as small translucent dots, jittered along x (gid "raw")."""
    rng = np.random.default_rng(seed)
    x = np.asarray(x, float) + rng.uniform(-width, width, len(x))
    ax.scatter(x, y, s=10, color=color, alpha=0.45, linewidths=0, zorder=1, gid="raw")


def pareto(
    effects: pd.DataFrame,
    *,
    alpha: float | None = None,
    top: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    diagnostics: Diagnostics | None = None,
) -> Figure:
    """Minitab-style Pareto chart of a :func:`labkit.stats.factorial_effects` table.

    * Replicated design (the table has ``t``): bars of |t| (standardized
      effects) and a dashed reference line at t(1 - alpha/2, df_error).
    * Unreplicated: bars of |effect| with Lenth's margin of error ME (dashed)
      and simultaneous margin of error SME (dotted).

    Bars are sorted, largest on top, annotated with each term's % of
    variation; bars beyond the (first) reference line are highlighted.
    ``alpha`` defaults to the table's own (``attrs["alpha"]``, else 0.05);
    ``top`` keeps only the largest ``top`` terms (the lines still use all).
    The reference lines carry ``gid`` "t_crit", "ME" or "SME". Terms are
    labelled with :func:`labkit.report.labels.term_label`. The error (residual) share of
    the variation is written under the x label; with ``diagnostics`` (a
    :class:`labkit.stats.Diagnostics`) whose residuals are not normal, a caveat
    there says the reference line is approximate.
    """
    v.frame(effects, "effects")
    v.columns(effects, ["term", "effect", "pct_variation"], "effects")
    if alpha is None:
        alpha = effects.attrs.get("alpha", 0.05)
    alpha = v.alpha(alpha)
    rows = effects[~effects["term"].isin(["I", "error"])]
    if rows.empty:
        raise ConfigError("effects has no terms besides I and error: nothing to chart")
    replicated = "t" in rows.columns and bool(np.isfinite(rows["t"].to_numpy(float)).any())
    lines = []
    if replicated:
        err = effects[effects["term"] == "error"]
        df_e = effects.attrs.get("df_error")
        if df_e is None and not err.empty:
            df_e = float(err["df"].iloc[0])
        if df_e is None:
            raise ConfigError(
                "effects has t values but no error row or attrs['df_error']: "
                "pass the table factorial_effects() returned"
            )
        values = rows["t"].abs().to_numpy(float)
        crit = float(sps.t.ppf(1 - alpha / 2, df_e))
        lines.append(("t_crit", crit, "--", f"t(1-α/2, {df_e:g}) = {crit:.3f}"))
        xlabel = "|t| (standardized effect)"
    else:
        values = rows["effect"].abs().to_numpy(float)
        res = lenth(rows, alpha=alpha)
        lines.append(("ME", res.me, "--", f"ME = {res.me:.4g}"))
        lines.append(("SME", res.sme, ":", f"SME = {res.sme:.4g}"))
        xlabel = "|effect|"
    order = np.argsort(-values, kind="stable")
    if top is not None:
        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise ConfigError(f"top must be a positive integer, got {top!r}")
        order = order[:top]
    terms = rows["term"].to_numpy()[order]
    vals = values[order]
    pct = rows["pct_variation"].to_numpy(float)[order]
    n = len(order)
    fig, ax = figure_axes(ax, (6.4, min(1.6 + 0.3 * n, 40)))
    ypos = np.arange(n)[::-1]  # largest on top
    colors = [BAR_HIGH if val > lines[0][1] else BAR for val in vals]
    ax.barh(ypos, vals, color=colors, height=0.7)
    ax.set_yticks(ypos, [term_label(t) for t in terms])
    span = max(float(np.nanmax(vals)) if n else 0.0, max(x for _, x, _, _ in lines))
    for y, val, p in zip(ypos, vals, pct):
        if np.isfinite(p):
            ax.text(
                val + 0.01 * span,
                y,
                f"{p:.1f}%",
                va="center",
                fontsize=8,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8},
            )
    for gid, x, style, text in lines:
        ax.axvline(x, color=REF, linestyle=style, linewidth=1.2, label=text, gid=gid)
    ax.set_xlim(0, span * 1.15 if span > 0 else 1)
    ax.set_ylim(-0.6, n - 0.4)
    notes = []
    err = effects.loc[effects["term"] == "error", "pct_variation"]
    if len(err) and np.isfinite(float(err.iloc[0])):
        notes.append(("error", f"error (residual): {float(err.iloc[0]):.1f}% of the variation"))
    if diagnostics is not None and getattr(diagnostics, "normal", None) is False:
        w, p = diagnostics.table.iloc[0][["W", "p"]]
        notes.append(
            (
                "caveat",
                f"caveat: residuals not normal (Shapiro-Wilk W = {w:.3f}, "
                f"p = {p:.2g}); the reference line is approximate",
            )
        )
    xlabel += "".join(f"\n{text}" for _, text in notes)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("term")
    ax.legend(loc="lower right", fontsize=8)
    response = effects.attrs.get("response")
    kind = "standardized effects" if replicated else "effects (Lenth)"
    ax.set_title(
        title
        or f"Pareto chart of the {kind}" + (f": {label(response)}" if response else "") + f", α = {alpha:g}"
    )
    return fig


def _levels(data: pd.DataFrame, factor: str, levels=None) -> list:
    return v.level_order(data[factor], v.level_map(levels).get(factor))


def _check(data, factors, response, arg="factors") -> list[str]:
    v.frame(data)
    factors = v.names(factors, arg)
    v.columns(data, factors, arg)
    v.response(data, response)
    v.no_missing(data, factors, arg)
    return factors


def _pooled_error(data: pd.DataFrame, factors: list[str], response: str):
    """(s_e, df_e) of the full cell-means model of ``factors``: the within-configuration
    spread pooled over every configuration, or None when no configuration is replicated."""
    g = data.groupby(factors, observed=True)[response]
    sse = float(((data[response] - g.transform("mean")) ** 2).sum())
    df_e = len(data) - g.ngroups
    return (np.sqrt(sse / df_e), df_e) if df_e > 0 else None


def main_effects(
    data: pd.DataFrame,
    factors: Sequence[str],
    response: str,
    *,
    alpha: float = 0.05,
    ci: bool = True,
    levels: v.Levels = None,
    points: bool | str = "auto",
) -> Figure:
    """Main effects plot (Minitab style): mean response at each level of each factor.

    One panel per factor (shared y axis), points joined by a line, error bars
    of the ``1 - alpha`` CI of each level mean when ``ci``, and the grand mean
    as a dashed grey line. The CI uses the model's error, not each level's raw
    spread: s_e and df_e of the full model of ``factors`` (every configuration's
    own mean), so the other factors' effects are not counted as noise; the
    half-width is t(1 - alpha/2, df_e)·s_e/sqrt(n_level). Unreplicated designs
    (df_e = 0) get no CI. ``points`` draws the raw runs (gid "raw"). Works for
    any number of levels. ``levels`` (a labkit Design or
    ``{factor: [levels in order]}``) orders the x axes.
    """
    factors = _check(data, factors, response)
    alpha = v.alpha(alpha)
    fig, axes = panel_grid(len(factors), 4)
    grand = float(data[response].mean())
    err = _pooled_error(data, factors, response) if ci else None
    for ax, f in zip(axes, factors):
        s = data.groupby(f, observed=True)[response].agg(["mean", "count"])
        s = s.loc[_levels(data, f, levels)]
        x = np.arange(len(s))
        if _show_points(points, int(s["count"].max())):
            pos = dict(zip(s.index, x))
            _raw(ax, data[f].map(pos), data[response], BAR)
        if err is not None:
            half = float(sps.t.ppf(1 - alpha / 2, err[1])) * err[0] / np.sqrt(s["count"])
            ax.errorbar(x, s["mean"], yerr=half, marker="o", capsize=3, color=BAR, zorder=2)
        else:
            ax.plot(x, s["mean"], marker="o", color=BAR, zorder=2)
        ax.axhline(grand, color="grey", linestyle="--", linewidth=1, gid="grand_mean")
        ax.set_xticks(x, [str(lv) for lv in s.index])
        ax.set_xlim(-0.5, len(s) - 0.5)
        ax.set_xlabel(label(f))
    axes[0].set_ylabel(f"mean {label(response)}")
    note = f" ({100 * (1 - alpha):g}% CI, model error, df = {err[1]})" if err is not None else ""
    fig.suptitle(f"Main effects on {label(response)}{note}")
    return fig


def interactions(
    data: pd.DataFrame,
    factors: Sequence[str],
    response: str,
    *,
    alpha: float = 0.05,
    ci: bool = False,
    levels: v.Levels = None,
) -> Figure:
    """Interaction plots: one panel per pair of factors (A, B), in the order of ``factors``.

    x = levels of A, one line per level of B, y = mean response; parallel
    lines mean no interaction. ``ci=True`` adds t-based CI error bars.
    ``levels`` orders the levels as in :func:`main_effects`.
    """
    factors = _check(data, factors, response)
    alpha = v.alpha(alpha)
    if len(factors) < 2:
        raise ConfigError("interactions() needs at least two factors")
    pairs = list(itertools.combinations(factors, 2))
    fig, axes = panel_grid(len(pairs), 3, panel=(3.6, 3.0))
    for ax, (a, b) in zip(axes, pairs):
        s = summarize(data, by=[a, b], response=response, alpha=alpha)
        xlev = _levels(data, a, levels)
        xpos = {lv: i for i, lv in enumerate(xlev)}
        blev = _levels(data, b, levels)
        for lv, col in zip(blev, colors(blev)):
            part = s[s[b] == lv].copy()
            part["_x"] = part[a].map(xpos)
            part = part.sort_values("_x")
            if ci:
                yerr = np.vstack([part["mean"] - part["ci_low"], part["ci_high"] - part["mean"]])
                ax.errorbar(
                    part["_x"], part["mean"], yerr=yerr, marker="o", capsize=3, label=str(lv), color=col
                )
            else:
                ax.plot(part["_x"], part["mean"], marker="o", label=str(lv), color=col)
        ax.set_xticks(range(len(xlev)), [str(lv) for lv in xlev])
        ax.set_xlim(-0.5, len(xlev) - 0.5)
        ax.set_xlabel(label(a))
        ax.legend(title=label(b), fontsize=8, title_fontsize=8)
    axes[0].set_ylabel(f"mean {label(response)}")
    fig.suptitle(f"Interactions on {label(response)}")
    return fig


def qq(
    residuals: Diagnostics | pd.DataFrame | pd.Series,
    *,
    alpha: float = 0.05,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Normal Q-Q plot of residuals, with the Shapiro-Wilk result in the title.

    ``residuals`` is a :class:`labkit.stats.Diagnostics`, a DataFrame with a
    ``residual`` column (:func:`labkit.stats.factorial_residuals`) or numbers.
    The points come from ``scipy.stats.probplot``; the line is its fit.
    """
    if hasattr(residuals, "residuals") and isinstance(residuals.residuals, pd.DataFrame):
        residuals = residuals.residuals
    if isinstance(residuals, pd.DataFrame):
        v.columns(residuals, ["residual"], "residuals")
        residuals = residuals["residual"]
    r = np.asarray(residuals, dtype=float).ravel()
    if len(r) < 3 or not np.all(np.isfinite(r)):
        raise ConfigError(f"qq() needs at least 3 finite residuals, got {len(r)}")
    alpha = v.alpha(alpha)
    (osm, osr), (slope, intercept, _) = sps.probplot(r, dist="norm")
    fig, ax = figure_axes(ax, (4.8, 4.2))
    ax.plot(osm, osr, "o", color=BAR, markersize=4, gid="points")
    ax.plot(osm, slope * osm + intercept, color=REF, linewidth=1.2, gid="fit")
    ax.set_xlabel("theoretical quantiles (normal)")
    ax.set_ylabel("ordered residuals")
    if title is None:
        title = "Normal Q-Q plot of residuals"
        if np.ptp(r) > 0:
            w, p = sps.shapiro(r)
            verdict = "normal" if p > alpha else "NOT normal"
            title += f"\nShapiro-Wilk W = {w:.3f}, p = {p:.3g} ({verdict} at α = {alpha:g})"
    ax.set_title(title, fontsize=10)
    return fig


def response_by_config(
    data: pd.DataFrame,
    by: str | Sequence[str],
    response: str,
    *,
    hue: str | None = None,
    alpha: float = 0.05,
    levels: v.Levels = None,
    ax: Axes | None = None,
    title: str | None = None,
    points: bool | str = "auto",
) -> Figure:
    """Mean response of every configuration with its t-based ``1 - alpha`` CI.

    Configurations are the combinations of the ``by`` columns (from
    :func:`labkit.stats.summarize`), one per x position. With ``hue`` (one
    of ``by``), its levels become side-by-side series at each configuration
    of the other columns, e.g. floating vs pinned per vcpus/count.
    ``levels`` orders the hue levels as in :func:`main_effects`. ``points``
    draws every run beside its mean (gid "raw"), by default when n <= 10.
    """
    v.frame(data)
    by = v.names(by, "by")
    v.columns(data, by, "by")
    alpha = v.alpha(alpha)
    if hue is not None and hue not in by:
        raise ConfigError(f"hue {hue!r} must be one of by ({', '.join(by)})")
    s = summarize(data, by=by, response=response, alpha=alpha)
    xcols = [c for c in by if c != hue]
    if xcols:
        keys = list(dict.fromkeys(map(tuple, s[xcols].itertuples(index=False, name=None))))
    else:
        keys = [()]
    xpos = {k: i for i, k in enumerate(keys)}
    series = [(None, s)] if hue is None else [(lv, s[s[hue] == lv]) for lv in _levels(data, hue, levels)]
    width = 0.8 / len(series)
    labels = ["\n".join(f"{label(c)}={val}" for c, val in zip(xcols, k)) or "all" for k in keys]
    longest = max(len(line) for label in labels for line in label.split("\n"))
    per_config = max(0.7 * max(1, len(series) / 2), 0.075 * longest)  # inches: room for the label
    fig, ax = figure_axes(ax, (max(4.8, per_config * len(keys) + 2), 4.2))
    raw = _show_points(points, int(s["n"].max()))
    palette = colors([lv for lv, _ in series]) if hue is not None else [BAR]
    # intervals of a positive quantity on the log scale (never negative); the axis holds the data
    # and the means, and an interval reaching past it ends in an arrowhead (small_n)
    s = s.drop(columns=["ci_low", "ci_high"]).merge(
        interval_table(data, by, response, alpha=alpha)[[*by, "ci_low", "ci_high"]], on=by, how="left"
    )
    series = [(None, s)] if hue is None else [(lv, s[s[hue] == lv]) for lv in _levels(data, hue, levels)]
    ylim = data_limits([*data[response], *s["mean"]])
    for i, ((lv, part), col) in enumerate(zip(series, palette)):
        x = np.array(
            [xpos[tuple(r)] if xcols else 0 for r in part[xcols].itertuples(index=False, name=None)], float
        )
        shift = (i - (len(series) - 1) / 2) * width
        x = x + shift
        ax.plot(x, part["mean"], "o", color=col, zorder=2, label=None if lv is None else str(lv))
        for xi, lo, hi in zip(x, part["ci_low"], part["ci_high"]):
            if np.isfinite(lo) or np.isfinite(hi):
                draw_interval(ax, xi, lo, hi, color=col, limits=ylim)
        if raw:
            rows = data if lv is None else data[data[hue] == lv]
            rx = [xpos[tuple(r)] if xcols else 0 for r in rows[xcols].itertuples(index=False, name=None)]
            _raw(ax, np.asarray(rx, float) + shift, rows[response], col, width=width / 4)
    ax.set_xticks(range(len(keys)), labels, fontsize=8)
    ax.set_xlim(-0.6, len(keys) - 0.4)
    ax.set_ylim(*ylim)
    # the axis is linear; only the interval of a positive quantity is computed on the log scale
    scale = " from the logs" if (data[response] > 0).all() else ""
    ax.set_ylabel(f"{label(response)}\n(mean, {100 * (1 - alpha):g}% CI{scale}; linear axis)")
    if hue is not None:
        ax.legend(title=label(hue), fontsize=8)
    ax.set_title(title or f"{label(response)} by configuration")
    return fig


def overhead(
    table: pd.DataFrame,
    *,
    panel: str = "benchmark",
    test: str = "test",
    alpha: float = 0.05,
    baseline: str = "native",
    ncols: int = 2,
    title: str | None = None,
) -> Figure:
    """Slowdown of each platform against a baseline, as ratios on a log scale, one panel per ``panel``.

    ``table`` is :func:`labkit.stats.overhead_ratios` output with a ``test``
    column added: one row per (test, platform) with ``panel``, ``test``,
    ``platform``, ``ratio`` (how many times worse than the baseline) and
    ``ci_low``/``ci_high``. The x axis is logarithmic with a line at 1 (no
    overhead), so 2x slower and 2x faster sit at the same distance from it, and
    each panel has its own range. Bars are grouped by ``test`` (the panel's name
    dropped from its front), one colour per platform (:mod:`labkit.report.labels`),
    in order of first appearance. Rows without a ratio are left out; an interval
    that is unbounded (NaN bounds) or reaches past ten times the ratios is drawn open-ended
    (an arrowhead at the axis edge), so no bound near 0 stretches the axis.
    """
    v.frame(table, "table")
    v.columns(table, [panel, test, "platform", "ratio", "ci_low", "ci_high"], "table")
    alpha = v.alpha(alpha)
    t = table[np.isfinite(table["ratio"].to_numpy(float)) & (table["ratio"] > 0)]
    if t.empty:
        raise ConfigError("overhead: no row has a positive ratio to plot")
    panels = list(dict.fromkeys(t[panel].astype(str)))
    plats = list(dict.fromkeys(t.platform.astype(str)))
    colours = dict(zip(plats, colors(plats)))
    n_tests = [t.loc[t[panel].astype(str) == p, test].nunique() for p in panels]
    ncols = max(1, min(int(ncols), len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    per_test = 0.2 * len(plats) + 0.25
    heights = [max(n_tests[r * ncols : (r + 1) * ncols]) * per_test + 1.0 for r in range(nrows)]
    fig = new_figure((5.2 * ncols, sum(heights) + 0.6))
    axes = fig.subplots(nrows, ncols, squeeze=False, gridspec_kw={"height_ratios": heights}).ravel()
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    height = 0.8 / len(plats)
    pending: list[tuple[float, float, float]] = []
    for ax, name in zip(axes, panels):
        part = t[t[panel].astype(str) == name]
        tests = list(dict.fromkeys(part[test].astype(str)))
        for i, plat in enumerate(plats):
            rows = part[part.platform.astype(str) == plat]
            if rows.empty:
                continue
            y = np.array([tests.index(x) for x in rows[test].astype(str)], float)
            y = y + (i - (len(plats) - 1) / 2) * height
            r = rows.ratio.to_numpy(float)
            # bars start at 1 (no overhead) and end at the ratio; intervals are drawn once the
            # axis is set from the ratios (an unbounded or far bound ends in an arrowhead)
            ax.barh(y, r - 1, left=1, height=height, color=colours[plat], label=plat)
            pending += [
                (yy, lo, hi)
                for yy, lo, hi in zip(y, rows.ci_low.to_numpy(float), rows.ci_high.to_numpy(float))
            ]
        ax.set_xscale("log")
        finite = [b for _, lo, hi in pending for b in (lo, hi) if np.isfinite(b) and b > 0]
        rat = part.ratio.to_numpy(float)
        xlim = data_limits(
            [*rat, *[b for b in finite if rat.min() / 10 <= b <= rat.max() * 10]], log=True, include=[1.0]
        )
        ax.set_xlim(*xlim)
        for yy, lo, hi in pending:
            draw_interval(ax, yy, lo, hi, orient="h", limits=xlim, lw=0.8, capsize=2)
        pending.clear()
        log_ticks(ax, "x")
        ax.axvline(1, color="black", lw=0.8, gid="no_overhead")
        short = [x[len(name) + 1 :] if x.startswith(name + " ") else x for x in tests]
        ax.set_yticks(range(len(tests)), short, fontsize=7)
        ax.set_ylim(len(tests) - 0.5, -0.5)
        ax.set_title(name, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_xlabel(f"slowdown vs {baseline} (×, log scale)", fontsize=8)
    handles, names = [], []
    for ax in axes[: len(panels)]:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    fig.legend(handles, names, title="platform", loc="outside lower center", ncols=len(names), fontsize=8)
    fig.suptitle(
        title
        or f"Slowdown against {baseline} (ratio of means, {100 * (1 - alpha):g}% Fieller CI); > 1: worse",
        fontsize=11,
    )
    return fig


def run_order(
    data: pd.DataFrame,
    response: str,
    *,
    order: str = "run_order",
    hue: str | None = None,
    window: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    levels: v.Levels = None,
) -> Figure:
    """Response against run order, to see drift over the campaign's time.

    One dot per run (coloured by ``hue`` when given, its levels in the legend in the order
    ``levels`` gives, as in :func:`main_effects`) and a centred rolling
    median over ``window`` runs (default: about a tenth of the runs, at least
    3; line ``gid`` "rolling_median"). Because runs execute in random order, a
    trend in the rolling median is drift (warm-up, thermal, a neighbour), not
    a factor's effect.
    """
    v.frame(data)
    v.columns(data, [order] + ([hue] if hue else []), "columns")
    v.response(data, response)
    d = data.sort_values(order)
    fig, ax = figure_axes(ax, (6.4, 3.6))
    if hue:
        hl = _levels(d, hue, levels)
        for lv, col in zip(hl, colors(hl)):
            part = d[d[hue] == lv]
            ax.scatter(part[order], part[response], s=14, color=col, label=str(lv), alpha=0.8)
        ax.legend(title=label(hue), fontsize=8)
    else:
        ax.scatter(d[order], d[response], s=14, color=BAR, alpha=0.8)
    w = window or max(3, len(d) // 10)
    if len(d) >= w:
        roll = d[response].rolling(w, center=True, min_periods=max(1, w // 2)).median()
        ax.plot(d[order], roll, color=REF, lw=1.5, gid="rolling_median", label=f"rolling median ({w} runs)")
    ax.set_xlabel(label(order))
    ax.set_ylabel(label(response))
    ax.set_title(title or f"{label(response)} in run order (drift check)")
    return fig
