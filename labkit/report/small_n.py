"""Figures that hold at small n: intervals that never go negative for positive quantities,
unbounded intervals drawn open-ended, axes set from the data and not from a wild bound, and
tick labels that do not overlap.

With 2 runs, a t interval's half-width is 12.7 standard errors: a requests/s interval goes
negative, a Fieller ratio is unbounded as soon as the baseline's interval contains 0, and an
axis stretched to hold such a bound flattens every other point. Here:

* :func:`interval_table`: mean and ``1 - alpha`` interval per group, on the log scale for a
  positive quantity (:func:`labkit.report.claims.mean_interval`);
* :func:`draw_interval`: an interval clipped to the axis limits, with an arrowhead where it
  goes on (clipped or unbounded) instead of a cap;
* :func:`data_limits`: axis limits from the data and the means, padded, on a linear or log
  scale;
* :func:`log_ticks`: a few 1-2-5 ticks with plain labels on a log axis (no minor labels);
* :func:`figure_problems`: what a reviewer would reject in a drawn figure (overlapping tick
  labels, an axis far wider than its data, a negative interval of a positive quantity), read
  through matplotlib's renderer; the tests run it on every committed figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from ..errors import ConfigError
from .claim_verdicts import mean_interval

__all__ = ["data_limits", "draw_interval", "figure_problems", "interval_table", "log_ticks"]

#: how far past the data an axis may reach (a factor on a log axis, spans on a linear one)
LIMIT_FACTOR = 3.0


def interval_table(
    data: pd.DataFrame, by: Sequence[str], response: str, *, alpha: float = 0.05
) -> pd.DataFrame:
    """One row per group of ``by`` (in order of first appearance): the ``by`` columns, ``n``,
    ``mean``, ``ci_low``, ``ci_high`` and ``scale`` ("log" for a positive quantity, whose
    interval is computed on the log scale and is never negative; "linear" otherwise)."""
    by = list(by)
    missing = [c for c in [*by, response] if c not in data.columns]
    if missing:
        raise ConfigError(f"interval_table: column(s) {missing} missing; have {list(data.columns)}")
    positive = bool((data[response] > 0).all())
    rows = []
    for key, grp in data.groupby(by, sort=False, observed=True):
        key = key if isinstance(key, tuple) else (key,)
        m = mean_interval(grp[response], alpha=alpha, positive=positive)
        rows.append(
            {
                **dict(zip(by, key)),
                "n": m["n"],
                "mean": m["mean"],
                "ci_low": m["low"],
                "ci_high": m["high"],
                "scale": m["scale"],
            }
        )
    return pd.DataFrame(rows, columns=[*by, "n", "mean", "ci_low", "ci_high", "scale"])


def data_limits(
    values: Sequence[float], *, log: bool = False, pad: float = 0.08, include: Sequence[float] = ()
) -> tuple[float, float]:
    """Axis limits that hold ``values`` (and ``include``, e.g. 1 on a ratio axis), padded by
    ``pad`` of the span (of the log span on a ``log`` axis); a linear axis of positive data
    does not go below 0."""
    v = np.asarray([*values, *include], dtype=float)
    v = v[np.isfinite(v) & ((v > 0) if log else True)]
    if not len(v):
        return (0.5, 2.0) if log else (0.0, 1.0)
    lo, hi = float(v.min()), float(v.max())
    if log:
        a, b = math.log10(lo), math.log10(hi)
        span = max(b - a, 0.1)
        return 10 ** (a - pad * span), 10 ** (b + pad * span)
    span = hi - lo or (abs(hi) * 0.1 or 1.0)
    out_lo, out_hi = lo - pad * span, hi + pad * span
    if lo >= 0 and out_lo < 0:
        out_lo = 0.0
    return out_lo, out_hi


def draw_interval(
    ax: Axes,
    pos: float,
    lo: float,
    hi: float,
    *,
    orient: str = "v",
    color: str = "black",
    limits: tuple[float, float] | None = None,
    lw: float = 1.0,
    capsize: float = 3.0,
) -> None:
    """Draw the interval [``lo``, ``hi``] at ``pos`` (x for ``orient`` "v", y for "h"), clipped to
    ``limits`` (default: the axis' current limits); a side that is NaN or infinite (unbounded) or
    beyond the limits ends in an arrowhead at the axis edge (gid "open_interval"), a side
    within them in a cap (gid "interval")."""
    if orient not in ("v", "h"):
        raise ConfigError(f"draw_interval: orient must be 'v' or 'h', got {orient!r}")
    a, b = limits if limits is not None else (ax.get_ylim() if orient == "v" else ax.get_xlim())
    a, b = min(a, b), max(a, b)
    lo = -math.inf if lo is None or math.isnan(lo) else lo
    hi = math.inf if hi is None or math.isnan(hi) else hi
    lo_c, hi_c = max(lo, a), min(hi, b)
    if lo_c > hi_c:
        return
    pts = ((pos, lo_c), (pos, hi_c)) if orient == "v" else ((lo_c, pos), (hi_c, pos))
    ax.plot(*zip(*pts), color=color, lw=lw, gid="interval", solid_capstyle="butt")
    for end, clipped in ((lo_c, lo < a), (hi_c, hi > b)):
        xy = (pos, end) if orient == "v" else (end, pos)
        if clipped:
            inner = (pos, (lo_c + hi_c) / 2) if orient == "v" else ((lo_c + hi_c) / 2, pos)
            ax.annotate(
                "",
                xy=xy,
                xytext=inner,
                gid="open_interval",
                arrowprops={
                    "arrowstyle": "-|>",
                    "color": color,
                    "lw": lw,
                    "shrinkA": 0,
                    "shrinkB": 0,
                    "mutation_scale": 8,
                },
            )
        else:
            ax.plot(
                *xy, marker="_" if orient == "v" else "|", color=color, markersize=2 * capsize, gid="interval"
            )


def _nice_log_ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for mantissas in ((1, 2, 5), (1, 2, 3, 5, 7), (1, 1.5, 2, 3, 4, 5, 6, 8), (1,)):
        ticks = [m * 10**e for e in range(a, b + 1) for m in mantissas if lo <= m * 10**e <= hi]
        if 2 <= len(ticks) <= most:
            return ticks
    ticks = [10**e for e in range(a, b + 1) if lo <= 10**e <= hi]
    step = max(1, math.ceil(len(ticks) / most))
    return ticks[::step] or [lo, hi]


def _plain(x: float, _pos=None) -> str:
    if x >= 1000 or x < 0.01:
        return f"{x:.0e}".replace("e+0", "e").replace("e-0", "e-")
    return f"{x:g}"


def log_ticks(ax: Axes, axis: str = "x", *, most: int = 6) -> None:
    """Put at most ``most`` 1-2-5 ticks with plain labels on ``ax``'s log ``axis`` within its
    limits, and no minor tick labels (which overlap on short log spans)."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    lo, hi = min(lo, hi), max(lo, hi)
    target.set_major_locator(FixedLocator(_nice_log_ticks(lo, hi, most)))
    target.set_major_formatter(FuncFormatter(_plain))
    target.set_minor_formatter(NullFormatter())


def _overlaps(boxes) -> int:
    n = 0
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            a, b = boxes[i], boxes[j]
            if a.x0 < b.x1 - 0.5 and b.x0 < a.x1 - 0.5 and a.y0 < b.y1 - 0.5 and b.y0 < a.y1 - 0.5:
                n += 1
    return n


def _points(ax: Axes) -> tuple[list[float], list[float]]:
    """x and y of what ``ax`` shows as data (markers, scatter points, bars), without intervals
    (gid "interval", error bars and their caps) and lines drawn in axes coordinates."""
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    xs: list[float] = []
    ys: list[float] = []
    for ln in ax.get_lines():
        if (
            not isinstance(ln, Line2D)
            or ln.get_gid() in ("interval", "open_interval")
            or ln.get_marker() in (None, "", "None", "none", "_", "|")
            or ln.get_transform() != ax.transData
        ):
            continue
        xs += list(np.asarray(ln.get_xdata(), float))
        ys += list(np.asarray(ln.get_ydata(), float))
    for col in ax.collections:
        if isinstance(col, PathCollection) and col.get_offset_transform() == ax.transData:
            off = np.asarray(col.get_offsets(), float)
            if off.size:
                xs += list(off[:, 0])
                ys += list(off[:, 1])
    for p in ax.patches:
        if isinstance(p, Rectangle) and p.get_transform() == ax.transData and p.get_visible():
            x0, y0, w, h = p.get_x(), p.get_y(), p.get_width(), p.get_height()
            xs += [x0, x0 + w]
            ys += [y0, y0 + h]
    return [v for v in xs if np.isfinite(v)], [v for v in ys if np.isfinite(v)]


def _interval_segments(ax: Axes) -> list[np.ndarray]:
    from matplotlib.collections import LineCollection

    segs = [np.asarray(ln.get_xydata(), float) for ln in ax.get_lines() if ln.get_gid() == "interval"]
    for col in ax.collections:
        if isinstance(col, LineCollection):
            segs += [np.asarray(s, float) for s in col.get_segments()]
    return segs


def figure_problems(fig: Figure, *, factor: float = LIMIT_FACTOR * 3) -> list[str]:
    """What is wrong with ``fig`` once drawn, as sentences (empty: nothing):

    * tick labels of one axis whose bounding boxes overlap (renderer extents);
    * an axis whose limits span more than ``factor`` times what it shows as data (markers,
      points, bars; intervals left out), e.g. a log axis stretched to 1e-12 by one bound;
    * an interval (an error bar or :func:`draw_interval`'s line) going below 0 on a linear axis
      whose data are all positive."""
    if not hasattr(fig.canvas, "get_renderer"):  # a figure made without pyplot: draw it with Agg
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    problems = []
    for k, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        where = f"axes {k} ({ax.get_title()!r})"
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            boxes = [
                t.get_window_extent(renderer)
                for t in axis.get_ticklabels(which="both")
                if t.get_visible() and t.get_text().strip()
            ]
            if _overlaps(boxes):
                problems.append(f"{where}: {name} tick labels overlap")
        xs, ys = _points(ax)
        for name, vals, (lo, hi), scale in (
            ("x", xs, ax.get_xlim(), ax.get_xscale()),
            ("y", ys, ax.get_ylim(), ax.get_yscale()),
        ):
            if len(vals) < 1:
                continue
            lo, hi = min(lo, hi), max(lo, hi)
            dlo, dhi = min(vals), max(vals)
            if scale == "log" and dlo > 0 and lo > 0:
                span, dspan = math.log10(hi / lo), max(math.log10(dhi / dlo), 0.5)
            else:
                span = hi - lo
                dspan = max(dhi - dlo, 0.1 * max(abs(dhi), abs(dlo)), 1e-12)
            if span > factor * dspan:
                problems.append(
                    f"{where}: {name} axis [{lo:.3g}, {hi:.3g}] spans more than {factor:g}x "
                    f"its data [{dlo:.3g}, {dhi:.3g}]"
                )
        if ys and min(ys) > 0 and ax.get_yscale() == "linear":
            if any(seg[:, 1].min() < 0 for seg in _interval_segments(ax) if seg.size):
                problems.append(f"{where}: an interval goes below 0 while every value is positive")
    return problems
