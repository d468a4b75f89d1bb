"""Storage for the libvirt backend: the VM image description, overlays and console logs.

The VM image is a directory holding ``image.json`` (written by ``labkit images
build --vm``): the base disk, kernel and initrd (file names relative to the
directory), the kernel command line, and facts recorded with every run::

    {"disk": "base.qcow2", "format": "qcow2", "kernel": "vmlinuz", "initrd": "initrd.img",
     "cmdline": "root=/dev/vda rw console=ttyS0 init=/sbin/labkit-init quiet",
     "size_mb": 2048, "kernel_version": "6.1.0-...-cloud-amd64", "hash": "..."}

The backend is given that directory (or its ``image.json``) as its ``image``
option; without it, ``$LABKIT_VM_IMAGE``, else the image that
``<image cache>/vm-current.json`` points to (the cache is
``$LABKIT_IMAGE_CACHE``, default ``/var/cache/labkit/images``).

Each VM boots a disk that is a volume of the libvirt storage pool ``labkit``
(at ``/var/lib/libvirt/images/labkit`` on ``qemu:///system``; on ``qemu:///session``, the
user's own daemon, at :func:`session_pool_path` in the user's data dir; the ``pool_path`` option
says otherwise), made as the backend's ``disk_format`` option says (:meth:`Pool.disk`): ``qcow2``
(the default), a copy-on-write overlay of the base disk; ``raw``, a full raw copy
of it (``qemu-img convert``: every block of the base is in the file, which is
sparse where the base holds zeros; a local daemon only). Its serial console log
lies beside it. Every other file operation goes through the pool API, so the same
code serves a local daemon and a remote one (``qemu+ssh://``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree

import libvirt

from ...core.host_commands import run_host
from ...core.waiting import retry
from ...errors import BackendError, BackendUnavailable, ConfigError
from .xml import overlay_volume_xml, pool_xml

log = logging.getLogger("labkit.backends.libvirt")

DEFAULT_CACHE = "/var/cache/labkit/images"
MISSING = "VM image missing: run `labkit images build --vm`"
#: Keys image.json must hold (file names are relative to its directory).
IMAGE_FILES = ("disk", "kernel", "initrd")
CONSOLE_TAIL_BYTES = 16384
#: longest a raw copy of the base disk may take (qemu-img convert)
RAW_COPY_TIMEOUT_S = 900
#: longest remove() waits for another process's volume build in the pool to end
BUSY_POOL_WAIT_S = 60


def session_pool_path() -> str:
    """Where the ``labkit`` pool of a ``qemu:///session`` daemon lives unless ``pool_path`` says
    otherwise: ``$XDG_DATA_HOME/labkit/libvirt-pool`` (default ``~/.local/share/labkit/libvirt-pool``),
    the user's own (libvirt creates it; the system pool's directory is root's)."""
    data = os.environ.get("XDG_DATA_HOME")
    base = Path(data) if data and os.path.isabs(data) else Path("~/.local/share").expanduser()
    return str(base / "labkit" / "libvirt-pool")


def image_cache() -> Path:
    """Where ``labkit images`` keeps images (``$LABKIT_IMAGE_CACHE``)."""
    return Path(os.environ.get("LABKIT_IMAGE_CACHE", DEFAULT_CACHE))


def load_image(image: str | os.PathLike | None = None) -> dict:
    """The VM image description with absolute ``disk``, ``kernel``, ``initrd`` and ``dir``.

    ``image``: the image directory or its ``image.json``, a pointer file naming one
    (``vm-current.json``, ``vm-<variant>.json``), or an image variant's name (``mpi``:
    ``<image cache>/vm-mpi.json``); None: ``$LABKIT_VM_IMAGE``, else the image named by
    ``<image cache>/vm-current.json``. Only the files
    on this machine are checked (a remote daemon needs the same paths).
    Raises BackendUnavailable saying how to build it, ConfigError for a malformed file.
    """
    image = image or os.environ.get("LABKIT_VM_IMAGE")
    if not image:
        pointer = image_cache() / "vm-current.json"
        try:
            image = json.loads(pointer.read_text())["image"]
        except (OSError, ValueError, KeyError, TypeError):
            raise BackendUnavailable(f"{MISSING} (no image named in {pointer})") from None
    image = str(image)
    if "/" not in image and not image.endswith(".json"):  # a variant's name
        image = str(image_cache() / f"vm-{image}.json")
    if image.endswith(".json") and Path(image).name != "image.json":  # a pointer file
        try:
            image = json.loads(Path(image).read_text())["image"]
        except (OSError, ValueError, KeyError, TypeError):
            raise BackendUnavailable(
                f"{MISSING} (no image named in {image}; build a variant "
                "with: labkit images build --vm --profile <name>)"
            ) from None
    path = Path(image)
    meta = path if path.name == "image.json" else path / "image.json"
    try:
        info = json.loads(meta.read_text())
    except OSError:
        raise BackendUnavailable(f"{MISSING} ({meta} is absent)") from None
    except ValueError as exc:
        raise ConfigError(f"libvirt option image: {meta} is not JSON: {exc}") from None
    if not isinstance(info, dict) or not all(isinstance(info.get(k), str) for k in (*IMAGE_FILES, "cmdline")):
        raise ConfigError(
            f"libvirt option image: {meta} must hold the strings {', '.join((*IMAGE_FILES, 'cmdline'))}"
        )
    for key in IMAGE_FILES:
        info[key] = str(meta.parent / info[key])
        if not Path(info[key]).exists():
            raise BackendUnavailable(f"{MISSING} ({info[key]} is missing)")
    info["dir"] = str(meta.parent)
    return info


def gone(exc: libvirt.libvirtError) -> bool:
    """The error says the domain or volume does not exist (any more)."""
    return exc.get_error_code() in (
        libvirt.VIR_ERR_NO_DOMAIN,
        libvirt.VIR_ERR_OPERATION_INVALID,
        libvirt.VIR_ERR_NO_STORAGE_VOL,
    )


def pool_busy(exc: BaseException) -> bool:
    """The error is libvirt's refusal to refresh a pool while a volume is being built in it
    ("pool ... has asynchronous jobs running": storagePoolRefresh reports it as an internal
    error of the storage driver, VIR_ERR_INTERNAL_ERROR from VIR_FROM_STORAGE)."""
    return (
        isinstance(exc, libvirt.libvirtError)
        and exc.get_error_code() == libvirt.VIR_ERR_INTERNAL_ERROR
        and exc.get_error_domain() == libvirt.VIR_FROM_STORAGE
    )


class Pool:
    """The storage pool holding overlays and console logs, on one libvirt connection."""

    def __init__(self, conn_of: Callable[[], libvirt.virConnect], name: str, path: str):
        self._conn_of = conn_of  # a callable: the backend's (lazily opened) connection
        self.name, self.path = name, path
        self._lock = threading.Lock()
        self._checked = False  # whether self.path was read back from the pool

    def pool(self) -> libvirt.virStoragePool:
        """The ``virStoragePool``, defined (transient) and started if needed."""
        conn = self._conn_of()
        with self._lock:
            try:
                pool = conn.storagePoolLookupByName(self.name)
            except libvirt.libvirtError:
                try:
                    pool = conn.storagePoolCreateXML(
                        pool_xml(self.name, self.path), libvirt.VIR_STORAGE_POOL_CREATE_WITH_BUILD
                    )
                except libvirt.libvirtError as exc:
                    try:  # another process made it meanwhile
                        pool = conn.storagePoolLookupByName(self.name)
                    except libvirt.libvirtError:
                        raise ConfigError(
                            f"libvirt storage pool {self.name} could not be made at {self.path}: {exc}; "
                            "set the libvirt option pool_path to a directory this user may create and "
                            "write (e.g. --backend-option pool_path=$HOME/labkit-pool), or name an existing pool "
                            "with the pool option"
                        ) from exc
            if not pool.isActive():
                pool.create(0)
            if not self._checked:  # a pool defined before (by hand, or another labkit) decides where
                self._checked = True
                try:
                    where = ElementTree.fromstring(pool.XMLDesc(0)).findtext("target/path")
                except (libvirt.libvirtError, ElementTree.ParseError):
                    where = None
                if where and where != self.path:
                    log.info(
                        "libvirt pool %s is at %s, not %s: its files go there", self.name, where, self.path
                    )
                    self.path = where
            return pool

    def overlay(self, name: str, img: dict) -> str:
        """Path of a new qcow2 overlay ``<name>.qcow2`` over the image's base disk."""
        xml = overlay_volume_xml(
            f"{name}.qcow2", img["disk"], img.get("format", "qcow2"), int(img.get("size_mb", 0)) << 20
        )
        try:
            return self.pool().createXML(xml, 0).path()
        except libvirt.libvirtError as exc:
            raise BackendError(
                f"could not create the overlay of {img['disk']} for {name} in pool {self.name}: {exc}"
            ) from exc

    def disk(self, name: str, img: dict, disk_format: str = "qcow2") -> str:
        """Path of a new disk for domain ``name``: :meth:`overlay` for ``qcow2``, :meth:`raw_copy`
        for ``raw``."""
        return self.raw_copy(name, img) if disk_format == "raw" else self.overlay(name, img)

    def raw_copy(self, name: str, img: dict) -> str:
        """Path of ``<name>.raw`` in the pool: the image's base disk converted to raw with
        ``qemu-img convert`` (mode 0600; libvirt hands it to QEMU's user at start). The pool
        must be on this machine. BackendError with qemu-img's message if it fails."""
        self.pool()  # the pool's directory exists
        dest = f"{self.path}/{name}.raw"
        argv = ["qemu-img", "convert", "-q", "-f", img.get("format", "qcow2"), "-O", "raw", img["disk"], dest]
        try:  # made here first, private: never someone else's file, and qemu-img keeps the mode
            os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as exc:
            raise BackendError(f"could not create {dest} for the raw disk of {name}: {exc}") from exc
        try:
            run_host(
                argv,
                what=f"could not make the raw copy of {img['disk']} for {name}",
                timeout=RAW_COPY_TIMEOUT_S,
            )
        except BackendError:
            os.unlink(dest)
            raise
        return dest  # remove() and volumes() refresh the pool, so they find it

    def console_log(self, name: str) -> str:
        """Where the serial console of domain ``name`` is written (in the pool's directory)."""
        self.pool()  # the pool's directory as libvirt has it
        return f"{self.path}/{name}.console.log"

    def refreshed(self) -> libvirt.virStoragePool:
        """The pool, refreshed (its directory read again); while another process builds a volume in
        it libvirt refuses the refresh (:func:`pool_busy`): retried for up to :data:`BUSY_POOL_WAIT_S`."""

        def refresh() -> libvirt.virStoragePool:
            pool = self.pool()
            pool.refresh(0)
            return pool

        return retry(
            refresh,
            transient=pool_busy,
            what=f"refreshing pool {self.name}",
            timeout=BUSY_POOL_WAIT_S,
            interval=0.5,
            backoff=1,
        )

    def volumes(self, prefix: str) -> list[str]:
        """Names of the pool's files starting with ``prefix`` (disks and console logs)."""
        try:
            pool = self.refreshed()
            return sorted(v.name() for v in pool.listAllVolumes(0) if v.name().startswith(prefix))
        except libvirt.libvirtError as exc:
            raise BackendError(f"listing pool {self.name}: {exc}") from exc

    def made(self, prefix: str) -> dict[str, float]:
        """Volume name -> when it was made, for the pool's files starting with ``prefix``: the birth
        time libvirt reports (``<timestamps><btime>``), else the last change (``ctime``); files
        without either are left out."""
        out = {}
        try:
            pool = self.refreshed()
            for vol in pool.listAllVolumes(0):
                if not vol.name().startswith(prefix):
                    continue
                stamps = ElementTree.fromstring(vol.XMLDesc(0)).find("target/timestamps")
                times = [] if stamps is None else [float(stamps.findtext(k) or 0) for k in ("btime", "ctime")]
                when = next((t for t in times if t > 0), None)  # a file system without birth times says 0
                if when is not None:
                    out[vol.name()] = when
        except (libvirt.libvirtError, ElementTree.ParseError, ValueError) as exc:
            log.debug("pool %s: times of %s* unreadable: %s", self.name, prefix, exc)
        return out

    def remove(self, path: str) -> None:
        """Delete the pool file ``path`` (quiet when it is already gone). While another process
        builds a volume in the pool, libvirt refuses to refresh it (:func:`pool_busy`): retried
        for up to :data:`BUSY_POOL_WAIT_S`."""

        def delete() -> None:
            pool = self.pool()
            pool.refresh(0)
            pool.storageVolLookupByName(os.path.basename(path)).delete(0)

        try:
            retry(
                delete,
                transient=pool_busy,
                what=f"removing {path} from pool {self.name}",
                timeout=BUSY_POOL_WAIT_S,
                interval=0.5,
                backoff=1,
            )
        except libvirt.libvirtError as exc:
            if not gone(exc):
                raise BackendError(f"could not remove {path} from pool {self.name}: {exc}") from exc

    def tail(self, path: str, lines: int = 30) -> str:
        """The last ``lines`` lines of a console log (or why it could not be read)."""
        try:
            pool = self.pool()
            pool.refresh(0)
            vol = pool.storageVolLookupByName(os.path.basename(path))
            size = vol.info()[1]
            offset = max(0, size - CONSOLE_TAIL_BYTES)
            stream = self._conn_of().newStream(0)
            vol.download(stream, offset, size - offset, 0)
            chunks: list[bytes] = []
            stream.recvAll(lambda _s, buf, acc: acc.append(buf), chunks)
            stream.finish()
        except libvirt.libvirtError as exc:
            return f"(serial console log {path} unreadable: {exc})"
        text = b"".join(chunks).decode("utf-8", errors="replace").replace("\r", "")
        return "\n".join(text.splitlines()[-lines:]) or "(serial console empty)"
