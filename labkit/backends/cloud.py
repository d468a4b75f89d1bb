"""The ``cloud`` backend: each instance is a cloud server, used through the ``ssh`` backend.

A platform (or ``--backend cloud``) names a provider of :mod:`labkit.backends.clouds`, a flavor and an
image (``host_cpus``, ``enforce_limits`` and ``connect_timeout``, default 60 s, are its other
options, for the ``ssh`` side); the rest go to the provider (``cloud``, ``network``,
``key_filename``, ``prices``, ...)::

    platforms:
      small:  {backend: cloud, provider: openstack, cloud: labkit, flavor: labkit.small,
               image: labkit-debian-12, network: provider, key_filename: ~/.ssh/id_ed25519}
      medium: {backend: cloud, provider: openstack, cloud: labkit, flavor: labkit.medium, ...}

With a ``platform`` factor over such platforms the flavor is a factor of the design. A run's
``count`` instances are ``count`` servers, requested together (:meth:`CloudProvider.provision`)
and named ``<campaign prefix><8 hex>``, tagged with the prefix. In each server the run's
:class:`~labkit.core.instance.InstanceSpec` limits (vCPUs, memory, affinity) are applied by the ``ssh``
backend as on any remote host. Destroying an instance deletes its server; ``cleanup(prefix)``
(a campaign's start, ``labkit clean <campaign>``) is the provider's: servers whose name and tag
both carry the prefix, and nothing else.

Each instance carries ``run_metrics = {"provisioning_s": (seconds, "s")}``: its server's time
from the create request to the first successful SSH command, which the campaign stores as a
measurement of the run with the instance's index (one row per server). ``active_s``, the flavor,
image, server id, address, price per hour and the CPUs the server's system reports
(``guest_cpus``) go into the run's instance metadata (``instances[i]["cloud"]``).
"""

from __future__ import annotations

import logging

from ..core.instance import InstanceSpec
from ..errors import ConfigError
from .base import NAME_PREFIX, Backend, Instance, Wrapped, check_prefix, teardown
from .clouds import PROVIDERS, get_provider
from .clouds.base import CloudInstance
from .private_network import Network

log = logging.getLogger("labkit.backends.cloud")

#: the cloud backend's own options; any other option is the provider's (it refuses unknown ones)
OWN_OPTIONS = ("provider", "flavor", "image", "host_cpus", "enforce_limits", "connect_timeout")
#: seconds the ssh backend waits for a server's connect, banner and login: a small guest (QEMU TCG
#: on a loaded host here) may answer the first login, then take more than ssh's default 10 s
CONNECT_TIMEOUT = 60


class CloudBackend(Backend):
    name = "cloud"
    OPTIONS = OWN_OPTIONS

    def __init__(self, **options):
        own = {k: v for k, v in options.items() if k in OWN_OPTIONS}
        super().__init__(**own)
        for key in ("provider", "flavor", "image"):
            if not isinstance(own.get(key), str) or not own[key]:
                raise ConfigError(
                    f"cloud backend: option {key!r} is required (a name)"
                    + (f"; providers: {', '.join(PROVIDERS)}" if key == "provider" else "")
                )
        cpus = own.get("host_cpus")
        if cpus is not None and (
            isinstance(cpus, bool) or not isinstance(cpus, int) or not 1 <= cpus <= 4096
        ):
            raise ConfigError(f"cloud backend: 'host_cpus' must be an integer in [1, 4096], got {cpus!r}")
        if not isinstance(own.get("enforce_limits", True), bool):
            raise ConfigError("cloud backend: 'enforce_limits' must be true or false")
        timeout = own.get("connect_timeout", CONNECT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
            raise ConfigError(
                f"cloud backend: 'connect_timeout' must be seconds in (0, 600], got {timeout!r}"
            )
        self.connect_timeout = timeout
        self.flavor, self.image = own["flavor"], own["image"]
        self.enforce_limits = own.get("enforce_limits", True)
        self._cpus = cpus
        self.provider = get_provider(
            own["provider"], **{k: v for k, v in options.items() if k not in OWN_OPTIONS}
        )

    def check(self) -> None:
        self.provider.check()

    def host_cpus(self) -> int:
        """vCPUs of the flavor: option ``host_cpus``, else what the provider says of the flavor."""
        if self._cpus is None:
            self._cpus = self.provider.flavor_vcpus(self.flavor)
            if self._cpus is None:
                raise ConfigError(
                    f"cloud backend: the {self.provider.name} provider does not report the vCPUs of "
                    f"flavor {self.flavor!r}; give them as option 'host_cpus'"
                )
        return self._cpus

    def fingerprint(self) -> dict:
        return {"provider": self.provider.name, "flavor": self.flavor, "image": self.image}

    def provision(
        self, spec: InstanceSpec, *, prefix: str = NAME_PREFIX, network: Network | None = None
    ) -> list[Instance]:
        """``spec.count`` servers (requested together), each with one ``ssh``-backend instance of
        ``spec``'s limits; on any failure every server made is deleted and the error re-raised."""
        check_prefix(prefix)
        if network is not None:
            raise ConfigError(
                "the cloud backend has no private networks (servers are on the provider's "
                "network); use network: none"
            )
        servers = self.provider.provision(self.flavor, self.image, prefix, spec.count)
        made: list[Instance] = []
        try:
            for i, server in enumerate(servers):
                made.append(self._attach(server, spec, i, prefix))
        except BaseException:
            teardown(made)
            _quietly(lambda: self.provider.destroy(servers[len(made) :]), "deleting the servers")
            raise
        return made

    def _create(
        self,
        spec: InstanceSpec,
        name: str,
        index: int,
        cpus: list[int] | None,
        network: Network | None = None,
    ) -> Instance:
        """One server under ``name``'s prefix (the provider draws the name's 8 hex digits)."""
        self.refuse_network(network)
        prefix = name[:-8]
        [server] = self.provider.provision(self.flavor, self.image, prefix, 1)
        try:
            return self._attach(server, spec, index, prefix)
        except BaseException:
            _quietly(lambda: self.provider.destroy([server]), f"deleting server {server.name}")
            raise

    def _attach(self, server: CloudInstance, spec: InstanceSpec, index: int, prefix: str) -> Instance:
        ssh = server.ssh_backend(enforce_limits=self.enforce_limits, connect_timeout=self.connect_timeout)
        try:
            ssh.check()
            one = InstanceSpec(spec.vcpus, spec.memory_mb, spec.affinity, 1)
            [inner] = ssh.provision(one, prefix=prefix)
        except BaseException:
            ssh.close()
            raise
        return CloudServer(self, server, ssh, inner, spec, index, ssh.host_cpus())

    def cleanup(self, prefix: str) -> list[str]:
        """The provider's cleanup: servers whose name starts with ``prefix`` and whose tag is ``prefix``."""
        return self.provider.cleanup(prefix)

    def list_labkit(self, prefix: str = NAME_PREFIX) -> list[str]:
        return [s.name for s in self.provider.list_labkit(prefix)]

    def close(self) -> None:
        """The provider's close: the keypair it imported for the campaign is deleted."""
        self.provider.close()


class CloudServer(Wrapped):
    """An ``ssh``-backend instance in a cloud server; destroying it deletes the server."""

    def __init__(
        self,
        backend: CloudBackend,
        server: CloudInstance,
        ssh,
        inner: Instance,
        spec: InstanceSpec,
        index: int,
        guest_cpus: int | None = None,
    ):
        super().__init__(backend, server.name, inner, spec, index)
        self.server, self.ssh = server, ssh
        self.metadata["cloud"] = {
            "provider": server.provider,
            "flavor": server.flavor,
            "image": server.image,
            "server_id": server.id,
            "address": server.address,
            "provisioning_s": server.provisioning_s,
            "active_s": server.active_s,
            "price_per_hour": server.price_per_hour,
            "guest_cpus": guest_cpus,
        }
        self.metadata["instance"] = inner.metadata
        self.run_metrics = {"provisioning_s": (server.provisioning_s, "s")}

    def _destroy(self):
        """The ssh instance, its connection, then the server (each tried; the first error raised)."""
        first = None
        for step in (
            self.inner.destroy,
            self.ssh.close,
            lambda: self.backend.provider.delete(self.server.id),
        ):
            try:
                step()
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first


def _quietly(fn, doing: str) -> None:
    try:
        fn()
    except Exception as exc:  # the error that made us clean up is the one to report
        log.warning("cloud backend: %s failed: %s", doing, exc)
