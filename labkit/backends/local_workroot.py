"""The ``local`` backend's work root (:mod:`.local`): where instances' private work directories go
(:func:`default_workroot`), made 0700 and verified to be this user's alone (:func:`private_dir`)."""

from __future__ import annotations

import os
import stat

from ..errors import ConfigError


def default_workroot() -> str:
    """``/run/labkit/instances`` for root; else under $XDG_RUNTIME_DIR or ~/.cache (both the user's)."""
    if os.geteuid() == 0:
        return "/run/labkit/instances"
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.expanduser("~/.cache")
    return os.path.join(base, "labkit", "instances")


def private_dir(path: str) -> str:
    """Create ``path`` (and missing parents) 0700, or verify an existing one is ours and private.

    Refuses (ConfigError) a directory that is a symlink, owned by another user,
    or writable by group or others: someone else could swap what root runs.
    """
    path = os.path.abspath(path)
    missing = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        p = os.path.dirname(p)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
    for d in _ancestors(os.path.dirname(path)):
        st = os.stat(d)
        if st.st_uid not in (0, os.geteuid()) or (st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX):
            raise ConfigError(
                f"local backend workroot {path}: its parent {d} can be changed by "
                "another user; choose a workroot under a directory only you and root own"
            )
    for d in [path] + [d for d in missing if d != path]:
        st = os.lstat(d)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise ConfigError(
                f"local backend workroot {d} is not a plain directory (a symlink?); choose another workroot"
            )
        if st.st_uid != os.geteuid():
            raise ConfigError(
                f"local backend workroot {d} is owned by uid {st.st_uid}, not by this "
                f"user (uid {os.geteuid()}): someone else could change what runs; remove "
                "it or choose another workroot"
            )
        if st.st_mode & 0o022:
            raise ConfigError(
                f"local backend workroot {d} is writable by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); chmod go-w it or choose another"
            )
    return path


def _ancestors(path: str) -> list[str]:
    out = []
    while True:
        out.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            return out
        path = parent
