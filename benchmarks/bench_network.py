"""Network cost of each platform against the floor: two plain network namespaces and a veth.

For each backend, one run's private network with two 1-vCPU instances on the ``--variant``
image (default ``study``, which carries OpenMPI; ``""`` for the base images): iperf3 TCP
throughput inst1 -> inst0 (median of ``--repeats`` tests of ``--seconds`` s) and an MPI
ping-pong latency (an 8-byte message bounced 2,000 times between one rank in each
instance: :mod:`labkit.workloads.pingpong`, compiled here with ``mpicc``, launched by
labkit's agent; in libvirt guests through the guest-agent relay). libvirt's guests are QEMU
TCG on a machine without nested KVM: their row measures the emulator.
The floor: the same two measurements between two network namespaces joined by one veth
pair (no bridge, no cgroup, no container). Printed: each figure and its ratio to the
floor (throughput: platform / floor, < 1 is slower; latency: platform / floor, > 1 is
slower). A backend that cannot run here (or has no OpenMPI in its image, for the MPI
figure) is listed as skipped with the reason. No assertion: this prints figures.

Network safety: traffic only on the networks made here (removed at the end).
"""

from __future__ import annotations

import argparse
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.backends import get_backend, teardown  # noqa: E402
from labkit.core import network_factors as netmod  # noqa: E402
from labkit.core.instance import InstanceSpec  # noqa: E402
from labkit.errors import LabkitError  # noqa: E402
from labkit.run.platforms import variant_image  # noqa: E402
from labkit.workloads import pingpong as pingpong_prog  # noqa: E402
from labkit.workloads.iperf3 import measure  # noqa: E402
from labkit.workloads.mpi import agent_script, launch, mpirun_argv  # noqa: E402


def build_pingpong(workdir: Path) -> Path:
    return Path(pingpong_prog.build(str(workdir)))


def latency(text: str) -> float:
    return next(r.value for r in pingpong_prog.parse(text) if r.metric == "pingpong_latency_us")


def pingpong(instances, binary: Path) -> float:
    for inst in instances:
        inst.put(binary, "/tmp/labkit-pingpong", 0o755)
    res, _, _ = launch(instances, ["/tmp/labkit-pingpong"], ranks=2, timeout=600)
    return latency(res.stdout)


def pingpong_floor(a, b, binary: Path, workdir: Path) -> float:
    """The floor's ping-pong: mpirun inside namespace ``a`` (the host is on no network here)."""
    agent = workdir / "agent"
    wdir = str(workdir / "mpi")  # each instance's OpenMPI session root lives under it
    agent.write_text(agent_script([a, b], wdir))
    agent.chmod(0o700)
    argv = a.host_command(mpirun_argv([a, b], str(agent), 2, wdir, [str(binary)]))
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True)
    return latency(res.stdout)


def throughput(server, client, seconds: int, repeats: int) -> float:
    vals = []
    for _ in range(repeats):
        rows = measure(server, client, server.address, protocol="tcp", duration_s=seconds, timeout_s=120)
        vals.append(next(r.value for r in rows if r.metric == "tcp_mbit_per_s"))
    return statistics.median(vals)


class NetnsEnd:
    """One end of the floor: a network namespace on this host (exec via nsenter)."""

    def __init__(self, ns: str, address: str, index: int, network):
        self.name, self.address, self.index, self.network = ns, address, index, network
        self.workdir = "/tmp"

    def host_command(self, argv):
        return ["nsenter", f"--net=/run/netns/{self.name}", "--", *argv]

    def exec(self, argv, timeout=None, check=True, env=None):
        argv = ["sh", "-c", argv] if isinstance(argv, str) else argv
        res = subprocess.run(self.host_command(argv), capture_output=True, text=True, timeout=timeout)
        out = SimpleNamespace(
            ok=res.returncode == 0,
            stdout=res.stdout,
            stderr=res.stderr,
            command=argv,
            exit_code=res.returncode,
        )
        if check and not out.ok:
            raise LabkitError(f"{argv} failed in {self.name}: {res.stderr[-300:]}")
        return out

    def put(self, local, remote, mode=0o755):
        pass  # same filesystem as the host


def floor(seconds, repeats, binary, workdir):
    tag = secrets.token_hex(4)
    subnet = netmod.pick_subnet(f"labkit-bench-{tag}")
    a_ip, b_ip = [str(h) for h in list(subnet.hosts())[:2]]
    ns = [f"labkit-bench-{tag}-a", f"labkit-bench-{tag}-b"]
    net = SimpleNamespace(subnet=str(subnet), peer_subnet=str(subnet))  # no bonded NICs: ranks use it too
    run = netmod.host_output
    try:
        for n in ns:
            run(["ip", "netns", "add", n])
            run(["ip", "-n", n, "link", "set", "lo", "up"])
        run(
            [
                "ip",
                "link",
                "add",
                f"lkb{tag}a",
                "netns",
                ns[0],
                "type",
                "veth",
                "peer",
                "name",
                f"lkb{tag}b",
                "netns",
                ns[1],
            ]
        )
        for n, dev, ip in ((ns[0], f"lkb{tag}a", a_ip), (ns[1], f"lkb{tag}b", b_ip)):
            run(["ip", "-n", n, "addr", "add", f"{ip}/24", "dev", dev])
            run(["ip", "-n", n, "link", "set", dev, "up"])
        a, b = NetnsEnd(ns[0], a_ip, 0, net), NetnsEnd(ns[1], b_ip, 1, net)
        return throughput(a, b, seconds, repeats), pingpong_floor(a, b, binary, workdir) if binary else None
    finally:
        for n in ns:
            subprocess.run(["ip", "netns", "delete", n], capture_output=True)


def platform(name, seconds, repeats, binary, variant: str):
    be = get_backend(name, **({"image": variant_image(name, variant)} if variant and name != "local" else {}))
    pfx = f"labkit-bench-net{secrets.token_hex(2)}--"
    net = be.create_network(pfx, 2)
    insts = []
    try:
        memory = 512 if name == "libvirt" else 256  # a guest's kernel and agent need more
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=memory, count=2), prefix=pfx, network=net)
        tput = throughput(insts[0], insts[1], seconds, repeats)
        lat, why = None, ""
        has_mpi = insts[0].exec(["sh", "-c", "command -v orted"], check=False, timeout=30).ok
        if binary and has_mpi:
            lat = pingpong(insts, binary)
        else:
            why = "no OpenMPI in the image" if binary else "no mpicc on this host"
        return tput, lat, why
    finally:
        teardown(insts)
        net.remove()
        be.cleanup(pfx)
        be.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="local,docker,lxd,libvirt")
    ap.add_argument("--variant", default="study", help="image variant of docker/lxd/libvirt ('' = base)")
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        try:
            binary = build_pingpong(Path(d))
        except (OSError, LabkitError) as exc:
            print(f"MPI ping-pong skipped: cannot build it with mpicc ({exc})")
            binary = None
        f_tput, f_lat = floor(args.seconds, args.repeats, binary, Path(d))
        print(f"{'platform':10} {'iperf3 Mbit/s':>14} {'ratio':>7} {'pingpong us':>12} {'ratio':>7}")
        print(f"{'floor':10} {f_tput:14.0f} {1:7.2f} {f_lat if f_lat else float('nan'):12.2f} {1:7.2f}")
        for name in args.backends.split(","):
            try:
                tput, lat, why = platform(name, args.seconds, args.repeats, binary, args.variant)
            except LabkitError as exc:
                print(f"{name:10} skipped: {str(exc).splitlines()[0][:150]}")
                continue
            lat_s = f"{lat:12.2f} {lat / f_lat:7.2f}" if lat and f_lat else f"{'-':>12} {'-':>7}  ({why})"
            print(f"{name:10} {tput:14.0f} {tput / f_tput:7.2f} {lat_s}")
    print("commands:", shlex.join(sys.argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
