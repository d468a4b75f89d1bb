"""Telemetry for display at any campaign size: one run's series capped, a configuration's runs summarised.

A campaign of 100,000 runs holds 20 M telemetry rows (200 per run); a figure needs a few hundred
points. What the explorer shows (:meth:`labkit.report.explore.Explorer.telemetry_view`) is read
bounded, whatever the campaign's size or its runs' length:

* :func:`run_series`: one run's samples as stored when it has at most :data:`RUN_SAMPLES` of them;
  else its host telemetry averaged in SQL over at most :data:`MAX_POINTS` spans of run time per
  metric (:meth:`labkit.store.Store.sample_bins`), said so in the figure's title;
* :func:`config_summary`: the median and the 95th percentile, across the runs of a configuration,
  of each host metric per second of run time (per span of equal width when the runs last longer
  than :data:`SUMMARY_BINS` seconds), over at most :data:`SUMMARY_RUNS` of its runs spread evenly
  in run order; SQL averages each run's samples per span, so at most ``runs x metrics x bins`` rows
  are read (``attrs["rows_loaded"]``);
* :func:`summary_figure`: that summary, one panel per metric, its title saying how many runs
  and spans it summarises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..store import Store

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

#: one run's samples shown as stored up to this many; above it, averaged spans
RUN_SAMPLES = 5_000
#: points per metric of one run's figure at most (spans of run time averaged)
MAX_POINTS = 300
#: runs of a configuration summarised at most, spread evenly in run order
SUMMARY_RUNS = 100
#: spans of run time of a summary at most (one per second for runs up to this many seconds)
SUMMARY_BINS = 120
#: metrics of a summary figure at most
SUMMARY_METRICS = 6


def run_series(
    store: Store, run_id: str, *, cap: int = RUN_SAMPLES, points: int = MAX_POINTS
) -> pd.DataFrame:
    """Run ``run_id``'s telemetry to draw (:func:`labkit.report.plots.telemetry`): its samples as
    stored when it has at most ``cap``, else its host metrics averaged over at most ``points`` spans of
    run time each. ``attrs``: ``samples`` (stored), ``shown`` (rows returned), ``note`` (what was
    downsampled, or "")."""
    total = store.sample_count(run_id)
    if total <= cap:
        out = store.samples(run_id)
        out.attrs.update(samples=total, shown=len(out), note="")
        return out
    binned = store.sample_bins([run_id], bins=points, min_width_s=0.0)
    out = binned[["run_id", "t", "metric", "value"]].assign(instance=None)
    note = (
        f"downsampled: {len(out):,d} of {total:,d} samples shown, each the mean over "
        f"{binned.attrs['width_s']:.3g} s (host metrics, at most {points} points per metric)"
    )
    out.attrs.update(samples=total, shown=len(out), note=note)
    return out


def pick_runs(run_ids: list[str], at_most: int) -> list[str]:
    """At most ``at_most`` of ``run_ids``, spread evenly over them (first and last included)."""
    if at_most < 1:
        raise ConfigError(f"runs to summarise must be >= 1, got {at_most!r}")
    if len(run_ids) <= at_most:
        return list(run_ids)
    if at_most == 1:
        return [run_ids[0]]
    step = (len(run_ids) - 1) / (at_most - 1)
    return [run_ids[round(i * step)] for i in range(at_most)]


def config_summary(
    store: Store,
    config: int,
    *,
    runs: int = SUMMARY_RUNS,
    bins: int = SUMMARY_BINS,
    metrics: list[str] | None = None,
) -> pd.DataFrame:
    """Median and 95th percentile across the runs of configuration ``config`` of each host metric per
    span of run time (see the module docstring). Columns metric, bin, t (the span's start, s), median,
    p95, runs (how many runs have samples there). ``attrs``: ``runs_used``, ``runs_total``,
    ``rows_loaded`` (rows read from the store), ``width_s``, ``samples`` (samples summarised)."""
    import pandas as pd

    every = store.config_runs(config)
    used = pick_runs(every, runs)
    binned = store.sample_bins(used, bins=bins, metrics=metrics)
    cols = ["metric", "bin", "t", "median", "p95", "runs"]
    if binned.empty:
        out = pd.DataFrame(columns=cols)
    else:
        g = binned.groupby(["metric", "bin"], sort=True)
        out = pd.DataFrame(
            {
                "t": g["t"].first(),
                "median": g["value"].median(),
                "p95": g["value"].quantile(0.95),
                "runs": g["run_id"].nunique(),
            }
        ).reset_index()[cols]
    out.attrs.update(
        runs_used=len(used),
        runs_total=len(every),
        rows_loaded=len(binned),
        width_s=binned.attrs.get("width_s"),
        samples=binned.attrs.get("samples", 0),
    )
    return out


def summary_note(summary: pd.DataFrame) -> str:
    """What :func:`config_summary` summarised, in one line (for a figure's title or a caption)."""
    a = summary.attrs
    width = a.get("width_s") or 0
    span = "per second of run time" if abs(width - 1.0) < 1e-9 else f"per {width:.3g} s of run time"
    runs = (
        f"all {a['runs_total']:,d} runs"
        if a["runs_used"] == a["runs_total"]
        else f"{a['runs_used']:,d} of {a['runs_total']:,d} runs, spread evenly in run order"
    )
    return f"median and p95 across {runs}, {span} ({a.get('samples', 0):,d} samples, averaged per run and span in SQL)"


def summary_figure(summary: pd.DataFrame, *, title: str, metrics: list[str] | None = None) -> Figure:
    """One panel per metric (at most :data:`SUMMARY_METRICS`): the median line and the p95 line against
    run time; the title says what was summarised (:func:`summary_note`)."""
    # texts drawn as written: a "$" in a metric name is not mathtext
    from .canvas import LiteralTextFigure

    if summary.empty:
        raise ConfigError("telemetry summary: no samples to draw")
    names = list(metrics) if metrics is not None else list(dict.fromkeys(summary["metric"]))[:SUMMARY_METRICS]
    ncols = min(3, len(names))
    nrows = -(-len(names) // ncols)
    fig = LiteralTextFigure(figsize=(3.0 * ncols, 1.9 * nrows + 0.7), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    for ax, m in zip(axes, names):
        part = summary[summary["metric"] == m]
        ax.plot(part["t"], part["median"], lw=1.2, label="median")
        ax.plot(part["t"], part["p95"], lw=0.9, ls="--", label="p95")
        ax.set_title(str(m), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("t (s)", fontsize=7)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{title}\n{summary_note(summary)}", fontsize=9)
    return fig
