"""One remote command of the ``ssh`` backend (:mod:`labkit.backends.ssh`) on its own SSH channel:
its output read into capped sinks as it arrives (:func:`read_channel`: neither stream is ever held
whole), its exit status, and the file holding its session id (:class:`RemoteCommand`)."""

from __future__ import annotations

import select
import threading

import paramiko

from .output import CHUNK, CappedOutput


class RemoteCommand:
    """One running remote command: its SSH channel read on a thread into two capped sinks
    (:func:`read_channel`), its exit status, and the file holding its session id."""

    #: the thread reading the channel (set by the ``_start`` that made the handle)
    thread: threading.Thread

    def __init__(self, pidfile: str):
        self.pidfile = pidfile
        self.out, self.err = CappedOutput(), CappedOutput()
        self.exit_status: int | None = None
        self.error: BaseException | None = None


def read_channel(chan: paramiko.Channel, out: CappedOutput, err: CappedOutput) -> int:
    """Feed ``chan``'s stdout and stderr into ``out`` and ``err`` as they arrive (neither is
    ever held whole) until both reached their end and the remote command exited; its exit
    status (-1 when the server sent none: the connection was lost)."""

    def drain():
        while chan.recv_ready() or chan.recv_stderr_ready():
            while chan.recv_ready():
                out.write(chan.recv(CHUNK))
            while chan.recv_stderr_ready():
                err.write(chan.recv_stderr(CHUNK))

    while True:
        drain()
        if chan.closed or (chan.eof_received and chan.exit_status_ready()):
            drain()  # what arrived before the end (nothing comes after it)
            return chan.recv_exit_status() if chan.exit_status_ready() else -1
        if chan.eof_received:
            chan.status_event.wait(1.0)  # set by the exit status, or the channel's close
        else:
            select.select([chan], [], [], 1.0)  # woken by data, the end of the output or a close
