"""The docker backend over SSH: the docker SDK's ``ssh://`` transport with a key, a known-hosts
file, a host-key policy, a connect timeout and keepalives.

The SDK (docker 7.1, ``docker/transport/sshconn.py``) reaches ``ssh://user@host:port`` through
paramiko and runs ``docker system dial-stdio`` on the far side; it takes the key only from
``~/.ssh/config`` (``IdentityFile``), rejects every host key missing from ``~/.ssh/known_hosts``
and has no connect timeout. :class:`SshSettings` are this backend's options for it:

    ssh_key_filename   private key file (then no agent and no ~/.ssh/id_* keys are tried)
    ssh_known_hosts    an OpenSSH known_hosts file checked besides ~/.ssh/known_hosts
    ssh_verify_host    True (default): refuse a host whose key is unknown; False: accept an unknown
                       key (not saved anywhere). A *changed* key is refused either way.
    connect_timeout    seconds for the TCP connect, the SSH banner and authentication (10)

:func:`api_client` builds the SDK's ``APIClient`` with :class:`KeyedSSHAdapter` mounted in place of
the SDK's own SSH adapter; the docker CLI commands an MPI launch agent needs go through the ``ssh``
binary with the same settings (:meth:`SshSettings.ssh_argv`).
"""
from __future__ import annotations

import math
import os
import shlex
import urllib.parse
from dataclasses import dataclass

import paramiko

from ..errors import BackendUnavailable, ConfigError

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


class _AcceptUnknown(paramiko.MissingHostKeyPolicy):
    """Accept a host key that no known_hosts file lists, without saving it."""

    def missing_host_key(self, client, hostname, key):
        return None


def _adapter_class():
    from docker.transport.sshconn import SSHHTTPAdapter

    class KeyedSSHAdapter(SSHHTTPAdapter):
        """The SDK's paramiko SSH adapter with :class:`SshSettings` applied before it connects."""

        def __init__(self, base_url, timeout, settings: SshSettings, **kwargs):
            self.settings = settings
            super().__init__(base_url, timeout, shell_out=False, **kwargs)

        def _create_paramiko_client(self, base_url):
            super()._create_paramiko_client(base_url)   # ~/.ssh/config, system host keys, reject
            s = self.settings
            self.ssh_params["port"] = s.port
            if s.known_hosts:
                self.ssh_client.load_host_keys(s.known_hosts)
            if not s.verify_host:
                self.ssh_client.set_missing_host_key_policy(_AcceptUnknown())
            self.ssh_params.update(s.connect_kwargs())

        def _connect(self):
            super()._connect()
            transport = self.ssh_client.get_transport() if self.ssh_client else None
            if transport is not None:
                transport.set_keepalive(KEEPALIVE_S)   # a partitioned host must not hang a call

    return KeyedSSHAdapter


def api_client(base_url: str, settings: SshSettings, *, timeout, version: str | None = None):
    """The SDK's ``APIClient`` for ``base_url`` connected with ``settings``; BackendUnavailable
    saying why when the SSH connection fails. ``version`` None asks the daemon."""
    import docker
    from docker.constants import DEFAULT_DOCKER_API_VERSION
    # use_ssh_client: the SDK's own adapter is built without connecting, then replaced by ours
    api = docker.APIClient(base_url=base_url, timeout=timeout, use_ssh_client=True,
                           version=version or DEFAULT_DOCKER_API_VERSION)
    try:
        adapter = _adapter_class()(base_url, timeout, settings)
    except (paramiko.SSHException, OSError, EOFError) as exc:
        api.close()
        raise BackendUnavailable(f"docker backend: {settings.why_not(exc)}") from exc
    api._custom_adapter.close()
    api._custom_adapter = adapter
    api.mount("http+docker://ssh", adapter)
    if version is None:
        api._version = api._retrieve_server_version()
    return api


def client(base_url: str, settings: SshSettings, *, timeout):
    """A ``DockerClient`` (models: containers, images, networks) on :func:`api_client`."""
    import docker

    class _Client(docker.DockerClient):
        def __init__(self, api):   # DockerClient.__init__ only makes self.api
            self.api = api

    return _Client(api_client(base_url, settings, timeout=timeout))
