"""The data dirs campaigns used on this host, kept after they stop: what local instances hide.

The registry of running campaigns (:mod:`labkit.core.registry`) forgets a campaign when it stops,
but its results stay in its data dir, and another campaign's workload must not read them. Each
campaign that registers adds its data dir here (:func:`remember`); :func:`known` lists them (as
``labkit clean`` reads the stores there to age a campaign's leftovers), and :func:`recent` the
newest few, which the ``local`` backend covers in its instances (a bounded number of mounts,
whatever the records hold: issue 47; data dirs are private, 0700, so the mounts are a second wall).

Where (one absolute path a line, 0600, at most :data:`MAX_ENTRIES`, the newest last; directories
gone when it is written are dropped): ``$LABKIT_RUN_DIR/data-dirs.list`` when that is set (tests),
else ``/var/lib/labkit/data-dirs.list`` for root (it outlives a reboot, unlike ``/run``), else
``$XDG_STATE_HOME/labkit/data-dirs.list`` (``~/.local/state/labkit/...``). Root also reads every
user's own file as :mod:`labkit.core.foreign` reads what another user wrote: a regular file of that
user's (never a link; a FIFO opened without blocking and refused) of at most :data:`MAX_BYTES`, its
newest :data:`MAX_ENTRIES` lines, taking from it only the directories that user owns (a user cannot
make root's instances hide, nor ``labkit clean`` read, someone else's directory). No record, root's
either, counts for a system directory (:func:`labkit.core.foreign.system_dir`). What is ignored is
logged.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pwd
from pathlib import Path

from ..errors import ConfigError
from .files import atomic_write
from .foreign import owned_dir, read_regular

__all__ = ["bounded", "known", "recent", "record_file", "remember", "sources"]

ENV = "LABKIT_RUN_DIR"
NAME = "data-dirs.list"
SYSTEM_FILE = Path("/var/lib/labkit") / NAME
MAX_ENTRIES = 1000
#: a record larger than this is not one labkit wrote (:data:`MAX_ENTRIES` lines): ignored, logged
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
    base = (
        Path(state)
        if state and os.path.isabs(state)
        else Path(home or os.path.expanduser("~")) / ".local" / "state"
    )
    return base / "labkit" / NAME


def _lines(path: Path, owner: int | None = None) -> list[str]:
    """The absolute paths record ``path`` lists, oldest first ([] if absent, unreadable, or not a
    regular file of at most :data:`MAX_BYTES`; with ``owner``, of that user's: :mod:`.foreign`)."""
    raw = read_regular(path, owner=owner, max_bytes=MAX_BYTES, what="data-dir record")
    if raw is None:
        return []
    return [
        line
        for line in raw.decode("utf-8", "replace").splitlines()
        if line.startswith("/") and "\x00" not in line
    ]


def _newest(record: Path, owner: int | None, limit: int) -> list[str]:
    """Up to ``limit`` directories of ``record``, newest first: existing ones, none a system
    directory, and with ``owner`` (another user's record) only that user's, of its newest
    :data:`MAX_ENTRIES` lines. Those ignored are logged (each at debug, how many at warning)."""
    lines = _lines(record, owner)
    if owner is not None:
        lines = lines[-MAX_ENTRIES:]
    out: list[str] = []
    ignored = 0
    for line in reversed(lines):
        if len(out) >= limit:
            break
        if line in out:
            continue
        if owned_dir(line, owner, what=f"data-dir record {record}") is None:
            ignored += os.path.lexists(line)  # a gone one is stale, not suspect
            continue
        out.append(line)
    if ignored:
        log.warning(
            "data-dir record %s: %d of its paths ignored (a system directory, or not a directory of uid %s)",
            record,
            ignored,
            "any" if owner is None else owner,
        )
    return out


def remember(data_dir: str | os.PathLike) -> None:
    """Add ``data_dir`` (made absolute) to this user's record: moved to the end if there; the
    directories that no longer exist are dropped, then past :data:`MAX_ENTRIES` the oldest. Best effort: a record that cannot be written is logged, never an
    error (the campaign's own registry entry still names the dir while it runs)."""
    path = os.path.abspath(os.fspath(data_dir))
    if "\n" in path:
        return
    record = record_file()
    try:
        record.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = os.open(record.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one writer at a time: none loses another's line
            before = _lines(record)
            kept = [p for p in before if p != path and os.path.isdir(p)]  # stale lines pruned
            if before != [*kept, path]:
                kept = bounded(kept, MAX_ENTRIES - 1) + [path]
                atomic_write(record, "".join(p + "\n" for p in kept), mode=0o600)
        finally:
            os.close(lock)
    except (OSError, ConfigError) as exc:  # ConfigError: a link planted at the record
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
    return kept[len(kept) - limit :]  # at least ``limit`` are left: at most ``excess`` were gone


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
    as root every user's (the directories each owns); those that no longer exist, and system
    directories, are left out. Oldest first within each record."""
    paths = [p for record, owner in sources() for p in reversed(_newest(record, owner, MAX_ENTRIES))]
    return list(dict.fromkeys(paths))


def recent(limit: int) -> list[str]:
    """Recorded data dirs, a bounded number whatever the records hold: at most ``limit`` of this
    user's, newest first, then (as root) at most ``limit`` of other users' together (each the
    directories that user owns, newest first, users in password-database order). What the
    ``local`` backend hides besides the running campaigns' data dirs."""
    if limit < 0:
        raise ValueError(f"datadirs.recent: limit must be 0 or more, not {limit}")
    (own, _), *others = sources()
    out = _newest(own, None, limit)
    left = limit
    for record, owner in others:
        if left <= 0:
            break
        found = [p for p in _newest(record, owner, left) if p not in out]
        out += found
        left -= len(found)
    return out
