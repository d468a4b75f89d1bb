"""NIC aggregation (``nics`` > 1) on the libvirt backend, proved from inside two real guests.

Each guest gets its first NIC on the run's network (the host's end: eth0) and two more, one
per data bridge, bonded (balance-rr) into ``bond0`` on the data subnet. Checked: the bond has
both NICs as slaves, instances name each other at their data addresses, the host-side tap of
every bonded NIC is shaped to the link's rate and netem delays eth0 and bond0 in the guest,
an iperf3 stream between the guests is spread over *both* data taps (byte counters of the
host-side taps, not throughput: nothing here asserts a rate), while almost nothing crosses
eth0; after teardown no domain, network or bridge named with the prefix remains.

Network safety: the only traffic is on the three bridges made here.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

from labkit.backends import get_backend, teardown
from labkit.backends.testing import required
from labkit.core.instance import InstanceSpec
from labkit.workloads import get_workload

pytestmark = [pytest.mark.libvirt, pytest.mark.network, pytest.mark.slow]  # 50-120 s: two TCG boots
RATE_MBIT = 20


def tx_bytes(device: str) -> int:
    """Bytes the host sent out of ``device`` (for a tap: bytes delivered into its guest)."""
    return int(Path(f"/sys/class/net/{device}/statistics/tx_bytes").read_text())


def test_two_vms_bond_two_nics_and_a_stream_between_them_uses_both():
    if shutil.which("iperf3") is None or shutil.which("tc") is None:
        why = "needs iperf3 and tc on this host (scripts/setup-tools.sh)"
        (pytest.fail if "network" in required() else pytest.skip)(why)
    be = get_backend("libvirt")
    pfx = f"labkit-test-lvbond{secrets.token_hex(2)}--"
    net = be.create_network(pfx, 2, f"{RATE_MBIT}mbit/2ms", nics=2)
    insts = []
    try:
        assert be.networks(pfx) == sorted([net.name, f"{net.name}-d1", f"{net.name}-d2"])
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=256, count=2), prefix=pfx, network=net)
        a, b = insts
        for inst in insts:
            bonding = inst.exec(["cat", "/proc/net/bonding/bond0"], timeout=60).stdout
            assert "Bonding Mode: load balancing (round-robin)" in bonding, bonding  # balance-rr
            assert bonding.count("Slave Interface:") == 2 and "data1" in bonding and "data2" in bonding, (
                bonding
            )
            for dev, address in (("eth0", inst.address), ("bond0", inst.peer_address)):
                shown = inst.exec(["ip", "-4", "-o", "addr", "show", "dev", dev], timeout=60).stdout
                assert f"inet {address}/24" in shown and shown.count(" inet ") == 1, shown
            assert inst.peer_address == net.data_addresses[inst.index] != inst.address
            # the peers by name are their data addresses; the host stays on eth0's subnet
            for name, address in net.names().items():
                assert inst.exec(["getent", "ahostsv4", name], timeout=60).stdout.split()[0] == address
            assert net.names()["inst1"] == net.data_addresses[1]
            # the delay is netem in the guest on both paths, the rate a tbf on every host-side tap
            for dev in ("eth0", "bond0"):
                assert "netem" in inst.exec(["tc", "qdisc", "show", "dev", dev], timeout=60).stdout
            taps = inst.metadata["network"]["data_devices"]
            assert taps == [f"{net.device}1h{inst.index}", f"{net.device}2h{inst.index}"]
            for tap in [inst.host_device, *taps]:
                qdisc = subprocess.run(
                    ["tc", "qdisc", "show", "dev", tap], capture_output=True, text=True
                ).stdout
                assert "tbf" in qdisc and f"{RATE_MBIT}Mbit" in qdisc, qdisc

        # inst1 -> inst0 (iperf3's listener on inst0's data address): the bytes into inst0
        # cross both of its bonded taps, and (nearly) none its eth0 tap
        data_taps = a.metadata["network"]["data_devices"]
        before = {t: tx_bytes(t) for t in [a.host_device, *data_taps]}
        rows = get_workload("iperf3", path="instances", protocol="tcp", duration_s=4).run_group(insts, {})
        assert next(r.value for r in rows if r.metric == "tcp_mbit_per_s") > 0
        sent = {t: tx_bytes(t) - before[t] for t in before}
        on_bond = sum(sent[t] for t in data_taps)
        assert on_bond > 1_000_000, sent
        for t in data_taps:
            assert 0.3 < sent[t] / on_bond < 0.7, sent  # round robin: about half each
        assert sent[a.host_device] < 0.05 * on_bond, sent
    finally:
        errors = teardown(insts)
        net.remove()
        try:
            assert errors == []
            assert be.list_labkit(pfx) == [] and be.list_overlays(pfx) == []
            for j in ("", "1", "2"):
                assert (
                    subprocess.run(["ip", "link", "show", net.device + j], capture_output=True).returncode
                    != 0
                )
        finally:
            be.cleanup(pfx)
            be.close()
