"""The ``libvirt`` backend: instances are virtual machines (KVM, QEMU/TCG, or Xen by URI).

    >>> from labkit.backends import get_backend
    >>> be = get_backend("libvirt")                          # qemu:///system
    >>> be = get_backend("libvirt", uri="qemu+ssh://host/system", image="/srv/vm-1234")

Each instance is a transient domain named ``labkit-...`` booted directly from
the VM image's kernel and initrd on a qcow2 copy-on-write overlay of its base
disk, or a full raw copy of it with ``disk_format: raw``
(:mod:`~labkit.backends.libvirt.storage`: image description, pool, disks).
Commands run through the QEMU guest agent (:mod:`~labkit.backends.libvirt.agent`).
The guest has no network, unless its run has a private one
(:mod:`~labkit.backends.libvirt.net`): a transient libvirt network without
``<forward>`` on bridge ``lk<8 hex>`` (the host holds the subnet's first address), a
virtio NIC per guest whose host-side tap ``lk<8 hex>h<i>`` carries the ``link``'s
rate (its delay is netem in the guest), static addresses and ``/etc/hosts`` written through the agent. Host
directories (``mounts``) are virtiofs shares mounted in the guest through the agent
(:mod:`~labkit.backends.libvirt.mounts`). The spec
maps to the domain XML as described in :mod:`~labkit.backends.libvirt.xml`.
Domain type: ``xen`` on Xen URIs; on QEMU URIs ``kvm`` when a guest really
boots under KVM here, else ``qemu`` (TCG) (:mod:`~labkit.backends.libvirt.probe`).

As a user who is not root, ``qemu:///session`` is the user's own daemon (libvirt starts it): its
pool defaults to the user's data dir (:func:`~labkit.backends.libvirt.storage.session_pool_path`),
each guest agent's socket is in the user's runtime directory
(:func:`labkit.core.paths.runtime_dir`, short enough for a UNIX socket's name), and what needs
root on the host (private networks, virtiofs ``mounts``) is refused at once by name.

Teardown on every path: domains are started with AUTODESTROY (they die with the
connection if the controller dies), ``destroy()`` stops the domain and deletes
its disk, console log and the read-only bind mounts of its shares,
``Network.remove()`` destroys the run's network, and ``cleanup(prefix)`` removes
all of them for names starting with ``prefix``. Remote hosts need the VM image at
the same paths; private networks, mounts and raw disks need a local URI (the bridge,
the ``tc`` shaping, the host end, the shared directories and ``qemu-img`` are on
this machine).

Its instances (the VMs) are :mod:`~labkit.backends.libvirt.domain`'s.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any
from urllib.parse import urlparse

import libvirt

from ...core.instance import InstanceSpec
from ...core.mounts import parse_mounts
from ...core.paths import runtime_dir
from ...errors import BackendError, BackendUnavailable, ConfigError
from .. import host_end
from ..base import (
    NAME_PREFIX,
    Backend,
    Instance,
    check_prefix,
    new_name,
    teardown,
)
from ..private_network import Network, join_network
from . import mounts as libvirt_mounts
from . import net as libvirt_net
from . import probe as libvirt_probe
from . import sshuri
from .domain import MACHINE_EXIT_WAIT_S, LibvirtInstance, remove_machine_cgroups, unlink_socket
from .storage import Pool, gone, load_image, session_pool_path
from .xml import (
    check_disk_format,
    check_tcg_cpu,
    domain_facts,
    domain_xml,
    uri_driver,
    uri_is_local,
)

log = logging.getLogger("labkit.backends.libvirt")

# libvirt prints every error to stderr by default; labkit raises them instead
libvirt.registerErrorHandler(lambda _ctx, _err: None, None)

DEFAULT_URI = "qemu:///system"
POOL_NAME = "labkit"
POOL_PATH = "/var/lib/libvirt/images/labkit"
DOMAIN_TYPES = ("auto", "kvm", "qemu", "xen")
#: the longest path a UNIX socket may have (``sun_path`` holds 108 bytes with its final NUL)
MAX_SOCKET_PATH = 107
#: The Debian cloud kernel and the host's initrd panic while unpacking it in less (128 MiB fails, 160 boots)
MIN_MEMORY_MB = 160


def _fmt_version(v: int) -> str:
    return f"{v // 1000000}.{v // 1000 % 1000}.{v % 1000}"


def _seconds(options: dict, key: str, default: float) -> float:
    value = options.get(key)
    if value is None:
        return default
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = -1.0
    if not 0 < value < float("inf"):
        raise ConfigError(f"libvirt option {key}={options[key]!r}: give a number of seconds > 0")
    return value


def connect_hint(error: str, uri: str, local: bool) -> str:
    """What to do when libvirt refused ``uri``, from its ``error``: a non-root user on
    ``qemu:///system`` meets polkit, which needs the D-Bus system bus (issue 44: "Unable to get
    system bus connection" while the daemons run), or a socket only the libvirt group may open."""
    if not local:
        return "check the URI and ssh access"
    text = error.lower()
    if "system bus" in text or "polkit" in text or "authentication" in text:
        return (
            "the daemons run, but libvirtd asks polkit, over the D-Bus system bus, whether a non-root user "
            "may use qemu:///system, and the bus is missing or polkit refuses: start dbus and polkitd "
            "(`systemctl start dbus polkit`) with the user in the libvirt group (`usermod -aG libvirt "
            "USER`, then log in again; polkit's rule grants that group, membership alone does not), or "
            "use qemu:///session, the user's own daemon (labkit keeps its pool in the user's data dir)"
        )
    if "permission denied" in text and "session" not in uri:
        return (
            "this user may not open libvirt's socket: add it to the libvirt group (`usermod -aG libvirt "
            "USER`, then log in again) or use qemu:///session"
        )
    if is_session(uri):
        return (
            "qemu:///session is this user's own libvirtd, which libvirt starts on first use: it needs "
            "libvirtd installed (libvirt-daemon) and a home directory (or XDG_RUNTIME_DIR) this user "
            "may write"
        )
    return "start the daemons (`virtlogd -d && libvirtd -d`) or run scripts/setup-libvirt.sh"


def is_session(uri: str) -> bool:
    """Whether ``uri`` is a local ``qemu:///session``: the user's own daemon, run as the user."""
    return uri_driver(uri) == "qemu" and uri_is_local(uri) and urlparse(uri).path.rstrip("/") == "/session"


def agent_socket(name: str) -> str:
    """The host end of domain ``name``'s guest agent channel on a session daemon:
    ``<runtime dir>/libvirt/<the name's random part>.agent``, the user's own (libvirt's default
    is deep in the user's home, and a longer path than a socket may have fails the start:
    "UNIX socket path ... too long"). ConfigError naming the path and the fix when it is too long."""
    path = f"{runtime_dir('libvirt')}/{name.rsplit('-', 1)[-1]}.agent"
    if len(path.encode()) > MAX_SOCKET_PATH:
        raise ConfigError(
            f"libvirt: the guest agent socket {path} is longer than the {MAX_SOCKET_PATH} bytes a "
            "UNIX socket's path may have; set XDG_RUNTIME_DIR to a shorter directory of yours "
            "(mode 0700)"
        )
    return path


class LibvirtBackend(Backend):
    """Options: ``uri`` (qemu:///system), ``domain_type`` ("auto" | "kvm" | "qemu" | "xen"),
    ``image`` (VM image directory or its image.json, or an image variant's name such as
    ``mpi``; default: the last built base image, see
    :func:`~labkit.backends.libvirt.storage.load_image`), ``boot_timeout`` (s, 240),
    ``kvm_probe_timeout`` (s, 25), ``pool`` / ``pool_path`` (where disks go; a
    ``qemu:///session``'s default is in the user's data dir),
    ``disk_cache`` (QEMU cache mode; libvirt's default when unset), ``disk_format``
    (``qcow2``: an overlay of the base disk, the default; ``raw``: a full raw copy per
    instance, deleted at teardown; recorded in each instance's metadata), ``tcg_cpu`` (a QEMU
    guest's CPU: ``qemu64``, the default, or ``max``, which runs x86-64-v2 code such as today's
    numpy wheels; recorded when not the default), ``mounts`` (host
    directories, see :mod:`labkit.core.mounts`, as virtiofs shares: a local URI, QEMU domains;
    the guest's memory is then a shared memfd, of the same size), ``host_key_policy`` (strict, the
    default | accept-new | insecure) and ``known_hosts`` (a known_hosts file checked besides
    ``~/.ssh/known_hosts``, where accept-new records): how the host key of an SSH URI is checked
    (:mod:`~labkit.backends.libvirt.sshuri`; recorded in the fingerprint and each instance's
    metadata)."""

    name = "libvirt"
    OPTIONS = (
        "uri",
        "domain_type",
        "image",
        "boot_timeout",
        "kvm_probe_timeout",
        "pool",
        "pool_path",
        "disk_cache",
        "disk_format",
        "tcg_cpu",
        "mounts",
        "host_key_policy",
        "known_hosts",
    )
    #: guests bond NICs on a private network (``nics`` factor; the image carries ``bonding``)
    MAX_NICS = 8
    daemons = ("libvirtd", "virtqemud", "virtlogd")  # a local URI's (monolithic or modular)

    def __init__(self, **options: Any):
        super().__init__(**options)
        self.uri = options.get("uri") or DEFAULT_URI
        #: what libvirt opens: ``uri`` with the host-key policy of an SSH transport applied
        self.ssh = sshuri.parse(self.uri, options.get("host_key_policy"), options.get("known_hosts"))
        if self.ssh.policy is not None:
            self.options["host_key_policy"] = self.ssh.policy
        self.driver = uri_driver(self.uri)
        self.local = uri_is_local(self.uri)
        self.session = is_session(self.uri)
        self.requested_type = options.get("domain_type") or "auto"
        if self.requested_type not in DOMAIN_TYPES:
            raise ConfigError(
                f"libvirt option domain_type={self.requested_type!r}; use one of {', '.join(DOMAIN_TYPES)}"
            )
        self.boot_timeout = _seconds(options, "boot_timeout", 240)
        self.kvm_probe_timeout = _seconds(options, "kvm_probe_timeout", 25)
        self.disk_cache = options.get("disk_cache")
        self.disk_format = check_disk_format(options.get("disk_format") or "qcow2")
        self.tcg_cpu = check_tcg_cpu(options.get("tcg_cpu") or "qemu64")
        if self.disk_format == "raw" and not self.local:
            raise ConfigError(
                f"libvirt option disk_format=raw needs a local URI (qemu-img makes the "
                f"copy on this machine), not {self.uri}; use disk_format=qcow2"
            )
        self.mounts = parse_mounts(options.get("mounts"), "libvirt")
        if self.mounts and not self.local:
            raise ConfigError(
                f"libvirt option mounts needs a local URI, not {self.uri} (the "
                "directories and their virtiofsd are on this machine)"
            )
        if self.mounts and self.session:
            raise ConfigError(
                f"libvirt option mounts needs qemu:///system, not {self.uri}: libvirt 9 starts "
                'virtiofsd only from the system daemon ("virtiofs is not yet supported in '
                'session mode")'
            )
        if any(m.readonly for m in self.mounts) and os.geteuid() != 0:
            raise ConfigError(
                "libvirt option mounts: a read-only mount needs root (labkit shares it through "
                "a read-only bind mount, which only root may make); run as root or make the "
                "mount read-write"
            )
        if self.mounts:
            self.options["mounts"] = [m.as_dict() for m in self.mounts]
        pool_path = options.get("pool_path") or (session_pool_path() if self.session else POOL_PATH)
        self.pool = Pool(
            lambda: self.conn,
            options.get("pool") or POOL_NAME,
            os.path.expanduser(pool_path) if self.local else pool_path,
        )
        self._conn: libvirt.virConnect | None = None
        self._image: dict | None = None
        self.probe_detail = ""

    # -- connection and image ----------------------------------------------
    @property
    def conn(self) -> libvirt.virConnect:
        """The libvirt connection to :attr:`uri`, opened on first use; BackendUnavailable if it cannot be."""
        if self._conn is None:
            try:
                self._conn = libvirt.open(self.ssh.open_uri)
            except libvirt.libvirtError as exc:
                keys = sshuri.refusal(self.ssh, exc)
                if keys:
                    raise BackendUnavailable(f"libvirt at {self.uri}: {keys}") from exc
                raise BackendUnavailable(
                    f"cannot connect to libvirt at {self.uri}: {exc}; "
                    f"{connect_hint(str(exc), self.uri, self.local)}"
                ) from exc
        return self._conn

    def image_info(self) -> dict:
        """The VM image description (see :func:`~labkit.backends.libvirt.storage.load_image`)."""
        if self._image is None:
            self._image = load_image(self.options.get("image"))
        return self._image

    def check(self) -> None:
        try:
            self.conn.getVersion()
        except libvirt.libvirtError as exc:
            raise BackendUnavailable(f"libvirt at {self.uri} does not answer: {exc}") from exc
        if self.driver not in ("qemu", "xen"):
            raise BackendUnavailable(f"libvirt URI {self.uri}: labkit drives qemu:// and xen:// URIs")
        if self.driver == "xen":
            raise BackendUnavailable(
                f"libvirt URI {self.uri}: Xen domains have no QEMU guest agent channel, so labkit "
                "cannot run commands in them yet (domain XML for Xen is generated, exec is not)"
            )
        self.image_info()

    def host_cpus(self) -> int:
        return int(self.conn.getInfo()[2])

    def close(self) -> None:
        """Close the connection. Domains still running die with it (they are AUTODESTROY)."""
        if self._conn is not None:
            try:
                self._conn.close()
            except libvirt.libvirtError:
                pass
            self._conn = None

    # -- domain type -------------------------------------------------------
    def domain_type(self) -> str:
        return self._verdict()[0]

    def _verdict(self) -> tuple[str, str]:
        if self.driver == "xen":
            return "xen", "Xen URI"
        if self.requested_type != "auto":
            return self.requested_type, "chosen by the domain_type option"
        dtype, reason, self.probe_detail = libvirt_probe.verdict(
            self.conn,
            self.uri,
            self.local,
            self.image_info().get("hash"),
            self._boot_kvm,
            self.kvm_probe_timeout,
        )
        return dtype, reason

    def _boot_kvm(self) -> None:
        inst = self._boot(InstanceSpec(vcpus=1, memory_mb=256), new_name("labkit-kvmprobe"), 0, None, "kvm")
        try:
            inst.wait_ready(self.kvm_probe_timeout)
        finally:
            inst.destroy()

    # -- provisioning ------------------------------------------------------
    def provision(
        self, spec: InstanceSpec, *, prefix: str = NAME_PREFIX, network: Network | None = None
    ) -> list[Instance]:
        """Start all ``spec.count`` VMs, then wait for each (they boot side by side).

        With a ``network`` (from :meth:`create_network`), VM ``i`` has a NIC on it and is
        ``inst<i>`` at ``network.addresses[i]``; its link is shaped on its host-side tap."""
        placement = spec.placement(self.host_cpus()) if spec.affinity == "pinned" else [None] * spec.count
        if network is not None and spec.count > len(network.addresses):
            raise ConfigError(
                f"network {network.name} has addresses for {len(network.addresses)} "
                f"instances, not {spec.count}"
            )
        dtype = self.domain_type()
        made: list[LibvirtInstance] = []
        try:
            for i in range(spec.count):
                made.append(self._boot(spec, new_name(prefix), i, placement[i], dtype, network, self.mounts))
            for inst in made:
                self._ready(inst, network)
        except BaseException:
            teardown(made)
            raise
        return list(made)  # as list[Instance]

    def _create(self, spec, name, index, cpus, network: Network | None = None) -> Instance:
        inst = self._boot(spec, name, index, cpus, self.domain_type(), network, self.mounts)
        try:
            self._ready(inst, network)
        except BaseException:
            inst.destroy()
            raise
        return inst

    def _ready(self, inst: LibvirtInstance, network: Network | None = None) -> None:
        """Wait for the agent (the boot timeout counts from the VM's start), read pinning back,
        and on a private network give the guest its address and names and shape its link."""
        inst.wait_ready(max(1.0, self.boot_timeout - (time.monotonic() - inst.started)))
        inst.metadata["boot_to_agent_s"] = round(time.monotonic() - inst.started, 3)
        inst.metadata.update(inst.pinning())
        if self.mounts:
            libvirt_mounts.mount_in_guest(inst, self.mounts)
            inst.metadata["mounts"] = [m.as_dict() for m in self.mounts]
        if network is not None:
            libvirt_net.configure_guest(inst, inst.dom, network)
            inst.host_device = libvirt_net.nic(network, inst.index).device
            join_network(inst, network, libvirt_net.host_link(network.link))
            bonded = libvirt_net.shape_data_nics(inst, network)
            libvirt_net.delay_in_guest(inst, network.link, bonded=bonded)

    def _boot(
        self, spec, name, index, cpus, dtype, network: Network | None = None, mounts=()
    ) -> LibvirtInstance:
        """Disk (+ read-only bind mounts of ``mounts``) + transient domain started (not yet
        waited for)."""
        if spec.memory_mb < MIN_MEMORY_MB:
            raise ConfigError(
                f"libvirt: memory_mb={spec.memory_mb} is too small for a VM; the guest "
                f"kernel and initrd need at least {MIN_MEMORY_MB} MiB"
            )
        img = self.image_info()
        if mounts and "virtiofs" not in img.get("modules", ()):
            raise BackendUnavailable(
                f"libvirt option mounts: the VM image {img.get('dir')} has no "
                "virtiofs module (built before labkit shared directories); "
                "rebuild it: labkit images build --vm"
            )
        if network is not None and network.nics > 1 and "bonding" not in img.get("modules", ()):
            raise BackendUnavailable(
                f"libvirt nics: {network.nics}: the VM image {img.get('dir')} has no "
                "bonding module (built before labkit NIC aggregation); "
                "rebuild it: labkit images build --vm"
            )
        t0 = time.monotonic()
        socket = agent_socket(name) if self.session else None
        disk = self.pool.disk(name, img, self.disk_format)
        console_log = self.pool.console_log(name)
        try:
            shares = libvirt_mounts.prepare(name, mounts) if mounts else ()
            xml = domain_xml(
                name=name,
                spec=spec,
                cpus=cpus,
                domain_type=dtype,
                disk=disk,
                kernel=img["kernel"],
                initrd=img["initrd"],
                cmdline=img["cmdline"],
                console_log=console_log,
                disk_format=self.disk_format,
                disk_cache=self.disk_cache,
                tcg_cpu=self.tcg_cpu,
                nics=()
                if network is None
                else (libvirt_net.nic(network, index), *libvirt_net.data_nics(network, index)),
                shares=shares,
                agent_socket=socket,
            )
            dom = self.conn.createXML(xml, libvirt.VIR_DOMAIN_START_AUTODESTROY)
        except BaseException as exc:
            self.pool.remove(disk)
            self.pool.remove(console_log)
            libvirt_mounts.release(name)
            unlink_socket(socket)
            if isinstance(exc, libvirt.libvirtError):
                hint = (
                    (
                        "; libvirt keeps a network's MAC list in its dnsmasq directory even "
                        "without dnsmasq: run scripts/setup-libvirt.sh (it creates "
                        "/var/lib/libvirt/dnsmasq)"
                    )
                    if "/dnsmasq/" in str(exc)
                    else ""
                )
                raise BackendError(f"libvirt could not start {name} ({dtype}): {exc}{hint}") from exc
            raise
        inst = LibvirtInstance(
            self,
            name,
            spec,
            index,
            cpus,
            dom=dom,
            disk=disk,
            console_log=console_log,
            domain_type=dtype,
            started=t0,
        )
        facts = domain_facts(dom.XMLDesc(0))
        inst.metadata["libvirt_memory_mb"] = facts["memory_mb"]
        inst.metadata["libvirt_vcpus"] = facts["vcpus"]
        return inst

    def remove_domain(self, name: str) -> None:
        try:
            dom = self.conn.lookupByName(name)
        except libvirt.libvirtError as exc:
            if gone(exc):
                return
            raise BackendError(f"looking up {name} for teardown: {exc}") from exc
        for step in ("destroy", "undefine"):
            try:
                if step == "destroy" and dom.isActive():
                    dom.destroy()
                elif step == "undefine" and dom.isPersistent():
                    dom.undefine()
            except libvirt.libvirtError as exc:
                if not gone(exc):
                    raise BackendError(f"{step} of {name} failed: {exc}") from exc
        if self.session:
            unlink_socket(agent_socket(name))
        elif self.local:
            remove_machine_cgroups(name, wait_s=MACHINE_EXIT_WAIT_S)

    # -- fingerprint, listing, cleanup ---------------------------------------
    def fingerprint(self) -> dict:
        conn = self.conn
        dtype, reason = self._verdict()
        img = self.image_info()
        return {
            "backend": self.name,
            "uri": self.uri,
            "hypervisor": conn.getType(),
            "hypervisor_version": _fmt_version(conn.getVersion()),
            "libvirt_version": _fmt_version(conn.getLibVersion()),
            "libvirt_python": _fmt_version(libvirt.getVersion()),
            "domain_type": dtype,
            "domain_type_reason": reason,  # stable; the probe's details: self.probe_detail
            "host": conn.getHostname(),
            "guest_kernel": img.get("kernel_version"),
            "vm_image": img.get("hash"),
            **({"tcg_cpu": self.tcg_cpu} if self.tcg_cpu != "qemu64" and dtype != "kvm" else {}),
            **({"host_key_policy": self.ssh.policy} if self.ssh.policy else {}),
        }

    def list_labkit(self, prefix: str = NAME_PREFIX) -> list[str]:
        """Names of the domains (running or defined), of the run networks and of the domains
        with shares' bind mounts left, whose names start with ``prefix``."""
        return sorted(set(self.domains(prefix) + self.networks(prefix) + libvirt_mounts.leftovers(prefix)))

    def created(self, names) -> dict[str, float]:
        """Of each name: when the first of its disk and console log was made in the pool
        (:meth:`Pool.made <labkit.backends.libvirt.storage.Pool.made>`: their birth time, or where
        the file system keeps none their last change, which makes a leftover look younger, never
        older); a domain or network without files there is left out."""
        wanted, out = set(names), dict[str, float]()
        for volume, when in self.pool.made(NAME_PREFIX).items():
            name = volume.split(".", 1)[0]  # labkit names hold no dot
            if name in wanted:
                out[name] = min(when, out.get(name, when))
        return out

    def domains(self, prefix: str = NAME_PREFIX) -> list[str]:
        """Names of the domains (running or defined) whose names start with ``prefix``."""
        check_prefix(prefix)
        try:
            return sorted(d.name() for d in self.conn.listAllDomains(0) if d.name().startswith(prefix))
        except libvirt.libvirtError as exc:
            raise BackendError(f"listing domains on {self.uri}: {exc}") from exc

    def networks(self, prefix: str = NAME_PREFIX) -> list[str]:
        """Names of the libvirt networks whose names start with ``prefix`` (runs' private networks)."""
        return libvirt_net.names(self.conn, check_prefix(prefix))

    def list_overlays(self, prefix: str = NAME_PREFIX) -> list[str]:
        """Disks (overlays, raw copies) and console logs in the pool whose names start with ``prefix``."""
        return self.pool.volumes(check_prefix(prefix))

    def cleanup(self, prefix: str) -> list[str]:
        """Remove the domains, disks, console logs, shares' bind mounts and networks named
        ``prefix*``; returns the instance and network names.

        Domains die with their connection (AUTODESTROY), so usually only files and networks remain.
        """
        removed = set()
        for name in self.domains(prefix):
            self.remove_domain(name)
            removed.add(name)
        for volume in self.list_overlays(prefix):
            self.pool.remove(volume)
            removed.add(volume.split(".", 1)[0])  # labkit names hold no dot
        for name in libvirt_mounts.leftovers(prefix):  # after the domains: virtiofsd is gone
            libvirt_mounts.release(name)
            removed.add(name)
        for name in self.networks(prefix):
            libvirt_net.remove(self.conn, name)
            removed.add(name)
        if self.session:  # agent sockets of domains gone with a killed controller
            for name in removed:
                unlink_socket(agent_socket(name))
        elif self.local:  # cgroups libvirt left behind for domains already gone, and host ends'
            remove_machine_cgroups(prefix + "*")
        if self.local:
            removed.update(host_end.remove_leftovers(prefix))
        return sorted(removed)

    # -- private networks ------------------------------------------------------
    def _create_network(self, network: Network) -> None:
        """An isolated libvirt network (see :mod:`~labkit.backends.libvirt.net`)."""
        if not self.local:
            raise ConfigError(
                f"libvirt: network: private needs a local URI, not {self.uri} (the run's "
                "bridge, its link shaping and its host end are on this machine)"
            )
        if self.session:
            raise ConfigError(
                f"libvirt: network: private needs qemu:///system, not {self.uri}: a session "
                "daemon runs as this user and cannot make the run's bridge and taps"
            )
        libvirt_net.create(self.conn, network)

    def _remove_network(self, network: Network) -> None:
        libvirt_net.remove_all(self.conn, network)
