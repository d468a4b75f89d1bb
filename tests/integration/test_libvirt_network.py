"""A private run network on the libvirt backend, proved from inside two real guests.

One provision (2 VMs, 256 MiB, 1 vCPU each: two TCG boots, side by side) serves the whole
test, and also proves ``disk_format: raw``: the guests boot from full raw copies of the
base disk. Checked: inst0 and inst1 reach each other by name, the host end answers on the
network, nothing outside the run's /24 is routed (a second run's network on this host is
unreachable), the link shaping sits on each guest's host-side tap and caps iperf3 (only the
upper bound is asserted: emulated guests on a loaded machine may not reach the rate), and
after teardown + ``cleanup(prefix)`` no domain, network or disk named with the prefix remains.

Network safety: the only traffic is on the two networks made here.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from labkit.backends import get_backend, teardown
from labkit.backends.testing import required
from labkit.core.instance import InstanceSpec
from labkit.workloads import get_workload

pytestmark = [pytest.mark.libvirt, pytest.mark.network, pytest.mark.slow]  # 50-120 s: two TCG boots
RATE_MBIT = 20


def test_two_vms_on_a_private_network_with_raw_disks():
    if shutil.which("iperf3") is None or shutil.which("tc") is None:
        why = "needs iperf3 and tc on this host (scripts/setup-tools.sh)"
        (pytest.fail if "network" in required() else pytest.skip)(why)
    be = get_backend("libvirt", disk_format="raw")
    pfx = f"labkit-test-lvnet{secrets.token_hex(2)}--"
    net = be.create_network(pfx, 2, f"{RATE_MBIT}mbit/")
    other = be.create_network(pfx + "other-", 1)  # another run's network: must stay unreachable
    insts = []
    try:
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=256, count=2), prefix=pfx, network=net)
        a, b = insts
        # raw disks: the domain boots a raw file, recorded in the metadata; exec works
        for inst in insts:
            driver = ET.fromstring(inst.dom.XMLDesc(0)).find("devices/disk/driver")
            assert driver.get("type") == "raw" and inst.disk.endswith(".raw")
            assert inst.metadata["disk_format"] == "raw"
        assert a.exec(["cat", "/proc/cmdline"], timeout=60).stdout.strip()

        # names and addresses; the only route is the run's /24
        assert [a.address, b.address] == net.addresses
        for inst in insts:
            for name, address in net.names().items():
                assert inst.exec(["getent", "ahostsv4", name], timeout=60).stdout.split()[0] == address
            routes = inst.exec(["ip", "-4", "route"], timeout=60).stdout
            assert "default" not in routes and routes.count("\n") == 1, routes

        # inst1 -> inst0 by name (iperf3's listener), and the host end (nothing listens on
        # port 9 there: a refused connection proves it answered)
        rows = get_workload("iperf3", path="instances", protocol="tcp", duration_s=2).run_group(insts, {})
        got = next(r.value for r in rows if r.metric == "tcp_mbit_per_s")
        assert 0 < got <= 1.02 * RATE_MBIT, got
        res = b.exec(["timeout", "20", "bash", "-c", "exec 3<>/dev/tcp/host/9"], check=False, timeout=60)
        assert "refused" in res.stderr.lower(), res.stderr
        res = a.exec(
            ["timeout", "20", "bash", "-c", f"exec 3<>/dev/tcp/{other.host_address}/9"],
            check=False,
            timeout=60,
        )
        assert not res.ok and "unreachable" in res.stderr.lower(), res.stderr

        # the shaping is on each guest's host-side tap, whose name is recorded
        for inst in insts:
            assert inst.metadata["network"]["host_device"] == inst.host_device == f"{net.device}h{inst.index}"
            qdisc = subprocess.run(
                ["tc", "qdisc", "show", "dev", inst.host_device], capture_output=True, text=True
            ).stdout
            assert "tbf" in qdisc and f"{RATE_MBIT}Mbit" in qdisc, qdisc
    finally:
        errors = teardown(insts)
        net.remove()
        try:
            assert errors == []
            # what a killed run leaves (its network outlives it): cleanup(prefix) finds and removes it
            assert be.list_labkit(pfx) == [other.name]
            assert other.name in be.cleanup(pfx)
            assert be.list_labkit(pfx) == [] and be.list_overlays(pfx) == []
            assert not subprocess.run(["ip", "link", "show", net.device], capture_output=True).returncode == 0
        finally:
            be.cleanup(pfx)
            be.close()
