"""Does a guest really boot under KVM here? The libvirt backend's domain-type verdict.

``/dev/kvm`` and libvirt's capabilities can claim KVM where a guest then fails
(nested virtualisation, a broken module). The probe boots the VM image once
under KVM with a short timeout: ``kvm`` when it reaches its guest agent,
``qemu`` (TCG) otherwise. The verdict is cached per URI for the process and,
for a local daemon, in ``<image cache>/../libvirt-probe.json`` until the next
host boot (or a new QEMU or image).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import libvirt

from ...errors import BackendError
from .storage import image_cache

log = logging.getLogger("labkit.backends.libvirt")

_lock = threading.Lock()
_verdicts: dict[str, tuple[str, str, str]] = {}  # uri -> (domain_type, reason, detail)


def cache_file() -> Path:
    return image_cache().parent / "libvirt-probe.json"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def verdict(
    conn: libvirt.virConnect,
    uri: str,
    local: bool,
    image_hash: str | None,
    boot_kvm: Callable[[], None],
    timeout: float,
) -> tuple[str, str, str]:
    """``(domain_type, reason, detail)`` for ``uri``, probing at most once per process.

    ``boot_kvm()`` boots one KVM guest to its agent within ``timeout`` seconds
    and removes it, raising BackendError when it cannot. ``reason`` is stable
    (it goes into the host fingerprint); ``detail`` holds the error or boot time.
    """
    with _lock:
        if uri not in _verdicts:
            _verdicts[uri] = _probe(conn, uri, local, image_hash, boot_kvm, timeout)
        return _verdicts[uri]


def _probe(conn, uri, local, image_hash, boot_kvm, timeout) -> tuple[str, str, str]:
    key = (
        {"uri": uri, "boot_id": _boot_id(), "qemu": conn.getVersion(), "image": image_hash} if local else None
    )
    if key is not None:
        try:
            cached = json.loads(cache_file().read_text())
            if cached.get("key") == key:
                return (
                    cached["domain_type"],
                    cached["reason"],
                    cached.get("detail", "") + " (cached for this host boot)",
                )
        except (OSError, ValueError, KeyError, TypeError):
            pass
    caps = conn.getCapabilities()
    if "<domain type='kvm'" not in caps and '<domain type="kvm"' not in caps:
        dtype, reason, detail = "qemu", "libvirt reports no KVM on this host", ""
    else:
        t0 = time.monotonic()
        try:
            boot_kvm()
            dtype, reason, detail = (
                "kvm",
                "a KVM guest booted to its agent",
                f"in {time.monotonic() - t0:.1f}s",
            )
        except BackendError as exc:
            dtype, reason, detail = (
                "qemu",
                f"a KVM guest did not boot within {timeout:.0f}s; TCG used",
                str(exc),
            )
    log.info("libvirt %s KVM probe: %s (%s)", uri, reason, detail)
    if key is not None:
        try:
            path = cache_file()
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"key": key, "domain_type": dtype, "reason": reason, "detail": detail}))
            os.replace(tmp, path)
        except OSError:
            pass
    return dtype, reason, detail
