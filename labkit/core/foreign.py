"""Reading state another user wrote (registries, data-dir records, locks) without trusting it.

Root reads every user's registry of running campaigns (:mod:`labkit.core.registry`) and record
of data dirs (:mod:`labkit.core.datadirs`); those files are written by users who may be hostile.
A FIFO planted as one of them made a root ``labkit run`` hang in ``open`` (issue 47, finding 2);
a record naming ``/usr`` made root's instances hide it. Here:

* :func:`open_regular` opens a file without following a link and without blocking (``O_NOFOLLOW |
  O_NONBLOCK``: a FIFO neither blocks the ``open`` nor, being refused, the read), then checks with
  ``fstat`` that it is a regular file, owned by the expected user, of at most ``max_bytes``;
  :func:`read_regular` reads such a file (a regular file's read never waits on a writer) up to the
  bound. Anything else is logged and None. (A file on another user's FUSE mount is refused to root
  by the kernel unless that mount was made with ``allow_other``, which ``/etc/fuse.conf`` must allow.)
* :func:`owned_dir` tells whether a path a record names is an existing directory of that user,
  and not a system directory (:func:`system_dir`): only then may a record be trusted about it.
"""

from __future__ import annotations

import logging
import os
import stat

from .files import is_within

__all__ = ["SYSTEM_DIRS", "open_regular", "owned_dir", "read_regular", "system_dir"]

log = logging.getLogger("labkit.foreign")

#: directories no record may name, nor any directory holding one (``/`` holds them all)
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/var/lib", "/proc", "/sys", "/dev", "/boot", "/run")
#: top-level directories nothing inside of which is a data dir (besides the ``/lib*`` ones)
_SYSTEM_TOPS = frozenset(("usr", "etc", "bin", "sbin", "proc", "sys", "dev", "boot"))


def open_regular(path: str | os.PathLike, *, owner: int | None, max_bytes: int, what: str) -> int | None:
    """A read-only fd on ``path`` if it is a regular file (never through a link, never blocking on
    a FIFO) owned by ``owner`` (None: anyone) of at most ``max_bytes``; else None (absent: silently;
    anything else: logged at warning, naming ``what`` and why). The caller closes the fd."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.debug("%s %s not read: %s", what, path, exc.strerror or exc)
        return None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        log.warning("%s %s not read: %s", what, path, exc.strerror or exc)
        return None
    why = (
        f"not a regular file (mode {stat.filemode(st.st_mode)})"
        if not stat.S_ISREG(st.st_mode)
        else f"owned by uid {st.st_uid}, not uid {owner}"
        if owner is not None and st.st_uid != owner
        else f"{st.st_size} bytes, more than the {max_bytes} allowed"
        if st.st_size > max_bytes
        else None
    )
    if why:
        os.close(fd)
        log.warning("%s %s ignored: %s", what, path, why)
        return None
    return fd


def read_regular(path: str | os.PathLike, *, owner: int | None, max_bytes: int, what: str) -> bytes | None:
    """The content of ``path`` when :func:`open_regular` accepts it (at most ``max_bytes``), else None."""
    fd = open_regular(path, owner=owner, max_bytes=max_bytes, what=what)
    if fd is None:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            return fh.read(max_bytes)
    except OSError as exc:
        log.warning("%s %s not read: %s", what, path, exc.strerror or exc)
        return None


def system_dir(path: str) -> bool:
    """Whether ``path`` (absolute, links resolved by the caller) is ``/``, is or holds one of
    :data:`SYSTEM_DIRS` or a ``/lib*``, or lies inside ``/usr``, ``/etc``, ``/bin``, ``/sbin``,
    ``/proc``, ``/sys``, ``/dev``, ``/boot`` or a ``/lib*``: never a data dir."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] in _SYSTEM_TOPS or parts[0].startswith("lib"):
        return True
    return any(is_within(system, path) for system in SYSTEM_DIRS)


def owned_dir(path: object, owner: int | None, *, what: str) -> str | None:
    """``path`` with its links resolved when it names an existing directory (absolute, printable
    text) owned by ``owner`` (None: anyone's) that is not a :func:`system_dir`; else None, logged at
    debug naming ``what`` (a record says many things; one line each would flood the log)."""
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path or "\n" in path:
        log.debug("%s: %r ignored: not an absolute path", what, path)
        return None
    real = os.path.realpath(path)
    if system_dir(real):
        log.debug("%s: %s ignored: a system directory (%s)", what, path, real)
        return None
    try:
        st = os.stat(real)
    except OSError:
        return None  # gone: nothing to say about it
    if not stat.S_ISDIR(st.st_mode):
        log.debug("%s: %s ignored: not a directory", what, path)
        return None
    if owner is not None and st.st_uid != owner:
        log.debug("%s: %s ignored: owned by uid %d, not uid %d", what, path, st.st_uid, owner)
        return None
    return real
