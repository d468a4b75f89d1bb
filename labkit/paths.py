"""Where the repository's data, figures and outputs are, whatever the working directory.

Notebooks and the CLI call :func:`data_dir` and friends instead of relative
paths such as ``"../data"``, so ``papermill notebooks/01... out.ipynb`` works
from the repository root, from ``notebooks/`` or from anywhere else.
``LABKIT_ROOT`` overrides the search (e.g. an installed labkit using a clone's data).
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError

__all__ = ["data_dir", "figures_dir", "out_dir", "repo_root", "resolve"]

_MARKERS = ("pyproject.toml", "data")


def repo_root(start: str | Path | None = None) -> Path:
    """The labkit checkout: ``LABKIT_ROOT``, else the first parent of ``start`` (default: the
    working directory, then this package's location) holding ``pyproject.toml`` and ``data/``."""
    env = os.environ.get("LABKIT_ROOT")
    if env:
        root = Path(env).expanduser().resolve()
        if not root.is_dir():
            raise ConfigError(f"LABKIT_ROOT={env!r} is not a directory")
        return root
    starts = [Path(start)] if start is not None else [Path.cwd(), Path(__file__).resolve().parent]
    for s in starts:
        for d in (s.resolve(), *s.resolve().parents):
            if all((d / m).exists() for m in _MARKERS):
                return d
    raise ConfigError(f"no labkit checkout (a folder with {' and '.join(_MARKERS)}) above "
                      f"{', '.join(str(s) for s in starts)}; set LABKIT_ROOT")


def resolve(path: str | Path | None, default: str) -> Path:
    """``path`` as given when absolute; relative paths (and ``None`` → ``default``) from the root."""
    p = Path(path if path is not None else default).expanduser()
    return p if p.is_absolute() else repo_root() / p


def data_dir(path: str | Path | None = None) -> Path:
    """The campaigns' folder (default ``<root>/data``)."""
    return resolve(path, "data")


def figures_dir(path: str | Path | None = None) -> Path:
    """The committed figures' folder (default ``<root>/figures``)."""
    return resolve(path, "figures")


def out_dir(path: str | Path | None = None) -> Path:
    """Scratch output that is never committed (default ``<root>/out``)."""
    return resolve(path, "out")
