"""A run's private network on an ``ssh`` host, as the shell scripts the backend runs there
(through its control shell, :mod:`.ssh_control`; every value is quoted with :func:`shlex.quote`).

What ``local`` does on this machine (:mod:`labkit.backends.local`), done on the remote host:

* the network is a bridge ``network.device`` (``lk<8 hex>``, its ``ifalias`` the network's
  name, how ``cleanup(prefix)`` finds it again: :data:`.native.NETDEVS` in the listing,
  :data:`BRIDGES`) holding ``network.host_address``, with no uplink: nothing routes outside
  it. Where bridged traffic crosses iptables (``br_netfilter``) one FORWARD rule (comment
  ``labkit:<name>``) accepts traffic between its own ports;
* each instance runs natively on the host, but in a network namespace of its own (named after
  the instance, ``/run/netns/<name>``) with only loopback and ``eth0``: one end of a veth pair
  whose host end (``<device>h<i>``) is a port of the bridge, shaped there with ``tc`` to the
  network's link; its ``/etc/hosts`` is its own file (``<work dir>/hosts``) bind-mounted in a
  private mount namespace, so ``inst0``, ``inst1`` and ``host`` resolve;
* every command of the instance enters both namespaces (:func:`enter_argv`: ``nsenter`` then
  ``unshare``, each an ``exec``, so the command keeps the pid its session was started with);
* removing the instance deletes its namespace (and with it the veth pair), removing the
  network deletes the FORWARD rule and then the bridge; ``cleanup(prefix)`` does both for
  whatever a killed campaign left.

It needs root on the host and ``ip``, ``nsenter``, ``unshare`` (and ``tc`` for a shaped link):
:func:`missing` names what is not there.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable

from ..core import network_factors as netmod
from ..errors import BackendError
from .private_network import Network

q = shlex.quote

#: the tools every private network needs on the host, and the one a shaped link needs
TOOLS = ("ip", "nsenter", "unshare")
SHAPING_TOOL = "tc"
#: the exit status of a script that found the host unable to do it (sysexits' EX_UNAVAILABLE):
#: the backend raises BackendUnavailable for it
UNAVAILABLE = 69
#: run argv with the instance's hosts file ($0) on /etc/hosts (in a private mount namespace)
HOSTS = 'mount --bind "$0" /etc/hosts && exec "$@"'
#: prints the host's bridges as JSON (``ip -j -d link show type bridge``): run by ``cleanup`` only when the
#: listing found a device named like a bridge (:data:`.native.NETDEVS`)
BRIDGES = "ip -j -d link show type bridge\n"


def missing(tools: Iterable[str], uid: str, link: netmod.Link | None) -> list[str]:
    """What the host lacks for a private network: ``root`` and the tools (from the probe's
    ``tools``), ``tc`` only when ``link`` shapes the link."""
    need = [*TOOLS, *([SHAPING_TOOL] if link is not None else [])]
    have = set(tools)
    return (["root"] if uid != "0" else []) + [t for t in need if t not in have]


def bridge_script(network: Network) -> str:
    """Create the network's bridge (alias, host address, up) and, where bridged traffic crosses
    iptables, its FORWARD rule; on any failure the bridge is deleted again."""
    dev, alias = q(network.device), q(network.name)
    address = q(f"{network.host_address}/{network.prefixlen}")
    rule = " ".join(q(w) for w in forward_rule(network.device, network.name))
    return (
        f"ip link add {dev} type bridge || exit 1\n"
        f"{{ ip link set {dev} alias {alias} && ip addr add {address} dev {dev} && ip link set {dev} up "
        f'&& {{ [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null)" != 1 ] '
        f"|| ! command -v iptables >/dev/null 2>&1 || iptables -I FORWARD {rule}; }}; }} "
        f"|| {{ ip link delete {dev} type bridge; exit 1; }}\n"
    )


def forward_rule(device: str, alias: str) -> list[str]:
    """The FORWARD rule (after the chain's name) that accepts traffic between the bridge's ports."""
    return ["-i", device, "-o", device, "-m", "comment", "--comment", f"labkit:{alias}", "-j", "ACCEPT"]


def remove_bridge_script(device: str, alias: str) -> str:
    """Delete the bridge's FORWARD rule(s) (quiet without iptables or a rule), then the bridge
    (quiet if it is gone)."""
    rule = " ".join(q(w) for w in forward_rule(device, alias))
    return (
        f"if command -v iptables >/dev/null 2>&1; then while iptables -D FORWARD {rule} 2>/dev/null; "
        f"do :; done; fi\n"
        f"if ip link show {q(device)} >/dev/null 2>&1; then ip link delete {q(device)} type bridge || exit 1; fi\n"
    )


def host_device(network: Network, index: int) -> str:
    """The host end of instance ``index``'s veth pair (a port of the bridge): ``<device>h<i>``."""
    return f"{network.device}h{index}"


def attach_script(name: str, network: Network, index: int, hosts_path: str) -> str:
    """Give instance ``name`` (its work dir made) its network namespace on ``network``: loopback
    up, ``eth0`` at its address (no route beyond the network's /24), the veth's host end on the
    bridge and shaped to the network's link, and its hosts file at ``hosts_path``."""
    ns, inside, outside = q(name), q(f"{network.device}c{index}"), q(host_device(network, index))
    address = q(f"{network.addresses[index]}/{network.prefixlen}")
    lines = [
        f"ip netns add {ns}",
        f"ip -n {ns} link set lo up",
        f"ip link add {outside} type veth peer name {inside} netns {ns}",
        f"ip -n {ns} link set {inside} name eth0",
        f"ip -n {ns} addr add {address} dev eth0",
        f"ip -n {ns} link set eth0 up",
        f"ip link set {outside} master {q(network.device)} up",
        f"printf %s {q(network.hosts_text())} > {q(hosts_path)}",
        f"chmod 644 {q(hosts_path)}",
    ]
    script = "".join(f"{line} || exit 1\n" for line in lines)
    for argv in netmod.shape_commands(host_device(network, index), network.link) if network.link else []:
        if "netem" in argv:  # the one qdisc a kernel may lack: the host cannot delay a link
            script += (
                f"{shlex.join(argv)} || {{ echo 'tc could not add a netem qdisc (above): this kernel "
                "may have no netem (CONFIG_NET_SCH_NETEM), so a link delay cannot be emulated there; "
                f"use a rate-only link such as 1gbit/ or load sch_netem' >&2; exit {UNAVAILABLE}; }}\n"
            )
        else:
            script += f"{shlex.join(argv)} || exit 1\n"
    return script


def remove_netns_script(name: str) -> str:
    """Delete instance ``name``'s network namespace (and so its veth pair); quiet if it has none."""
    path = q(f"/run/netns/{name}")
    return f"if [ -e {path} ]; then ip netns delete {q(name)} || exit 1; fi\n"


def enter_argv(name: str, hosts_path: str) -> list[str]:
    """The argv prefix that runs a command in instance ``name``'s network namespace with its hosts
    file on ``/etc/hosts``: ``nsenter`` (not ``ip netns exec``, which remounts ``/sys`` and would
    hide the cgroup files), then ``unshare`` of a private mount namespace for the bind mount."""
    return [
        "nsenter",
        f"--net=/run/netns/{name}",
        "--",
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        HOSTS,
        hosts_path,
    ]


def parse_bridges(text: str, prefix: str) -> dict[str, str]:
    """The bridges of networks named ``prefix*`` in ``text``, the JSON :data:`BRIDGES` printed:
    alias -> device. BackendError for text that is not JSON."""
    try:
        links = json.loads(text or "[]")
    except ValueError as exc:
        raise BackendError(f"ip -j link printed no JSON ({exc}): {text[:200]!r}") from None
    return netmod.bridges_in(links, prefix)
