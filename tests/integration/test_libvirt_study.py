"""Seed 004's and seed 002's workloads across two libvirt guests, on the ``study`` VM image
(``labkit images build --only none --vm --profile study``, which scripts/setup-libvirt.sh builds):
Apache httpd in inst0 with ab in inst1 and ab on the host against both, MariaDB in inst0 with
sysbench OLTP from inst1, bonnie++ (O_DIRECT) on a guest's own disk, and MPI ranks in both
guests (mpirun on the host starts each guest's orted through the guest agent: the guests run
no SSH server), an MPI ping-pong between them among it.

One provision (2 VMs, 512 MiB, 1 vCPU each; QEMU TCG on this machine) serves every workload,
on a private network whose guests also bond 2 NICs (``nics=2``): the workloads between guests
use the bonded data addresses, and the ping-pong's bytes are seen on both bonded taps.
Only positive figures are asserted, never a nominal rate: the guests are emulated and the
machine is shared. Afterwards no domain, disk or network named with the test's prefix remains.

Network safety: the only traffic is on the run's private network made here.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import time

import pytest

from labkit.backends import get_backend, teardown
from labkit.backends.testing import required
from labkit.core.instance import InstanceSpec
from labkit.errors import BackendUnavailable, BenchmarkError
from labkit.workloads import get_workload, mpi, pingpong
from labkit.workloads.mpi import launch

from . import workload_checks as checks

pytestmark = [pytest.mark.libvirt, pytest.mark.network, pytest.mark.slow]  # two TCG boots, ~3-5 min
IMAGE = "study"
BUILD = "labkit images build --only none --vm --profile study"


def _unavailable(why: str):
    (pytest.fail if {"libvirt", "network"} & set(required()) else pytest.skip)(why)


@pytest.fixture(scope="module")
def guests():
    if shutil.which("ab") is None:
        _unavailable("needs ab on this host (scripts/setup-tools.sh)")
    try:
        be = get_backend("libvirt", image=IMAGE)  # checks libvirtd and the image
    except BackendUnavailable as exc:
        _unavailable(f"libvirt or its {IMAGE!r} VM image is unavailable ({exc}); build it with: {BUILD}")
    pfx = f"labkit-test-lvstudy{secrets.token_hex(2)}--"
    net, insts = None, []
    try:
        net = be.create_network(pfx, 2, nics=2)
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=512, count=2), prefix=pfx, network=net)
        yield be, net, insts
    finally:
        errors = teardown(insts)
        if net is not None:
            net.remove()
        try:
            assert errors == []
            assert be.list_labkit(pfx) == [] and be.list_overlays(pfx) == []
        finally:
            be.cleanup(pfx)
            be.close()


def test_the_study_image_carries_the_tools(guests):
    be, net, (a, b) = guests
    base = get_backend("libvirt")
    try:
        assert be.fingerprint()["vm_image"] != base.image_info().get("hash")  # not the base image
    finally:
        base.close()
    for tool in ("mariadbd", "bonnie++", "sysbench", "apache2", "ab"):
        assert a.exec(["sh", "-c", f"command -v {tool}"], check=False, timeout=60).ok, tool


def test_apache_in_one_guest_ab_in_the_other(guests):
    be, net, (a, b) = guests
    checks.apache_across(a, b, requests=200, concurrency=4)


def test_apache_ab_on_the_host_against_both_guests(guests):
    be, net, (a, b) = guests
    checks.apache_from_host(a, b, requests=200, concurrency=4)


def test_sysbench_oltp_against_mariadb_in_the_other_guest(guests):
    be, net, (a, b) = guests
    checks.oltp_across(a, b, table_size=500, time_s=3, timeout=60)


def test_bonnie_block_write_on_a_guest_disk(guests):
    be, net, (a, b) = guests
    checks.bonnie_in(a, size_mb=128, timeout=60)


def _need_mpirun():
    if shutil.which("mpirun") is None or shutil.which("mpicc") is None:
        _unavailable("needs mpirun and mpicc on this host (apt-get install openmpi-bin libopenmpi-dev)")


def test_mpi_ranks_run_in_both_guests(guests):
    """mpirun on the host starts one rank in each guest: the launch agent's command for a guest
    is the guest-agent relay (``LibvirtInstance.host_command``); each rank prints its guest's
    address, and both are in mpirun's output."""
    be, net, (a, b) = guests
    _need_mpirun()
    res, _, _ = launch([a, b], ["ip", "-4", "-o", "addr", "show", "dev", "eth0"], ranks=2, timeout=300)
    seen = {addr for addr in net.addresses if addr + "/" in res.stdout}
    assert seen == set(net.addresses), res.stdout


def test_mpi_daemon_that_dies_in_a_guest_fails_the_launch(guests, monkeypatch):
    """The relay ends with the guest's orted: one that dies at start (no usable out-of-band
    transport in inst1) fails the launch with mpirun's error instead of a hang until the
    timeout (which would raise CommandTimeout, not BenchmarkError)."""
    be, net, (a, b) = guests
    _need_mpirun()
    real = mpi.agent_script

    def broken(instances, wdir):
        return "\n".join(
            ln.replace('"$*" ;;', '"$* -mca oob ^tcp" ;;') if ln.lstrip().startswith(f"{b.address}|") else ln
            for ln in real(instances, wdir).split("\n")
        )

    monkeypatch.setattr(mpi, "agent_script", broken)
    with pytest.raises(BenchmarkError, match=r"mpirun failed \(exit (?!137)"):
        launch([a, b], ["true"], ranks=2, timeout=200)


def test_mpi_pingpong_between_guests(guests, tmp_path):
    """Seed 003's ping-pong between ranks in two guests, over the run's bonded NICs: the
    binary is built on the host (the guests carry the same OpenMPI) and copied into both."""
    be, net, (a, b) = guests
    _need_mpirun()
    binary = pingpong.build(str(tmp_path))
    for g in (a, b):
        g.put(binary, "/opt/labkit/labkit-pingpong", 0o755)
    wl = get_workload(
        "mpi",
        program="/opt/labkit/labkit-pingpong",
        ranks=2,
        parser="labkit.workloads.pingpong:parse",
        timeout_s=300,
    )
    taps = b.metadata["network"]["data_devices"]  # b's two bonded NICs, host side
    before = {t: _tx_bytes(t) for t in [b.host_device, *taps]}
    got = {r.metric: r.value for r in wl.run_group([a, b], {})}
    into_b = {t: _tx_bytes(t) - before[t] for t in before}
    # the ranks' messages (MiB-sized) cross both bonded NICs; mpirun's own traffic is on eth0
    assert all(into_b[t] > 1_000_000 for t in taps), into_b
    assert sum(into_b[t] for t in taps) > into_b[b.host_device], into_b
    # physical bounds only: a TCP round trip between two emulated guests takes more than 1 us,
    # and 1 MiB messages cannot cross a virtual link faster than 100 GB/s
    assert 1 < got["pingpong_latency_us"] < 1e6, got
    assert 0 < got["pingpong_bandwidth_mb_per_s"] < 1e5, got
    assert got["wall_time_s"] > 0


def _tx_bytes(device: str) -> int:
    with open(f"/sys/class/net/{device}/statistics/tx_bytes") as f:
        return int(f.read())


def test_link_delay_is_netem_in_the_guest():
    """A link's delay on a host kernel without netem (this machine's): the guest delays its own
    egress (the image's sch_netem), the host-side tap carries the rate. A TCP connect from the
    host to the guest takes one round trip, whose guest-to-host half is delayed: at least the
    20 ms delay (an emulated guest answers a SYN in well under that unshaped)."""
    from labkit.workloads.iperf3 import start_server, stop_server

    try:
        be = get_backend("libvirt", image=IMAGE)
    except BackendUnavailable as exc:
        _unavailable(f"libvirt or its {IMAGE!r} VM image is unavailable ({exc}); build it with: {BUILD}")
    pfx = f"labkit-test-lvdelay{secrets.token_hex(2)}--"
    net, insts = be.create_network(pfx, 1, "100mbit/20ms"), []
    try:
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=512, count=1), prefix=pfx, network=net)
        g = insts[0]
        qdisc = g.exec(["tc", "qdisc", "show", "dev", "eth0"], timeout=30).stdout
        assert "netem" in qdisc and "delay 20ms" in qdisc, qdisc
        on_tap = subprocess.run(
            ["tc", "qdisc", "show", "dev", g.host_device], capture_output=True, text=True, timeout=30
        ).stdout
        assert "tbf" in on_tap and "100Mbit" in on_tap and "netem" not in on_tap, on_tap
        port, pidfile = start_server(g, bind=g.address)
        try:
            t = time.perf_counter()
            with socket.create_connection((g.address, port), timeout=10):
                rtt = time.perf_counter() - t
        finally:
            stop_server(g, pidfile)
        assert rtt >= 0.020, rtt
        assert net.metadata()["link"] == {"rate_bit_per_s": 100e6, "delay_s": 0.02}
    finally:
        errors = teardown(insts)
        net.remove()
        try:
            assert errors == [] and be.list_labkit(pfx) == []
        finally:
            be.cleanup(pfx)
            be.close()
