"""Host-key attack trials against the real test sshd (scripts/setup-ssh.sh, LABKIT_SSH_*), on every
SSH path labkit uses (issue 28): the ``ssh`` backend (fabric/paramiko), the ``ssh`` binary of an
MPI launch agent, docker over ``ssh://``, the libvirt backend on a ``qemu+ssh://`` URI (its
``host_key_policy`` and ``known_hosts`` options), a cloud server's readiness wait, and the relay
that an MPI launch agent runs for a libvirt guest (``python -m labkit.backends.libvirt.relay`` on
the URI the backend opens). Shared by tests/integration/test_ssh_hostkeys.py and
reliability/security_hostkeys.py.

Each trial runs in a :func:`private_home` (HOME is a temporary directory, so ``~/.ssh/known_hosts``
is empty and root's real file is never read or written) against a known_hosts file that either
lists a *different* key for ``[host]:port`` (:func:`changed_file`, the old key on line 2) or does
not exist (:func:`unknown_file`). :func:`attempt` says whether a path accepted the host.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import paramiko

PATHS = ("ssh backend", "ssh binary", "docker ssh://", "libvirt", "cloud wait", "libvirt relay")
#: the paths that need libvirtd
LIBVIRT_PATHS = ("libvirt", "libvirt relay")


def target() -> dict:
    """The test sshd (the Makefile's LABKIT_SSH_* variables, else scripts/setup-ssh.sh's)."""
    return {
        "host": os.environ.get("LABKIT_SSH_HOST", "127.0.0.1"),
        "port": int(os.environ.get("LABKIT_SSH_PORT", "2222")),
        "user": os.environ.get("LABKIT_SSH_USER", "root"),
        "key_filename": os.environ.get("LABKIT_SSH_KEY", "/root/.ssh/labkit_test_ed25519"),
    }


def entry_name() -> str:
    t = target()
    return f"[{t['host']}]:{t['port']}"


@contextlib.contextmanager
def private_home():
    """HOME set to a new private directory (with an empty ``.ssh``) for the block; restored after."""
    old = os.environ.get("HOME")
    with tempfile.TemporaryDirectory(prefix="labkit-hostkeys-") as tmp:
        os.makedirs(os.path.join(tmp, ".ssh"), mode=0o700)
        os.environ["HOME"] = tmp
        try:
            yield Path(tmp)
        finally:
            if old is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = old


def changed_file(home: Path) -> Path:
    """A known_hosts file whose line 2 holds a fresh ECDSA key (the sshd has an ECDSA host key of its
    own, so every client asks for that type and meets a different one) for the test sshd."""
    key = paramiko.ECDSAKey.generate()
    path = home / "known_hosts_changed"
    path.write_text(f"# labkit host-key trial\n{entry_name()} {key.get_name()} {key.get_base64()}\n")
    return path


def unknown_file(home: Path) -> Path:
    return home / "known_hosts_new"


def server_keys() -> set[str]:
    """The test sshd's host keys as ``type base64`` (its HostKey files' .pub)."""
    return {" ".join(p.read_text().split()[:2]) for p in Path("/etc/ssh").glob("ssh_host_*_key.pub")}


def recorded_keys(path: Path) -> set[str]:
    """``type base64`` of the entries of ``path`` for the test sshd (plain or hashed: the ssh binary
    hashes what it records where ``HashKnownHosts`` is on, as on Debian)."""
    from paramiko.hostkeys import HostKeys

    found = HostKeys(str(path)).lookup(entry_name()) if path.exists() else None
    return {f"{k.get_name()} {k.get_base64()}" for k in (found or {}).values()}


def _ssh_backend(policy: str, known_hosts: Path):
    from labkit.backends.ssh import SshBackend

    return SshBackend(**target(), connect_timeout=10, host_key_policy=policy, known_hosts=str(known_hosts))


def connect(path: str, policy: str, known_hosts: Path) -> None:
    """Connect to the test sshd on ``path`` (one of :data:`PATHS`) under ``policy``; raise if refused."""
    t = target()
    if path == "ssh backend":
        be = _ssh_backend(policy, known_hosts)
        try:
            be.connection()
        finally:
            be.close()
    elif path == "ssh binary":  # what an MPI launch agent runs (SshInstance.host_command)
        argv = _ssh_backend(policy, known_hosts).settings.ssh_argv(["true"])
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            raise ConnectionRefusedError(f"ssh exited {res.returncode}: {res.stderr.strip()[-400:]}")
    elif path == "docker ssh://":
        from labkit.backends import docker_ssh

        settings = docker_ssh.SshSettings(
            t["user"], t["host"], t["port"], t["key_filename"], str(known_hosts), policy, 10.0
        )
        # a version given: no API call, only the SSH connection (the part that checks the host key)
        docker_ssh.api_client(
            f"ssh://{t['user']}@{t['host']}:{t['port']}", settings, timeout=30, version="1.41"
        ).close()
    elif path == "libvirt":
        be = libvirt_backend(policy, known_hosts)
        try:
            be.conn.getVersion()
        finally:
            be.close()
    elif path == "libvirt relay":  # what an MPI launch agent runs for a libvirt guest (host_command)
        uri = libvirt_backend(policy, known_hosts).ssh.open_uri
        res = subprocess.run(
            [sys.executable, "-m", "labkit.backends.libvirt.relay", uri, "labkit-test-nosuchvm", "true"],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            cwd=str(Path(__file__).resolve().parents[2]),
        )
        if "Domain not found" not in res.stderr:  # connected: only the domain is missing
            raise ConnectionRefusedError(f"relay exited {res.returncode}: {res.stderr.strip()[-1500:]}")
    elif path == "cloud wait":
        from labkit.backends.clouds.base import wait_ssh

        wait_ssh(
            t["host"],
            t["port"],
            t["user"],
            t["key_filename"],
            time.monotonic() + 60,
            connect_timeout=10,
            interval=0.5,
            host_key_policy=policy,
            known_hosts=str(known_hosts),
        )
    else:
        raise ValueError(f"unknown path {path!r}; one of {PATHS}")


def libvirt_backend(policy: str, known_hosts: Path, **options):
    """The libvirt backend on the test sshd's ``qemu+ssh://`` URI with ``policy`` (not connected yet)."""
    from labkit.backends.libvirt import LibvirtBackend

    t = target()
    return LibvirtBackend(
        uri=f"qemu+ssh://{t['user']}@{t['host']}:{t['port']}/system?keyfile={t['key_filename']}",
        host_key_policy=policy,
        known_hosts=str(known_hosts),
        **options,
    )


def attempt(path: str, policy: str, known_hosts: Path) -> tuple[bool, str]:
    """(True, "") if ``path`` connected under ``policy``, else (False, the error text)."""
    try:
        connect(path, policy, known_hosts)
    except Exception as exc:  # every refusal counts, whatever its type: the caller checks the text
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""
