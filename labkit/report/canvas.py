"""The canvas of every labkit figure: :class:`LiteralTextFigure` (texts drawn as written, never
mathtext), new figures, axes and panel grids released by pyplot at once, the bar and reference
colours, and :func:`save_figure` (PNG and SVG written reproducibly) with :func:`figures_written`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib import rc_context
from matplotlib.backend_bases import RendererBase
from matplotlib.figure import Figure

from ..core.files import atomic_write
from ..errors import ConfigError
from .labels import PALETTE

__all__ = [
    "BAR",
    "BAR_HIGH",
    "REF",
    "LiteralTextFigure",
    "figure_axes",
    "figures_written",
    "new_figure",
    "panel_grid",
    "save_figure",
]

BAR = PALETTE[0]
BAR_HIGH = PALETTE[3]
REF = "#a0322b"


class LiteralTextFigure(Figure):
    """A Figure whose texts are drawn as written: before each draw every Text artist gets
    ``parse_math`` off, and texts created while drawing (tick labels are made lazily) are
    created with ``text.parse_math`` off, so ``$`` in data is never mathtext."""

    def draw(self, renderer: RendererBase) -> None:
        from matplotlib.text import Text

        with rc_context({"text.parse_math": False}):
            for t in self.findobj(Text):
                t.set_parse_math(False)
            return super().draw(renderer)


def new_figure(figsize) -> Figure:
    """A new figure (texts literal) on the current backend, already released by pyplot."""
    fig = plt.figure(figsize=figsize, layout="constrained", FigureClass=LiteralTextFigure)
    plt.close(fig)
    return fig


def figure_axes(ax, figsize):
    if ax is not None:
        return ax.figure, ax
    fig = new_figure(figsize)
    return fig, fig.add_subplot()


def panel_grid(n: int, ncols_max: int, panel=(3.2, 2.8)):
    ncols = min(n, ncols_max)
    nrows = math.ceil(n / ncols)
    fig = new_figure((panel[0] * ncols, panel[1] * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def save_figure(
    fig: Figure,
    name: str,
    directory: str | Path = "figures",
    *,
    formats: Sequence[str] = ("png", "svg"),
    dpi: int = 150,
    mode: int = 0o600,
) -> list[Path]:
    """Write ``fig`` as ``directory/name.png`` and ``directory/name.svg``; return the paths.

    ``name`` is a bare file stem (no directory). The directory is created if
    needed. SVG output is made reproducible (no date, fixed id salt) so
    committed figures only change when the figure does. Each file is written with
    :func:`labkit.core.files.atomic_write` with ``mode`` (0600 by default, like every file labkit
    writes; git records figures as 0644 whatever their mode here), and a symbolic link
    in place of a figure is refused.
    """
    if not isinstance(fig, Figure):
        raise ConfigError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    if not isinstance(name, str) or not name.strip() or any(c in name for c in "/\\") or name in (".", ".."):
        raise ConfigError(f"name must be a bare file name without directories, got {name!r}")
    allowed = {"png", "svg", "pdf"}
    formats = [formats] if isinstance(formats, str) else list(formats)
    bad = [f for f in formats if f not in allowed]
    if bad or not formats:
        raise ConfigError(f"formats must be among {sorted(allowed)}, got {formats!r}")
    stem = name[:-4] if name.lower().endswith((".png", ".svg", ".pdf")) else name
    out = Path(directory)
    paths = []
    with rc_context({"svg.hashsalt": "labkit"}):
        for fmt in formats:
            meta = {"Date": None} if fmt in ("svg", "pdf") else None
            paths.append(
                atomic_write(
                    out / f"{stem}.{fmt}",
                    partial(fig.savefig, format=fmt, dpi=dpi, bbox_inches="tight", metadata=meta),
                    mode=mode,
                )
            )
    return paths


# -- measurement: levels, drift, telemetry (issue 32) -------------------------------------------


def figures_written(paths: Sequence[str | Path]) -> str:
    """One line for the files :func:`save_figure` wrote: how many figures and files, in which
    folder(s) ("wrote 6 figures (12 files: png, svg) to out/figures/x"), instead of a line per file."""
    ps = [Path(p) for p in paths]
    if not ps:
        return "wrote no figure"
    dirs = list(dict.fromkeys(str(p.parent) for p in ps))
    stems = {(p.parent, p.stem) for p in ps}
    kinds = ", ".join(dict.fromkeys(p.suffix.lstrip(".") for p in ps))
    return (
        f"wrote {len(stems)} figure{'s' if len(stems) != 1 else ''} ({len(ps)} files: {kinds}) to "
        + ", ".join(dirs)
    )
