"""Import the labkit rootfs tarball into LXD under the alias ``labkit-debian-12``.

LXD's split image format: a small metadata tarball (``metadata.yaml``) plus the
rootfs tarball, the equivalent of ``lxc image import meta.tar rootfs.tar --alias
labkit-debian-12``, through pylxd's client. The rootfs hash is stored as the image
property ``labkit.hash``: an image with the same hash is not imported again.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import platform
import tarfile
import time
from pathlib import Path

from ..errors import BackendError, BackendUnavailable
from .sdks import sdk

log = logging.getLogger("labkit.images")

ALIAS = "labkit-debian-12"
START_HINT = (
    "start LXD (`lxd --group root &`, then `lxd waitready`) or run `bash scripts/setup-containers.sh`"
)
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def metadata_tarball(h: str, created: int | None = None) -> bytes:
    """A deterministic tarball holding LXD's ``metadata.yaml`` for rootfs hash ``h``."""
    created = int(created if created is not None else time.time())
    arch = _ARCH.get(platform.machine(), platform.machine())
    yaml = (
        f"architecture: {arch}\n"
        f"creation_date: {created}\n"
        "properties:\n"
        "  description: labkit Debian 12 (bookworm) benchmark image\n"
        "  os: debian\n"
        "  release: bookworm\n"
        '  version: "12"\n'
        f'  labkit.hash: "{h}"\n'
        "templates: {}\n"
    ).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        info = tarfile.TarInfo("metadata.yaml")
        info.size, info.mode, info.mtime = len(yaml), 0o644, created
        tf.addfile(info, io.BytesIO(yaml))
    return buf.getvalue()


def _fingerprint(meta: bytes, rootfs: Path) -> str:
    """LXD's fingerprint of a split image: sha256 over the metadata then the rootfs."""
    digest = hashlib.sha256(meta)
    with open(rootfs, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def alias(variant: str | None = None) -> str:
    """The alias of the base image (``labkit-debian-12``) or of a variant (``labkit-debian-12-mpi``)."""
    return f"{ALIAS}-{variant}" if variant else ALIAS


def import_image(
    tarball: Path, h: str, *, force: bool = False, socket: str | None = None, variant: str | None = None
) -> dict:
    """Import ``tarball`` as ``labkit-debian-12`` (``-<variant>``) unless that alias already
    has hash ``h``.

    ``socket``: LXD's unix socket (default: pylxd's, from ``$LXD_DIR``).
    Returns ``alias``, ``fingerprint`` and ``built`` (False: the alias was up to date).
    """
    pylxd = sdk("pylxd", "pylxd")
    if socket and not os.path.exists(socket):
        raise BackendUnavailable(f"LXD is not running: no socket at {socket}; {START_HINT}")
    try:
        client = pylxd.Client(endpoint=socket)
    except pylxd.exceptions.ClientConnectionFailed as exc:
        raise BackendUnavailable(f"cannot reach LXD ({exc}); {START_HINT}") from exc
    images = client.images
    name = alias(variant)
    try:
        current = _by_alias(images, pylxd, name)
        if current is not None and not force and current.properties.get("labkit.hash") == h:
            log.info("LXD image %s (%s) is up to date; nothing to do", name, current.fingerprint[:12])
            return {"alias": name, "fingerprint": current.fingerprint, "built": False}
        # the tarball's mtime as creation date keeps the metadata (hence the fingerprint) stable
        meta = metadata_tarball(h, created=int(tarball.stat().st_mtime))
        fp = _fingerprint(meta, tarball)
        if images.exists(fp):
            log.info("LXD already holds image %s; pointing %s at it", fp[:12], name)
            image = images.get(fp)
        else:
            log.info("lxc image import %s --alias %s", tarball, name)
            with open(tarball, "rb") as rootfs:
                image = images.create(rootfs, metadata=meta, public=False, wait=True)
        if current is not None and current.fingerprint != image.fingerprint:
            current.delete_alias(name)
            current.delete(wait=True)
            log.info("removed stale LXD image %s", current.fingerprint[:12])
        if current is None or current.fingerprint != image.fingerprint:
            image.add_alias(name, f"labkit Debian 12 image (rootfs {h})")
        return {"alias": name, "fingerprint": image.fingerprint, "built": True}
    except pylxd.exceptions.LXDAPIException as exc:
        raise BackendError(f"importing {tarball} into LXD failed: {exc}") from exc


def _by_alias(images, pylxd, name: str = ALIAS):
    try:
        return images.get_by_alias(name)
    except pylxd.exceptions.NotFound:
        return None
