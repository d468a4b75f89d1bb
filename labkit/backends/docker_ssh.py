"""The docker backend over SSH: the docker SDK's ``ssh://`` transport with a key, a known-hosts
file, a host-key policy, a connect timeout and keepalives.

The SDK (docker 7.1, ``docker/transport/sshconn.py``) reaches ``ssh://user@host:port`` through
paramiko and runs ``docker system dial-stdio`` on the far side; it takes the key only from
``~/.ssh/config`` (``IdentityFile``), rejects every host key missing from ``~/.ssh/known_hosts``
and has no connect timeout. :class:`SshSettings` are this backend's options for it:

    ssh_key_filename   private key file (then no agent and no ~/.ssh/id_* keys are tried)
    ssh_known_hosts    an OpenSSH known_hosts file checked besides ~/.ssh/known_hosts (and the one
                       ``accept-new`` records new keys in)
    host_key_policy    strict (default) | accept-new | insecure (:mod:`labkit.backends.hostkeys`)
    ssh_verify_host    deprecated: true is host_key_policy strict, false accept-new
    connect_timeout    seconds for the TCP connect, the SSH banner and authentication (10)

:func:`api_client` builds the SDK's ``APIClient`` with :class:`KeyedSSHAdapter` mounted in place of
the SDK's own SSH adapter; the docker CLI commands an MPI launch agent needs go through the ``ssh``
binary with the same settings (:meth:`SshSettings.ssh_argv`).
"""

from __future__ import annotations

import paramiko

from ..errors import BackendUnavailable
from ._ssh_settings import KEEPALIVE_S, OPTIONS, SshSettings  # noqa: F401 (OPTIONS: the docker backend's)


def _adapter_class():
    from docker.transport.sshconn import SSHHTTPAdapter

    class KeyedSSHAdapter(SSHHTTPAdapter):
        """The SDK's paramiko SSH adapter with :class:`SshSettings` applied before it connects."""

        def __init__(self, base_url, timeout, settings: SshSettings, **kwargs):
            self.settings = settings
            super().__init__(base_url, timeout, shell_out=False, **kwargs)

        def _create_paramiko_client(self, base_url):
            super()._create_paramiko_client(base_url)  # ~/.ssh/config (its host keys: replaced)
            s = self.settings
            self.ssh_params["port"] = s.port
            self.ssh_client = paramiko.SSHClient()
            s.configure(self.ssh_client)
            self.ssh_params.update(s.connect_kwargs())

        def _connect(self):
            super()._connect()
            transport = self.ssh_client.get_transport() if self.ssh_client else None
            if transport is not None:
                transport.set_keepalive(KEEPALIVE_S)  # a partitioned host must not hang a call

    return KeyedSSHAdapter


def api_client(base_url: str, settings: SshSettings, *, timeout, version: str | None = None):
    """The SDK's ``APIClient`` for ``base_url`` connected with ``settings``; BackendUnavailable
    saying why when the SSH connection fails. ``version`` None asks the daemon."""
    import docker
    from docker.constants import DEFAULT_DOCKER_API_VERSION

    # use_ssh_client: the SDK's own adapter is built without connecting, then replaced by ours
    api = docker.APIClient(
        base_url=base_url, timeout=timeout, use_ssh_client=True, version=version or DEFAULT_DOCKER_API_VERSION
    )
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
        def __init__(self, api):  # DockerClient.__init__ only makes self.api
            self.api = api

    return _Client(api_client(base_url, settings, timeout=timeout))
