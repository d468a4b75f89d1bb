"""Import the labkit rootfs tarball into LXD under the alias ``labkit-debian-12``.

LXD's split image format: a small metadata tarball (``metadata.yaml``) plus the
rootfs tarball, the equivalent of ``lxc image import meta.tar rootfs.tar --alias
labkit-debian-12``, through pylxd's client. The rootfs hash is stored as the image
property ``labkit.hash``: an image with the same hash is not imported again.
"""
from __future__ import annotations

import hashlib
import io
import platform
import tarfile
import time
from pathlib import Path

from ..errors import BackendError

ALIAS = "labkit-debian-12"
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def metadata_tarball(h: str, created: int | None = None) -> bytes:
    """A deterministic tarball holding LXD's ``metadata.yaml`` for rootfs hash ``h``."""
    created = int(created if created is not None else time.time())
    arch = _ARCH.get(platform.machine(), platform.machine())
    yaml = (f"architecture: {arch}\n"
            f"creation_date: {created}\n"
            "properties:\n"
            "  description: labkit Debian 12 (bookworm) benchmark image\n"
            "  os: debian\n"
            "  release: bookworm\n"
            "  version: \"12\"\n"
            f"  labkit.hash: \"{h}\"\n"
            "templates: {}\n").encode()
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


def import_image(tarball: Path, h: str, *, force: bool = False, socket: str | None = None,
                 echo=print) -> dict:
    """Import ``tarball`` as ``labkit-debian-12`` unless that alias already has hash ``h``."""
    from ..backends.lxd import LxdBackend, _sdk

    echo = echo or (lambda *a: None)
    pylxd = _sdk()
    be = LxdBackend(socket=socket)
    client = be.client  # BackendUnavailable with how to start LXD
    try:
        current = _alias_target(client, pylxd)
        if current and not force:
            if client.images.get(current).properties.get("labkit.hash") == h:
                echo(f"LXD image {ALIAS} ({current[:12]}) is up to date; nothing to do")
                return {"alias": ALIAS, "fingerprint": current, "built": False}
        # the stamp's creation date keeps the metadata (hence the fingerprint) stable
        meta = metadata_tarball(h, created=int(tarball.stat().st_mtime))
        fp = _fingerprint(meta, tarball)
        if not client.images.exists(fp):
            echo(f"lxc image import {tarball} --alias {ALIAS}")
            with open(tarball, "rb") as rootfs:
                image = pylxd.models.Image.create(client, rootfs, metadata=meta, public=False)
            fp = image.fingerprint
        else:
            echo(f"LXD already holds image {fp[:12]}; pointing {ALIAS} at it")
        if current and current != fp:
            client.images.get(current).delete_alias(ALIAS)
            _delete_image(client, pylxd, current, echo)
        if current != fp:
            client.images.get(fp).add_alias(ALIAS, f"labkit Debian 12 image (rootfs {h})")
        return {"alias": ALIAS, "fingerprint": fp, "built": True}
    except pylxd.exceptions.LXDAPIException as exc:
        raise BackendError(f"importing {tarball} into LXD failed: {exc}") from exc
    finally:
        be.close()


def _alias_target(client, pylxd) -> str | None:
    try:
        return client.images.get_by_alias(ALIAS).fingerprint
    except pylxd.exceptions.NotFound:
        return None


def _delete_image(client, pylxd, fp: str, echo) -> None:
    try:
        client.images.get(fp).delete(wait=True)
        echo(f"removed stale LXD image {fp[:12]}")
    except pylxd.exceptions.LXDAPIException:
        pass
