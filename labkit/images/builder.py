"""The build of the images: the rootfs, then each target's import of it (:func:`build`, what
``labkit images build`` runs; the steps are described in :mod:`labkit.images`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError

#: the images :func:`build` imports the rootfs into (the VM image is asked for apart: ``vm=True``)
TARGETS = ("docker", "lxd")


def check_targets(targets: str | Sequence[str] | None) -> tuple[str, ...]:
    """The targets asked (a sequence, or a comma- or space-separated string; None: all of
    :data:`TARGETS`), each once, in order; ConfigError naming an unknown one."""
    if targets is None:
        return TARGETS
    if isinstance(targets, str):
        targets = [t for t in targets.replace(" ", ",").split(",") if t]
    out: list[str] = []
    for t in targets:
        if t not in TARGETS:
            raise ConfigError(
                f"images build: unknown target {t!r}; allowed: {', '.join(TARGETS)} (the VM image is --vm)"
            )
        if t not in out:
            out.append(t)
    return tuple(out)


def build(
    targets: str | Sequence[str] | None = TARGETS,
    vm: bool = False,
    force: bool = False,
    *,
    profile: str | None = None,
    packages: str | Sequence[str] | None = None,
    variant: str | None = None,
) -> dict:
    """Build the rootfs and import it into each target; returns what each step did.

    ``targets``: a sequence or comma-separated string of ``docker``, ``lxd``
    (empty: only the rootfs). ``vm``: also build the libvirt VM image.
    ``force``: rebuild everything even when cached (progress: INFO lines on the
    ``labkit.images`` logger). ``profile`` / ``packages`` / ``variant``: build the image
    variant with those extra Debian packages (see :func:`labkit.images.rootfs.variant`)
    instead of the base image.

    Returned keys: ``rootfs`` (path), ``hash`` (image content hash), ``variant`` (None
    for the base), ``packages`` (the extra ones), ``docker``, ``lxd`` and ``vm`` (each the
    importer's result, with ``built`` False when the cache was used), only for the
    targets asked.
    """
    from .rootfs import build_rootfs, image_hash, rootfs_tarball
    from .rootfs import variant as make_variant

    chosen = check_targets(targets)
    var = make_variant(profile, packages, variant)
    path = build_rootfs(force=force, var=var)
    h = image_hash(path)
    result: dict = {"rootfs": str(path), "hash": h, "variant": var.name, "packages": list(var.extra)}
    if chosen:
        tarball = rootfs_tarball(path, force=force)
        result["tarball"] = str(tarball)
        if "docker" in chosen:
            from .docker_image import import_image as import_docker

            result["docker"] = import_docker(tarball, h, force=force, variant=var.name)
        if "lxd" in chosen:
            from .lxd_image import import_image as import_lxd

            result["lxd"] = import_lxd(tarball, h, force=force, variant=var.name)
    if vm:
        from .vm import build_vm_image  # the libvirt image, written by its own module

        result["vm"] = build_vm_image(path, force=force, variant=var.name)
    return result
