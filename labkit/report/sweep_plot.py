"""A response against a numeric sweep (message sizes, threads): the mean of each level with its
interval, on log axes where the sweep and the response span decades, as the papers draw them
(seed 003, Figure 5.2: ping-pong latency and bandwidth against message sizes from 1 B to 4 MB)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..errors import ConfigError
from .canvas import BAR, LiteralTextFigure
from .labels import label
from .small_n import interval_table, log_ticks


def sweep(
    data: pd.DataFrame, x: str, response: str, *, alpha: float = 0.05, title: str | None = None
) -> Figure:
    """Mean ``response`` per level of the numeric column ``x`` (one point each, joined in order)
    with its ``1 - alpha`` interval (:func:`~labkit.report.small_n.interval_table`: on the log
    scale for a positive response, never negative) and every run beside it. An axis is
    logarithmic when its values are positive and span more than a factor of 100. ConfigError for
    a missing column, a non-numeric ``x`` or fewer than 2 levels."""
    for c in (x, response):
        if c not in data.columns:
            raise ConfigError(f"sweep: column {c!r} missing; have {list(data.columns)}")
    xs = pd.to_numeric(data[x], errors="coerce")
    if xs.isna().any():
        raise ConfigError(
            f"sweep: {x!r} must be numeric (a sweep's levels), got {data[x].unique()[:5].tolist()}"
        )
    frame = data.assign(**{x: xs})
    t = interval_table(frame, [x], response, alpha=alpha).sort_values(x)
    if len(t) < 2:
        raise ConfigError(f"sweep: {x!r} has {len(t)} level(s); a sweep needs at least 2")
    fig = plt.figure(figsize=(7.0, 4.2), layout="constrained", FigureClass=LiteralTextFigure)
    plt.close(fig)  # released by pyplot: the caller displays or saves it
    ax = fig.add_subplot()
    ax.plot(frame[x], frame[response], ".", color=BAR, alpha=0.35, ms=4, gid="raw")
    ax.plot(t[x], t["mean"], "o-", color=BAR, lw=1.2, ms=5)
    lo, hi = t["ci_low"].to_numpy(float), t["ci_high"].to_numpy(float)
    ok = np.isfinite(lo) & np.isfinite(hi)
    ax.vlines(t[x][ok], lo[ok], hi[ok], color=BAR, lw=1.6, gid="ci")
    for axis, values in (("x", t[x]), ("y", frame[response])):
        v = np.asarray(values, float)
        if (v > 0).all() and v.max() / v.min() > 100:
            (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
            log_ticks(ax, axis)  # plain numbers (the figure's texts are literal: no mathtext)
    ax.set_xlabel(label(x))
    ax.set_ylabel(f"{label(response)}\n(mean, {100 * (1 - alpha):g} % CI; dots: runs)")
    ax.grid(True, which="major", alpha=0.3)
    if title:
        ax.set_title(title)
    return fig
