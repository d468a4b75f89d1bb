"""The ``ssh-hosts`` backend: one run's instances on several SSH hosts, on the hosts' own network.

Instance ``i`` of a run is an ``ssh`` backend instance (a cgroup and a private work dir) on host
``i mod n`` of the ``hosts`` option, so a run can span machines: an MPI ping-pong with rank 0 on one
host and rank 1 on another (seed 003). ``network: private`` here means the hosts' own addresses (no
network is created or removed): instance ``i`` is at its host's address, and this machine, where
``mpirun`` runs and reaches each host's instance through ``ssh`` (the instance's
``host_command``: the host's key and port), is the host end. The subnet is the one this machine
reaches the hosts on (all hosts must be on it: MPI's traffic is held to it). Link shaping needs a
network labkit made, so ``link`` is refused.

>>> be = get_backend("ssh-hosts", hosts=[{"host": "10.0.0.11", "key_filename": "~/.ssh/k"},
...                                      {"host": "10.0.0.12", "key_filename": "~/.ssh/k"}])
"""

from __future__ import annotations

import ipaddress
import json

from ..core.host_commands import run_host
from ..core.instance import InstanceSpec
from ..errors import ConfigError
from .base import Backend, new_name
from .lookup import backend_class
from .private_network import Network

HOST_KEYS = ("host", "port", "user", "key_filename", "host_key_policy", "known_hosts")
#: options every member gets unless its own mapping says otherwise
COMMON = ("connect_timeout", "enforce_limits", "host_key_policy", "known_hosts")
MAX_HOSTS = 64


def _route(address: str) -> tuple[str, ipaddress.IPv4Interface]:
    """(device, its address with prefix) this machine uses to reach ``address``."""

    def ip(*args):
        res = run_host(
            ["ip", "-j", *args], what=f"ssh-hosts: finding the route to {address}", timeout=10, check=False
        )
        if res.returncode != 0:
            raise ConfigError(f"ssh-hosts: no route from this machine to {address}: {res.stderr.strip()}")
        return json.loads(res.stdout or "[]")

    route = ip("route", "get", address)[0]
    dev, src = route.get("dev"), route.get("prefsrc")
    for link in ip("-4", "addr", "show", "dev", dev):
        for a in link.get("addr_info", []):
            if a.get("local") == src:
                return dev, ipaddress.IPv4Interface(f"{src}/{a['prefixlen']}")
    raise ConfigError(f"ssh-hosts: cannot find this machine's address {src} on {dev} (route to {address})")


class SshHostsBackend(Backend):
    """Instances spread over the SSH hosts of option ``hosts`` (mappings with ``host``, ``port``,
    ``user``, ``key_filename``, ``host_key_policy``, ``known_hosts``); ``connect_timeout``,
    ``enforce_limits``, ``host_key_policy`` and ``known_hosts`` as for ``ssh`` (a host's own
    mapping wins)."""

    name = "ssh-hosts"
    OPTIONS = ("hosts", *COMMON)

    def __init__(self, **options):
        super().__init__(**options)
        hosts = options.get("hosts")
        if not isinstance(hosts, list) or not 1 <= len(hosts) <= MAX_HOSTS:
            raise ConfigError(
                f"ssh-hosts option hosts: a list of 1-{MAX_HOSTS} mappings with keys {', '.join(HOST_KEYS)}"
            )
        common = {k: options[k] for k in COMMON if k in options}
        ssh = backend_class("ssh")  # through the registry: a backend never imports another
        self.members: list = []
        for i, h in enumerate(hosts):
            if not isinstance(h, dict) or not h.get("host") or set(h) - set(HOST_KEYS):
                raise ConfigError(
                    f"ssh-hosts option hosts[{i}]: a mapping with 'host' and optionally "
                    f"{', '.join(HOST_KEYS[1:])}, got {str(h)[:120]!r}"
                )
            self.members.append(ssh(**{**common, **h}))

    def member(self, index: int):
        return self.members[index % len(self.members)]

    def check(self) -> None:
        for m in self.members:
            m.check()

    def host_cpus(self) -> int:
        return min(m.host_cpus() for m in self.members)

    def fingerprint(self) -> dict:
        return {"backend": self.name, "hosts": [m.fingerprint() for m in self.members]}

    def _create(self, spec: InstanceSpec, name: str, index: int, cpus, network: Network | None = None):
        return self.member(index).create_one(spec, name, index, cpus)

    def create_network(self, prefix: str = "labkit-", count: int = 1, link=None, nics: int = 1) -> Network:
        """The hosts' own network for ``count`` instances (one per host; nothing is created)."""
        if nics != 1:
            raise ConfigError(
                f"ssh-hosts: nics: {nics}: the hosts' own NICs are what they are; labkit "
                "aggregates NICs only on networks it creates (drop the 'nics' factor)"
            )
        if link is not None:
            raise ConfigError(
                "ssh-hosts: link shaping needs a network labkit creates; the hosts' own "
                "network cannot be shaped (drop the 'link' factor)"
            )
        if not 1 <= count <= len(self.members):
            raise ConfigError(
                f"ssh-hosts: a run on the hosts' network has one instance per host: "
                f"1-{len(self.members)}, not {count}"
            )
        addresses = [m.host for m in self.members[:count]]
        try:
            parsed = [ipaddress.IPv4Address(a) for a in addresses]
        except ValueError as exc:
            raise ConfigError(
                f"ssh-hosts: MPI across hosts needs their IPv4 addresses as 'host' ({exc})"
            ) from None
        dev, iface = _route(addresses[0])
        outside = [str(a) for a in parsed if a not in iface.network]
        if outside:
            raise ConfigError(
                f"ssh-hosts: host(s) {', '.join(outside)} are not on {iface.network}, the "
                f"subnet this machine reaches {addresses[0]} on; MPI's traffic is held to one subnet"
            )
        return Network(
            name=new_name(prefix + "net"),
            subnet=str(iface.network),
            host_address=str(iface.ip),
            addresses=addresses,
            device=dev,
            backend=self,
        )

    def _remove_network(self, network: Network) -> None:
        """Nothing to remove: the hosts' network is theirs."""

    def list_labkit(self, prefix: str = "labkit-") -> list[str]:
        return sorted({n for m in self.members for n in m.list_labkit(prefix)})

    def cleanup(self, prefix: str) -> list[str]:
        return sorted({n for m in self.members for n in m.cleanup(prefix)})

    def close(self) -> None:
        for m in self.members:
            m.close()
