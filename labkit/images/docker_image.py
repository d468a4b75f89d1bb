"""Import the labkit rootfs tarball into Docker as ``labkit/debian:12-<hash>`` (+ ``:12``).

The equivalent of ``docker import rootfs.tar labkit/debian:12-<hash>``, through the
docker SDK. Cached: an image already tagged with the same hash is not imported again.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import BackendError, BackendUnavailable
from . import sdk

REPOSITORY = "labkit/debian"
TAG = "12"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def image_names(h: str) -> tuple[str, str]:
    """(the content-addressed name, the moving name) of the image for rootfs hash ``h``."""
    return f"{REPOSITORY}:{TAG}-{h}", f"{REPOSITORY}:{TAG}"


def import_image(tarball: Path, h: str, *, force: bool = False, base_url: str | None = None,
                 echo=print) -> dict:
    """Import ``tarball`` unless an image for ``h`` exists.

    Returns ``image`` (the content-addressed name), ``id`` and ``built`` (False:
    the image was already there).
    """
    docker = sdk("docker", "docker")
    echo = echo or (lambda *a: None)
    base_url = base_url or os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
    try:
        api = docker.APIClient(base_url=base_url, timeout=600)
    except docker.errors.DockerException as exc:
        raise BackendUnavailable(f"cannot reach the Docker daemon at {base_url} ({exc}); start dockerd "
                                 "or run `bash scripts/setup-containers.sh`") from exc
    exact, _ = image_names(h)
    try:
        existing = _image_id(api, docker, exact)
        if existing and not force:
            api.tag(existing, REPOSITORY, TAG, force=True)
            echo(f"docker image {exact} is up to date; nothing to do")
            return {"image": exact, "id": existing, "built": False}
        echo(f"docker import {tarball} {exact}")
        changes = ['CMD ["sleep", "infinity"]', f"ENV PATH={PATH_ENV}", "WORKDIR /tmp/labkit",
                   f"LABEL labkit=1 labkit.hash={h}"]
        api.import_image(src=str(tarball), repository=REPOSITORY, tag=f"{TAG}-{h}", changes=changes)
        new_id = _image_id(api, docker, exact)
        if not new_id:
            raise BackendError(f"docker import of {tarball} did not create {exact}")
        api.tag(new_id, REPOSITORY, TAG, force=True)
        _remove_stale(api, docker, keep=exact, echo=echo)
        return {"image": exact, "id": new_id, "built": True}
    except docker.errors.APIError as exc:
        raise BackendError(f"importing {tarball} into Docker failed: {exc}") from exc
    finally:
        api.close()


def _image_id(api, docker, name: str) -> str | None:
    try:
        return api.inspect_image(name)["Id"]
    except docker.errors.ImageNotFound:
        return None


def _remove_stale(api, docker, keep: str, echo) -> None:
    """Untag older ``labkit/debian:12-<hash>`` images (their layers go when nothing uses them)."""
    for img in api.images(name=REPOSITORY):
        for tag in img.get("RepoTags") or []:
            if tag.startswith(f"{REPOSITORY}:{TAG}-") and tag != keep:
                try:
                    api.remove_image(tag)
                    echo(f"removed stale docker image {tag}")
                except docker.errors.APIError:
                    pass  # still used by a container: leave it
