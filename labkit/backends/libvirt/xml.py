"""Domain and volume XML for the libvirt backend, from an InstanceSpec. Pure functions, no libvirt.

The instance meaning (docs/design.md, "Instances") in libvirt terms:

* ``vcpus``      -> ``<vcpu placement='static'>N</vcpu>``
* ``memory_mb``  -> ``<memory unit='MiB'>`` = ``<currentMemory>``, no balloon (the guest sees it all)
* ``pinned``     -> ``<cputune>`` with one ``<vcpupin vcpu='j' cpuset='c'/>`` per vCPU (1:1)
* ``floating``   -> no ``<cputune>``: the vCPU threads run on any host CPU, at most
  ``vcpus`` CPUs' worth of time since each vCPU is one thread

Domain type: ``kvm`` or ``qemu`` (TCG) on QEMU connections, ``xen`` on Xen ones.
No ``<interface>``: the guest has no network (docs/design.md, "Network safety"), except
on a run's private network: one virtio NIC (:class:`Nic`) on the run's isolated
network (:func:`network_xml`: no ``<forward>``, so libvirt routes nothing out of it),
and with ``nics`` > 1 one more on each of the run's data bridges (bonded in the guest).

Disk: ``disk_format`` ``qcow2`` (a copy-on-write overlay of the image's base disk) or
``raw`` (a full raw copy of it); see :mod:`~labkit.backends.libvirt.storage`.

Mounts (host directories, :mod:`labkit.core.mounts`): one virtiofs ``<filesystem>`` per mount,
tag ``labkit<i>`` (:func:`mount_tag`), plus ``<memoryBacking>`` with a shared ``memfd``
source (virtiofsd, a separate host process, must map the guest's RAM); ``<memory>`` is
unchanged, so the guest sees the same MemTotal. No ``<binary>``: libvirt picks virtiofsd from
QEMU's vhost-user descriptors (``/usr/share/qemu/vhost-user/*.json``; on Debian 12
``50-qemu-virtiofsd.json`` names ``/usr/lib/qemu/virtiofsd`` of qemu-system-common). No
``<readonly/>``: libvirt 9.0 refuses it for virtiofs ("virtiofs does not yet support
read-only mode"; libvirt >= 11 with virtiofsd >= 1.11 has it), so read-only is applied by
the share's source being a read-only bind mount on the host and by ``mount -o ro`` in the
guest (:mod:`~labkit.backends.libvirt.mounts`).
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from urllib.parse import urlparse

from ...core.instance import InstanceSpec
from ...errors import BackendError, ConfigError

DOMAIN_TYPES = ("kvm", "qemu", "xen")
#: how an instance's disk is made: a qcow2 overlay of the base disk, or a full raw copy of it
DISK_FORMATS = ("qcow2", "raw")
AGENT_CHANNEL = "org.qemu.guest_agent.0"
#: virtio-fs tags are at most 36 bytes (the device's ``tag`` field)
MAX_TAG = 36
LABKIT_NS = "https://labkit.invalid/xmlns/libvirt/1"  # an identifier, never fetched


def uri_driver(uri: str) -> str:
    """``qemu`` or ``xen`` (or whatever the URI's scheme names before ``+transport``)."""
    scheme = urlparse(uri).scheme or uri.split(":", 1)[0]
    driver = scheme.split("+", 1)[0]
    return {"libxl": "xen"}.get(driver, driver)


def uri_is_local(uri: str) -> bool:
    """True when the URI talks to this machine's daemon (no host part, no remote transport)."""
    parsed = urlparse(uri)
    transport = parsed.scheme.split("+", 1)[1] if "+" in parsed.scheme else ""
    return parsed.hostname in (None, "", "localhost") and transport in ("", "unix")


#: On every guest's kernel command line. ``no_timer_check``: an emulated (TCG) guest on a busy host
#: can fail the kernel's IO-APIC timer test and panic at boot ("IO-APIC + timer doesn't work!",
#: seen in CI); the test only matters on broken hardware. ``panic=-1``: a guest that panics
#: anyway reboots at once, and ``on_reboot=destroy`` turns that into a fast "stopped during
#: boot" error with the console tail instead of a wait for the whole boot timeout.
GUEST_KERNEL_ARGS = "no_timer_check panic=-1"


@dataclass(frozen=True)
class Nic:
    """A guest NIC on libvirt network ``network``: its ``mac`` and the host-side tap ``device``."""

    network: str
    mac: str
    device: str


def guest_mac(network: str, index: int) -> str:
    """The MAC of instance ``index`` on ``network``: QEMU's 52:54:00 prefix, then 3 bytes of a
    hash of both (the guest finds its NIC by it)."""
    tail = hashlib.sha256(f"{network}/{index}".encode()).hexdigest()[:6]
    return "52:54:00:" + ":".join(tail[i : i + 2] for i in range(0, 6, 2))


def network_xml(name: str, bridge: str, address: str | None, prefixlen: int) -> str:
    """An isolated ``<network>``: bridge ``bridge`` (STP off, no forward delay) holding the
    host's ``address``/``prefixlen`` (None: no host address, a switch only); no ``<forward>``
    (nothing is routed or NATed out), no DHCP, DNS off (libvirt then starts no dnsmasq).
    Guests get static addresses."""
    if not name.startswith("labkit-"):
        raise ConfigError(f"libvirt network name {name!r} must start with 'labkit-'")
    if not 0 < len(bridge) <= 15:
        raise ConfigError(f"bridge name {bridge!r} must be 1-15 characters")
    net = ET.Element("network")
    _sub(net, "name", name)
    _sub(net, "bridge", name=bridge, stp="off", delay=0)
    _sub(net, "dns", enable="no")
    if address is not None:
        _sub(net, "ip", address=address, prefix=prefixlen)
    ET.indent(net)
    return ET.tostring(net, encoding="unicode")


def mount_tag(index: int) -> str:
    """The virtiofs tag of a domain's mount ``index`` (the guest mounts the share by it)."""
    if not isinstance(index, int) or index < 0:
        raise ConfigError(f"mount index {index!r} must be an integer >= 0")
    return f"labkit{index}"


@dataclass(frozen=True)
class Share:
    """A host directory ``source`` given to the guest as virtiofs ``tag``."""

    source: str
    tag: str


def _check_shares(shares) -> None:
    tags = [sh.tag for sh in shares]
    for sh in shares:
        if not sh.source.startswith("/") or "\n" in sh.source:
            raise ConfigError(f"virtiofs source {sh.source!r} must be an absolute path")
        if not 0 < len(sh.tag.encode()) <= MAX_TAG or tags.count(sh.tag) > 1:
            raise ConfigError(
                f"virtiofs tag {sh.tag!r} must be 1-{MAX_TAG} bytes and unique "
                f"in the domain (tags: {', '.join(tags)})"
            )


def _sub(parent, tag, text=None, **attrs):
    el = ET.SubElement(parent, tag, {k.rstrip("_"): str(v) for k, v in attrs.items()})
    if text is not None:
        el.text = str(text)
    return el


#: the CPUs a QEMU (TCG) guest can be given (the libvirt option ``tcg_cpu``): ``qemu64``, the
#: default, emulates well but lacks x86-64-v2 (no SSSE3, SSE4.2 or POPCNT: today's numpy and
#: pyarrow wheels stop with SIGILL in it); ``max``, QEMU's every emulated feature, runs them
TCG_CPUS = ("qemu64", "max")


def check_tcg_cpu(value: str) -> str:
    """``value`` if it is one of :data:`TCG_CPUS`, else ConfigError naming them."""
    if value not in TCG_CPUS:
        raise ConfigError(f"libvirt option tcg_cpu={value!r}; use one of {', '.join(TCG_CPUS)}")
    return value


def domain_xml(
    *,
    name: str,
    spec: InstanceSpec,
    cpus: list[int] | None,
    domain_type: str,
    disk: str,
    kernel: str,
    initrd: str,
    cmdline: str,
    console_log: str,
    disk_format: str = "qcow2",
    disk_cache: str | None = None,
    emulator: str | None = None,
    nics: tuple[Nic, ...] = (),
    shares: tuple[Share, ...] = (),
    agent_socket: str | None = None,
    tcg_cpu: str = "qemu64",
) -> str:
    """The ``<domain>`` document for one instance.

    ``cpus`` is the host CPU of each vCPU when pinned, None when floating.
    ``disk`` is a file in ``disk_format`` (one of :data:`DISK_FORMATS`).
    ``console_log`` is the file the serial console (ttyS0) is written to.
    ``disk_cache`` is QEMU's cache mode (libvirt's default when None: disk
    benchmarks measure what an ordinary guest would see).
    ``nics``: the guest's NICs on a private network, in order (none: no ``<interface>`` at all).
    ``shares``: host directories as virtiofs ``<filesystem>`` devices (then the guest's
    memory is a shared memfd; none: no ``<memoryBacking>``). Not on Xen (ConfigError).
    ``agent_socket``: the host end of the guest agent's channel (None: libvirt's choice, under
    its state directory; a ``qemu:///session`` daemon's is in the user's home, where the path can
    pass the 107 bytes a UNIX socket's name may have).
    ``tcg_cpu``: the CPU a QEMU (TCG) guest is given, one of :data:`TCG_CPUS` (a KVM guest gets
    the host's, ``host-passthrough``, whatever this says).
    """
    if domain_type not in DOMAIN_TYPES:
        raise ConfigError(
            f"libvirt domain type {domain_type!r} not allowed; use one of {', '.join(DOMAIN_TYPES)}"
        )
    check_disk_format(disk_format)
    if not name.startswith("labkit-"):
        raise ConfigError(f"libvirt domain name {name!r} must start with 'labkit-'")
    if cpus is not None and len(cpus) != spec.vcpus:
        raise ConfigError(f"pinning {cpus} names {len(cpus)} host CPUs for {spec.vcpus} vCPUs")
    if spec.affinity == "pinned" and cpus is None:
        raise ConfigError("affinity 'pinned' needs the host CPU of each vCPU")
    xen = domain_type == "xen"
    _check_shares(shares)
    if shares and xen:
        raise ConfigError("libvirt mounts (virtiofs) need a QEMU domain, not xen")

    dom = ET.Element("domain", {"type": domain_type})
    _sub(dom, "name", name)
    meta = _sub(dom, "metadata")
    ET.SubElement(
        meta,
        f"{{{LABKIT_NS}}}instance",
        {
            "vcpus": str(spec.vcpus),
            "memory_mb": str(spec.memory_mb),
            "affinity": spec.affinity,
            "cpus": ",".join(map(str, cpus)) if cpus is not None else "",
            "disk_format": disk_format,
        },
    )
    _sub(dom, "memory", spec.memory_mb, unit="MiB")
    _sub(dom, "currentMemory", spec.memory_mb, unit="MiB")
    if shares:  # virtiofsd maps the guest's RAM: it must be a shared memory object
        backing = _sub(dom, "memoryBacking")
        _sub(backing, "source", type="memfd")
        _sub(backing, "access", mode="shared")
    _sub(dom, "vcpu", spec.vcpus, placement="static")
    if cpus is not None:
        tune = _sub(dom, "cputune")
        for j, cpu in enumerate(cpus):
            _sub(tune, "vcpupin", vcpu=j, cpuset=cpu)

    os_ = _sub(dom, "os")
    if xen:
        _sub(os_, "type", "linux", arch="x86_64", machine="xenpv")
    else:
        _sub(os_, "type", "hvm", arch="x86_64", machine="pc")
    _sub(os_, "kernel", kernel)
    _sub(os_, "initrd", initrd)
    root = "/dev/xvda" if xen else "/dev/vda"
    _sub(
        os_,
        "cmdline",
        cmdline.replace("root=/dev/vda", f"root={root}") + f" {GUEST_KERNEL_ARGS} labkit.hostname={name}",
    )

    if not xen:
        feats = _sub(dom, "features")
        _sub(feats, "acpi")
        _sub(feats, "apic")
        if domain_type == "kvm":
            _sub(dom, "cpu", mode="host-passthrough", check="none")
        elif check_tcg_cpu(tcg_cpu) == "max":  # everything TCG can emulate (x86-64-v2 and more)
            _sub(dom, "cpu", mode="maximum", check="none")
        else:  # TCG cannot pass the host CPU through; qemu64 is what it emulates well
            cpu = _sub(dom, "cpu", mode="custom", match="exact", check="none")
            _sub(cpu, "model", "qemu64", fallback="allow")
    _sub(dom, "clock", offset="utc")
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        _sub(dom, event, "destroy")

    dev = _sub(dom, "devices")
    if emulator:
        _sub(dev, "emulator", emulator)
    disk_el = _sub(dev, "disk", type="file", device="disk")
    _sub(disk_el, "driver", name="qemu", type=disk_format, **({"cache": disk_cache} if disk_cache else {}))
    _sub(disk_el, "source", file=disk)
    _sub(disk_el, "target", dev="xvda" if xen else "vda", bus="xen" if xen else "virtio")
    for nic in nics:
        iface = _sub(dev, "interface", type="network")
        _sub(iface, "source", network=nic.network)
        _sub(iface, "mac", address=nic.mac)
        _sub(iface, "target", dev=nic.device)
        if not xen:
            _sub(iface, "model", type="virtio")
    for sh in shares:
        fs = _sub(dev, "filesystem", type="mount", accessmode="passthrough")
        _sub(fs, "driver", type="virtiofs")
        _sub(fs, "source", dir=sh.source)
        _sub(fs, "target", dir=sh.tag)
    serial = _sub(dev, "serial", type="file")
    _sub(serial, "source", path=console_log, append="off")
    _sub(serial, "target", port=0)
    if xen:
        cons = _sub(dev, "console", type="pty")
        _sub(cons, "target", type="xen", port=0)
    else:
        chan = _sub(dev, "channel", type="unix")
        if agent_socket is not None:
            _sub(chan, "source", mode="bind", path=agent_socket)
        _sub(chan, "target", type="virtio", name=AGENT_CHANNEL)
        _sub(dev, "controller", type="usb", model="none")
        _sub(dev, "memballoon", model="none")
    ET.indent(dom)
    return ET.tostring(dom, encoding="unicode")


def check_disk_format(value: object, where: str = "libvirt option disk_format") -> str:
    """``value`` if it is one of :data:`DISK_FORMATS`, else ConfigError naming them."""
    if not isinstance(value, str) or value not in DISK_FORMATS:
        raise ConfigError(f"{where}={value!r}; use one of {', '.join(DISK_FORMATS)}")
    return value


def overlay_volume_xml(
    name: str, base: str, base_format: str = "qcow2", capacity_bytes: int | None = None
) -> str:
    """A storage ``<volume>``: a qcow2 overlay of ``base`` (copy-on-write; base never written)."""
    vol = ET.Element("volume")
    _sub(vol, "name", name)
    _sub(vol, "capacity", capacity_bytes or 0, unit="bytes")
    target = _sub(vol, "target")
    _sub(target, "format", type="qcow2")
    _sub(target, "permissions").append(_mode("0644"))
    backing = _sub(vol, "backingStore")
    _sub(backing, "path", base)
    _sub(backing, "format", type=base_format)
    ET.indent(vol)
    return ET.tostring(vol, encoding="unicode")


def _mode(value: str):
    el = ET.Element("mode")
    el.text = value
    return el


def pool_xml(name: str, path: str) -> str:
    pool = ET.Element("pool", {"type": "dir"})
    _sub(pool, "name", name)
    target = _sub(pool, "target")
    _sub(target, "path", path)
    ET.indent(pool)
    return ET.tostring(pool, encoding="unicode")


def parse_pinning(xml: str) -> dict[int, list[int]]:
    """``{vcpu: [host cpus]}`` from a domain's ``<cputune><vcpupin>``; empty when floating."""
    root = ET.fromstring(xml)
    pins: dict[int, list[int]] = {}
    for pin in root.findall("./cputune/vcpupin"):
        vcpu = pin.get("vcpu")
        if vcpu is None:
            raise BackendError("libvirt domain XML: a <cputune><vcpupin> has no vcpu attribute")
        pins[int(vcpu)] = parse_cpuset(pin.get("cpuset"))
    return pins


def parse_cpuset(text: str | None) -> list[int]:
    """libvirt cpuset syntax (``0-2,5,^1``) to a sorted list of CPUs (none for None or empty)."""
    cpus: set[int] = set()
    excluded: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        target = cpus
        if part.startswith("^"):
            target, part = excluded, part[1:]
        if "-" in part:
            lo, hi = part.split("-", 1)
            target.update(range(int(lo), int(hi) + 1))
        else:
            target.add(int(part))
    return sorted(cpus - excluded)


def domain_facts(xml: str) -> dict:
    """vcpus, memory (MiB) and domain type as libvirt reports them."""
    root = ET.fromstring(xml)
    mem = root.find("memory")
    if mem is not None and mem.text is None:
        raise BackendError("libvirt domain XML: <memory> has no value")
    unit = (mem.get("unit") or "KiB") if mem is not None else "KiB"
    factor = {
        "KiB": 1 / 1024,
        "k": 1 / 1024,
        "MiB": 1,
        "M": 1,
        "GiB": 1024,
        "G": 1024,
        "b": 1 / 1048576,
        "bytes": 1 / 1048576,
    }.get(unit, 1 / 1024)
    return {
        "domain_type": root.get("type"),
        "vcpus": int(root.findtext("vcpu") or 0),
        "memory_mb": round(int(mem.text) * factor) if mem is not None and mem.text is not None else None,
    }
