"""How to reach a machine over SSH with a given key, known-hosts file, host-key policy and connect
timeout: :class:`SshSettings`, shared by the docker backend's ``ssh://`` transport
(:mod:`labkit.backends.docker_ssh`, whose options they are), by the ``ssh`` command lines an MPI
launch agent runs (``ssh`` and ``docker`` backend instances) and by the ``qemu+ssh://`` URIs of
remote libvirt platforms. The host-key policy (:mod:`labkit.backends.hostkeys`) means the same on
each: paramiko (:meth:`SshSettings.configure`), ``ssh`` options (:meth:`SshSettings.ssh_argv`) and
libvirt URI parameters (:meth:`SshSettings.libvirt_query`) all derive from it. Private: no backend
imports another.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import urllib.parse
from dataclasses import dataclass

import paramiko

from ..errors import ConfigError
from . import hostkeys
from .hostkeys import known_hosts_path

OPTIONS = ("ssh_key_filename", "ssh_known_hosts", "host_key_policy", "ssh_verify_host", "connect_timeout")
KEEPALIVE_S = 15
log = logging.getLogger("labkit.backends")


def _path(option: str, value) -> str | None:
    if value in (None, ""):  # "" : a testbed template such as "{key}" on a host without a key
        return None
    if not isinstance(value, str) or "\x00" in value or len(value) > 4096 or any(c.isspace() for c in value):
        raise ConfigError(
            f"docker option {option}: the path of a file (no white space), got {str(value)[:80]!r}"
        )
    path = os.path.expanduser(value)
    if not os.path.isfile(path):
        raise ConfigError(f"docker option {option}: {path} is not a file")
    return path


def policy_option(where: str, options: dict, legacy: str | None = None) -> str:
    """``options['host_key_policy']`` checked (default strict). ``legacy``: the name of a deprecated
    boolean (``ssh_verify_host``): true means strict, false accept-new (an unknown key trusted, a
    changed one refused, as it was), with a deprecation warning; both given is a ConfigError."""
    policy = options.get("host_key_policy")
    old = options.get(legacy) if legacy else None
    if old is not None:
        if policy is not None:
            raise ConfigError(f"{where}: give host_key_policy only ({legacy} is its deprecated form)")
        if not isinstance(old, bool):
            raise ConfigError(
                f"{where}: {legacy}: true or false, got {str(old)[:40]!r} (deprecated: use "
                f"host_key_policy: {' | '.join(hostkeys.POLICIES)})"
            )
        policy = hostkeys.STRICT if old else hostkeys.ACCEPT_NEW
        log.warning("%s: %s is deprecated; read as host_key_policy: %s", where, legacy, policy)
    return hostkeys.check_policy(hostkeys.DEFAULT if policy is None else policy, where)


@dataclass(frozen=True)
class SshSettings:
    """How to reach a host over SSH: the docker daemon of an ``ssh://`` base URL, an ``ssh`` backend's
    host (see the module docstring)."""

    user: str | None
    host: str
    port: int
    key_filename: str | None = None
    known_hosts: str | None = None
    host_key_policy: str = hostkeys.DEFAULT
    connect_timeout: float = 10.0

    def __post_init__(self):
        hostkeys.check_policy(self.host_key_policy, f"ssh to {self.host}")

    @classmethod
    def from_options(cls, base_url: str, options: dict) -> SshSettings | None:
        """The settings of ``options`` for ``base_url``; None for a non-SSH URL (ConfigError if SSH
        options are given with one, or if an option is malformed)."""
        given = sorted(k for k in OPTIONS if options.get(k) not in (None, ""))
        if not base_url.startswith("ssh://"):
            if given:
                raise ConfigError(
                    f"docker options {', '.join(given)} apply to an ssh:// base_url only, not {base_url!r}"
                )
            return None
        url = urllib.parse.urlparse(base_url)
        try:
            port = url.port or 22
        except ValueError as exc:
            raise ConfigError(f"docker option base_url {base_url!r}: {exc}") from None
        if not url.hostname or url.path not in ("", "/") or url.query or url.password:
            raise ConfigError(
                f"docker option base_url {base_url!r}: use ssh://user@host:port (no password, path or query)"
            )
        policy = policy_option("docker options", options, "ssh_verify_host")
        timeout = options.get("connect_timeout", 10)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or not 0 < timeout <= 600
        ):
            raise ConfigError(
                f"docker option connect_timeout: seconds in (0, 600], got {str(timeout)[:40]!r}"
            )
        return cls(
            url.username,
            url.hostname,
            port,
            _path("ssh_key_filename", options.get("ssh_key_filename")),
            known_hosts_path("docker option ssh_known_hosts", options.get("ssh_known_hosts")),
            policy,
            float(timeout),
        )

    @property
    def target(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"

    def connect_kwargs(self) -> dict:
        """paramiko ``SSHClient.connect`` arguments beyond host, port and user."""
        kw: dict[str, object] = {
            "timeout": self.connect_timeout,
            "banner_timeout": self.connect_timeout,
            "auth_timeout": self.connect_timeout,
        }
        if self.key_filename:
            kw.update(key_filename=[self.key_filename], look_for_keys=False, allow_agent=False)
        return kw

    def configure(self, client: paramiko.SSHClient) -> object:
        """Make a paramiko client check host keys by this policy (:func:`hostkeys.configure`, whose
        missing-key policy it returns)."""
        return hostkeys.configure(client, self.host_key_policy, self.known_hosts)

    def ssh_options(self) -> list[str]:
        """``ssh -o`` options of this host-key policy (:func:`hostkeys.ssh_options`)."""
        return hostkeys.ssh_options(self.host_key_policy, self.known_hosts)

    def libvirt_query(self) -> dict:
        """Query parameters of a ``qemu+ssh://`` URI for this host (:func:`hostkeys.libvirt_query`)."""
        return hostkeys.libvirt_query(self.host_key_policy, self.known_hosts, self.key_filename)

    def ssh_argv(self, remote: list[str]) -> list[str]:
        """An ``ssh`` command line that runs ``remote`` (an argv, quoted here) on the host with these
        settings (no tty, no password prompt)."""
        argv = [
            "ssh",
            "-T",
            "-p",
            str(self.port),
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={math.ceil(self.connect_timeout)}",
            "-o",
            f"ServerAliveInterval={KEEPALIVE_S}",
        ]
        if self.key_filename:
            argv += ["-i", self.key_filename, "-o", "IdentitiesOnly=yes"]
        argv += self.ssh_options() + ["-o", "LogLevel=ERROR"]
        if self.user:
            argv += ["-l", self.user]
        return argv + ["--", self.host, shlex.join(remote)]

    def why_not(self, exc: BaseException) -> str:
        """What a failed connection means and what to do."""
        tried = f"{self.target} with key {self.key_filename or '~/.ssh defaults and the agent'}"
        keys = hostkeys.why_not(exc, self.host, self.port, self.known_hosts)
        if keys:
            return keys
        if isinstance(exc, paramiko.AuthenticationException):
            return f"{tried}: authentication failed ({exc}); set ssh_key_filename to an authorized key"
        return f"cannot reach the Docker daemon over SSH at {tried} ({type(exc).__name__}: {exc})"
