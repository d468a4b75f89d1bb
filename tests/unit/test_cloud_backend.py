"""The ``cloud`` backend in a campaign: ``provisioning_s`` per instance in the measurements table,
servers deleted after each run, and ``labkit clean <campaign>`` calling the provider's cleanup."""

from __future__ import annotations

import json

import pytest

from labkit import cli
from labkit.backends import cloud as cloud_backend
from labkit.backends import get_backend
from labkit.backends.clouds import base
from labkit.backends.clouds.base import ACTIVE, BUILDING, ServerState
from labkit.core.instance import InstanceSpec
from labkit.errors import BackendError, ConfigError
from labkit.run.campaign import Campaign
from labkit.store import Store

from .fixtures.fakes import FakeInstance
from .test_cloud_base import Ledger

PROVIDER_OPTS = {"provider": "ledger", "flavor": "small", "image": "img", "host_cpus": 2}


class FakeSsh:
    """What ``CloudInstance.ssh_backend()`` gives: one scripted instance per server."""

    made: list = []
    opened: list = []  # the options of every ssh_backend() call

    def __init__(self, address, fail=False):
        self.address, self.fail, self.closed = address, fail, False

    def check(self):
        if self.fail:
            raise BackendError(f"ssh {self.address}: refused")

    def host_cpus(self):
        return 4

    def provision(self, spec, prefix):
        inst = FakeInstance(spec=spec)
        FakeSsh.made.append(inst)
        return [inst]

    def close(self):
        self.closed = True


@pytest.fixture
def ledger(monkeypatch):
    """A CloudBackend on an in-memory provider whose servers boot (building, then active) and
    answer SSH at once (no dial); each server's SSH side is a scripted instance."""
    cloud = Ledger([ServerState(BUILDING), ServerState(ACTIVE, "192.0.2.7")])
    monkeypatch.setattr(base, "wait_ssh", lambda *a, **k: None)
    monkeypatch.setattr(cloud_backend, "get_provider", lambda name, **opts: cloud)
    monkeypatch.setattr(
        base.CloudInstance, "ssh_backend", lambda self, **o: FakeSsh.opened.append(o) or FakeSsh(self.address)
    )
    FakeSsh.made, FakeSsh.opened = [], []
    return cloud


def test_each_run_stores_provisioning_s_per_instance_and_deletes_its_servers(tmp_path, ledger):
    be = cloud_backend.CloudBackend(**PROVIDER_OPTS)
    design = {"name": "c", "factors": {"count": [1, 2]}, "seed": 3}
    store = Campaign(
        design,
        backend=be,
        workload="command",
        workload_params={"argv": ["true"]},
        campaign_id="cloud-unit",
        data_dir=tmp_path,
        progress=False,
    ).run()
    with store:
        tidy = store.tidy()
        runs = store.runs()
    assert set(runs.status) == {"ok"}
    prov = tidy[tidy.metric == "provisioning_s"]
    # one row per server: instance 0 in the count=1 run, instances 0 and 1 in the count=2 run
    assert sorted(prov.groupby("run_id").instance_index.apply(sorted).tolist()) == [[0], [0, 1]]
    assert (prov.value > 0).all() and set(prov.unit) == {"s"}
    assert len(tidy[tidy.metric == "wall_time_s"]) == 3  # the workload's rows are still there
    for _, run in runs.iterrows():  # the measurement is the server's own timing, also in the metadata
        meta = json.loads(run.metadata) if isinstance(run.metadata, str) else run.metadata
        stored = prov[prov.run_id == run.run_id].sort_values("instance_index").value.tolist()
        assert stored == [i["cloud"]["provisioning_s"] for i in meta["instances"]]
        assert all(
            i["cloud"]["flavor"] == "small" and i["cloud"]["guest_cpus"] == 4 for i in meta["instances"]
        )
    assert ledger.servers == {} and len(ledger.deleted) == 3  # every server deleted after its run
    assert FakeSsh.opened == [{"enforce_limits": True, "connect_timeout": 60}] * 3


def test_a_server_that_fails_ssh_setup_is_deleted_with_the_others(ledger, monkeypatch):
    opened = []

    def ssh(server, **options):
        opened.append(FakeSsh(server.address, fail=len(opened) == 1))  # the second server refuses
        return opened[-1]

    monkeypatch.setattr(base.CloudInstance, "ssh_backend", ssh)
    be = cloud_backend.CloudBackend(**PROVIDER_OPTS)
    with pytest.raises(BackendError, match="refused"):
        be.provision(InstanceSpec(count=2), prefix="labkit-c1--")
    assert ledger.servers == {} and len(ledger.deleted) == 2 and all(s.closed for s in opened)


def test_options_are_checked(ledger):
    with pytest.raises(ConfigError, match="'flavor' is required"):
        cloud_backend.CloudBackend(provider="ledger", image="img")
    with pytest.raises(ConfigError, match="host_cpus"):
        cloud_backend.CloudBackend(**{**PROVIDER_OPTS, "host_cpus": 0})
    with pytest.raises(ConfigError, match="connect_timeout"):
        cloud_backend.CloudBackend(**{**PROVIDER_OPTS, "connect_timeout": "1m"})
    be = cloud_backend.CloudBackend(**{**PROVIDER_OPTS, "host_cpus": None})
    with pytest.raises(ConfigError, match="give them as option 'host_cpus'"):  # Ledger does not say
        be.host_cpus()


def test_unknown_provider_option_names_the_allowed_ones():
    pytest.importorskip("cs")
    with pytest.raises(ConfigError, match="unknown option.*regionn.*allowed"):
        get_backend("cloud", provider="cloudstack", flavor="f", image="i", regionn="x")


# -- labkit clean <campaign> on a cloud campaign (recorded CloudStack exchanges) -----------------
def test_clean_campaign_deletes_only_its_tagged_servers(tmp_path, monkeypatch, capsys):
    pytest.importorskip("cs")
    pytest.importorskip("responses")
    from .cloud_replay import replay

    monkeypatch.setattr(base, "wait_ssh", lambda *a, **k: 0.0)
    opts = {
        "provider": "cloudstack",
        "flavor": "Small Instance",
        "image": "Debian 12",
        "endpoint": "https://cloud.example.org/client/api",
        "key": "k",
        "secret": "s",
        "poll_interval": 0,
    }
    c = Campaign(
        {"name": "c", "factors": {"vcpus": [1, 2]}, "seed": 1},
        backend="cloud",
        workload="command",
        workload_params={"argv": ["true"]},
        backend_options=opts,
        campaign_id="c1",
        data_dir=tmp_path,
    )
    with Store.for_campaign(tmp_path, "c1") as st:
        c._check_or_write_meta(st)
        assert st.meta()["backend_options"]["secret"] == "<redacted>"
    # cs_check: the backend's check (listZones); cs_cleanup: listVirtualMachines keyword=labkit-c1--
    # answers with this campaign's tagged server, another campaign's (labkit-c1-2--) and an untagged
    # one named with the prefix: only the first is destroyed (then its keypair is deleted).
    with replay("cs_check", "cs_cleanup") as mock:
        assert (
            cli.main(
                [
                    "clean",
                    "c1",
                    "--data-dir",
                    str(tmp_path),
                    "--backend-option",
                    "key=k",
                    "--backend-option",
                    "secret=s",
                ]
            )
            == 0
        )
        destroyed = [c.request.url for c in mock.calls if "command=destroyVirtualMachine" in c.request.url]
        mock.reset()  # the recording's last listing (after the cleanup) is not requested by `clean`
    assert len(destroyed) == 1 and "id=6f1e0a62-53a1-4c8e-9b5e-2d5c6a1f0e11" in destroyed[0]
    assert "cloud: removed 1 leftover(s) of campaign c1: labkit-c1--0a1b2c3d" in capsys.readouterr().out
