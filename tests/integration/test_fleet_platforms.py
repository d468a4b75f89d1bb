"""Remote platforms on the fleet test hosts of scripts/setup-fleet.sh (marker ``fleet``).

The namespace hosts share this machine's file system, hence its docker and libvirt sockets: docker
reached over ``ssh://`` and libvirt over ``qemu+ssh://`` on a fleet host drive the same daemons as
locally, but every call crosses that host's sshd, with the test key and a host-key check.

* a 4-run campaign (2 replicate blocks) with a declared ``docker`` platform (``ssh://{user}@{address}:{port}``, host keys
  checked against a known_hosts file made from the hosts' public keys) on 2 hosts: both runs ok,
  one per host, nothing left;
* an unknown host key is refused, naming the way out;
* one 256 MB VM provisioned through the ``qemu+ssh://`` URI a testbed generates for a fleet host,
  and a command run in it (one TCG boot, ~30-60 s);
* an MPI ping-pong between rank 0 on one fleet host and rank 1 on another (ssh backend, the hosts'
  own addresses): latency and bandwidth stored by a campaign.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from labkit.backends import get_backend
from labkit.backends.hostkeys import ssh_options, ssh_wrapper
from labkit.backends.testing import required
from labkit.core.ids import campaign_prefix
from labkit.core.instance import InstanceSpec
from labkit.errors import BackendUnavailable
from labkit.run.campaign import Campaign
from labkit.run.platforms import options_for
from labkit.run.testbed import Testbed
from labkit.workloads import pingpong

from .conftest import instances
from .test_fleet import HOSTS, KEY, _hosts_up

FLEET_ETC = Path("/etc/labkit-fleet")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The fleet hosts (skip, or fail when LABKIT_REQUIRE names fleet, when they are down) and a
    known_hosts file listing their host keys (scripts/setup-fleet.sh's host_<i>_ed25519.pub)."""
    ok, why = _hosts_up()
    if not ok:
        if "fleet" in required():
            pytest.fail(f"fleet is required (LABKIT_REQUIRE) but unavailable: {why}")
        pytest.skip(why)
    lines = []
    for i, (_name, addr) in enumerate(HOSTS, 1):
        kind, blob = (FLEET_ETC / f"host_{i}_ed25519.pub").read_text().split()[:2]
        lines.append(f"{addr} {kind} {blob}\n")
    known = tmp_path_factory.mktemp("fleet2-kh") / "known_hosts"
    known.write_text("".join(lines))
    return known


@pytest.mark.fleet
@pytest.mark.docker
def test_docker_over_ssh_on_two_fleet_hosts(fleet, tmp_path):
    cid = "t-fleet2-docker"
    testbed = {
        "platforms": {
            "docker": {
                "backend": "docker",
                "base_url": "ssh://{user}@{address}:{port}",
                "ssh_known_hosts": str(fleet),
                "connect_timeout": 5,
            }
        },
        "hosts": [{"name": n, "address": a, "key": KEY, "platforms": ["docker"]} for n, a in HOSTS[:2]],
        "connect_timeout": 5,
    }
    d = {"factors": {"vcpus": [1, 2]}, "replications": 2, "seed": 3}  # 4 runs: one block per host
    st = Campaign(
        d,
        backend="docker",
        workload="command",
        workload_params={"argv": ["sh", "-c", "test -f /.dockerenv"]},
        campaign_id=cid,
        data_dir=tmp_path,
        testbed=testbed,
        progress=False,
        run_timeout=120,
    ).run()
    runs = st.runs()
    assert len(runs) == 4 and set(runs.status) == {"ok"}, runs[["status", "error"]]
    # one replicate block per host (assign: blocks), each run names its host and platform
    assert sorted(runs.metadata.map(lambda m: m["host"])) == ["ns1", "ns1", "ns2", "ns2"]
    assert set(runs.metadata.map(lambda m: (m["platform"], m["backend"]))) == {("docker", "docker")}
    assert set(runs.metadata.map(lambda m: m["platform_options"]["base_url"])) == {
        "ssh://{user}@{address}:{port}"
    }
    names = runs.metadata.map(lambda m: m["instances"][0]["name"])
    assert all(n.startswith(campaign_prefix(cid)) for n in names)
    tb = Testbed.from_dict(testbed)
    be = get_backend("docker", **options_for(tb.platform("docker"), tb.hosts[0]))
    try:
        assert be.ssh is not None and be.ssh.host_key_policy == "strict" and be.ssh.key_filename == KEY
        assert be.list_labkit(campaign_prefix(cid)) == []
    finally:
        be.close()


@pytest.mark.fleet
@pytest.mark.docker
def test_docker_over_ssh_refuses_an_unknown_host_key(fleet, tmp_path, monkeypatch):
    monkeypatch.setenv(
        "HOME", str(tmp_path)
    )  # no ~/.ssh/known_hosts (setup-fleet.sh records the hosts there)
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(
        BackendUnavailable,
        match=r"host key of 10\.231\.0\.12:22 is unknown.*host_key_policy is strict"
        r".*accept-new",
    ):
        get_backend(
            "docker",
            base_url="ssh://root@10.231.0.12:22",
            ssh_key_filename=KEY,
            ssh_known_hosts=str(empty),
            connect_timeout=5,
        )


@pytest.mark.fleet
@pytest.mark.libvirt
@pytest.mark.slow
def test_libvirt_over_qemu_ssh_on_a_fleet_host(fleet):
    """One 256 MB guest through the URI a testbed generates for fleet host ns1 (libvirt's ssh transport:
    the client spawns ssh with the test key and strict host-key checking against ~/.ssh/known_hosts,
    where setup-fleet.sh records the host's key; ns1's sshd runs virt-ssh-helper, which reaches the
    shared libvirtd). One TCG boot."""
    tb = Testbed.from_dict(
        {"hosts": [{"name": n, "address": a, "key": KEY, "platforms": ["libvirt"]} for n, a in HOSTS[:1]]}
    )
    opts = options_for(tb.platform("libvirt"), tb.hosts[0])
    # the host's key policy goes to the backend, which applies it to the URI it opens
    # (backends/libvirt/sshuri.py: the policy's ssh wrapper as libvirt's command, no_tty)
    assert opts == {
        "uri": f"qemu+ssh://root@{HOSTS[0][1]}:22/system?keyfile={KEY}",
        "host_key_policy": "strict",
    }
    be = get_backend("libvirt", **opts)
    local = get_backend("libvirt")
    try:
        assert not be.local
        assert (
            f"command={ssh_wrapper(ssh_options('strict', None))}" in be.ssh.open_uri
            and "no_tty=1" in be.ssh.open_uri
        )
        with instances(be, InstanceSpec(vcpus=1, memory_mb=256), prefix="labkit-fleet2-kvm") as (inst,):
            assert inst.name in local.list_labkit("labkit-fleet2-kvm")  # the daemon both reach
            assert inst.metadata["uri"] == opts["uri"]
            res = inst.exec(["sh", "-c", "echo $((6 * 7)); awk '/MemTotal/ {print $2}' /proc/meminfo"])
            answer, mem_kb = res.stdout.split()
            assert answer == "42" and 150_000 < int(mem_kb) <= 256 * 1024
        assert local.list_labkit("labkit-fleet2-kvm") == [] and local.list_overlays("labkit-fleet2-kvm") == []
    finally:
        be.close()
        local.close()


@pytest.mark.fleet
@pytest.mark.root
@pytest.mark.slow
def test_mpi_pingpong_between_two_fleet_hosts(fleet, tmp_path):
    """Rank 0 in an instance on ns1, rank 1 in one on ns2 (the ``ssh-hosts`` backend, the hosts' own
    addresses); mpirun on this machine starts each host's orted through ssh with the test key (the
    launch agent, in mpirun's private work dir). The binary is built here: the hosts share this
    machine's file system."""
    cid = "t-fleet2-mpi"
    # a TCP connection from ns1 to ns2's sshd (bash's /dev/tcp: no ping needed on the machine)
    probe = subprocess.run(
        [
            "nsenter",
            "--net=/run/netns/labkit-fleet-1",
            "timeout",
            "5",
            "bash",
            "-c",
            f"exec 3<>/dev/tcp/{HOSTS[1][1]}/22",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert probe.returncode == 0, (
        "fleet host ns1 cannot reach ns2 (the bridge's FORWARD rule is missing?): "
        f"run scripts/setup-fleet.sh\n{probe.stdout}{probe.stderr}"
    )
    binary = pingpong.build(str(tmp_path))
    hosts = [{"host": a, "port": 22, "user": "root", "key_filename": KEY} for _n, a in HOSTS[:2]]
    d = {"factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 7}
    st = Campaign(
        d,
        backend="ssh-hosts",
        backend_options={"hosts": hosts, "connect_timeout": 5},
        workload="mpi",
        workload_params={"program": binary, "ranks": 2, "parser": "labkit.workloads.pingpong:parse"},
        defaults=InstanceSpec(count=2, memory_mb=256),
        campaign_id=cid,
        data_dir=tmp_path / "data",
        progress=False,
        run_timeout=300,
    ).run()
    runs = st.runs()
    assert len(runs) == 2 and set(runs.status) == {"ok"}, runs[["status", "error"]]
    for meta in runs.metadata:
        assert meta["network"]["mode"] == "private" and meta["network"]["subnet"] == "10.231.0.0/24"
        assert [i["ssh_host"] for i in meta["instances"]] == [f"root@{a}:22" for _n, a in HOSTS[:2]]
    tidy = st.tidy()
    lat = tidy[tidy.metric == "pingpong_latency_us"].value
    bw = tidy[tidy.metric == "pingpong_bandwidth_mb_per_s"].value
    # physical bounds only (a loaded 2-core machine): a round trip over TCP takes more than 1 us, and
    # no veth moves more than 100 GB/s
    assert len(lat) == 2 and (lat > 1).all() and len(bw) == 2 and ((bw > 0) & (bw < 100_000)).all()
    be = get_backend("ssh-hosts", hosts=hosts, connect_timeout=5)
    try:
        assert be.list_labkit(campaign_prefix(cid)) == []
    finally:
        be.close()
