"""Run-level networks and link shaping: what a ``network`` and a ``link`` factor mean.

``network`` levels (docs/design.md, "Networks"):

* ``none`` (the default): instances are isolated, loopback only.
* ``private``: the backend creates a network for the run (a bridge + veth pairs
  on ``local``, a Docker ``internal`` network, an LXD bridge without NAT, DHCP,
  DNS or routing, a libvirt network without ``<forward>``), connects every
  instance and the host to it, and removes it at teardown. Instance ``i`` is
  named ``inst<i>`` (resolvable inside every instance through ``/etc/hosts``),
  the host end is ``host``. Nothing routes outside it: instances get only the
  network's own /24 (no default route), so any other address is unreachable.

``nics`` levels (1 by default) aggregate links: with ``nics: k`` > 1 each instance also
gets ``k`` NICs, NIC ``j`` on the run's ``j``-th extra bridge ("k parallel switches"),
bonded (Linux ``bonding``, balance-rr) into one interface on a second /24, the *data*
subnet. Instances reach each other on the data subnet (``inst<i>`` in ``/etc/hosts``), so
traffic between them spreads over all ``k`` links, each shaped to the ``link`` level: the
thesis's "NIC aggregation". The host keeps the first network only (host <-> instance
traffic is one link). A backend offers it when it can bond inside an instance
(``Backend.MAX_NICS``; libvirt, whose guest kernel has ``bonding``); others refuse k > 1.

``link`` levels shape the traffic *into* each instance (``tc`` on the host side
of its interface: ``netem`` for the delay, a ``tbf`` child for the rate), so
between two instances the round trip is ``2 x delay`` and a stream is capped at
``rate``. Traffic the instances send to the host is not shaped. A level is a
named class (:data:`LINK_CLASSES`), ``none``, a text ``"<rate>/<delay>"``
(``"1gbit/50us"``; either part may be left empty: ``"/2ms"``), or, from Python,
a mapping ``{"rate": "1gbit", "delay": "50us"}``.

Subnets are /24s of 10.200.0.0/13 picked from the network's name, skipping
any that overlaps a route of this host.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import BackendError, BackendUnavailable, ConfigError
from . import host_commands

NETWORK_MODES = ("none", "private")
#: most NICs an instance can bond (``nics`` factor)
MAX_NICS = 8
#: bounds of a shaped link
MIN_RATE_BIT, MAX_RATE_BIT = 8_000, 100e9
MAX_DELAY_S = 10.0

_RATE_UNITS = {
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
    "bps": 8,
    "kbps": 8e3,
    "mbps": 8e6,
    "gbps": 8e9,
}
_DELAY_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]+)\s*$")


@dataclass(frozen=True)
class Link:
    """A shaped link: ``rate_bit`` (bit/s, None = unlimited) and one-way ``delay_s`` (s)."""

    rate_bit: float | None = None
    delay_s: float = 0.0

    def as_dict(self) -> dict:
        """``{"rate_bit_per_s": ..., "delay_s": ...}``: recorded in each run's metadata."""
        return {"rate_bit_per_s": self.rate_bit, "delay_s": self.delay_s}


#: named interconnect classes (seed 003's: Gigabit and 10 Gigabit Ethernet, a slow WAN-like link)
LINK_CLASSES = {
    "gbe": Link(1e9, 50e-6),
    "gbe-rate": Link(1e9, 0.0),
    "10gbe-rate": Link(10e9, 0.0),
    "10gbe": Link(10e9, 10e-6),
    "fast-ethernet": Link(100e6, 100e-6),
    "wan": Link(100e6, 10e-3),
}


def parse_rate(where: str, text: object) -> float:
    """Bit/s of a tc-style rate (``1gbit``, ``200mbit``, ``10mbps`` = bytes), within the bounds."""
    m = _RATE_RE.match(str(text).lower())
    if not m or m.group(2) not in _RATE_UNITS:
        raise ConfigError(
            f"{where}: rate {text!r} is not a number followed by one of {', '.join(_RATE_UNITS)} (e.g. 1gbit)"
        )
    value = float(m.group(1)) * _RATE_UNITS[m.group(2)]
    if not MIN_RATE_BIT <= value <= MAX_RATE_BIT:
        raise ConfigError(f"{where}: rate {text!r} outside {MIN_RATE_BIT:.0f} bit/s - 100gbit")
    return value


def parse_delay(where: str, text: object) -> float:
    """Seconds of a delay (``50us``, ``2ms``, ``0.1s``), within 0 - 10 s."""
    m = _RATE_RE.match(str(text).lower())
    if not m or m.group(2) not in _DELAY_UNITS:
        raise ConfigError(f"{where}: delay {text!r} is not a number followed by us, ms or s (e.g. 50us)")
    value = float(m.group(1)) * _DELAY_UNITS[m.group(2)]
    if value > MAX_DELAY_S:
        raise ConfigError(f"{where}: delay {text!r} above {MAX_DELAY_S:.0f} s")
    return value


def parse_link(level: object, where: str = "link") -> Link | None:
    """The :class:`Link` a ``link`` level means (None for ``none``); ConfigError naming ``where``."""
    if level is None or level == "none":
        return None
    if isinstance(level, Link):
        return level
    if isinstance(level, str) and level in LINK_CLASSES:
        return LINK_CLASSES[level]
    if isinstance(level, str) and "/" in level:
        rate_text, _, delay_text = level.partition("/")
        level = {k: v for k, v in (("rate", rate_text.strip()), ("delay", delay_text.strip())) if v}
    if not isinstance(level, dict) or not level or set(level) - {"rate", "delay"}:
        raise ConfigError(
            f"{where}: {str(level)[:80]!r} is not a link; use none, a class "
            f"({', '.join(LINK_CLASSES)}), '<rate>/<delay>' such as '1gbit/50us', "
            "or {rate: ..., delay: ...}"
        )
    rate = parse_rate(where, level["rate"]) if "rate" in level else None
    delay = parse_delay(where, level["delay"]) if "delay" in level else 0.0
    return Link(rate, delay)


def check_mode(level: object, where: str = "network") -> str:
    """``level`` if it is one of :data:`NETWORK_MODES`; ConfigError naming ``where``."""
    if not isinstance(level, str) or level not in NETWORK_MODES:
        raise ConfigError(
            f"{where}: {str(level)[:80]!r} is not a network; use one of {', '.join(NETWORK_MODES)}"
        )
    return level


def check_nics(level: object, where: str = "nics") -> int:
    """The number of bonded NICs a ``nics`` level means (1 - :data:`MAX_NICS`); ConfigError naming ``where``."""
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= MAX_NICS:
        raise ConfigError(
            f"{where}: {str(level)[:80]!r} is not a number of NICs; use a whole number "
            f"from 1 (no aggregation) to {MAX_NICS}"
        )
    return level


def check_factor(name: str, levels: Sequence, where: str) -> None:
    """Validate the levels of a ``network``, ``link`` or ``nics`` design factor (ConfigError naming ``where``)."""
    for v in levels:
        if name == "network":
            check_mode(v, f"{where}: factor 'network' level")
        elif name == "nics":
            check_nics(v, f"{where}: factor 'nics' level")
        else:
            parse_link(v, f"{where}: factor 'link' level {str(v)[:60]!r}")


# -- tc ------------------------------------------------------------------------------
def _tc_rate(bit: float) -> str:
    return f"{int(round(bit))}bit"


def shape_commands(device: str, link: Link) -> list[list[str]]:
    """``tc`` argv lists that shape ``device``'s egress to ``link``: with a delay, a netem root
    and a tbf child (the rate); without one, a tbf root only (no netem needed). The tbf burst
    holds 2 ms at the rate (at least 64 KiB, so a GSO packet fits) and its queue 50 ms."""
    cmds = []
    parent = ["root", "handle", "1:"]
    if link.delay_s > 0:
        cmds.append(
            [
                "tc",
                "qdisc",
                "replace",
                "dev",
                device,
                "root",
                "handle",
                "1:",
                "netem",
                "delay",
                f"{link.delay_s * 1e6:.0f}us",
                "limit",
                "100000",
            ]
        )
        parent = ["parent", "1:1", "handle", "10:"]
    if link.rate_bit is not None:
        burst = max(65536, int(link.rate_bit / 8 * 0.002))
        cmds.append(
            [
                "tc",
                "qdisc",
                "replace",
                "dev",
                device,
                *parent,
                "tbf",
                "rate",
                _tc_rate(link.rate_bit),
                "burst",
                str(burst),
                "latency",
                "50ms",
            ]
        )
    return cmds


def host_output(argv: list[str], what: str | None = None, timeout: float = 30) -> str:
    """The stdout of a short host command (``ip``, ``tc``, ``iptables``) run by
    :func:`labkit.core.host_commands.run_host`: BackendError naming it with its stderr's end."""
    return host_commands.run_host(argv, what=what or f"running {argv[0]}", timeout=timeout).stdout


def shape(device: str, link: Link | None) -> None:
    """Apply ``link`` to ``device`` on this host (nothing for None)."""
    if link is None:
        return
    for argv in shape_commands(device, link):
        try:
            host_output(argv)
        except BackendError as exc:
            if "netem" in argv and "unknown" in str(exc).lower():
                raise BackendUnavailable(
                    "this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), so a link delay cannot "
                    "be emulated here; use a rate-only link such as '1gbit/' or load sch_netem"
                ) from exc
            raise


def host_links() -> list[dict]:
    """``ip -j -d link show`` of this host: one dict per interface (ifname, ifindex, ifalias...)."""
    return json.loads(host_output(["ip", "-j", "-d", "link", "show"]) or "[]")


def device_by_index(ifindex: int) -> str:
    """The name of this host's interface ``ifindex`` (BackendError if none)."""
    for link in host_links():
        if link.get("ifindex") == ifindex:
            return link["ifname"]
    raise BackendError(f"no interface with index {ifindex} on this host")


# -- host bridges (local and lxd) ------------------------------------------------------
def create_bridge(device: str, alias: str, address: str) -> bool:
    """Bridge ``device`` on this host, ``ifalias`` = ``alias`` (how :func:`bridges` finds it),
    holding ``address`` (``a.b.c.d/len``), up; no uplink port. Removed again on failure.
    Returns whether its traffic is exempt from connection tracking (below).

    Where bridged traffic goes through iptables (``br_netfilter``, as Docker sets it up,
    with a FORWARD policy of DROP) one rule accepts traffic between the bridge's own ports
    (``-i device -o device``, comment ``labkit:<alias>``); nothing else is allowed.

    Where the host tracks connections (conntrack loaded, as Docker's NAT rules load it), the
    bridge's traffic is not tracked (two ``raw`` rules, ``-j CT --notrack``, same comment): a
    benchmark's connections, 8,000 a run for ``ab``, would otherwise fill the host's table
    (262,144 entries here after 30 runs, each kept 2 minutes after its close), and a full table
    drops new connections: ``ab`` then stops for its 30-s timeout. :func:`tracked` says which.
    """
    host_output(["ip", "link", "add", device, "type", "bridge"])
    try:
        host_output(["ip", "link", "set", device, "alias", alias])
        host_output(["ip", "addr", "add", address, "dev", device])
        host_output(["ip", "link", "set", device, "up"])
        rules = _rules(device, alias)
        for table, chain, rule in rules:
            host_output(["iptables", "-t", table, "-I", chain, *rule])
        return any(table == "raw" for table, _, _ in rules)
    except BaseException:
        delete_bridge(device, alias)
        raise


#: the iptables chains labkit puts a network's rules in
RULE_CHAINS = (("filter", "FORWARD"), ("raw", "PREROUTING"), ("raw", "OUTPUT"))


def _bridge_netfilter() -> bool:
    try:
        with open("/proc/sys/net/bridge/bridge-nf-call-iptables") as f:
            return f.read().strip() == "1" and shutil.which("iptables") is not None
    except OSError:
        return False


def tracked() -> bool:
    """Whether this host tracks connections (the conntrack module is loaded) and so whether a
    bridge made here gets the rules that exempt its traffic (:func:`create_bridge`)."""
    return (
        os.path.exists("/proc/sys/net/netfilter/nf_conntrack_count") and shutil.which("iptables") is not None
    )


def _rules(device: str, alias: str) -> list[tuple[str, str, list[str]]]:
    """(table, chain, rule) of what :func:`create_bridge` inserts for bridge ``device``."""
    tag = ["-m", "comment", "--comment", f"labkit:{alias}"]
    out = (
        [("filter", "FORWARD", ["-i", device, "-o", device, *tag, "-j", "ACCEPT"])]
        if _bridge_netfilter()
        else []
    )
    if tracked():
        out += [
            ("raw", "PREROUTING", ["-i", device, *tag, "-j", "CT", "--notrack"]),
            ("raw", "OUTPUT", ["-o", device, *tag, "-j", "CT", "--notrack"]),
        ]
    return out


def delete_bridge(device: str, alias: str | None = None) -> None:
    """Delete bridge ``device`` (and its FORWARD rule, see :func:`create_bridge`); quiet if gone."""
    if os.path.exists(f"/sys/class/net/{device}"):
        host_output(["ip", "link", "delete", device, "type", "bridge"])
    if alias is not None:
        drop_rules(alias)


def drop_rules(prefix: str) -> list[str]:
    """Delete the rules labkit made for networks named ``prefix*`` (:data:`RULE_CHAINS`); returns
    their comments, one per network."""
    if shutil.which("iptables") is None:
        return []
    gone = []
    for table, chain in RULE_CHAINS:
        try:
            listing = host_output(["iptables", "-t", table, "-S", chain])
        except BackendError:
            continue  # no such table here (raw without conntrack's modules)
        for line in listing.splitlines():
            argv = shlex.split(line)
            if argv[:1] == ["-A"] and "--comment" in argv:
                comment = argv[argv.index("--comment") + 1]
                if comment.startswith(f"labkit:{prefix}"):
                    host_output(["iptables", "-t", table, "-D", *argv[1:]])
                    gone.append(comment)
    return list(dict.fromkeys(gone))


def bridges(prefix: str) -> dict[str, str]:
    """This host's bridges whose ``ifalias`` starts with ``prefix``: alias -> device."""
    return bridges_in(host_links(), prefix)


def bridges_in(links: object, prefix: str) -> dict[str, str]:
    """The bridges among ``links`` (what ``ip -j -d link show`` prints, parsed) whose ``ifalias``
    starts with ``prefix``: alias -> device. Anything else in ``links`` is ignored."""
    if not isinstance(links, list):
        return {}
    return {
        str(link["ifalias"]): str(link["ifname"])
        for link in links
        if isinstance(link, dict)
        and str(link.get("ifalias", "")).startswith(prefix)
        and "ifname" in link
        and (link.get("linkinfo") or {}).get("info_kind") == "bridge"
    }


# -- addresses -----------------------------------------------------------------------
SUBNET_POOL = ipaddress.ip_network("10.200.0.0/13")  # 10.200.0.0 - 10.207.255.255
MAX_INSTANCES = 200


#: the command whose JSON output :func:`parse_routes` reads (every IPv4 route of a host)
ROUTES_ARGV = ["ip", "-j", "-4", "route", "show", "table", "all"]


def _routes() -> list[ipaddress.IPv4Network]:
    return parse_routes(host_output(ROUTES_ARGV))


def parse_routes(text: str) -> list[ipaddress.IPv4Network]:
    """The destinations of the routes in ``text`` (the JSON :data:`ROUTES_ARGV` prints; the
    default route left out): what a new network's subnet must not overlap. BackendError when it
    is not that JSON."""
    try:
        routes = json.loads(text or "[]")
    except ValueError as exc:
        raise BackendError(f"ip -j route printed no JSON ({exc}): {text[:200]!r}") from None
    if not isinstance(routes, list):
        raise BackendError(f"ip -j route printed {type(routes).__name__}, not a list of routes")
    out: list[ipaddress.IPv4Network] = []
    for r in routes:
        dst = r.get("dst", "") if isinstance(r, dict) else ""
        if dst == "default":
            continue
        try:
            out.append(ipaddress.IPv4Network(dst if "/" in dst else dst + "/32", strict=False))
        except ValueError:
            continue
    return out


def pick_subnet(
    name: str,
    taken: Sequence[ipaddress.IPv4Network] | None = None,
    tries: int = 256,
    also: Sequence[ipaddress.IPv4Network] = (),
) -> ipaddress.IPv4Network:
    """A /24 of :data:`SUBNET_POOL` for network ``name`` (hash of the name, then the next ones)
    that overlaps no route of this host (or ``taken``) nor ``also``; BackendError after ``tries``."""
    taken = [*(_routes() if taken is None else taken), *also]
    subnets = 2 ** (24 - SUBNET_POOL.prefixlen)
    start = int(hashlib.sha256(name.encode()).hexdigest(), 16) % subnets
    for k in range(min(tries, subnets)):
        net = ipaddress.IPv4Network((int(SUBNET_POOL.network_address) + ((start + k) % subnets) * 256, 24))
        if not any(net.overlaps(t) for t in taken):
            return net
    raise BackendError(f"no free /24 in {SUBNET_POOL} for network {name}")


def hosts_text(names: dict[str, str]) -> str:
    """An ``/etc/hosts``: loopback, then ``address name`` for each of ``names`` (name -> address)."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{addr}\t{name}" for name, addr in names.items()]
    return "\n".join(lines) + "\n"


#: resolv.conf of an instance on a private network: no server (names come from /etc/hosts)
NO_DNS = "# labkit private network: names are in /etc/hosts, no DNS server\\noptions timeout:1 attempts:1\\n"


def short_id(name: str) -> str:
    """8 hex digits that stand for a network's name in its host devices (``lk<8 hex>``, at most
    15 characters with ``h<i>``/``c<i>``): the name's own when it ends in 8 hex digits (the names
    labkit made before its names got 65 random bits: ``labkit-x--net-1a2b3c4d`` -> ``1a2b3c4d``),
    else the first 8 of the SHA-256 of the name. Labkit finds its bridges by their alias (the
    network's whole name), never by this id."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"network name {name!r} must be a non-empty string")
    tail = name.rsplit("-", 1)[-1]
    if re.fullmatch(r"[0-9a-f]{8}", tail):
        return tail
    return hashlib.sha256(name.encode()).hexdigest()[:8]
