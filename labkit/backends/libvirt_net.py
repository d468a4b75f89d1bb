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
* A link's delay is applied in the guest (:func:`delay_in_guest`: ``netem`` on the guest's
  ``eth0`` egress, from the image's ``sch_netem`` module) and its rate on the host-side tap
  (:func:`host_link`), so a delay works on a host kernel without netem (this machine's):
  between two guests the round trip is still two delays, as on the other backends.
"""
from __future__ import annotations

import shlex

import libvirt

from .. import network as netmod
from ..errors import BackendError, BackendUnavailable
from . import libvirt_agent as agent
from .libvirt_xml import Nic, guest_mac, network_xml

#: how long the guest may take to show its NIC (s)
NIC_WAIT_S = 30


def create(conn, network) -> None:
    """Start ``network`` (a :class:`~labkit.backends.base.Network`) as a transient isolated
    libvirt network; BackendError with libvirt's message."""
    xml = network_xml(network.name, network.device, network.host_address, network.prefixlen)
    try:
        conn.networkCreateXML(xml)
    except libvirt.libvirtError as exc:
        raise BackendError(f"libvirt could not create network {network.name} "
                           f"(bridge {network.device}, {network.subnet}): {exc}") from exc


def remove(conn, name: str) -> None:
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


def names(conn, prefix: str) -> list[str]:
    """Names of the libvirt networks (active or defined) starting with ``prefix``."""
    try:
        return sorted(n.name() for n in conn.listAllNetworks(0) if n.name().startswith(prefix))
    except libvirt.libvirtError as exc:
        raise BackendError(f"listing libvirt networks: {exc}") from exc


def nic(network, index: int) -> Nic:
    """Instance ``index``'s NIC on ``network``."""
    return Nic(network.name, guest_mac(network.name, index), f"{network.device}h{index}")


def guest_script(mac: str, address: str, prefixlen: int) -> str:
    """The ``sh`` script that gives the guest NIC with ``mac`` the name ``eth0`` and the address
    ``address/prefixlen``, up; it fails naming the loaded modules if the NIC never shows."""
    mac, cidr = shlex.quote(mac), shlex.quote(f"{address}/{prefixlen}")
    return f"""
dev=""; n=0
while [ -z "$dev" ]; do
    for d in /sys/class/net/*; do [ "$(cat "$d/address" 2>/dev/null)" = {mac} ] && dev=${{d##*/}}; done
    [ -n "$dev" ] && break
    n=$((n + 1))
    if [ "$n" -gt {NIC_WAIT_S * 10} ]; then
        echo "no network interface with MAC {mac} after {NIC_WAIT_S} s; loaded modules:" \
            $(cut -d' ' -f1 /proc/modules) >&2
        exit 1
    fi
    sleep 0.1
done
if [ "$dev" != eth0 ]; then ip link set dev "$dev" down && ip link set dev "$dev" name eth0 || exit 1; fi
ip addr add {cidr} dev eth0 && ip link set eth0 up || exit 1
printf '{netmod.NO_DNS}' > /etc/resolv.conf && chmod 644 /etc/hosts /etc/resolv.conf
"""


def configure_guest(inst, network) -> None:
    """Give booted instance ``inst`` its address and names on ``network`` (see the module doc)."""
    agent.write_file(inst.dom, "/etc/hosts", network.hosts_text().encode())
    inst.exec(["sh", "-c", guest_script(guest_mac(network.name, inst.index),
                                        network.addresses[inst.index], network.prefixlen)],
              timeout=NIC_WAIT_S + 30)


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


def host_link(link):
    """What the host-side tap carries of ``link``: its rate only (the delay is in the guest)."""
    return None if link is None or link.rate_bit is None else netmod.Link(link.rate_bit, 0.0)


def delay_in_guest(inst, link) -> None:
    """Delay ``inst``'s egress on eth0 by ``link.delay_s`` (nothing without a delay), with the
    same netem command as a host-side delay; BackendUnavailable when the VM image carries no
    netem module (built before labkit delays)."""
    if link is None or link.delay_s <= 0:
        return
    (tc,) = netmod.shape_commands("eth0", netmod.Link(None, link.delay_s))
    res = inst.exec(["sh", "-c", DELAY_SCRIPT, "sh", *tc], check=False, timeout=60)
    if res.exit_code == 3:
        raise BackendUnavailable(f"libvirt link delay: {res.stderr.strip()}: the VM image predates link "
                                 "delays; rebuild it: labkit images build --vm")
    if not res.ok:
        raise BackendError(f"libvirt link delay in {inst.name} failed (exit {res.exit_code}): "
                           f"{res.stderr.strip()[:300]}")
