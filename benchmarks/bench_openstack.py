"""Benchmark: labkit's OpenStack provisioning time against `openstack server create --wait`.

Same cloud, flavor, image, network and key. Each pair (in alternating order) makes one server with
labkit (``OpenStackProvider.provision``: request -> SSH answers) and one with the OpenStack
command line (``openstack server create --wait``, then the same SSH readiness check from the moment
the command was started), and deletes both. Prints each time, the medians and their ratio
labkit / CLI (target <= 1.05: labkit's wait adds no more than 5 %). Makes no timed assertion.
Needs the cloud of scripts/setup-openstack.sh (or ``--cloud``); boots are QEMU TCG on this machine.
Run: ``python benchmarks/bench_openstack.py [--pairs 2] [--flavor labkit.small]``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from labkit.backends.clouds import get_provider  # noqa: E402
from labkit.backends.clouds.openstack import first_address  # noqa: E402


def cli_once(args, provider, prefix: str) -> float:
    """Seconds from `openstack server create --wait` to SSH ready; the server is deleted."""
    name = f"{prefix}cli{secrets.token_hex(3)}"
    keypair = provider._keypair(prefix)
    env = {**os.environ, "OS_CLOUD": args.cloud}
    t0 = time.monotonic()
    subprocess.run(
        [
            args.openstack,
            "server",
            "create",
            "--wait",
            "--flavor",
            args.flavor,
            "--image",
            args.image,
            "--network",
            args.network,
            "--key-name",
            keypair,
            "--property",
            f"labkit-prefix={prefix}",
            name,
            "-f",
            "value",
            "-c",
            "id",
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=args.timeout,
    )
    active = time.monotonic() - t0
    server = provider.conn.compute.find_server(name)
    try:
        address = first_address(server.addresses or {}, args.network)
        provider.wait_new_server(address, t0 + args.timeout, f"cli server {name}")  # as labkit's own servers
        total = time.monotonic() - t0
    finally:
        provider.delete(server.id)
    print(f"  cli     {name}: active {active:6.1f}s, SSH {total:6.1f}s")
    return total


def labkit_once(args, provider, prefix: str) -> float:
    [server] = provider.provision(args.flavor, args.image, prefix)
    try:
        print(f"  labkit  {server.name}: active {server.active_s:6.1f}s, SSH {server.provisioning_s:6.1f}s")
        return server.provisioning_s
    finally:
        provider.destroy([server])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cloud", default=os.environ.get("LABKIT_OS_CLOUD", "labkit"))
    ap.add_argument("--flavor", default="labkit.small")
    ap.add_argument("--image", default="labkit-debian-12")
    ap.add_argument("--network", default="provider")
    ap.add_argument("--key", default=os.environ.get("LABKIT_SSH_KEY", "/root/.ssh/labkit_test_ed25519"))
    ap.add_argument("--pairs", type=int, default=5, help="labkit/CLI pairs (each boots two servers)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--openstack", default=shutil.which("openstack") or "openstack", help="the OpenStack CLI")
    args = ap.parse_args(argv)
    provider = get_provider(
        "openstack",
        cloud=args.cloud,
        network=args.network,
        key_filename=args.key,
        boot_timeout=args.timeout,
        poll_interval=1,
    )
    provider.check()
    prefix = f"labkit-benchos{secrets.token_hex(3)}--"
    lab, cli = [], []
    try:
        for i in range(args.pairs):
            order = (labkit_once, cli_once) if i % 2 == 0 else (cli_once, labkit_once)
            for fn in order:
                (lab if fn is labkit_once else cli).append(fn(args, provider, prefix))
    finally:
        removed = provider.cleanup(prefix)
        if removed:
            print(f"cleanup removed {removed}")
    ml, mc = statistics.median(lab), statistics.median(cli)
    print(f"flavor {args.flavor}, image {args.image}, {args.pairs} pair(s)")
    print(f"labkit provision (request -> SSH): median {ml:.1f}s  {[round(x, 1) for x in lab]}")
    print(f"openstack server create --wait (+ SSH): median {mc:.1f}s  {[round(x, 1) for x in cli]}")
    print(f"ratio labkit / CLI: {ml / mc:.3f} (target <= 1.05)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
