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
* a file that already exists gets the declared mode: a report that was 0644 becomes 0600.
"""
from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ..errors import ConfigError

__all__ = ["atomic_write"]


def _check_target(path: Path) -> None:
    if path.name in ("", ".", ".."):
        raise ConfigError(f"{path}: not a file name to write to")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"{path} is a symbolic link: labkit does not write through links "
                          "(remove the link or choose another path)")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path} exists and is not a regular file: refusing to replace it")


def atomic_write(path, data: bytes | str | Callable[[BinaryIO], object], *, mode: int = 0o600,
                 dir_mode: int = 0o700) -> Path:
    """Write ``data`` to ``path`` atomically with file mode ``mode``; return ``path``.

    ``data`` is bytes, a str (written as UTF-8) or a callback given the open binary file
    (e.g. ``lambda fh: df.to_csv(fh)``; ``zipfile.ZipFile(fh, "w")`` and
    ``fig.savefig(fh)`` work too). Missing parent directories are created with
    ``dir_mode``. Raises :class:`~labkit.errors.ConfigError` when ``path`` is a symbolic
    link or not a regular file; ``OSError`` from the file system (full disk, no
    permission) propagates and the temporary file is removed.
    """
    path = Path(path)
    if not isinstance(mode, int) or mode & ~0o7777:
        raise ConfigError(f"atomic_write: mode must be a permission number such as 0o600, got {mode!r}")
    _check_target(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    tmp = f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode & 0o777, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), mode)
                if callable(data):
                    data(fh)
                else:
                    fh.write(data.encode() if isinstance(data, str) else data)
                fh.flush()
                os.fsync(fh.fileno())
            _check_target(path)       # a link planted meanwhile is refused; rename would only replace it
            os.rename(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return path
