"""The data dirs campaigns used on this host, kept after they stop: what local instances hide.

The registry of running campaigns (:mod:`labkit.core.registry`) forgets a campaign when it stops,
but its results stay in its data dir, and another campaign's workload must not read them. Each
campaign that registers adds its data dir here (:func:`remember`); :func:`known` lists them, and
the ``local`` backend covers every one in its instances (:mod:`labkit.backends.sandbox`), as
``labkit clean`` reads the stores there to age a campaign's leftovers.

Where (one absolute path a line, 0600, at most :data:`MAX_ENTRIES`, the newest kept):
``$LABKIT_RUN_DIR/data-dirs.list`` when that is set (tests), else ``/var/lib/labkit/data-dirs.list``
for root (it outlives a reboot, unlike ``/run``), else ``$XDG_STATE_HOME/labkit/data-dirs.list``
(``~/.local/state/labkit/...``). Root also reads every user's own file, taking from it only the
directories that user owns (a user cannot make root's instances hide someone else's directory).
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pwd
import stat
from pathlib import Path

from ..errors import ConfigError
from .files import atomic_write

__all__ = ["bounded", "known", "record_file", "remember", "sources"]

ENV = "LABKIT_RUN_DIR"
NAME = "data-dirs.list"
SYSTEM_FILE = Path("/var/lib/labkit") / NAME
MAX_ENTRIES = 1000
MAX_BYTES = 4 << 20
log = logging.getLogger("labkit.datadirs")


def record_file(uid: int | None = None, home: str | None = None) -> Path:
    """This user's record (see the module docstring); with ``uid``/``home``, that user's."""
    env = os.environ.get(ENV) if uid is None else None
    if env:
        return Path(os.path.abspath(os.path.expanduser(env))) / NAME
    if (os.geteuid() if uid is None else uid) == 0:
        return SYSTEM_FILE
    state = os.environ.get("XDG_STATE_HOME") if uid is None else None
    base = Path(state) if state and os.path.isabs(state) else Path(home or os.path.expanduser("~")) / ".local" / "state"
    return base / "labkit" / NAME


def _read(path: Path, owner: int | None = None) -> list[str]:
    """The paths of record ``path`` (not followed if a link; [] if absent or unreadable); with
    ``owner``, only if the file is that user's, and only the directories that user owns."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as fh:
        if owner is not None and os.fstat(fh.fileno()).st_uid != owner:
            return []
        lines = fh.read(MAX_BYTES).decode("utf-8", "replace").splitlines()
    out = []
    for line in lines:
        if not line.startswith("/") or "\x00" in line:
            continue
        if owner is not None:
            try:
                st = os.stat(line)
            except OSError:
                continue
            if st.st_uid != owner or not stat.S_ISDIR(st.st_mode):
                continue
        out.append(line)
    return out


def remember(data_dir: str | os.PathLike) -> None:
    """Add ``data_dir`` (made absolute) to this user's record: moved to the end if there; past
    :data:`MAX_ENTRIES`, the directories that no longer exist are dropped first (oldest first), then
    the oldest (:func:`bounded`). Best effort: a record that cannot be written is logged, never an
    error (the campaign's own registry entry still names the dir while it runs)."""
    path = os.path.abspath(os.fspath(data_dir))
    if "\n" in path:
        return
    record = record_file()
    try:
        record.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = os.open(record.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)   # one writer at a time: none loses another's line
            before = _read(record)
            if before[-1:] != [path]:
                kept = bounded([p for p in before if p != path], MAX_ENTRIES - 1) + [path]
                atomic_write(record, "".join(p + "\n" for p in kept), mode=0o600)
        finally:
            os.close(lock)
    except (OSError, ConfigError) as exc:   # ConfigError: a link planted at the record
        log.debug("data dir %s not recorded in %s: %s", path, record, exc)


def bounded(paths: list[str], limit: int) -> list[str]:
    """At most ``limit`` of ``paths`` (oldest first), in their order: when there are more, those
    that are no longer directories go first, the oldest of them first, then the oldest. A record
    filled with gone directories (a test suite's temporary data dirs) thus never pushes out a data
    dir that still holds results, which instances must keep hiding."""
    excess = len(paths) - limit
    if excess <= 0:
        return list(paths)
    gone = set([i for i, p in enumerate(paths) if not os.path.isdir(p)][:excess])
    kept = [p for i, p in enumerate(paths) if i not in gone]
    return kept[len(kept) - limit:]   # at least ``limit`` are left: at most ``excess`` were gone


def sources() -> list[tuple[Path, int | None]]:
    """The records :func:`known` reads: this user's (owner None: any), and as root every user's
    own (with that user's uid)."""
    out: list[tuple[Path, int | None]] = [(record_file(), None)]
    if os.geteuid() == 0 and not os.environ.get(ENV):
        with contextlib.suppress(OSError):
            for pw in pwd.getpwall():
                if pw.pw_uid != 0 and pw.pw_dir and os.path.isabs(pw.pw_dir):
                    out.append((record_file(pw.pw_uid, pw.pw_dir), pw.pw_uid))
    return out


def known() -> list[str]:
    """Every data dir recorded on this host that this user may know of: this user's record, and
    as root every user's (the directories each owns); those that no longer exist are left out."""
    paths = [p for record, owner in sources() for p in _read(record, owner=owner)]
    return [p for p in dict.fromkeys(paths) if os.path.isdir(p)]
