"""Where the repository's data, figures and outputs are, whatever the working directory.

Notebooks and the CLI call :func:`data_dir` and friends instead of relative
paths such as ``"../data"``, so ``papermill notebooks/01... out.ipynb`` works
from the repository root, from ``notebooks/`` or from anywhere else.
``LABKIT_ROOT`` overrides the search (e.g. an installed labkit using a clone's data).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ConfigError, StoreError

__all__ = ["check_data_dir", "data_dir", "figures_dir", "out_dir", "repo_root", "resolve", "unsafe_dir"]

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


def unsafe_dir(path: str | Path) -> str | None:
    """Why another user could change what is in the existing directory ``path``, or None.

    Unsafe: owned by a user other than root and this one, or writable by group or others
    without the sticky bit (``/tmp``'s 1777 is safe: nobody can replace another's entries).
    """
    st = os.stat(path)
    if st.st_uid not in (0, os.geteuid()):
        return f"owned by uid {st.st_uid}, not by root or this user (uid {os.geteuid()})"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"writable by group or others without the sticky bit (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def check_data_dir(path: str | Path, what: str = "data dir") -> Path:
    """``path`` (absolute) if it and every existing parent are safe (:func:`unsafe_dir`), else
    StoreError naming the directory: labkit writes stores, locks and exports there, and a
    directory another user controls lets them swap those for links to anything it writes.
    Missing parts are fine (labkit creates them, private); both the path as written and the
    one its links resolve to are checked."""
    path = Path(os.path.abspath(Path(path).expanduser()))
    seen = set()
    for chain in (path, Path(os.path.realpath(path))):
        for d in (chain, *chain.parents):
            if d in seen or not d.is_dir():
                continue
            seen.add(d)
            why = unsafe_dir(d)
            if why:
                where = "" if d == path else f": its parent {d} is"
                raise StoreError(f"{what} {path}{where or ' is'} {why}; another user could replace what "
                                 "labkit writes there: use a directory only you (and root) can change")
    return path
