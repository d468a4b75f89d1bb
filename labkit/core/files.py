"""Files labkit writes to a path someone chose: reports, bundles, exports, figures.

:func:`atomic_write` is the one writer. The content goes to a new temporary file in
the target's own directory (``O_CREAT | O_EXCL | O_NOFOLLOW``, so nothing planted
there under that name is opened), its mode is set explicitly with ``fchmod`` (0600
unless the caller declares another; the umask plays no part), it is flushed and
fsync'd, then renamed over the target and the directory fsync'd. So:

* a reader sees the old file or the new one, never half of one, and a crash leaves
  at most a hidden ``.<name>.<random>.tmp`` beside it;
* a symbolic link at the target (e.g. planted by another user in a directory they
  own) is refused with a :class:`~labkit.errors.ConfigError` naming the path, and even
  a link planted between that check and the rename is replaced, never written through;
* a file that already exists gets the declared mode: a report that was 0644 becomes 0600;
* the directory written into is opened without following a link (``O_DIRECTORY | O_NOFOLLOW``,
  then every file operation relative to it): a directory link planted by another user (e.g.
  ``/tmp/shared/out`` pointing at a directory of root's) is refused with a ConfigError, and
  nothing is written into its target (:func:`open_dir`);
* directories labkit creates get their declared mode whatever the umask (:func:`make_dirs`):
  under ``umask 000`` a data dir is still 0700, not 0777.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ..errors import ConfigError

__all__ = ["atomic_write", "is_within", "make_dirs", "open_dir"]


def is_within(path: str, parent: str) -> bool:
    """Whether the absolute, normalised ``path`` is ``parent`` or lies below it (by its text: no
    link is followed)."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def make_dirs(path: str | os.PathLike, mode: int = 0o700) -> Path:
    """Create ``path`` and its missing parents, each with exactly ``mode`` (``os.mkdir`` then
    ``chmod`` of what this call created: the umask plays no part; directories that already exist
    are left as they are). Returns ``path``; ``OSError`` from the file system propagates."""
    path = Path(os.path.abspath(path))
    missing = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode & 0o777)
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs, left as it is
        os.chmod(d, mode, follow_symlinks=False)
    return path


def open_dir(path: str | os.PathLike, *, dir_mode: int = 0o700, create: bool = True) -> int:
    """A file descriptor of directory ``path``, opened without following a link at its last
    component (``O_DIRECTORY | O_NOFOLLOW``): write into it with ``dir_fd=`` / ``openat`` only.
    Missing directories are created first (:func:`make_dirs`, ``dir_mode``) when ``create``.
    ConfigError naming the path when it is a symbolic link or not a directory."""
    path = Path(path)
    if create:
        make_dirs(path, dir_mode)
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if os.path.islink(path):
            raise ConfigError(
                f"{path} is a symbolic link (to {os.readlink(path)}): labkit does not write "
                "into a directory through a link (remove the link, or give the directory "
                "itself)"
            ) from None
        raise ConfigError(f"{path} is not a directory: cannot write into it") from None


def _check_target(path: Path, dfd: int | None = None) -> None:
    if path.name in ("", ".", ".."):
        raise ConfigError(f"{path}: not a file name to write to")
    try:
        st = os.lstat(path) if dfd is None else os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(
            f"{path} is a symbolic link: labkit does not write through links "
            "(remove the link or choose another path)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path} exists and is not a regular file: refusing to replace it")


def atomic_write(
    path,
    data: bytes | str | Callable[[BinaryIO], object],
    *,
    mode: int = 0o600,
    dir_mode: int = 0o700,
    dir_fd: int | None = None,
    sync: bool = True,
) -> Path:
    """Write ``data`` to ``path`` atomically with file mode ``mode``; return ``path``.

    ``data`` is bytes, a str (written as UTF-8) or a callback given the open binary file
    (e.g. ``lambda fh: df.to_csv(fh)``; ``zipfile.ZipFile(fh, "w")`` and
    ``fig.savefig(fh)`` work too). Missing parent directories are created with
    ``dir_mode`` (whatever the umask), and the directory is opened without following a link
    (:func:`open_dir`); ``dir_fd``: a directory already opened so (by :func:`open_dir`), which
    ``path``'s name is written into (``path`` then only names it in messages). Raises
    :class:`~labkit.errors.ConfigError` when ``path`` or its directory is a symbolic
    link or ``path`` is not a regular file; ``OSError`` from the file system (full disk, no
    permission) propagates and the temporary file is removed.

    ``sync=False`` leaves out the two ``fsync`` calls (the file's and its directory's): the
    file still replaces ``path`` whole or not at all for every process (a crash of this one
    included), but a power loss may undo it, as it may undo what a store in WAL mode with
    ``synchronous=NORMAL`` committed last (:meth:`labkit.store.Store.write_run_output`).
    """
    path = Path(path)
    if not isinstance(mode, int) or mode & ~0o7777:
        raise ConfigError(f"atomic_write: mode must be a permission number such as 0o600, got {mode!r}")
    own = dir_fd is None
    if own:
        _check_target(path)
    dfd = open_dir(path.parent, dir_mode=dir_mode) if dir_fd is None else dir_fd
    tmp = f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        _check_target(path, dfd)
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode & 0o777, dir_fd=dfd
        )
        try:
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), mode)
                if callable(data):
                    data(fh)
                else:
                    fh.write(data.encode() if isinstance(data, str) else data)
                fh.flush()
                if sync:
                    os.fsync(fh.fileno())
            _check_target(path, dfd)  # a link planted meanwhile is refused; rename would only replace it
            os.rename(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
        if sync:
            os.fsync(dfd)
    finally:
        if own:
            os.close(dfd)
    return path
