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

This package only gathers the public names; each lives in the module named for what it owns:
:mod:`~labkit.images.builder` (:func:`build` and its targets), :mod:`~labkit.images.fallback_cli`
(``python -m labkit.images`` and the variant options), :mod:`~labkit.images.sdks` (the optional
SDKs), and one module per step (:mod:`~labkit.images.rootfs`, :mod:`~labkit.images.docker_image`,
:mod:`~labkit.images.lxd_image`, :mod:`~labkit.images.vm`).
"""

from __future__ import annotations

from .builder import TARGETS, build, check_targets
from .fallback_cli import add_variant_arguments, main
from .sdks import sdk

__all__ = ["TARGETS", "add_variant_arguments", "build", "check_targets", "main", "sdk"]
