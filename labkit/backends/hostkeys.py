"""Host-key checking for every SSH connection labkit makes: one policy, three meanings.

``host_key_policy`` (an option of the ``ssh``, ``docker`` and ``libvirt`` backends, of testbeds, hosts
and cloud providers) is one of :data:`POLICIES`:

    strict      (default) the host's key must be listed in ``~/.ssh/known_hosts`` or in the
                optional ``known_hosts`` file; an unknown or a changed key is refused
    accept-new  an unknown host is trusted on first use and its key is appended to the
                ``known_hosts`` file (``~/.ssh/known_hosts`` when none is given), as OpenSSH's
                ``StrictHostKeyChecking accept-new``; a changed key is refused
    insecure    every key is accepted, known or not, changed or not (no file is read or written);
                each use logs a warning and backends record the policy in their fingerprint

A changed key is :class:`BackendUnavailable` (through the callers' ``why_not``) naming
``host:port``, the known_hosts file and line holding the old key, and the ``ssh-keygen -R``
command that removes it. The paramiko side is :func:`configure` (paramiko's own checks:
``load_system_host_keys``/``load_host_keys`` and a ``MissingHostKeyPolicy``); the ``ssh`` binary's
options are :func:`ssh_options`, and libvirt's ``qemu+ssh://`` parameters (:func:`libvirt_query`)
run ``ssh`` with those same options; :func:`ssh_refusal` turns the ``ssh`` binary's refusal (as
libvirt passes it on) into the same messages. :class:`labkit.backends._ssh_settings.SshSettings` carries
the policy to each.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shlex
import threading
from typing import Any

from ..errors import ConfigError

log = logging.getLogger("labkit.hostkeys")

STRICT, ACCEPT_NEW, INSECURE = "strict", "accept-new", "insecure"
POLICIES = (STRICT, ACCEPT_NEW, INSECURE)
DEFAULT = STRICT
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
#: where :func:`ssh_wrapper` writes its programs
SSH_WRAPPERS = "~/.cache/labkit/ssh"
#: bytes of a known_hosts file read to name the line of an old key
MAX_SCAN = 16 << 20
_record_lock = threading.Lock()


class UnknownHostKey(ConnectionError):
    """The host's key is in no known_hosts file and the policy is ``strict``. (paramiko is imported
    only when a connection is made: a testbed reads its policy without the ``ssh`` extra.)"""


def check_policy(value: Any, where: str) -> str:
    """``value`` if it is one of :data:`POLICIES`; ConfigError naming ``where`` otherwise."""
    if value not in POLICIES:
        raise ConfigError(
            f"{where}: host_key_policy must be one of {', '.join(POLICIES)}, got {str(value)[:40]!r}"
        )
    return value


def known_hosts_path(where: str, value: Any) -> str | None:
    """A known_hosts file option: None, or a path (no white space) that is a file or can become one
    (its directory exists: ``accept-new`` creates it); ConfigError naming ``where`` otherwise."""
    if value in (None, ""):
        return None
    if not isinstance(value, str) or "\x00" in value or len(value) > 4096 or any(c.isspace() for c in value):
        raise ConfigError(
            f"{where}: the path of a known_hosts file (no white space), got {str(value)[:80]!r}"
        )
    path = os.path.abspath(os.path.expanduser(value))
    if not (os.path.isfile(path) or (not os.path.exists(path) and os.path.isdir(os.path.dirname(path)))):
        raise ConfigError(f"{where}: {path} is not a file (nor a new file in an existing directory)")
    return path


def user_known_hosts() -> str:
    return os.path.expanduser(USER_KNOWN_HOSTS)


def entry_name(host: str, port: int) -> str:
    """How known_hosts names ``host:port``: ``host`` on port 22, else ``[host]:port``."""
    return host if port == 22 else f"[{host}]:{port}"


def files(known_hosts: str | None) -> list[str]:
    """The known_hosts files checked, in paramiko's order: the user's, then ``known_hosts``."""
    return [user_known_hosts()] + ([known_hosts] if known_hosts else [])


def record_file(known_hosts: str | None) -> str:
    """The file ``accept-new`` appends to: ``known_hosts`` when given, else the user's."""
    return known_hosts or user_known_hosts()


def find_entry(path: str, name: str) -> int | None:
    """The line number (1-based) of the first entry of ``path`` for ``name`` (plain or hashed, as
    paramiko matches them), reading at most :data:`MAX_SCAN` bytes; None if there is none."""
    from paramiko.hostkeys import HostKeys

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_SCAN)
    except OSError:
        return None
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        hosts = line.split(None, 1)[0].split(",")
        if name in hosts or any(h.startswith("|1|") and HostKeys.hash_host(name, h) == h for h in hosts):
            return lineno
    return None


def changed_message(host: str, port: int, known_hosts: str | None, exc: Any) -> str:
    """What a changed key means (``exc``: paramiko's BadHostKeyException) and how to remove the old one."""
    offered = exc.key.fingerprint if exc.key is not None else None
    return _changed(host, port, offered, _old_entry(host, port, known_hosts))


def _old_entry(host: str, port: int, known_hosts: str | None) -> str:
    """``<file> line <n>`` of the first entry for ``host:port`` in the files checked, else a vaguer phrase."""
    name = entry_name(host, port)
    for path in files(known_hosts):
        line = find_entry(path, name)
        if line is not None:
            return f"{path} line {line}"
    return "a known_hosts file"


def _changed(host: str, port: int, offered: str | None, where: str) -> str:
    name = entry_name(host, port)
    offers = f"the server offers {offered} but" if offered else "the server offers a key other than the one"
    return (
        f"the host key of {host}:{port} CHANGED: {offers} {where} holds a "
        f"different key for {name} (a man-in-the-middle, or the host was reinstalled). If the new "
        f"key is right, remove the old one with: ssh-keygen -f {where.split(' line ')[0]} -R '{name}'"
    )


#: OpenSSH's words (the ``ssh`` binary's stderr, which libvirt's ssh transport passes on in its errors)
#: for a changed key: the key the server offered and the file and line of the old one; then the
#: words of OpenSSH and of libvirt's libssh/libssh2 transports for a changed and an unknown key
_OFFERED = re.compile(r"key sent by the remote host is\s+(\S+?)\.?\n")
_OFFENDING = re.compile(r"Offending \S+ key in (.+?):(\d+)\n")
_CHANGED_WORDS = (
    "REMOTE HOST IDENTIFICATION HAS CHANGED",
    "has changed and you have requested strict checking",
    "differs from stored identity",
)
_REFUSED_WORDS = (
    "Host key verification failed",
    "host key is known for",
    "Can't verify the session host key",
)


def ssh_refusal(text: str, host: str, port: int, known_hosts: str | None) -> str | None:
    """labkit's message for a host key the ``ssh`` binary refused, read from ``text`` (its stderr, or
    an error carrying it, such as libvirt's "Cannot recv data: ..."): a changed key named with the
    key offered and the file and line OpenSSH names (:func:`changed_message`'s words), an unknown one
    as :func:`unknown_message`; None when ``text`` tells of no refused host key."""
    text = str(text).replace("\r", "") + "\n"
    if any(w in text for w in _CHANGED_WORDS):
        offered, offending = _OFFERED.search(text), _OFFENDING.search(text)
        where = f"{offending[1]} line {offending[2]}" if offending else _old_entry(host, port, known_hosts)
        return _changed(host, port, offered[1] if offered else None, where)
    if any(w in text for w in _REFUSED_WORDS):
        return unknown_message(host, port, known_hosts)
    return None


def unknown_message(host: str, port: int, known_hosts: str | None) -> str:
    return (
        f"the host key of {host}:{port} is unknown (not in {' or '.join(files(known_hosts))}) and "
        f"host_key_policy is strict; add it (ssh-keyscan -p {port} {host} >> {record_file(known_hosts)}, "
        "after checking its fingerprint) or set host_key_policy: accept-new to trust it on first use"
    )


# paramiko calls a policy's missing_host_key (raise to refuse); no base class needed
class _Refuse:
    def __init__(self, known_hosts: str | None):
        self.known_hosts = known_hosts

    def missing_host_key(self, client, hostname, key):
        raise UnknownHostKey(f"{hostname} not found in {' or '.join(files(self.known_hosts))}")


class _RecordNew:
    """accept-new: append the key to ``path`` (locked, re-checked: a key another connection
    recorded meanwhile must match) and trust it for this client."""

    def __init__(self, path: str):
        self.path = path

    def missing_host_key(self, client, hostname, key):
        import paramiko
        from paramiko.hostkeys import HostKeyEntry, HostKeys

        os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        with (
            _record_lock,
            open(
                os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600), "r+", encoding="utf-8"
            ) as f,
        ):
            fcntl.flock(f, fcntl.LOCK_EX)
            now = HostKeys(self.path).lookup(hostname)
            if now is not None:
                old = now.get(key.get_name()) or next(iter(now.values()))
                if old != key:
                    raise paramiko.BadHostKeyException(hostname, key, old)
            else:
                f.write(HostKeyEntry([hostname], key).to_line())
                log.info("host key of %s (%s) recorded in %s", hostname, key.fingerprint, self.path)
        client.get_host_keys().add(hostname, key.get_name(), key)


def forget(path: str, host: str, port: int) -> int:
    """Remove every entry for ``host:port`` from the known_hosts file ``path`` (locked as
    :class:`_RecordNew` records, rewritten atomically, 0600); returns how many. For files labkit
    owns only (the cloud servers' file: a new server at a recycled address has a new key)."""
    from paramiko.hostkeys import HostKeys

    if not os.path.isfile(path):
        return 0
    name, removed = entry_name(host, port), 0
    with _record_lock, open(path, encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        keys = HostKeys(path)
        while True:
            try:
                del keys[name]
            except KeyError:
                break
            removed += 1
        if removed:
            tmp = f"{path}.{os.getpid()}.tmp"
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            keys.save(tmp)
            os.replace(tmp, path)
    return removed


class _AcceptAny:
    def missing_host_key(self, client, hostname, key):
        log.warning(
            "host_key_policy insecure: accepting host key %s of %s unchecked", key.fingerprint, hostname
        )


def configure(client: Any, policy: str, known_hosts: str | None = None) -> _AcceptAny | _Refuse | _RecordNew:
    """Make the paramiko ``client`` check host keys by ``policy`` (``known_hosts``: the optional
    extra file); returns the ``MissingHostKeyPolicy`` it installed (paramiko calls it for a key no
    loaded file lists; a listed key that differs is paramiko's BadHostKeyException)."""
    check_policy(policy, "ssh")
    if policy == INSECURE:  # nothing loaded: every key goes to the policy, which accepts it
        log.warning(
            "host_key_policy insecure: host keys are not checked (a man-in-the-middle is not noticed)"
        )
        missing: _AcceptAny | _Refuse | _RecordNew = _AcceptAny()
    else:
        client.load_system_host_keys()  # ~/.ssh/known_hosts, if it exists
        if known_hosts and os.path.isfile(known_hosts):
            client.load_host_keys(known_hosts)
        missing = _Refuse(known_hosts) if policy == STRICT else _RecordNew(record_file(known_hosts))
    client.set_missing_host_key_policy(missing)
    return missing


def ssh_options(policy: str, known_hosts: str | None) -> list[str]:
    """``ssh -o`` options of ``policy``: strict ``StrictHostKeyChecking=yes``, accept-new
    ``accept-new`` (OpenSSH adds a new key to the first ``UserKnownHostsFile``: ``known_hosts`` when
    given, else the user's), both checking ``known_hosts`` and ``~/.ssh/known_hosts``; insecure ``no``
    with no known_hosts file at all (a changed key is accepted too)."""
    if check_policy(policy, "ssh") == INSECURE:
        return [
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
        ]
    files = [record_file(known_hosts)] + ([user_known_hosts()] if known_hosts else [])
    check = "yes" if policy == STRICT else "accept-new"
    return ["-o", "UserKnownHostsFile=" + " ".join(files), "-o", f"StrictHostKeyChecking={check}"]


def ssh_wrapper(options: list[str]) -> str:
    """The path of a small executable that runs ``ssh <options> <its own arguments>``: a program
    given where only an ``ssh`` binary's name can be (libvirt's ``command`` URI parameter). OpenSSH
    uses the first value of each option, so ``options`` win over those the caller adds after them.
    Written once per distinct ``options`` under :data:`SSH_WRAPPERS` (0700, atomically)."""
    body = (
        "#!/bin/sh\n# labkit: ssh with a host-key policy (labkit.backends.hostkeys.ssh_wrapper)\n"
        f'exec ssh {shlex.join(options)} "$@"\n'
    )
    folder = os.path.expanduser(SSH_WRAPPERS)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, "ssh-" + hashlib.sha256(body.encode()).hexdigest()[:16])
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == body:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700), "w", encoding="utf-8") as f:
        f.write(body)
    os.replace(tmp, path)
    return path


def libvirt_query(policy: str, known_hosts: str | None, key_filename: str | None) -> dict:
    """Query parameters of a ``qemu+ssh://`` URI with ``policy``: libvirt's ssh transport runs the
    ``command`` it is given in place of ``ssh`` (docs/uri.rst), here :func:`ssh_wrapper` with
    :func:`ssh_options`, so the ``ssh`` binary checks host keys exactly as the MPI launch agent's;
    ``no_tty`` (never prompt) and the key as ``keyfile``. (libvirt's ``no_verify`` only turns
    checking off; its libssh transport takes a known_hosts file, but hangs on large replies without
    an event loop, seen with libvirt 9.0.)"""
    query = {"no_tty": "1", "command": ssh_wrapper(ssh_options(policy, known_hosts))}
    if key_filename:
        query["keyfile"] = key_filename
    return query


def why_not(exc: BaseException, host: str, port: int, known_hosts: str | None) -> str | None:
    """The host-key meaning of a failed connect (changed or unknown key), else None."""
    import paramiko

    if isinstance(exc, paramiko.BadHostKeyException):
        return changed_message(host, port, known_hosts, exc)
    if isinstance(exc, UnknownHostKey):
        return unknown_message(host, port, known_hosts)
    return None
