"""The ``libvirt`` backend: instances are virtual machines (KVM, QEMU/TCG, or Xen by URI).

    >>> from labkit.backends import get_backend
    >>> be = get_backend("libvirt")                          # qemu:///system
    >>> be = get_backend("libvirt", uri="qemu+ssh://host/system")

Each instance is a transient domain named ``labkit-...`` booted directly from
the VM image's kernel and initrd (``labkit images build --vm``) on a qcow2
copy-on-write overlay of its base disk, kept in the libvirt storage pool
``labkit`` (``/var/lib/libvirt/images/labkit``). Commands run through the QEMU
guest agent; the guest has no network. The spec maps to the domain XML as
described in :mod:`labkit.backends.libvirt_xml`.

Domain type: ``xen`` on Xen URIs; on QEMU URIs ``kvm`` when a guest really boots
under KVM here, else ``qemu`` (TCG). The verdict comes from booting the image
once under KVM with a short timeout; it is cached per URI for the process (and,
for a local daemon, in ``/var/cache/labkit/libvirt-probe.json`` until the next
host boot) and recorded in every instance's metadata and in the fingerprint.

Teardown on every path: domains are started with AUTODESTROY (they die with the
connection if the controller dies), ``destroy()`` stops and undefines the domain
and deletes its overlay and console log.

Remote hosts: the VM image must exist at the same paths on the remote host
(run ``labkit images build --vm`` there).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import libvirt

from ..errors import BackendError, BackendUnavailable, ConfigError, tail
from ..instance import InstanceSpec
from . import libvirt_agent as agent
from .base import NAME_PREFIX, Backend, Instance, RawResult, new_name, teardown
from .libvirt_xml import (domain_facts, domain_xml, overlay_volume_xml, parse_pinning, pool_xml,
                          uri_driver, uri_is_local)

log = logging.getLogger("labkit.backends.libvirt")

# libvirt prints every error to stderr by default; labkit raises them instead
libvirt.registerErrorHandler(lambda _ctx, _err: None, None)

DEFAULT_URI = "qemu:///system"
POOL_NAME = "labkit"
POOL_PATH = "/var/lib/libvirt/images/labkit"
PROBE_CACHE = Path(os.environ.get("LABKIT_IMAGE_CACHE", "/var/cache/labkit/images")).parent / "libvirt-probe.json"
OPTIONS = ("uri", "domain_type", "image", "boot_timeout", "kvm_probe_timeout", "pool",
           "pool_path", "disk_cache")

_probe_lock = threading.Lock()
_verdicts: dict[str, tuple[str, str, str]] = {}   # uri (host) -> (domain_type, reason, detail)


def _fmt_version(v: int) -> str:
    return f"{v // 1000000}.{v // 1000 % 1000}.{v % 1000}"


def _gone(exc: libvirt.libvirtError) -> bool:
    return exc.get_error_code() in (libvirt.VIR_ERR_NO_DOMAIN, libvirt.VIR_ERR_OPERATION_INVALID,
                                    libvirt.VIR_ERR_NO_STORAGE_VOL)


class LibvirtInstance(Instance):
    """One running VM. ``dom`` is its ``virDomain``; commands go through the guest agent."""

    def __init__(self, backend: "LibvirtBackend", name, spec, index, cpus, *, dom, overlay: str,
                 console_log: str, domain_type: str):
        super().__init__(backend, name, spec, index, cpus)
        self.dom = dom
        self.overlay = overlay
        self.console_log = console_log
        self.started = time.monotonic()   # when provisioning began (set by the backend)
        self.metadata.update({"domain_type": domain_type, "uri": backend.uri,
                              "guest_kernel": backend.image_info().get("kernel_version")})

    # -- hooks -------------------------------------------------------------
    def _exec(self, argv, timeout, env) -> RawResult:
        return agent.run(self.dom, argv, timeout, env, alive=self._alive)

    def put(self, local_path, remote_path, mode=0o755) -> None:
        data = Path(local_path).read_bytes()
        parent = os.path.dirname(remote_path) or "/"
        self.exec(["mkdir", "-p", parent], timeout=60)
        agent.write_file(self.dom, remote_path, data)
        self.exec(["chmod", format(mode, "o"), remote_path], timeout=60)

    def _destroy(self) -> None:
        errors = []
        for step in (lambda: self.backend._remove_domain(self.name),
                     lambda: self.backend._remove_file(self.overlay),
                     lambda: self.backend._remove_file(self.console_log)):
            try:   # every step is tried: a failed destroy must not leave the overlay behind
                step()
            except BackendError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    # -- libvirt facts -----------------------------------------------------
    def _alive(self) -> bool:
        try:
            return bool(self.dom.isActive())
        except libvirt.libvirtError:
            return False

    def pinning(self) -> dict:
        """What libvirt reports: ``vcpupin`` (effective CPUs of each vCPU) and ``vcpupin_xml``
        (the ``<cputune>`` pins; empty when floating)."""
        info = self.dom.vcpuPinInfo(0)
        return {
            "vcpupin": {j: [c for c, on in enumerate(row) if on] for j, row in enumerate(info)},
            "vcpupin_xml": parse_pinning(self.dom.XMLDesc(0)),
        }

    def console_tail(self, lines: int = 30) -> str:
        return self.backend._console_tail(self.console_log, lines)

    def wait_ready(self, timeout: float) -> float:
        """Wait for the guest agent; returns seconds waited. BackendError with the console tail if not."""
        start = time.monotonic()
        while True:
            if agent.ping(self.dom, timeout=2):
                return time.monotonic() - start
            if not self._alive():
                raise BackendError(f"VM {self.name} stopped during boot; serial console (tail):\n"
                                   f"{tail(self.console_tail())}")
            if time.monotonic() - start > timeout:
                raise BackendError(
                    f"VM {self.name} ({self.metadata.get('domain_type')}) did not answer on the guest "
                    f"agent within {timeout:.0f}s; serial console (tail):\n{tail(self.console_tail())}")
            time.sleep(0.1)


class LibvirtBackend(Backend):
    """Options: ``uri`` (qemu:///system), ``domain_type`` ("auto" | "kvm" | "qemu" | "xen"),
    ``image`` (VM image directory; default the last built), ``boot_timeout`` (s, 240),
    ``kvm_probe_timeout`` (s, 25), ``pool`` / ``pool_path`` (where overlays go),
    ``disk_cache`` (QEMU cache mode; libvirt's default when unset)."""

    name = "libvirt"

    def __init__(self, **options):
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"libvirt backend: unknown option(s) {', '.join(unknown)}; "
                              f"allowed: {', '.join(OPTIONS)}")
        super().__init__(**options)
        self.uri = options.get("uri") or DEFAULT_URI
        self.driver = uri_driver(self.uri)
        self.local = uri_is_local(self.uri)
        self.requested_type = options.get("domain_type") or "auto"
        if self.requested_type not in ("auto", "kvm", "qemu", "xen"):
            raise ConfigError(f"libvirt option domain_type={self.requested_type!r}; "
                              "use auto, kvm, qemu or xen")
        self.boot_timeout = float(options.get("boot_timeout") or 240)
        self.kvm_probe_timeout = float(options.get("kvm_probe_timeout") or 25)
        self.pool_name = options.get("pool") or POOL_NAME
        self.pool_path = options.get("pool_path") or POOL_PATH
        self.disk_cache = options.get("disk_cache")
        self._conn = None
        self._image = None
        self._lock = threading.Lock()
        self.probe_detail = ""

    # -- connection and image ----------------------------------------------
    @property
    def conn(self):
        if self._conn is None:
            try:
                self._conn = libvirt.open(self.uri)
            except libvirt.libvirtError as exc:
                hint = ("start the daemons (`virtlogd -d && libvirtd -d`) or run "
                        "scripts/setup-libvirt.sh") if self.local else "check the URI and ssh access"
                raise BackendUnavailable(f"cannot connect to libvirt at {self.uri}: {exc}; {hint}") from exc
        return self._conn

    def image_info(self) -> dict:
        if self._image is None:
            from ..images.vm import vm_image_info
            self._image = vm_image_info(self.options.get("image"))
        return self._image

    def check(self) -> None:
        conn = self.conn
        try:
            conn.getVersion()
        except libvirt.libvirtError as exc:
            raise BackendUnavailable(f"libvirt at {self.uri} does not answer: {exc}") from exc
        if self.driver not in ("qemu", "xen"):
            raise BackendUnavailable(f"libvirt URI {self.uri}: labkit drives qemu:// and xen:// URIs")
        if self.driver == "xen":
            raise BackendUnavailable(
                f"libvirt URI {self.uri}: Xen domains have no QEMU guest agent channel, so labkit "
                "cannot run commands in them yet (domain XML for Xen is generated, exec is not)")
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
        with _probe_lock:
            if self.uri not in _verdicts:
                _verdicts[self.uri] = (*self._probe(), self.probe_detail)
            dtype, reason, self.probe_detail = _verdicts[self.uri]
            return dtype, reason

    def _probe_key(self) -> dict:
        try:
            boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            boot_id = ""
        return {"uri": self.uri, "boot_id": boot_id, "qemu": self.conn.getVersion(),
                "image": self.image_info().get("hash")}

    def _probe(self) -> tuple[str, str]:
        """Boot the image under KVM with a short timeout: ('kvm', why) or ('qemu', why).

        ``why`` is stable (it goes into the host fingerprint); the details (the
        error, the console tail) are logged and kept in ``self.probe_detail``.
        """
        key = self._probe_key() if self.local else None
        if key is not None:
            try:
                cached = json.loads(PROBE_CACHE.read_text())
                if cached.get("key") == key:
                    self.probe_detail = cached.get("detail", "") + " (cached for this host boot)"
                    return cached["domain_type"], cached["reason"]
            except (OSError, ValueError, KeyError):
                pass
        caps = self.conn.getCapabilities()
        if "<domain type='kvm'" not in caps and '<domain type="kvm"' not in caps:
            verdict, detail = ("qemu", "libvirt reports no KVM on this host"), ""
        else:
            spec = InstanceSpec(vcpus=1, memory_mb=256)
            name = new_name("labkit-kvmprobe")
            t0 = time.monotonic()
            inst = None
            try:
                inst = self._start(spec, name, 0, None, "kvm")
            except BackendError as exc:
                verdict, detail = ("qemu", "a KVM guest failed to start; TCG used"), str(exc)
            else:
                try:
                    inst.wait_ready(self.kvm_probe_timeout)
                    verdict = ("kvm", "a KVM guest booted to its agent")
                    detail = f"in {time.monotonic() - t0:.1f}s"
                except BackendError as exc:
                    verdict = ("qemu", f"a KVM guest did not boot within {self.kvm_probe_timeout:.0f}s; "
                                       "TCG used")
                    detail = str(exc)
                finally:
                    inst.destroy()
        self.probe_detail = detail
        log.info("libvirt %s KVM probe: %s (%s)", self.uri, verdict[1], detail)
        if key is not None:
            try:
                PROBE_CACHE.parent.mkdir(parents=True, exist_ok=True)
                tmp = PROBE_CACHE.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps({"key": key, "domain_type": verdict[0], "reason": verdict[1],
                                      "detail": detail}))
                os.replace(tmp, PROBE_CACHE)
            except OSError:
                pass
        return verdict

    # -- provisioning ------------------------------------------------------
    def provision(self, spec: InstanceSpec, *, prefix: str = "labkit") -> list[Instance]:
        """Start all ``spec.count`` VMs, then wait for each (they boot side by side)."""
        placement = spec.placement(self.host_cpus()) if spec.affinity == "pinned" else [None] * spec.count
        dtype = self.domain_type()
        made: list[LibvirtInstance] = []
        try:
            for i in range(spec.count):
                made.append(self._start(spec, new_name(prefix), i, placement[i], dtype))
            for inst in made:
                self._ready(inst)
        except BaseException:
            teardown(made)
            raise
        return made

    def _create(self, spec, name, index, cpus) -> Instance:
        inst = self._start(spec, name, index, cpus, self.domain_type())
        try:
            self._ready(inst)
        except BaseException:
            inst.destroy()
            raise
        return inst

    def _ready(self, inst: LibvirtInstance) -> None:
        """Wait for the agent (the boot timeout counts from the VM's start), then read pinning back."""
        started = inst.started
        inst.wait_ready(max(1.0, self.boot_timeout - (time.monotonic() - started)))
        inst.metadata["boot_to_agent_s"] = round(time.monotonic() - started, 3)
        inst.metadata.update(inst.pinning())

    def _start(self, spec, name, index, cpus, dtype) -> LibvirtInstance:
        """Overlay + transient domain started (not yet waited for)."""
        if not name.startswith(NAME_PREFIX):
            raise ConfigError(f"libvirt instance name {name!r} must start with {NAME_PREFIX!r}")
        img = self.image_info()
        t0 = time.monotonic()
        overlay = self._make_overlay(name, img)
        console_log = f"{self.pool_path}/{name}.console.log"
        xml = domain_xml(name=name, spec=spec, cpus=cpus, domain_type=dtype, disk=overlay,
                         kernel=img["kernel"], initrd=img["initrd"], cmdline=img["cmdline"],
                         console_log=console_log, disk_cache=self.disk_cache)
        try:
            dom = self.conn.createXML(xml, libvirt.VIR_DOMAIN_START_AUTODESTROY)
        except libvirt.libvirtError as exc:
            self._remove_file(overlay)
            self._remove_file(console_log)
            raise BackendError(f"libvirt could not start {name} ({dtype}): {exc}") from exc
        inst = LibvirtInstance(self, name, spec, index, cpus, dom=dom, overlay=overlay,
                               console_log=console_log, domain_type=dtype)
        inst.started = t0
        facts = domain_facts(dom.XMLDesc(0))
        inst.metadata["libvirt_memory_mb"] = facts["memory_mb"]
        inst.metadata["libvirt_vcpus"] = facts["vcpus"]
        return inst

    # -- storage: overlays and console logs -------------------------------
    def _pool(self):
        with self._lock:
            try:
                pool = self.conn.storagePoolLookupByName(self.pool_name)
            except libvirt.libvirtError:
                try:
                    pool = self.conn.storagePoolCreateXML(
                        pool_xml(self.pool_name, self.pool_path),
                        libvirt.VIR_STORAGE_POOL_CREATE_WITH_BUILD)
                except libvirt.libvirtError:  # another process made it meanwhile
                    pool = self.conn.storagePoolLookupByName(self.pool_name)
            if not pool.isActive():
                pool.create(0)
            return pool

    def _make_overlay(self, name: str, img: dict) -> str:
        pool = self._pool()
        xml = overlay_volume_xml(f"{name}.qcow2", img["disk"], img.get("format", "qcow2"),
                                 int(img.get("size_mb", 0)) << 20)
        try:
            vol = pool.createXML(xml, 0)
        except libvirt.libvirtError as exc:
            raise BackendError(f"could not create the overlay of {img['disk']} for {name} "
                               f"in pool {self.pool_name}: {exc}") from exc
        return vol.path()

    def _remove_domain(self, name: str) -> None:
        try:
            dom = self.conn.lookupByName(name)
        except libvirt.libvirtError as exc:
            if _gone(exc):
                return
            raise BackendError(f"looking up {name} for teardown: {exc}") from exc
        for step in ("destroy", "undefine"):
            try:
                if step == "destroy" and dom.isActive():
                    dom.destroy()
                elif step == "undefine" and dom.isPersistent():
                    dom.undefine()
            except libvirt.libvirtError as exc:
                if not _gone(exc):
                    raise BackendError(f"{step} of {name} failed: {exc}") from exc

    def _remove_file(self, path: str) -> None:
        if self.local:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise BackendError(f"could not remove {path}: {exc}") from exc
            self._refresh_pool()
            return
        try:
            pool = self._pool()
            pool.refresh(0)
            pool.storageVolLookupByName(os.path.basename(path)).delete(0)
        except libvirt.libvirtError as exc:
            if not _gone(exc):
                raise BackendError(f"could not remove {path} on {self.uri}: {exc}") from exc

    def _refresh_pool(self) -> None:
        try:
            self.conn.storagePoolLookupByName(self.pool_name).refresh(0)
        except libvirt.libvirtError:
            pass

    def _console_tail(self, path: str, lines: int = 30) -> str:
        try:
            if self.local:
                data = Path(path).read_bytes()[-16384:]
            else:
                pool = self._pool()
                pool.refresh(0)
                vol = pool.storageVolLookupByName(os.path.basename(path))
                stream = self.conn.newStream(0)
                vol.download(stream, 0, 0, 0)
                chunks = []
                stream.recvAll(lambda _s, buf, acc: acc.append(buf), chunks)
                stream.finish()
                data = b"".join(chunks)[-16384:]
        except (OSError, libvirt.libvirtError) as exc:
            return f"(serial console log {path} unreadable: {exc})"
        text = data.decode("utf-8", errors="replace").replace("\r", "")
        return "\n".join(text.splitlines()[-lines:]) or "(serial console empty)"

    # -- fingerprint -------------------------------------------------------
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
            "domain_type_reason": reason,     # stable; the probe's details: self.probe_detail
            "host": conn.getHostname(),
            "guest_kernel": img.get("kernel_version"),
            "vm_image": img.get("hash"),
        }

    def list_labkit(self) -> list[str]:
        """Names of every domain whose name starts with ``labkit-`` (running or defined)."""
        return [d.name() for d in self.conn.listAllDomains(0) if d.name().startswith(NAME_PREFIX)]

    def cleanup(self, prefix: str) -> list[str]:
        """Remove domains, overlays and console logs named ``prefix*`` left by a killed process.

        Domains die with their connection (AUTODESTROY), so usually only files remain.
        """
        if not prefix.startswith(NAME_PREFIX):
            raise BackendError(f"cleanup prefix must start with {NAME_PREFIX!r}, got {prefix!r}")
        removed = []
        for name in self.list_labkit():
            if name.startswith(prefix):
                self._remove_domain(name)
                removed.append(name)
        if self.local:
            for f in self.list_overlays():
                if f.startswith(prefix):
                    self._remove_file(os.path.join(self.pool_path, f))
                    removed.append(f)
        else:
            try:
                pool = self._pool()
                pool.refresh(0)
                for vol in pool.listAllVolumes(0):
                    if vol.name().startswith(prefix):
                        vol.delete(0)
                        removed.append(vol.name())
            except libvirt.libvirtError as exc:
                raise BackendError(f"cleanup of {prefix}* on {self.uri}: {exc}") from exc
        return removed

    def list_overlays(self) -> list[str]:
        """Files named ``labkit-*`` (overlays, console logs) in the local overlay directory."""
        if not (self.local and os.path.isdir(self.pool_path)):
            return []
        return sorted(f for f in os.listdir(self.pool_path) if f.startswith(NAME_PREFIX))
