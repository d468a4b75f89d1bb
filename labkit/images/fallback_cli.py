"""The fallback command line of the images, ``python -m labkit.images build`` (the same as
``labkit images build``), and the variant options both share."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from .builder import TARGETS, build


def add_variant_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--profile``, ``--packages`` and ``--variant`` options of ``images build``."""
    from .rootfs import PROFILES

    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        help="build the image variant of this profile (extra Debian packages: "
        + "; ".join(f"{k}: {','.join(v)}" for k, v in sorted(PROFILES.items()))
        + ")",
    )
    parser.add_argument("--packages", help="comma-separated extra Debian packages for a variant")
    parser.add_argument("--variant", help="the variant's name (default: the profile's, or x<hash>)")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m labkit.images build [--vm] [--force] [--only docker,lxd]`` (fallback CLI)."""
    parser = argparse.ArgumentParser(prog="python -m labkit.images")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the rootfs and the docker/lxd (and VM) images")
    b.add_argument("--vm", action="store_true", help="also build the libvirt VM image")
    b.add_argument("--force", action="store_true", help="rebuild even when cached")
    b.add_argument(
        "--only", default=",".join(TARGETS), help="comma-separated targets among docker,lxd (default: both)"
    )
    add_variant_arguments(b)
    args = parser.parse_args(argv)
    # the builders' progress lines on stderr (basicConfig does nothing when logging is set up)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from ..errors import LabkitError

    try:
        result = build(
            targets=args.only,
            vm=args.vm,
            force=args.force,
            profile=args.profile,
            packages=args.packages,
            variant=args.variant,
        )
    except LabkitError as exc:
        print(f"error: {exc}")
        return 1
    print(f"images ready (rootfs hash {result['hash']})")
    return 0
