"""A run's private network on libvirt: the isolated network, and each guest's address on it.

* :func:`create` starts a transient libvirt network (:func:`~.libvirt_xml.network_xml`:
  no ``<forward>``, DHCP and DNS off) on bridge ``network.device`` holding the host's
  address; :func:`remove` destroys it (and undefines it if someone made it persistent);
  :func:`names` lists those named ``prefix*`` (what ``cleanup(prefix)`` removes after a
  SIGKILL: networks, unlike AUTODESTROY domains, outlive the controller).
* :func:`nic` is instance ``i``'s NIC: a MAC derived from the network and ``i``, and the
  host-side tap ``<device>h<i>`` (named so that ``tc`` can shape it, as on lxd).
* :func:`configure_guest` runs in the booted guest through the agent: it finds the NIC by
  its MAC (the initrd's udev has loaded ``virtio_net``), names it ``eth0``, adds the
  instance's static address (no default route: the /24 only), brings it up, and writes
  ``/etc/hosts`` (``inst0``, ``inst1``, ..., ``host``) and a resolv.conf without server.
* With ``nics`` > 1 (NIC aggregation), :func:`create` also starts one address-less
  network per data bridge (``<name>-d<j>`` on ``Network.data_device(j)``), each guest gets
  one more NIC on each (tap ``<data device>h<i>``, shaped to the link's rate like the first),
  and :func:`configure_guest` bonds them (``bonding`` balance-rr from the image's modules,
  loaded with ``insmod``: the image has no modules.dep) into ``bond0`` holding the
  instance's data address. Host <-> guest traffic stays on ``eth0``.
* A link's delay is applied in the guest (:func:`delay_in_guest`: ``netem`` on the guest's
  ``eth0`` egress, from the image's ``sch_netem`` module) and its rate on the host-side tap
  (:func:`host_link`), so a delay works on a host kernel without netem (this machine's):
  between two guests the round trip is still two delays, as on the other backends.
"""

from __future__ import annotations

import shlex

import libvirt

from ...core import network_factors as netmod
from ...errors import BackendError, BackendUnavailable
from ..base import Instance
from ..private_network import Network
from . import agent
from .xml import Nic, guest_mac, network_xml

#: how long the guest may take to show its NIC (s)
NIC_WAIT_S = 30


def data_name(network: Network, j: int) -> str:
    """The libvirt network of bonded NIC ``j`` (1 - ``network.nics``)."""
    return f"{network.name}-d{j}"


def create(conn: libvirt.virConnect, network: Network) -> None:
    """Start ``network`` (a :class:`~labkit.backends.private_network.Network`) as a transient isolated
    libvirt network, with its data networks when it bonds NICs; BackendError with libvirt's
    message (and nothing left started)."""
    parts: list[tuple[str, str, str | None, str | None]] = [
        (network.name, network.device, network.host_address, network.subnet)
    ]
    parts += [
        (data_name(network, j), network.data_device(j), None, network.data_subnet)
        for j in _data_nics(network)
    ]
    made: list[str] = []
    for name, bridge, address, subnet in parts:
        try:
            conn.networkCreateXML(network_xml(name, bridge, address, network.prefixlen))
        except libvirt.libvirtError as exc:
            for done in reversed(made):
                remove(conn, done)
            raise BackendError(
                f"libvirt could not create network {name} (bridge {bridge}, {subnet}): {exc}"
            ) from exc
        made.append(name)


def remove_all(conn: libvirt.virConnect, network: Network) -> None:
    """Remove ``network``'s data networks, then the network itself; quiet for those gone."""
    for j in reversed(_data_nics(network)):
        remove(conn, data_name(network, j))
    remove(conn, network.name)


def _data_nics(network: Network) -> range:
    """1 - ``nics`` when the network bonds NICs, else nothing."""
    return range(1, network.nics + 1) if network.nics > 1 else range(0)


def remove(conn: libvirt.virConnect, name: str) -> None:
    """Destroy (and undefine, if persistent) libvirt network ``name``; quiet if it is gone."""
    try:
        net = conn.networkLookupByName(name)
        if net.isActive():
            net.destroy()
        if net.isPersistent():
            net.undefine()
    except libvirt.libvirtError as exc:
        if exc.get_error_code() not in (libvirt.VIR_ERR_NO_NETWORK, libvirt.VIR_ERR_OPERATION_INVALID):
            raise BackendError(f"removing libvirt network {name} failed: {exc}") from exc


def names(conn: libvirt.virConnect, prefix: str) -> list[str]:
    """Names of the libvirt networks (active or defined) starting with ``prefix``."""
    try:
        return sorted(n.name() for n in conn.listAllNetworks(0) if n.name().startswith(prefix))
    except libvirt.libvirtError as exc:
        raise BackendError(f"listing libvirt networks: {exc}") from exc


def nic(network: Network, index: int) -> Nic:
    """Instance ``index``'s NIC on ``network``."""
    return Nic(network.name, guest_mac(network.name, index), f"{network.device}h{index}")


def data_nics(network: Network, index: int) -> tuple[Nic, ...]:
    """Instance ``index``'s bonded NICs (none unless ``network.nics`` > 1), NIC ``j`` on data
    network ``j``; each tap is its bridge's name, ``h`` and the index (at most 15 characters)."""
    return tuple(
        Nic(
            data_name(network, j),
            guest_mac(data_name(network, j), index),
            f"{network.data_device(j)}h{index}",
        )
        for j in _data_nics(network)
    )


#: ``find_nic MAC``: sets ``dev`` to the name of the guest NIC with that MAC, waiting for it
_FIND_NIC = f"""
find_nic() {{
    dev=""; n=0
    while [ -z "$dev" ]; do
        for d in /sys/class/net/*; do [ "$(cat "$d/address" 2>/dev/null)" = "$1" ] && dev=${{d##*/}}; done
        [ -n "$dev" ] && break
        n=$((n + 1))
        if [ "$n" -gt {NIC_WAIT_S * 10} ]; then
            echo "no network interface with MAC $1 after {NIC_WAIT_S} s; loaded modules:" \\
                $(cut -d' ' -f1 /proc/modules) >&2
            exit 1
        fi
        sleep 0.1
    done
}}
"""

#: loads the image's tls and bonding modules (bonding needs tls on Debian's 6.1 kernel) unless
#: the kernel has them; exit 3 when the image carries none
_LOAD_BONDING = r"""
for path in net/tls/tls drivers/net/bonding/bonding; do
    m=${path##*/}
    [ -d /sys/module/$m ] && continue
    ko=$(ls /lib/modules/$(uname -r)/kernel/$path.ko* 2>/dev/null | head -n1)
    args=""; [ $m = bonding ] && args=max_bonds=0
    if [ -z "$ko" ] || ! insmod "$ko" $args; then
        echo "no loadable $m module for kernel $(uname -r)" >&2
        exit 3
    fi
done
"""


def guest_script(
    mac: str, address: str, prefixlen: int, bond: tuple[str, ...] = (), data_address: str | None = None
) -> str:
    """The ``sh`` script that gives the guest NIC with ``mac`` the name ``eth0`` and the address
    ``address/prefixlen``, up; with ``bond`` (MACs), also bonds those NICs into ``bond0``
    (balance-rr) holding ``data_address/prefixlen``. It fails naming the loaded modules if a
    NIC never shows, and exits 3 when the image has no bonding module."""
    mac, cidr = shlex.quote(mac), shlex.quote(f"{address}/{prefixlen}")
    script = (
        _FIND_NIC
        + f"""
find_nic {mac}
if [ "$dev" != eth0 ]; then ip link set dev "$dev" down && ip link set dev "$dev" name eth0 || exit 1; fi
ip addr add {cidr} dev eth0 && ip link set eth0 up || exit 1
printf '{netmod.NO_DNS}' > /etc/resolv.conf && chmod 644 /etc/hosts /etc/resolv.conf
"""
    )
    if not bond:
        return script
    data = shlex.quote(f"{data_address}/{prefixlen}")
    # a kernel that already had bonding may have made bond0 itself (max_bonds=1): set its mode then
    script += _LOAD_BONDING + (
        "ip link add bond0 type bond mode balance-rr miimon 100 2>/dev/null || "
        "ip link set bond0 type bond mode balance-rr miimon 100 || exit 1\n"
    )
    for j, m in enumerate(bond, 1):
        script += (
            f'find_nic {shlex.quote(m)}\nip link set dev "$dev" down && '
            f'ip link set dev "$dev" name data{j} && ip link set dev data{j} master bond0 || exit 1\n'
        )
    return script + f"ip link set bond0 up && ip addr add {data} dev bond0 || exit 1\n"


def configure_guest(inst: Instance, dom: libvirt.virDomain, network: Network) -> None:
    """Give booted instance ``inst`` (libvirt domain ``dom``) its address and names on ``network``,
    and bond its data NICs when the network has them (see the module doc); BackendUnavailable
    when the image cannot bond."""
    agent.write_file(dom, "/etc/hosts", network.hosts_text().encode())
    bond = tuple(n.mac for n in data_nics(network, inst.index))
    script = guest_script(
        guest_mac(network.name, inst.index),
        network.addresses[inst.index],
        network.prefixlen,
        bond,
        network.peer_addresses[inst.index],
    )
    _in_guest(
        inst,
        ["sh", "-c", script],
        f"network set-up (nics: {network.nics})",
        "NIC aggregation",
        timeout=NIC_WAIT_S * (1 + len(bond)) + 30,
    )


def _in_guest(inst: Instance, argv: list[str], what: str, feature: str, timeout: float) -> None:
    """Run ``argv`` in the guest: exit 3 (a module the image lacks) is BackendUnavailable saying
    to rebuild the image, which predates ``feature``; any other failure BackendError."""
    res = inst.exec(argv, check=False, timeout=timeout)
    if res.exit_code == 3:
        raise BackendUnavailable(
            f"libvirt {what}: {res.stderr.strip()}: the VM image predates {feature}; "
            "rebuild it: labkit images build --vm"
        )
    if not res.ok:
        raise BackendError(
            f"libvirt {what} in {inst.name} failed (exit {res.exit_code}): {res.stderr.strip()[:500]}"
        )


#: run in the guest as ``sh -c DELAY_SCRIPT sh <tc argv...>``: the netem ``tc`` command, after
#: loading the image's sch_netem module where the kernel lacks it (no modules.dep there: insmod)
DELAY_SCRIPT = r"""
"$@" 2>/dev/null && exit 0
ko=$(ls /lib/modules/$(uname -r)/kernel/net/sched/sch_netem.ko* 2>/dev/null | head -n1)
if [ -z "$ko" ] || ! insmod "$ko"; then
    echo "no loadable sch_netem module for kernel $(uname -r)" >&2
    exit 3
fi
"$@"
"""


def host_link(link: netmod.Link | None) -> netmod.Link | None:
    """What the host-side tap carries of ``link``: its rate only (the delay is in the guest)."""
    return None if link is None or link.rate_bit is None else netmod.Link(link.rate_bit, 0.0)


def shape_data_nics(inst: Instance, network: Network) -> bool:
    """Shape the host-side taps of ``inst``'s bonded NICs to the link's rate (each NIC carries
    the class's rate: k NICs, k times the capacity) and record them; whether it has any."""
    devices = [n.device for n in data_nics(network, inst.index)]
    for device in devices:
        netmod.shape(device, host_link(network.link))
    if devices:
        inst.metadata["network"]["data_devices"] = devices
    return bool(devices)


def delay_in_guest(inst: Instance, link: netmod.Link | None, bonded: bool = False) -> None:
    """Delay ``inst``'s egress on eth0 (and on bond0 when ``bonded``) by ``link.delay_s``
    (nothing without a delay), with the same netem command as a host-side delay;
    BackendUnavailable when the VM image carries no netem module (built before labkit delays)."""
    if link is None or link.delay_s <= 0:
        return
    for device in ("eth0", "bond0") if bonded else ("eth0",):
        _delay(inst, device, link.delay_s)


def _delay(inst: Instance, device: str, delay_s: float) -> None:
    (tc,) = netmod.shape_commands(device, netmod.Link(None, delay_s))
    _in_guest(
        inst, ["sh", "-c", DELAY_SCRIPT, "sh", *tc], f"link delay on {device}", "link delays", timeout=60
    )
