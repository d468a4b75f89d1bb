"""The OpenStack provider on the single-node cloud of scripts/setup-openstack.sh (marker ``openstack``).

A small design runs on it as a campaign: the flavor is the factor (one ``cloud`` platform per
flavor: labkit.small, 1 vCPU; labkit.medium, 2); each run's server is made from labkit's image,
reached over SSH on the isolated provider network (bridge lkos0), used through the ``ssh``
backend, deleted, and its ``provisioning_s`` stored as a measurement. A campaign process SIGKILLed right
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

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.backends.clouds import get_provider
from labkit.backends.testing import required
from labkit.core.ids import campaign_prefix
from labkit.errors import ConfigError, LabkitError
from labkit.run.campaign import Campaign

pytestmark = [pytest.mark.openstack, pytest.mark.slow]

CLOUD = os.environ.get("LABKIT_OS_CLOUD", "labkit")
KEY = os.environ.get("LABKIT_SSH_KEY", "/root/.ssh/labkit_test_ed25519")
IMAGE = os.environ.get("LABKIT_OS_IMAGE", "labkit-debian-12")
NETWORK = os.environ.get("LABKIT_OS_NETWORK", "provider")
FLAVOR_CPUS = {"labkit.small": 1, "labkit.medium": 2}
NOVA_COMPUTE_LOG = "/var/log/nova/nova-compute.log"
PRICES = {"labkit.small": 0.011, "labkit.medium": 0.022}  # made-up prices: a testbed attribute


def provider(**extra):
    return get_provider(
        "openstack", cloud=CLOUD, network=NETWORK, key_filename=KEY, prices=PRICES, boot_timeout=900, **extra
    )


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
        try:
            p.cleanup(prefix)
        except LabkitError:
            print(nova_story(p, prefix))
            raise
    left = [s.name for s in conn.compute.servers() if any(s.name.startswith(x) for x in prefixes)]
    ports = [
        pt.id
        for pt in conn.network.ports()
        if pt.device_owner.startswith("compute:")
        and pt.device_id not in {s.id for s in conn.compute.servers()}
    ]
    keys = [k.name for k in conn.compute.keypairs() if any(k.name.startswith(x) for x in prefixes)]
    assert (left, ports, keys) == ([], [], []), "left behind"
    assert sorted(i.id for i in conn.image.images()) == images_before
    if conn.has_service("block-storage"):  # the test cloud has no cinder; labkit makes no volume
        assert list(conn.block_storage.volumes()) == []


def nova_story(p, prefix: str, lines: int = 60) -> str:
    """What nova says of the servers of ``prefix`` still there, and the last lines of
    nova-compute's log that name them (a failure's diagnosis, printed into the test report)."""
    out = []
    log = Path(NOVA_COMPUTE_LOG)
    text = []
    if log.is_file():
        with log.open("rb") as fh:  # its last 8 MB: a long-lived log stays out of memory
            fh.seek(max(0, log.stat().st_size - (8 << 20)))
            text = fh.read().decode(errors="replace").splitlines()
    for s in p.conn.compute.servers(name=f"^{prefix}"):
        out.append(
            f"server {s.name} {s.id}: status={s.status} vm_state={s.vm_state} "
            f"task_state={s.task_state} power_state={s.power_state}"
        )
        out += [line[:400] for line in text if s.id in line][-lines:]
    return "\n".join(out) or f"no server of {prefix} is left"


def new_prefix(prefixes: list[str]) -> str:
    prefixes.append(f"labkit-ostest{secrets.token_hex(3)}--")
    return prefixes[-1]


def test_campaign_with_flavor_as_factor_stores_provisioning_s(cloud, tmp_path):
    """A campaign over two ``cloud`` platforms (one per flavor): each run boots its server, runs the
    workload in it over SSH, deletes it, and stores ``provisioning_s`` (> 0) as a measurement."""
    p, prefixes = cloud
    cid = f"ostest{secrets.token_hex(3)}"
    prefixes.append(campaign_prefix(cid))
    common = {
        "backend": "cloud",
        "provider": "openstack",
        "cloud": CLOUD,
        "network": NETWORK,
        "key_filename": KEY,
        "image": IMAGE,
        "prices": PRICES,
        "boot_timeout": 900,
    }
    platforms = {flavor.split(".")[1]: {**common, "flavor": flavor} for flavor in FLAVOR_CPUS}
    design = {"name": "flavors", "factors": {"platform": list(platforms)}, "seed": 7}
    store = Campaign(
        design,
        backend="small",
        workload="command",
        workload_params={"argv": ["hostname"]},
        campaign_id=cid,
        data_dir=tmp_path,
        progress=False,
        testbed={"name": "os", "hosts": [{"name": "controller"}], "platforms": platforms},
    ).run()
    with store:
        runs, tidy = store.runs(), store.tidy()
    print(runs[["run_id", "status", "error"]].to_dict("records"))
    if list(runs.status) != ["ok", "ok"]:
        print(nova_story(p, campaign_prefix(cid)))
    assert list(runs.status) == ["ok", "ok"]
    prov = tidy[tidy.metric == "provisioning_s"]
    assert (
        sorted(prov.run_id) == sorted(runs.run_id)
        and (prov.value > 0).all()
        and set(prov.instance_index) == {0}
    )
    seen = {}
    for _, run in runs.iterrows():
        meta = json.loads(run.metadata) if isinstance(run.metadata, str) else run.metadata
        [server] = [i["cloud"] for i in meta["instances"]]
        assert server["address"].startswith("10.238.0.")
        assert prov[prov.run_id == run.run_id].value.tolist() == [server["provisioning_s"]]
        seen[server["flavor"]] = (server["guest_cpus"], server["price_per_hour"])
    print(prov[["run_id", "value"]].to_dict("records"))
    assert seen == {f: (FLAVOR_CPUS[f], PRICES[f]) for f in FLAVOR_CPUS}
    assert p.list_labkit(campaign_prefix(cid)) == []  # servers deleted after each run
    assert [k.name for k in p.conn.compute.keypairs() if k.name.startswith(campaign_prefix(cid))] == []


KILLED = """
import sys, time
from labkit.backends.clouds import get_provider
p = get_provider("openstack", cloud=sys.argv[1], network=sys.argv[2], key_filename=sys.argv[3])
p.provision("labkit.small", sys.argv[4], sys.argv[5])
time.sleep(3600)
"""


def test_killed_campaign_leaves_servers_that_cleanup_deletes(cloud):
    p, prefixes = cloud
    prefix = new_prefix(prefixes)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, CLOUD, NETWORK, KEY, IMAGE, prefix],
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
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
