"""Where the data, figures, outputs, reference data and notebooks are, whatever the working directory.

Notebooks and the CLI call :func:`data_dir` and friends instead of relative
paths such as ``"../data"``, so ``papermill notebooks/01... out.ipynb`` works
from the repository root, from ``notebooks/`` or from anywhere else.

Relative paths are taken from the labkit checkout when there is one: this repository, known by its
own marker file (:data:`MARKER` at its root), found above the working directory or above this
package's own location (an editable install); ``LABKIT_ROOT`` overrides the search. Outside a
checkout (labkit installed from a wheel, a researcher's own study folder) they are taken from the
working directory, as ``Campaign(data_dir="data")`` takes them. A folder that merely holds a
``pyproject.toml`` and a ``data/`` is never taken for the checkout.

The seed notebooks and the reference data they compare with (the papers' tables) ship inside the
package (:func:`notebooks_dir`, :func:`reference_dir`): in a checkout those are links to
``notebooks/`` and ``data/reference/``, one source of truth.

What labkit keeps while it runs (sockets, bind mounts) goes under the user's own runtime directory
(:func:`runtime_dir`): root's ``/run/labkit``, a user's ``$XDG_RUNTIME_DIR/labkit`` (or
``/run/user/<uid>/labkit``, or ``~/.cache/labkit``), never another user's.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ConfigError, StoreError

__all__ = [
    "DATA_DIR_ENV",
    "MARKER",
    "SYSTEM_RUNTIME_DIR",
    "base_dir",
    "check_data_dir",
    "checkout",
    "data_dir",
    "figures_dir",
    "notebooks_dir",
    "out_dir",
    "reference_dir",
    "repo_root",
    "resolve",
    "runtime_base",
    "runtime_dir",
    "unsafe_dir",
]

#: the file at the root of the labkit repository that tells it apart from any other folder
MARKER = ".labkit-checkout"
#: the environment variable naming the default data dir (:func:`data_dir`)
DATA_DIR_ENV = "LABKIT_DATA_DIR"
_PACKAGE = Path(__file__).resolve().parents[1]  # labkit/core/paths.py -> labkit/
#: root's runtime directory (the registry of running campaigns, the local backend's work root, the
#: libvirt backend's bind mounts); other users have their own (:func:`runtime_base`)
SYSTEM_RUNTIME_DIR = Path("/run/labkit")


def checkout(start: str | Path | None = None) -> Path | None:
    """The labkit checkout: ``LABKIT_ROOT``, else the first parent of ``start`` (default: the
    working directory, then this package's location) holding :data:`MARKER`; None when there is none."""
    env = os.environ.get("LABKIT_ROOT")
    if env:
        root = Path(env).expanduser().resolve()
        if not root.is_dir():
            raise ConfigError(f"LABKIT_ROOT={env!r} is not a directory; unset it or name the labkit checkout")
        return root
    starts = [Path(start)] if start is not None else [Path.cwd(), _PACKAGE]
    for s in starts:
        for d in (s.resolve(), *s.resolve().parents):
            if (d / MARKER).is_file():
                return d
    return None


def repo_root(start: str | Path | None = None) -> Path:
    """:func:`checkout`, or ConfigError when there is none (for what only the repository has)."""
    root = checkout(start)
    if root is None:
        raise ConfigError(
            f"no labkit checkout (a folder with {MARKER}) above "
            f"{start if start is not None else f'{Path.cwd()} or {_PACKAGE}'}: this needs the "
            "labkit repository (set LABKIT_ROOT to a clone), or give the path explicitly"
        )
    return root


def base_dir() -> Path:
    """Where relative paths start: the checkout, else the working directory."""
    return checkout() or Path.cwd()


def resolve(path: str | Path | None, default: str) -> Path:
    """``path`` as given when absolute; relative paths (and ``None`` → ``default``) from the
    checkout, or from the working directory outside one."""
    p = Path(path if path is not None else default).expanduser()
    return p if p.is_absolute() else base_dir() / p


def data_dir(path: str | Path | None = None) -> Path:
    """The campaigns' folder: ``path``, else ``$LABKIT_DATA_DIR`` (:data:`DATA_DIR_ENV`: how
    ``labkit dashboard`` tells the explorer's kernels), else ``<checkout>/data``, or ``./data``
    outside a checkout."""
    if path is None and os.environ.get(DATA_DIR_ENV):
        path = os.environ[DATA_DIR_ENV]
    return resolve(path, "data")


def figures_dir(path: str | Path | None = None) -> Path:
    """The committed figures' folder (default ``<checkout>/figures``, or ``./figures``)."""
    return resolve(path, "figures")


def out_dir(path: str | Path | None = None) -> Path:
    """Scratch output that is never committed (default ``<checkout>/out``, or ``./out``)."""
    return resolve(path, "out")


def reference_dir(path: str | Path | None = None) -> Path:
    """The papers' tables the studies compare with: ``path`` when given (relative: as
    :func:`resolve`), else the copy that ships with labkit (``labkit/studies/reference``)."""
    return resolve(path, "") if path is not None else _PACKAGE / "studies" / "reference"


def notebooks_dir() -> Path:
    """The seed notebooks and the explorer that ship with labkit (``labkit/studies/notebooks``)."""
    return _PACKAGE / "studies" / "notebooks"


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
                raise StoreError(
                    f"{what} {path}{where or ' is'} {why}; another user could replace what "
                    "labkit writes there: use a directory only you (and root) can change"
                )
    return path


def _own_dir(path: Path) -> bool:
    """Whether ``path`` is a directory (not a link) of this user's."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def runtime_base() -> Path:
    """This user's labkit runtime directory (not created): :data:`SYSTEM_RUNTIME_DIR` for root; else
    ``$XDG_RUNTIME_DIR/labkit`` when ``XDG_RUNTIME_DIR`` is an absolute path, else
    ``/run/user/<uid>/labkit`` when ``/run/user/<uid>`` is the user's, else ``~/.cache/labkit``.
    ConfigError when a non-root user has none of them (no runtime dir and no home)."""
    if os.geteuid() == 0:
        return SYSTEM_RUNTIME_DIR
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "labkit"
    user_run = Path(f"/run/user/{os.geteuid()}")
    if _own_dir(user_run):
        return user_run / "labkit"
    home = Path("~").expanduser()
    if not home.is_absolute():
        raise ConfigError(
            f"no runtime directory for labkit: uid {os.geteuid()} is not root, XDG_RUNTIME_DIR "
            f"is not set, {user_run} is not the user's and there is no home directory; set "
            "XDG_RUNTIME_DIR to a directory of yours (mode 0700)"
        )
    return home / ".cache" / "labkit"


def runtime_dir(*parts: str, create: bool = True) -> Path:
    """``runtime_base() / parts``: where labkit keeps what it needs while it runs (sockets, bind
    mounts), this user's only. With ``create``, each missing level is made 0700 (``/run/labkit``
    itself 0755, as the registry makes it); an existing one
    must be a directory of this user's (root's: root's) that group and others cannot write.
    ConfigError naming the directory and the fix when it cannot be made, reached or trusted (e.g.
    a ``$XDG_RUNTIME_DIR`` of another user's); without ``create`` a missing directory is returned
    as it is."""
    base = runtime_base()
    path = base.joinpath(*parts)
    fix = (
        "set XDG_RUNTIME_DIR to a directory of yours (mode 0700)"
        if os.geteuid() != 0
        else f"remove {path} (labkit makes it again)"
    )
    for d in (*reversed(path.parents), path):
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            if not create:
                return path
            try:  # root's own is 0755: other users read root's registry of running campaigns there
                os.mkdir(d, 0o755 if d == SYSTEM_RUNTIME_DIR else 0o700)
                st = os.lstat(d)
            except OSError as exc:
                raise ConfigError(
                    f"labkit's runtime directory {d} cannot be made ({exc.strerror or exc}); {fix}"
                ) from None
        except OSError as exc:
            raise ConfigError(
                f"labkit's runtime directory {d} cannot be reached ({exc.strerror or exc}); {fix}"
            ) from None
        if d != base and base not in d.parents:
            continue  # above the runtime directory (/run, a home): only passed through
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"labkit's runtime directory {d} is not a directory (a link or a file); {fix}")
        if st.st_uid != os.geteuid():
            raise ConfigError(
                f"labkit's runtime directory {d} belongs to uid {st.st_uid}, not to this user "
                f"(uid {os.geteuid()}); {fix}"
            )
        if st.st_mode & 0o022:
            raise ConfigError(
                f"labkit's runtime directory {d} is writable by group or others (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); {fix}"
            )
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise ConfigError(
            f"labkit's runtime directory {path} is not readable and writable by this user; {fix}"
        )
    return path
