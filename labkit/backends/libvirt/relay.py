"""``python -m labkit.backends.libvirt.relay URI DOMAIN ARGV...``: run ``ARGV`` in libvirt guest
``DOMAIN`` through its QEMU guest agent, the way a remote shell would for its caller: wait for
the command to end, write its output to this process's stdout and stderr, exit with its status.

It is a libvirt guest's :meth:`~labkit.backends.libvirt.LibvirtInstance.host_command`: the
command an MPI launch agent runs on this host to start an ``orted`` in a guest, which has no
SSH server. The orted stays attached to it (``orte_leave_session_attached``), so it lives as
long as the orted does, and an orted that dies ends it with the orted's status.

What differs from ``ssh``: no standard input reaches the command, and its output arrives when
it ends (the guest agent hands it over then, up to its own limit, marked when truncated).
The command and what it starts carry a tag of their own in the guest (see :mod:`.agent`);
SIGTERM, SIGINT or SIGHUP kill them all and exit with 128 + the signal. A guest or libvirt
that cannot be reached exits 255, as ``ssh`` does; a host key refused on the way (a ``qemu+ssh://``
URI: the backend passes its URI with the host-key policy applied) is said in labkit's words
(:func:`labkit.backends.hostkeys.ssh_refusal`: the host, the key offered, the known_hosts file and
line of the old key, the ``ssh-keygen -R`` command), not OpenSSH's banner.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

#: pause between polls of a long command (an orted lives as long as its MPI job: polling it
#: faster would only load the guest's agent while ranks are measured)
POLL_S = 0.5
USAGE = "usage: python -m labkit.backends.libvirt.relay URI DOMAIN COMMAND [ARG...]"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3:
        print(USAGE, file=sys.stderr)
        return 2
    import libvirt

    from ...errors import BackendError
    from . import agent

    uri, name, command = args[0], args[1], args[2:]
    try:
        dom = libvirt.open(uri).lookupByName(name)
        cmd = agent.start(dom, command)
    except (libvirt.libvirtError, BackendError) as exc:
        print(f"labkit libvirt relay: {name} at {_shown(uri)}: {_explained(uri, exc)}", file=sys.stderr)
        return 255

    def stop(signum, _frame):
        with contextlib.suppress(Exception):
            agent.kill_tree(dom, cmd, timeout=10)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        res = agent.wait(dom, cmd.pid, None, alive=lambda: bool(dom.isActive()), max_poll_s=POLL_S)
    except (libvirt.libvirtError, BackendError) as exc:
        print(f"labkit libvirt relay: {name} at {_shown(uri)}: {exc}", file=sys.stderr)
        return 255
    if res is None:  # a wait without a timeout returns only once the command has exited
        raise BackendError(
            f"labkit libvirt relay: {name} at {uri}: the guest agent's wait "
            "ended with no result although it had no timeout"
        )
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    return res.exit_code if 0 <= res.exit_code < 256 else 255


def _shown(uri: str) -> str:
    """``uri`` without its query (the ssh program labkit gives libvirt: noise in a message)."""
    return uri.split("?", 1)[0]


def _explained(uri: str, exc: BaseException) -> str:
    """``exc`` as text; a refused host key in labkit's words (:func:`labkit.backends.hostkeys.ssh_refusal`)."""
    import urllib.parse

    from ..hostkeys import ssh_refusal

    parts = urllib.parse.urlsplit(uri)
    try:
        port = parts.port or 22
    except ValueError:
        return str(exc)
    keys = (
        ssh_refusal(str(exc), parts.hostname, port, None) if parts.hostname and "+" in parts.scheme else None
    )
    return keys or str(exc)


if __name__ == "__main__":
    sys.exit(main())
