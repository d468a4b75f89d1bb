"""A run's private network as the backends share it: :class:`Network` (the addresses of the
run's instances and of the host, the bridge, the link shaping and bonded NICs) that
:meth:`Backend.create_network <labkit.backends.base.Backend.create_network>` makes and each
backend realises, :func:`join_network` (an instance joins it) and :func:`remove_bridges`
(clean-up of the host bridges of a campaign's networks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core import network_factors as netmod
from ..errors import BackendError, ConfigError

if TYPE_CHECKING:
    from .base import Backend, Instance


@dataclass
class Network:
    """A run's private network: instance ``i`` is ``inst<i>`` at ``addresses[i]``, the host
    is ``host`` at ``host_address`` on bridge ``device``; ``link`` shapes each instance's link.

    With ``nics`` > 1 each instance also has ``nics`` bonded NICs, NIC ``j`` (1-based) on
    bridge :meth:`data_device` ``(j)``, holding ``data_addresses[i]`` on ``data_subnet``
    (no host address there): instances reach each other at :attr:`peer_addresses`."""

    name: str
    subnet: str
    host_address: str
    addresses: list[str]
    device: str
    backend: Backend
    link: netmod.Link | None = None
    removed: bool = False
    nics: int = 1
    data_subnet: str | None = None
    data_addresses: list[str] = field(default_factory=list)
    conntrack_exempt: bool = False  # its bridge's traffic is not tracked (core.network.create_bridge)

    @property
    def prefixlen(self) -> int:
        return int(self.subnet.split("/")[1])

    @property
    def peer_addresses(self) -> list[str]:
        """The address of each instance that the other instances use (the data one when bonded)."""
        return self.data_addresses or self.addresses

    @property
    def peer_subnet(self) -> str:
        """The subnet traffic between instances crosses (the data subnet when bonded)."""
        return self.data_subnet or self.subnet

    def data_device(self, j: int) -> str:
        """The bridge of bonded NIC ``j`` (1 - ``nics``): the network's bridge name and ``j``."""
        if not 1 <= j <= self.nics:
            raise ConfigError(f"network {self.name} has data NICs 1-{self.nics}, not {j}")
        return f"{self.device}{j}"

    def names(self) -> dict[str, str]:
        """Host name -> address for every member: ``inst0``, ``inst1``, ... (at their
        :attr:`peer_addresses`), ``host``."""
        return {**{f"inst{i}": a for i, a in enumerate(self.peer_addresses)}, "host": self.host_address}

    def hosts_text(self) -> str:
        """The ``/etc/hosts`` its instances get."""
        return netmod.hosts_text(self.names())

    def metadata(self) -> dict:
        """What a run records: name, subnet, host address, bridge and link."""
        aggregation = {} if self.nics == 1 else {"data_subnet": self.data_subnet, "bonding": "balance-rr"}
        return {
            "mode": "private",
            "name": self.name,
            "subnet": self.subnet,
            "host_address": self.host_address,
            "device": self.device,
            "link": None if self.link is None else self.link.as_dict(),
            "nics": self.nics,
            "conntrack_exempt": self.conntrack_exempt,
            **aggregation,
        }

    def remove(self) -> None:
        """Remove the network (after its instances); safe to call twice."""
        if not self.removed:
            self.removed = True
            self.backend.remove_network(self)


def join_network(inst: Instance, network: Network, host_link: netmod.Link | None) -> None:
    """Record that ``inst`` (connected by its backend, ``inst.host_device`` set) is ``inst<index>``
    on ``network`` and shape its host-side device to ``host_link`` (the network's link, or what
    of it the backend applies on the host; see :func:`labkit.core.network_factors.shape`). BackendError when
    there is a link to shape but no host-side device (a network labkit did not create)."""
    if inst.host_device is None and host_link is not None:
        raise BackendError(
            f"instance {inst.name} has no host-side device on network {network.name}, "
            "so its link cannot be shaped"
        )
    inst.network, inst.address = network, network.addresses[inst.index]
    inst.peer_address = network.peer_addresses[inst.index]
    if inst.host_device is not None:
        netmod.shape(inst.host_device, host_link)
    inst.metadata["network"] = {
        "name": network.name,
        "host": f"inst{inst.index}",
        "address": inst.address,
        "host_device": inst.host_device,
    }
    if network.nics > 1:
        inst.metadata["network"]["data_address"] = inst.peer_address


def remove_bridges(prefix: str) -> list[str]:
    """Delete the host bridges (and their rules) of networks named ``prefix*``; return those names."""
    from .base import check_prefix

    nets = netmod.bridges(check_prefix(prefix))
    for alias, device in nets.items():
        netmod.delete_bridge(device, alias)
    netmod.drop_rules(prefix)
    return sorted(nets)
