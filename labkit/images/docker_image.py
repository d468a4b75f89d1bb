"""Import the labkit rootfs tarball into Docker as ``labkit/debian:12-<hash>`` (+ ``:12``).

The equivalent of ``docker import rootfs.tar labkit/debian:12-<hash>``, through the
docker SDK. Cached: an image already tagged with the same hash is not imported again.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from ..errors import BackendError, BackendUnavailable
from .sdks import sdk

log = logging.getLogger("labkit.images")

REPOSITORY = "labkit/debian"
TAG = "12"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def tag(variant: str | None = None) -> str:
    """The moving tag of the base image (``12``) or of a variant (``12-mpi``)."""
    return f"{TAG}-{variant}" if variant else TAG


def image_names(h: str, variant: str | None = None) -> tuple[str, str]:
    """(the content-addressed name, the moving name) of the image for rootfs hash ``h``:
    ``labkit/debian:12-<hash>`` and ``labkit/debian:12``, or for a variant
    ``labkit/debian:12-<variant>-<hash>`` and ``labkit/debian:12-<variant>``."""
    return f"{REPOSITORY}:{tag(variant)}-{h}", f"{REPOSITORY}:{tag(variant)}"


def import_image(
    tarball: Path, h: str, *, force: bool = False, base_url: str | None = None, variant: str | None = None
) -> dict:
    """Import ``tarball`` unless an image for ``h`` (of ``variant``) exists.

    Returns ``image`` (the content-addressed name), ``tag`` (the moving name), ``id`` and
    ``built`` (False: the image was already there).
    """
    docker = sdk("docker", "docker")
    base_url = base_url or os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
    try:
        api = docker.APIClient(base_url=base_url, timeout=600)
    except docker.errors.DockerException as exc:
        raise BackendUnavailable(
            f"cannot reach the Docker daemon at {base_url} ({exc}); start dockerd "
            "or run `bash scripts/setup-containers.sh`"
        ) from exc
    exact, moving = image_names(h, variant)
    try:
        existing = _image_id(api, docker, exact)
        if existing and not force:
            api.tag(existing, REPOSITORY, tag(variant), force=True)
            log.info("docker image %s is up to date; nothing to do", exact)
            return {"image": exact, "tag": moving, "id": existing, "built": False}
        log.info("docker import %s %s", tarball, exact)
        changes = [
            'CMD ["sleep", "infinity"]',
            f"ENV PATH={PATH_ENV}",
            "WORKDIR /tmp/labkit",
            f"LABEL labkit=1 labkit.hash={h}",
        ]
        api.import_image(src=str(tarball), repository=REPOSITORY, tag=f"{tag(variant)}-{h}", changes=changes)
        new_id = _image_id(api, docker, exact)
        if not new_id:
            raise BackendError(f"docker import of {tarball} did not create {exact}")
        api.tag(new_id, REPOSITORY, tag(variant), force=True)
        _remove_stale(api, docker, keep=exact, variant=variant)
        return {"image": exact, "tag": moving, "id": new_id, "built": True}
    except docker.errors.APIError as exc:
        raise BackendError(f"importing {tarball} into Docker failed: {exc}") from exc
    finally:
        api.close()


def _image_id(api, docker, name: str) -> str | None:
    try:
        return api.inspect_image(name)["Id"]
    except docker.errors.ImageNotFound:
        return None


def _remove_stale(api, docker, keep: str, variant: str | None = None) -> None:
    """Untag older ``labkit/debian:12[-<variant>]-<hash>`` images of the same variant (their
    layers go when nothing uses them); other variants' images stay."""
    family = re.compile(re.escape(f"{REPOSITORY}:{tag(variant)}-") + "[0-9a-f]{12}")
    for img in api.images(name=REPOSITORY):
        for name in img.get("RepoTags") or []:
            if family.fullmatch(name) and name != keep:
                try:
                    api.remove_image(name)
                    log.info("removed stale docker image %s", name)
                except docker.errors.APIError:
                    pass  # still used by a container: leave it
