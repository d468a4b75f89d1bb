"""One long-lived ``/bin/sh`` on a remote host, on its own SSH channel, that runs the ``ssh``
backend's control scripts (probe, create, remove, kill, list, read) one after another.

Each SSH ``exec`` request starts the remote user's login shell, which reads its start-up files
(bash reads ``~/.bashrc`` when sshd starts it; one that sets up a version manager costs 85 ms on
the development machine, more than everything else in the round trip). The control shell pays that
once per connection: a control script then costs one round trip and the start of a ``/bin/sh``.
Commands (:meth:`SshInstance.exec <labkit.backends.ssh_instance.SshInstance>`) keep their own channels.

Protocol: each script is written to the shell's stdin as one command line::

    /bin/sh -c '<script>' </dev/null; printf '\\n<token> %s\\n' "$?"; printf '\\n<token>\\n' >&2

with a fresh random token. The script's stdout is everything before ``\\n<token> `` on the
channel's stdout, its stderr everything before ``\\n<token>\\n`` on its stderr (the leading newline
frames output without a final newline exactly); the script cannot read the protocol (its stdin is
``/dev/null``) nor forge the token (it is chosen after the script). What the login shell prints
before the first script is dropped (a first, empty frame takes it).

One script at a time: :meth:`ControlShell.run` returns None at once when another thread's script
holds the shell (the caller then opens a channel of its own). A script that runs past its timeout,
or a shell that ends, costs the shell: its channel is closed and the next script starts a new one.
"""

from __future__ import annotations

import os
import select
import shlex
import threading
import time
from dataclasses import dataclass

import paramiko

from .output import CHUNK


@dataclass
class Reply:
    """What a control script did: its exit status, stdout and stderr (UTF-8, invalid bytes replaced)."""

    exited: int
    stdout: str
    stderr: str


class ControlShell:
    """The control shell of one SSH connection (see the module docstring); started at its first
    script, on ``transport``."""

    def __init__(self, transport: paramiko.Transport):
        self.transport = transport
        self.chan: paramiko.Channel | None = None
        self.lock = threading.Lock()
        self._out = bytearray()
        self._err = bytearray()

    def run(self, script: str, timeout: float) -> Reply | None:
        """Run ``script`` with ``/bin/sh`` in the control shell; None when the shell is busy with
        another thread's script. TimeoutError past ``timeout`` seconds (the script may still be
        running on the host); EOFError or paramiko's errors when the shell or the connection ends
        meanwhile (the script may have run or not)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            deadline = time.monotonic() + timeout
            chan, fresh = self.chan, False
            if chan is None or chan.closed or chan.exit_status_ready():
                chan, fresh = self._start(), True
            token = f"labkit-ctl-{os.urandom(8).hex()}"
            # a fresh shell first answers an empty frame: what the login shell printed goes there
            ready = _frame("true", token + "-ready") if fresh else ""
            try:
                chan.sendall((ready + _frame(script, token)).encode())
                if fresh:
                    self._read(chan, token + "-ready", deadline)
                return self._read(chan, token, deadline)
            except BaseException:
                self.close()
                raise
        finally:
            self.lock.release()

    def _start(self) -> paramiko.Channel:
        self.close()
        self._out.clear()
        self._err.clear()
        chan = self.transport.open_session()
        try:
            chan.exec_command("exec /bin/sh")
        except BaseException:
            chan.close()
            raise
        self.chan = chan
        return chan

    def _read(self, chan: paramiko.Channel, token: str, deadline: float) -> Reply:
        """Read until both ends of ``token``'s frame arrived; the frame, removed from the buffers."""
        out_end, err_end = f"\n{token} ".encode(), f"\n{token}\n".encode()
        while True:
            ended = chan.closed or chan.eof_received  # before draining: nothing comes after the end
            while chan.recv_ready():
                self._out += chan.recv(CHUNK)
            while chan.recv_stderr_ready():
                self._err += chan.recv_stderr(CHUNK)
            i, j = self._out.find(out_end), self._err.find(err_end)
            k = self._out.find(b"\n", i + len(out_end)) if i >= 0 else -1
            if k >= 0 and j >= 0:
                status = self._out[i + len(out_end) : k].decode(errors="replace")
                reply = Reply(
                    int(status) if status.isdigit() else -1,
                    self._out[:i].decode(errors="replace"),
                    self._err[:j].decode(errors="replace"),
                )
                del self._out[: k + 1]
                del self._err[: j + len(err_end)]
                return reply
            if ended:
                raise EOFError("the remote control shell ended")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("control script timed out")
            select.select([chan], [], [], min(left, 1.0))  # woken by data, its end or a close

    def close(self) -> None:
        """Close the shell's channel (the shell reads the end of its input and exits)."""
        chan, self.chan = self.chan, None
        if chan is not None:
            chan.close()


def _frame(script: str, token: str) -> str:
    return (
        f"/bin/sh -c {shlex.quote(script)} </dev/null; printf '\\n{token} %s\\n' \"$?\"; "
        f"printf '\\n{token}\\n' >&2\n"
    )
