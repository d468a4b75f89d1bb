"""Talking to the QEMU guest agent through libvirt: ping, start/wait/kill a command, files.

Commands go through ``libvirt_qemu.qemuAgentCommand`` as QMP-style JSON:
``guest-exec`` starts a process (output captured), ``guest-exec-status`` is
polled until it has exited, ``guest-file-*`` copy files in and read files out.
The guest needs no network.

Every command starts with a tag of its own in its environment (``LABKIT_EXEC=<random hex>``,
:class:`GuestCommand`), which everything it starts inherits, and nothing else: no wrapper is
exec'd before it. Under QEMU TCG an exec costs as much as a short command itself, so the
``setsid`` that once made each command a process group of its own doubled the cost of ``exec
true``. :func:`kill_tree` ends the command and everything that carries its tag: one guest
command SIGKILLs the command's pid and every process whose initial environment holds the tag,
again until none is left alive (zombies do not count). That finds what a process group finds,
and also what left the group (``setsid``, a daemon that detached); only a process started with an
environment of its own choosing (``env -i``) escapes it, as one that calls ``setsid`` escapes a
group kill; the VM's destruction at teardown ends whatever is left.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import libvirt
import libvirt_qemu

from ...errors import BackendError
from ..base import RawResult
from ..output import CappedOutput

#: Environment of every guest command (qemu-ga would otherwise pass its own).
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}
#: Bytes per guest-file-write (base64 makes the message a third bigger; 400 KiB chunks hang the agent).
CHUNK = 64 * 1024
#: Polls of guest-exec-status start 1 ms apart and double up to FAST_POLL_S for the first
#: FAST_S seconds (most commands end there: a coarse poll would add up to its pause to each),
#: then up to MAX_POLL_S (a long benchmark loses nothing and the agent is left alone).
FAST_POLL_S, FAST_S, MAX_POLL_S = 0.005, 2.0, 0.1
#: How often a wait asks libvirt whether the guest is still running.
ALIVE_EVERY_S = 1.0
TRUNCATED = "\n[labkit: output truncated by the guest agent]"
#: the largest string libvirt's RPC carries (VIR_NET_MESSAGE_STRING_MAX): a guest-exec-status
#: reply whose base64 output is larger fails ("Unable to encode message payload")
PAYLOAD_MAX = 4 << 20
#: How long a wait bears a guest agent that does not answer (a guest stalled on a loaded host,
#: as QEMU TCG guests are seen to be for tens of seconds) before it gives up.
SILENCE_S = 300.0
#: The pause between polls while the agent does not answer.
SILENT_POLL_S = 1.0

log = logging.getLogger("labkit.backends")


class AgentError(BackendError):
    """The guest agent answered with an error, or could not be reached. ``unresponsive``: libvirt
    got no answer in time (the guest may be stalled, not gone)."""

    def __init__(self, message: str, unresponsive: bool = False):
        super().__init__(message)
        self.unresponsive = unresponsive


def command(dom: libvirt.virDomain, execute: str, arguments: dict | None = None, timeout: int = 30) -> Any:
    """Run one agent command and return its ``return`` value."""
    msg: dict[str, object] = {"execute": execute}
    if arguments is not None:
        msg["arguments"] = arguments
    try:
        reply = libvirt_qemu.qemuAgentCommand(dom, json.dumps(msg), timeout, 0)
    except libvirt.libvirtError as exc:
        too_big = execute == "guest-exec-status" and "encode message payload" in str(exc)
        hint = (
            (
                f" (the command's output, base64-encoded, exceeds what libvirt carries in one reply, "
                f"{PAYLOAD_MAX >> 20} MiB: about {PAYLOAD_MAX * 3 // 4 >> 20} MiB of output at most; "
                "write large output to a file in the guest instead)"
            )
            if too_big
            else ""
        )
        raise AgentError(
            f"guest agent {execute} in {dom.name()}: {exc}{hint}",
            unresponsive=exc.get_error_code() == libvirt.VIR_ERR_AGENT_UNRESPONSIVE,
        ) from exc
    data = json.loads(reply)
    if "error" in data:
        raise AgentError(f"guest agent {execute} in {dom.name()}: {data['error']}")
    return data.get("return")


def ping(dom: libvirt.virDomain, timeout: int = 2) -> bool:
    """True when the guest agent answers within ``timeout`` seconds."""
    try:
        command(dom, "guest-ping", timeout=timeout)
        return True
    except AgentError:
        return False


#: the environment variable that tags a command and everything it starts (see the module docstring)
TAG_VAR = "LABKIT_EXEC"
#: ``sh -c KILL_TREE sh <tag> <pid>``: SIGKILL ``pid`` and every process whose initial environment
#: holds ``LABKIT_EXEC=<tag>``, until none is left alive (a zombie's environ reads empty); exits 1
#: naming the survivors after 200 rounds
KILL_TREE = r"""
t="LABKIT_EXEC=$1"
kill -KILL "$2" 2>/dev/null
i=0
while :; do
  pids=""
  for f in $(grep -lzxF "$t" /proc/[0-9]*/environ 2>/dev/null); do f=${f#/proc/}; pids="$pids ${f%/environ}"; done
  [ -z "$pids" ] && exit 0
  kill -KILL $pids 2>/dev/null
  i=$((i + 1))
  [ "$i" -ge 200 ] && { echo "still alive with $t:$pids" >&2; exit 1; }
  sleep 0.05
done
"""


@dataclass(frozen=True)
class GuestCommand:
    """A command started in the guest: the ``pid`` ``guest-exec`` returned and the ``tag`` in its
    environment (and its descendants')."""

    pid: int
    tag: str


#: what runs a command the agent could not start itself, so that it fails as in a shell
#: (127: not found, 126: not executable; the shell's message on stderr)
AS_SHELL = ["/bin/sh", "-c", 'exec "$@"', "sh"]


def start(dom: libvirt.virDomain, argv: list[str], env: dict | None = None) -> GuestCommand:
    """Start ``argv`` (output captured) with a fresh tag in its environment; exec'd by the agent
    itself, with no wrapper (see the module docstring). When the agent answers that it could not
    start it (no such file, not executable), it runs again under ``/bin/sh`` (:data:`AS_SHELL`)
    and ends as it would in a shell: the cost of a wrapper only on that path."""
    tag = secrets.token_hex(8)
    environ = [f"{k}={v}" for k, v in {**BASE_ENV, **(env or {}), TAG_VAR: tag}.items()]
    try:
        reply = command(
            dom, "guest-exec", {"path": argv[0], "arg": argv[1:], "capture-output": True, "env": environ}
        )
    except AgentError as exc:
        if exc.unresponsive:
            raise
        reply = command(
            dom,
            "guest-exec",
            {"path": AS_SHELL[0], "arg": [*AS_SHELL[1:], *argv], "capture-output": True, "env": environ},
        )
    return GuestCommand(int(reply["pid"]), tag)


def wait(
    dom: libvirt.virDomain,
    pid: int,
    timeout: float | None,
    alive: Callable[[], bool] | None = None,
    max_poll_s: float = MAX_POLL_S,
) -> RawResult | None:
    """The command's :class:`RawResult` once it has exited; None if still running after ``timeout`` s.

    ``alive()``, when given, is asked between polls: a guest that stopped
    raises :class:`BackendError` instead of waiting forever. ``max_poll_s``: the longest pause
    between polls after the first :data:`FAST_S` seconds. An agent that does not answer (a
    stalled guest) is asked again until the deadline, for at most :data:`SILENCE_S`.
    """
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    delay, next_alive = 0.001, start + ALIVE_EVERY_S
    silent_since = None
    while True:
        try:
            st = command(dom, "guest-exec-status", {"pid": pid})
        except AgentError as exc:
            now = time.monotonic()
            if not exc.unresponsive or (silent_since is not None and now - silent_since > SILENCE_S):
                raise
            if silent_since is None:
                silent_since = now
                log.warning(
                    "%s: the guest agent does not answer (stalled guest?); asking again for up to %.0fs: %s",
                    dom.name(),
                    SILENCE_S,
                    exc,
                )
            st = {}  # no news: still running, as far as we know
        else:
            if silent_since is not None:
                log.warning(
                    "%s: the guest agent answers again after %.0fs",
                    dom.name(),
                    time.monotonic() - silent_since,
                )
                silent_since = None
        if st.get("exited"):
            return _result(st)
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return None
        if alive is not None and now >= next_alive:
            if not alive():
                raise BackendError(f"{dom.name()} stopped while running guest pid {pid}")
            next_alive = now + ALIVE_EVERY_S
        pause = SILENT_POLL_S if silent_since is not None else delay
        time.sleep(pause if deadline is None else min(pause, max(0.0, deadline - now)))
        delay = min(delay * 2, FAST_POLL_S if now - start < FAST_S else max_poll_s)


def _result(st: dict) -> RawResult:
    if "exitcode" in st:
        code = int(st["exitcode"])
    elif "signal" in st:
        code = 128 + int(st["signal"])
    else:
        code = -1
    out, err = _decode(st, "out"), _decode(st, "err")
    raw = RawResult.from_sinks(code, out, err)
    raw.stdout += TRUNCATED if st.get("out-truncated") else ""
    raw.stderr += TRUNCATED if st.get("err-truncated") else ""
    raw.truncated = raw.truncated or bool(st.get("out-truncated") or st.get("err-truncated"))
    return raw


def _decode(st: dict, stream: str) -> CappedOutput:
    """The ``<stream>-data`` of a status reply, decoded into a capped sink (qemu-ga caps what it
    captures, but far above what labkit keeps: only the head and tail are held as text)."""
    sink = CappedOutput()
    data = st.get(f"{stream}-data")
    if data:
        sink.write(base64.b64decode(data))
    return sink


def kill_tree(dom: libvirt.virDomain, cmd: GuestCommand, timeout: float = 30) -> None:
    """SIGKILL ``cmd`` and everything it started in the guest (:data:`KILL_TREE`; quiet when they
    are already gone). The killer itself runs through ``guest-exec`` and is reaped here, so the
    agent keeps no status behind."""
    killer = start(dom, ["/bin/sh", "-c", KILL_TREE, "sh", cmd.tag, str(cmd.pid)])
    res = wait(dom, killer.pid, timeout)
    if res is None:
        raise AgentError(
            f"kill of guest pid {cmd.pid} and its tree in {dom.name()} did not finish in {timeout:.0f}s"
        )
    if res.exit_code != 0:
        raise AgentError(
            f"kill of guest pid {cmd.pid} and its tree in {dom.name()} exited "
            f"{res.exit_code}: {res.stderr.strip()}"
        )


def write_file(dom: libvirt.virDomain, path: str, data: bytes, timeout: int = 60) -> None:
    """Write ``data`` to ``path`` in the guest (created or truncated)."""
    handle = command(dom, "guest-file-open", {"path": path, "mode": "w"}, timeout)
    try:
        for off in range(0, len(data), CHUNK):
            chunk = data[off : off + CHUNK]
            res = command(
                dom,
                "guest-file-write",
                {"handle": handle, "buf-b64": base64.b64encode(chunk).decode()},
                timeout,
            )
            if int(res.get("count", len(chunk))) != len(chunk):
                raise AgentError(f"short write to {path} in {dom.name()}: {res}")
    finally:
        command(dom, "guest-file-close", {"handle": handle}, timeout)


def read_file(dom: libvirt.virDomain, path: str, limit: int = 1 << 20, timeout: int = 30) -> bytes:
    """The first ``limit`` bytes of ``path`` in the guest (works for /proc files, whose size is 0)."""
    handle = command(dom, "guest-file-open", {"path": path, "mode": "r"}, timeout)
    chunks, size = [], 0
    try:
        while size < limit:
            res = command(
                dom, "guest-file-read", {"handle": handle, "count": min(CHUNK, limit - size)}, timeout
            )
            data = base64.b64decode(res.get("buf-b64", ""))
            chunks.append(data)
            size += len(data)
            if res.get("eof") or not data:
                break
    finally:
        command(dom, "guest-file-close", {"handle": handle}, timeout)
    return b"".join(chunks)
