"""One process per campaign: an OS lock (``flock``) on ``<data_dir>/<campaign>/campaign.lock``.

The kernel releases the lock when its holder dies, however it dies (even
SIGKILL), so a lock file left behind is stale by definition and is simply taken
over. The holder writes its pid, host and start time into the file; a second
process fails at once with a :class:`~labkit.errors.StoreError` naming them.
The file is never deleted (deleting it would let two processes lock two
different files), is opened without following symlinks, and is private (0600).

With ``register=`` the lock also registers the campaign in the host's registry of running
campaigns (:mod:`labkit.core.registry`) once it is held, and unregisters it on release, so the
same campaign id cannot start from another data dir. A data dir on a read-only file system
is refused with what to do (make it writable, or copy it); with ``readonly_ok`` (``labkit
clean``, which writes nothing there) an existing lock file is then locked read-only instead.

>>> with CampaignLock("data/demo/campaign.lock"):   # doctest: +SKIP
...     ...  # run the campaign
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StoreError
from .clock import now_iso
from .files import make_dirs
from .foreign import open_regular, read_regular
from .waiting import wait_until

if TYPE_CHECKING:
    from .registry import Registration

LOCK_NAME = "campaign.lock"
#: a lock file's content (its holder's identity) is read up to this many bytes
MAX_HOLDER = 4096
#: a lock file larger than this is not a lock labkit wrote (the registry's are empty, a campaign's
#: holds its holder's identity): refused by :func:`lock_state`
MAX_LOCK_FILE = 1 << 20


def holder(path: str | Path) -> dict | None:
    """The holder recorded in lock file ``path`` (pid, host, started), or None if unreadable (or not
    a regular file of at most :data:`MAX_HOLDER` bytes: never through a link, never blocking)."""
    raw = read_regular(path, owner=None, max_bytes=MAX_HOLDER, what="campaign lock")
    try:
        data = json.loads((raw or b"").decode("utf-8", "replace") or "null")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def is_locked(path: str | Path) -> bool:
    """Whether a live process holds the lock at ``path`` (False if there is no lock file)."""
    return lock_state(path) is True


def lock_state(path: str | Path, owner: int | None = None) -> bool | None:
    """True if a live process holds the ``flock`` at ``path``; False if none does or there is no
    file; None if it cannot tell: the file cannot be opened (another user's, or a symlink: never
    followed), is not a regular file (a FIFO planted there: opened without blocking, never locked)
    or, with ``owner``, is not that user's (:func:`labkit.core.foreign.open_regular`)."""
    if not os.path.lexists(path):
        return False
    fd = open_regular(path, owner=owner, max_bytes=MAX_LOCK_FILE, what="lock")
    if fd is None:
        return False if not os.path.lexists(path) else None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def describe_holder(info: dict | None) -> str:
    if not info:
        return "another process (holder not recorded yet)"
    return f"pid {info.get('pid', '?')} on host {info.get('host', '?')}, started {info.get('started', '?')}"


class CampaignLock:
    """Exclusive lock for one campaign; use as a context manager or call acquire()/release().

    ``what`` names the campaign in messages. Acquiring raises StoreError when a live
    process holds it (naming that process) or when the lock file cannot be created.
    """

    def __init__(
        self,
        path: str | Path,
        what: str = "campaign",
        *,
        dir_mode: int = 0o700,
        register: dict | None = None,
        readonly_ok: bool = False,
    ):
        self.path = Path(path)
        self.what = what
        self.dir_mode = dir_mode
        self.register = register
        self.readonly_ok = readonly_ok
        self._fd: int | None = None
        self._registration: Registration | None = None

    def acquire(self) -> CampaignLock:
        """Take the lock (then the registry entry, with ``register``); StoreError when either is held."""
        fd = self._open()
        self._lock(fd)
        if self.register is not None:
            from .registry import register

            try:
                self._registration = register(**self.register)
            except BaseException:
                os.close(fd)
                raise
        self._fd = fd
        return self

    def _open(self) -> int:
        try:
            make_dirs(self.path.parent, self.dir_mode)  # its mode whatever the umask (issue 47)
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise StoreError(
                    f"{self.path}: cannot create the campaign lock: {exc.strerror or exc}"
                ) from None
            if self.readonly_ok and self.path.is_file():
                with contextlib.suppress(OSError):
                    return os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            where = self.path.parent.parent
            raise StoreError(
                f"{self.path}: cannot write the campaign lock ({exc.strerror or exc}): make {where} "
                f"writable (remount it read-write or chmod u+w), or copy it (cp -a {where} "
                "<somewhere writable>) and pass that as --data-dir"
            ) from None

    def _lock(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(
                f"{self.what} is already running: {describe_holder(self._wait_holder())} "
                f"holds {self.path}; wait for it to finish or stop it first"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"{self.path}: cannot lock: {exc.strerror or exc}") from None
        # a stale file (its holder died) is taken over: the content is rewritten
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": now_iso()}
        with contextlib.suppress(OSError):  # a lock file opened read-only (readonly_ok) keeps its content
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)

    def _wait_holder(self) -> dict | None:
        # the holder writes its identity just after locking: give it a moment
        return (
            wait_until(
                lambda: holder(self.path),
                timeout=1.0,
                interval=0.05,
                error=None,
                what=f"the holder of {self.path} to write its identity",
            )
            or None
        )

    def release(self) -> None:
        if self._registration is not None:
            reg, self._registration = self._registration, None
            reg.release()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing releases the flock; the file stays (see module docstring)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
