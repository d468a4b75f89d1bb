"""The OpenStack provider on the single-node cloud of scripts/setup-openstack.sh (marker ``openstack``).

A small design runs on it: the flavor is the factor (labkit.small: 1 vCPU, labkit.medium: 2);
each run's server is made from labkit's image, reached over SSH on the isolated provider network
(bridge lkos0), used through the ``ssh`` backend, and deleted. A campaign process SIGKILLed right
after its create request leaves a server that ``cleanup(prefix)`` deletes. The module checks at
the end that no server, port or keypair of its prefixes is left, and that the images are the
ones it found. Boots are QEMU TCG (no nested KVM here): two servers boot, the killed one is
deleted while building.

Cloud ``$LABKIT_OS_CLOUD`` (default ``labkit``) of clouds.yaml; key ``$LABKIT_SSH_KEY`` (default
/root/.ssh/labkit_test_ed25519). The module runs only when asked (``make test-openstack`` sets
LABKIT_REQUIRE=openstack; LABKIT_OPENSTACK=1 runs it when the cloud is there): it boots VMs, and the
cloud is not part of ``make test``. Asked and absent: fails under LABKIT_REQUIRE, else skipped.
"""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time

import pytest

from labkit.clouds import get_provider
from labkit.design import Design
from labkit.errors import ConfigError, LabkitError
from labkit.instance import InstanceSpec
from labkit.testing import required

pytestmark = [pytest.mark.openstack, pytest.mark.slow]

CLOUD = os.environ.get("LABKIT_OS_CLOUD", "labkit")
KEY = os.environ.get("LABKIT_SSH_KEY", "/root/.ssh/labkit_test_ed25519")
IMAGE = os.environ.get("LABKIT_OS_IMAGE", "labkit-debian-12")
NETWORK = os.environ.get("LABKIT_OS_NETWORK", "provider")
FLAVOR_CPUS = {"labkit.small": 1, "labkit.medium": 2}
PRICES = {"labkit.small": 0.011, "labkit.medium": 0.022}   # made-up prices: a testbed attribute


def provider(**extra):
    return get_provider("openstack", cloud=CLOUD, network=NETWORK, key_filename=KEY, prices=PRICES,
                        boot_timeout=900, **extra)


@pytest.fixture(scope="module")
def cloud():
    if "openstack" not in required() and os.environ.get("LABKIT_OPENSTACK") != "1":
        pytest.skip("the OpenStack tests run on request: make test-openstack (or LABKIT_OPENSTACK=1)")
    try:
        p = provider()
        p.check()
        if not os.path.isfile(KEY):
            raise ConfigError(f"no SSH key {KEY} (bash scripts/setup-ssh.sh makes it)")
    except LabkitError as exc:
        if "openstack" in required():
            pytest.fail(f"openstack is required (LABKIT_REQUIRE) but unavailable: {exc}")
        pytest.skip(f"openstack unavailable: {exc}")
    conn = p.conn
    images_before = sorted(i.id for i in conn.image.images())
    prefixes: list[str] = []
    yield p, prefixes
    for prefix in prefixes:
        p.cleanup(prefix)
    left = [s.name for s in conn.compute.servers() if any(s.name.startswith(x) for x in prefixes)]
    ports = [pt.id for pt in conn.network.ports() if pt.device_owner.startswith("compute:")
             and pt.device_id not in {s.id for s in conn.compute.servers()}]
    keys = [k.name for k in conn.compute.keypairs() if any(k.name.startswith(x) for x in prefixes)]
    assert (left, ports, keys) == ([], [], []), "left behind"
    assert sorted(i.id for i in conn.image.images()) == images_before
    if conn.has_service("block-storage"):     # the test cloud has no cinder; labkit makes no volume
        assert list(conn.block_storage.volumes()) == []


def new_prefix(prefixes: list[str]) -> str:
    prefixes.append(f"labkit-ostest{secrets.token_hex(3)}--")
    return prefixes[-1]


def test_design_with_flavor_as_factor_over_ssh(cloud):
    p, prefixes = cloud
    prefix = new_prefix(prefixes)
    design = Design.from_dict({"name": "flavors", "factors": {"flavor": list(FLAVOR_CPUS)}, "seed": 7})
    rows = []
    for run in design.plan():
        flavor = run.levels["flavor"]
        [server] = p.provision(flavor, IMAGE, prefix)
        try:
            assert server.address.startswith("10.238.0.")
            assert [s.name for s in p.list_labkit(prefix)] == [server.name]
            backend = server.ssh_backend()
            try:
                [inst] = backend.provision(InstanceSpec(vcpus=1), prefix="labkit-ostest-")
                try:
                    cpus = int(inst.exec(["grep", "-c", "^processor", "/proc/cpuinfo"], timeout=60).stdout)
                    host = inst.exec(["hostname"], timeout=60).stdout.strip()
                finally:
                    inst.destroy()
            finally:
                backend.close()
            rows.append({"run": run.run_id, "flavor": flavor, "vcpus": cpus, "hostname": host,
                         **server.metrics(), "price_per_hour": server.price_per_hour})
        finally:
            p.destroy([server])
        assert p.list_labkit(prefix) == []
    print(rows)
    assert {r["flavor"]: r["vcpus"] for r in rows} == FLAVOR_CPUS
    assert {r["flavor"]: r["price_per_hour"] for r in rows} == PRICES
    assert all(r["provisioning_s"] > 0 and r["hostname"].startswith("labkit-ostest") for r in rows)


KILLED = """
import sys, time
from labkit.clouds import get_provider
p = get_provider("openstack", cloud=sys.argv[1], network=sys.argv[2], key_filename=sys.argv[3])
p.provision("labkit.small", sys.argv[4], sys.argv[5])
time.sleep(3600)
"""


def test_killed_campaign_leaves_servers_that_cleanup_deletes(cloud):
    p, prefixes = cloud
    prefix = new_prefix(prefixes)
    proc = subprocess.Popen([sys.executable, "-c", KILLED, CLOUD, NETWORK, KEY, IMAGE, prefix],
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        deadline = time.monotonic() + 180
        while not p.list_labkit(prefix):
            assert proc.poll() is None, "the campaign process ended before its server was requested"
            assert time.monotonic() < deadline, "no server requested within 180 s"
            time.sleep(1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    [left] = p.list_labkit(prefix)
    assert p.cleanup(prefix) == [left.name]
    assert p.list_labkit(prefix) == []


def test_unknown_flavor_is_a_config_error(cloud):
    p, prefixes = cloud
    with pytest.raises(ConfigError, match="no flavor 'labkit.none'"):
        p.provision("labkit.none", IMAGE, new_prefix(prefixes))
