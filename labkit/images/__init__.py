"""Images for the container and VM backends, all made from one Debian 12 rootfs.

``build()`` is what ``labkit images build`` runs::

    rootfs  debootstrap bookworm from this machine's apt mirror + benchmark tools   (rootfs.py)
    docker  docker import  -> labkit/debian:12-<hash>, also tagged labkit/debian:12 (docker_image.py)
    lxd     image import   -> alias labkit-debian-12                                (lxd_image.py)
    vm      (--vm) a disk image for libvirt, made from the same rootfs              (vm.py)

Every step is cached on its inputs: a second build with the same inputs does
nothing and says so. Progress goes to the ``labkit.images`` logger at INFO level (the
command-line entry points show it on the terminal).

Variants add Debian packages (``profile="mpi"`` from ``rootfs.PROFILES``, or
``packages="hpcc,openmpi-bin"``); each carries its name everywhere, beside the base:
``labkit/debian:12-mpi`` (Docker), ``labkit-debian-12-mpi`` (LXD),
``vm-mpi.json`` naming its VM image directory (libvirt). Pass that name as the
backend's ``image`` option.

>>> import labkit.images
>>> labkit.images.build(targets=("docker",))
"""
from __future__ import annotations

import argparse
import importlib
import logging
from collections.abc import Sequence
from types import ModuleType

from ..errors import BackendUnavailable, ConfigError

TARGETS = ("docker", "lxd")


def sdk(module: str, pip_name: str) -> ModuleType:
    """Import an optional SDK (``docker``, ``pylxd``) or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BackendUnavailable(f"importing images needs the {module} SDK for Python, which is not "
                                 f"installed; install it with: pip install {pip_name}") from exc


def _targets(targets: str | Sequence[str] | None) -> tuple[str, ...]:
    if targets is None:
        return TARGETS
    if isinstance(targets, str):
        targets = [t for t in targets.replace(" ", ",").split(",") if t]
    out: list[str] = []
    for t in targets:
        if t not in TARGETS:
            raise ConfigError(f"images build: unknown target {t!r}; allowed: {', '.join(TARGETS)} "
                              "(the VM image is --vm)")
        if t not in out:
            out.append(t)
    return tuple(out)


def build(targets: str | Sequence[str] | None = TARGETS, vm: bool = False, force: bool = False,
          *, profile: str | None = None, packages: str | Sequence[str] | None = None,
          variant: str | None = None) -> dict:
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

    chosen = _targets(targets)
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


def add_variant_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--profile``, ``--packages`` and ``--variant`` options of ``images build``."""
    from .rootfs import PROFILES
    parser.add_argument("--profile", choices=sorted(PROFILES),
                        help="build the image variant of this profile (extra Debian packages: "
                             + "; ".join(f"{k}: {','.join(v)}" for k, v in sorted(PROFILES.items())) + ")")
    parser.add_argument("--packages", help="comma-separated extra Debian packages for a variant")
    parser.add_argument("--variant", help="the variant's name (default: the profile's, or x<hash>)")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m labkit.images build [--vm] [--force] [--only docker,lxd]`` (fallback CLI)."""
    parser = argparse.ArgumentParser(prog="python -m labkit.images")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the rootfs and the docker/lxd (and VM) images")
    b.add_argument("--vm", action="store_true", help="also build the libvirt VM image")
    b.add_argument("--force", action="store_true", help="rebuild even when cached")
    b.add_argument("--only", default=",".join(TARGETS),
                   help="comma-separated targets among docker,lxd (default: both)")
    add_variant_arguments(b)
    args = parser.parse_args(argv)
    # the builders' progress lines on stderr (basicConfig does nothing when logging is set up)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from ..errors import LabkitError
    try:
        result = build(targets=args.only, vm=args.vm, force=args.force, profile=args.profile,
                       packages=args.packages, variant=args.variant)
    except LabkitError as exc:
        print(f"error: {exc}")
        return 1
    print(f"images ready (rootfs hash {result['hash']})")
    return 0
