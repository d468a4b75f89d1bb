"""Talking to the QEMU guest agent through libvirt: ping, exec, file copy.

Commands go through ``libvirt_qemu.qemuAgentCommand`` as QMP-style JSON:
``guest-exec`` starts a process (output captured), ``guest-exec-status`` is
polled until it has exited, ``guest-file-open/write/close`` copy files in. The
guest needs no network.
"""
from __future__ import annotations

import base64
import json
import time

import libvirt
import libvirt_qemu

from ..errors import BackendError
from .base import RawResult

#: Environment of every guest command (qemu-ga would otherwise pass its own).
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "LANG": "C.UTF-8"}
#: Bytes per guest-file-write (base64 makes the message a third bigger; 400 KiB chunks hang the agent).
CHUNK = 64 * 1024


class AgentError(BackendError):
    """The guest agent answered with an error, or could not be reached."""


def command(dom, execute: str, arguments: dict | None = None, timeout: int = 30):
    """Run one agent command and return its ``return`` value."""
    msg = {"execute": execute}
    if arguments is not None:
        msg["arguments"] = arguments
    try:
        reply = libvirt_qemu.qemuAgentCommand(dom, json.dumps(msg), timeout, 0)
    except libvirt.libvirtError as exc:
        raise AgentError(f"guest agent {execute} in {dom.name()}: {exc}") from exc
    data = json.loads(reply)
    if "error" in data:
        raise AgentError(f"guest agent {execute} in {dom.name()}: {data['error']}")
    return data.get("return")


def ping(dom, timeout: int = 2) -> bool:
    try:
        command(dom, "guest-ping", timeout=timeout)
        return True
    except AgentError:
        return False


def spawn(dom, argv: list[str], env: dict | None = None) -> int:
    """Start ``argv`` in the guest with output captured; returns its pid."""
    args = {"path": argv[0], "arg": list(argv[1:]), "capture-output": True,
            "env": [f"{k}={v}" for k, v in {**BASE_ENV, **(env or {})}.items()]}
    return int(command(dom, "guest-exec", args)["pid"])


def status(dom, pid: int) -> dict:
    return command(dom, "guest-exec-status", {"pid": pid})


def _decode(st: dict, key: str) -> str:
    data = st.get(key)
    if not data:
        return ""
    return base64.b64decode(data).decode("utf-8", errors="replace")


def run(dom, argv: list[str], timeout: float | None = None, env: dict | None = None,
        alive=None) -> RawResult:
    """Run ``argv`` to completion in the guest.

    With a ``timeout``, the command runs in its own session (``setsid``) and the
    whole process group is killed with SIGKILL once the timeout passes;
    ``timed_out`` is then set. ``alive()``, when given, is asked while waiting:
    a guest that died raises instead of waiting forever.
    """
    if timeout is not None:
        argv = ["setsid", *argv]
    pid = spawn(dom, argv, env)
    start = time.monotonic()
    deadline = start + timeout if timeout is not None else None
    delay = 0.001
    timed_out = False
    while True:
        st = status(dom, pid)
        if st.get("exited"):
            break
        now = time.monotonic()
        if deadline is not None and now >= deadline and not timed_out:
            timed_out = True
            try:
                spawn(dom, ["kill", "-KILL", "--", f"-{pid}"])
            except AgentError:
                pass
            deadline = None
        if alive is not None and delay >= 0.05 and not alive():
            raise BackendError(f"{dom.name()} stopped while running {argv!r}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    if "exitcode" in st:
        code = int(st["exitcode"])
    elif "signal" in st:
        code = 128 + int(st["signal"])
    else:
        code = -1
    out, err = _decode(st, "out-data"), _decode(st, "err-data")
    if st.get("out-truncated"):
        out += "\n[labkit: output truncated by the guest agent]"
    if st.get("err-truncated"):
        err += "\n[labkit: output truncated by the guest agent]"
    return RawResult(code, out, err, timed_out)


def write_file(dom, path: str, data: bytes, timeout: int = 60) -> None:
    """Write ``data`` to ``path`` in the guest (created or truncated)."""
    handle = command(dom, "guest-file-open", {"path": path, "mode": "w"}, timeout)
    try:
        for off in range(0, max(len(data), 1), CHUNK):
            chunk = data[off:off + CHUNK]
            if not chunk:
                break
            res = command(dom, "guest-file-write",
                          {"handle": handle, "buf-b64": base64.b64encode(chunk).decode()}, timeout)
            if int(res.get("count", len(chunk))) != len(chunk):
                raise AgentError(f"short write to {path} in {dom.name()}: {res}")
    finally:
        command(dom, "guest-file-close", {"handle": handle}, timeout)
