"""Host-wide claims of campaign ids: an abstract Unix socket per running campaign id.

A registry directory is per user (root's ``/run/labkit``, a user's ``$XDG_RUNTIME_DIR``), and no
user may read another's runtime directory, so two non-root users could once run the same
campaign id side by side, and the second one's start-up clean-up removed the first one's
instances. An abstract socket name (``@labkit/campaign/<id>``, :func:`socket_name`) is one
namespace for every user of the host's network namespace: :func:`claim` binds it (refused when
bound already, whoever holds it), the kernel frees it when its holder dies however it dies (no
file to go stale, nothing to clean), and :func:`bound` lists the ids claimed now from
``/proc/net/unix``, which every user may read. The holder listens on its socket, so anyone who
connects learns its pid and uid from the kernel (``SO_PEERCRED``, :func:`holder`), even without
reading its registry.

With ``LABKIT_RUN_DIR`` set (a separate registry, as tests use) names carry a digest of that
directory, so ids are unique among those who share it. The names are per network namespace:
campaigns started inside another network namespace (a container) are not seen.

Any user may bind any name under the prefix, so :func:`bound` keeps only names that are valid
campaign ids (:func:`labkit.core.ids.check_campaign_id`): a name such as ``../x`` or one with
blanks is ignored (logged). (A name carrying a newline can still forge a whole line of
``/proc/net/unix``, naming a valid id nobody holds: that id then reads as running, which only
keeps ``labkit clean`` from removing that id's leftovers.)
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import socket
import struct

from ..errors import ConfigError
from .ids import check_campaign_id

__all__ = ["bound", "claim", "holder", "socket_name"]

ENV = "LABKIT_RUN_DIR"
log = logging.getLogger("labkit.claims")
PREFIX = "labkit/campaign/"
#: bytes of /proc/net/unix read at most (a host with 100 000 sockets lists about 10 MB)
MAX_LIST = 32 << 20


def _space() -> str:
    scope = os.environ.get(ENV)
    if not scope:
        return PREFIX
    digest = hashlib.sha256(os.path.abspath(os.path.expanduser(scope)).encode()).hexdigest()[:12]
    return f"labkit/{digest}/campaign/"


def socket_name(campaign_id: str) -> str:
    """The abstract socket name of ``campaign_id`` (no leading NUL)."""
    return _space() + campaign_id


def claim(campaign_id: str) -> socket.socket | None:
    """Bind and listen on ``campaign_id``'s name; the socket (close it to give the id up: it is
    not inherited by children), or None when another process holds it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("\0" + socket_name(campaign_id))
        sock.listen(16)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            return None
        raise
    return sock


def holder(campaign_id: str) -> tuple[int, int] | None:
    """``(pid, uid)`` of the process holding ``campaign_id``'s name, from the kernel
    (``SO_PEERCRED``); None if nobody holds it or it does not answer (its queue is full)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        sock.connect("\0" + socket_name(campaign_id))
        pid, uid, _gid = struct.unpack(
            "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        )
        return pid, uid
    except OSError:
        return None
    finally:
        sock.close()


def bound() -> set[str]:
    """The campaign ids claimed on this host now (in this process's network namespace and
    ``LABKIT_RUN_DIR`` scope); a bound name that is not a valid campaign id is left out (logged)."""
    space = "@" + _space()
    try:
        with open("/proc/net/unix", "rb") as fh:
            text = fh.read(MAX_LIST).decode("utf-8", "replace")
    except OSError:
        return set()
    out = set()
    for line in text.splitlines()[1:]:
        fields = line.split()  # Num RefCount Protocol Flags Type St Inode [Path]
        path = fields[7] if len(fields) == 8 else ""  # more: a name with blanks, never a campaign id
        if path.startswith(space):
            cid = path[len(space) :]
            try:
                check_campaign_id(cid)
            except ConfigError:
                log.warning(
                    "abstract socket @%s%r is not a campaign's claim (not a valid campaign id): ignored",
                    space[1:],
                    cid,
                )
                continue
            out.add(cid)
    return out
