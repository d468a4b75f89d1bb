"""How to reach a machine over SSH with a given key, known-hosts file, host-key policy and connect
timeout: :class:`SshSettings`, shared by the docker backend's ``ssh://`` transport
(:mod:`labkit.backends.docker_ssh`, whose options they are) and by the ``ssh`` command lines
an MPI launch agent runs (``ssh`` backend instances). Private: no backend imports another.
"""
from __future__ import annotations

import math
import os
import shlex
import urllib.parse
from dataclasses import dataclass

import paramiko

from ..errors import ConfigError

OPTIONS = ("ssh_key_filename", "ssh_known_hosts", "ssh_verify_host", "connect_timeout")
KEEPALIVE_S = 15


def _path(option: str, value) -> str | None:
    if value in (None, ""):     # "" : a testbed template such as "{key}" on a host without a key
        return None
    if not isinstance(value, str) or "\x00" in value or len(value) > 4096 or any(c.isspace() for c in value):
        raise ConfigError(f"docker option {option}: the path of a file (no white space), got {str(value)[:80]!r}")
    path = os.path.expanduser(value)
    if not os.path.isfile(path):
        raise ConfigError(f"docker option {option}: {path} is not a file")
    return path


@dataclass(frozen=True)
class SshSettings:
    """How to reach the daemon of an ``ssh://`` base URL (see the module docstring)."""
    user: str | None
    host: str
    port: int
    key_filename: str | None = None
    known_hosts: str | None = None
    verify_host: bool = True
    connect_timeout: float = 10.0

    @classmethod
    def from_options(cls, base_url: str, options: dict) -> SshSettings | None:
        """The settings of ``options`` for ``base_url``; None for a non-SSH URL (ConfigError if SSH
        options are given with one, or if an option is malformed)."""
        given = sorted(k for k in OPTIONS if options.get(k) not in (None, ""))
        if not base_url.startswith("ssh://"):
            if given:
                raise ConfigError(f"docker options {', '.join(given)} apply to an ssh:// base_url only, "
                                  f"not {base_url!r}")
            return None
        url = urllib.parse.urlparse(base_url)
        try:
            port = url.port or 22
        except ValueError as exc:
            raise ConfigError(f"docker option base_url {base_url!r}: {exc}") from None
        if not url.hostname or url.path not in ("", "/") or url.query or url.password:
            raise ConfigError(f"docker option base_url {base_url!r}: use ssh://user@host:port "
                              "(no password, path or query)")
        verify = options.get("ssh_verify_host", True)
        if not isinstance(verify, bool):
            raise ConfigError(f"docker option ssh_verify_host: true or false, got {str(verify)[:40]!r}")
        timeout = options.get("connect_timeout", 10)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
                or not 0 < timeout <= 600:
            raise ConfigError(f"docker option connect_timeout: seconds in (0, 600], got {str(timeout)[:40]!r}")
        return cls(url.username, url.hostname, port, _path("ssh_key_filename", options.get("ssh_key_filename")),
                   _path("ssh_known_hosts", options.get("ssh_known_hosts")), verify, float(timeout))

    @property
    def target(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"

    def connect_kwargs(self) -> dict:
        """paramiko ``SSHClient.connect`` arguments beyond host, port and user."""
        kw = {"timeout": self.connect_timeout, "banner_timeout": self.connect_timeout,
              "auth_timeout": self.connect_timeout}
        if self.key_filename:
            kw.update(key_filename=[self.key_filename], look_for_keys=False, allow_agent=False)
        return kw

    def ssh_argv(self, remote: list[str]) -> list[str]:
        """An ``ssh`` command line that runs ``remote`` (an argv, quoted here) on the host with these
        settings (no tty, no password prompt)."""
        argv = ["ssh", "-T", "-p", str(self.port), "-o", "BatchMode=yes",
                "-o", f"ConnectTimeout={math.ceil(self.connect_timeout)}",
                "-o", f"ServerAliveInterval={KEEPALIVE_S}"]
        if self.key_filename:
            argv += ["-i", self.key_filename, "-o", "IdentitiesOnly=yes"]
        # ssh checks every file listed and adds an accepted new key to the first: /dev/null when
        # unknown keys are accepted (nothing saved, as with paramiko here), known ones still checked
        files = ([] if self.verify_host else ["/dev/null"]) + ([self.known_hosts] if self.known_hosts else [])
        if files:
            argv += ["-o", "UserKnownHostsFile=" + " ".join([*files, "~/.ssh/known_hosts"])]
        argv += ["-o", f"StrictHostKeyChecking={'yes' if self.verify_host else 'accept-new'}",
                 "-o", "LogLevel=ERROR"]
        if self.user:
            argv += ["-l", self.user]
        return argv + ["--", self.host, shlex.join(remote)]

    def why_not(self, exc: BaseException) -> str:
        """What a failed connection means and what to do."""
        tried = f"{self.target} with key {self.key_filename or '~/.ssh defaults and the agent'}"
        if isinstance(exc, paramiko.BadHostKeyException):
            return (f"the host key of {self.target} differs from the known one ({exc}); if the host was "
                    "reinstalled, remove the old entry from the known_hosts file")
        if isinstance(exc, paramiko.AuthenticationException):
            return f"{tried}: authentication failed ({exc}); set ssh_key_filename to an authorized key"
        if isinstance(exc, paramiko.SSHException) and "known_hosts" in str(exc):
            return (f"the host key of {self.target} is unknown ({exc}); add it to a known_hosts file "
                    "given as ssh_known_hosts (ssh-keyscan), or set ssh_verify_host: false to accept it")
        return f"cannot reach the Docker daemon over SSH at {tried} ({type(exc).__name__}: {exc})"
