"""The lxd backend on a real LXD (marker ``lxd``): the instance meaning of docs/design.md
proved from inside each container, plus LXD-specific guarantees."""

from __future__ import annotations

import logging

import pytest

from labkit.backends.lxd import base as lxd_base
from labkit.core.instance import InstanceSpec
from labkit.images import lxd_image

from .conftest import PREFIX, ContainerContract, instances, tiny_rootfs_tar
from .contract_lifecycle import LifecycleContract


@pytest.mark.lxd
class TestLxd(ContainerContract, LifecycleContract):
    backend_name = "lxd"

    def stop(self, backend, inst):
        inst.model.stop(force=True, wait=True)

    def break_start(self, monkeypatch):
        monkeypatch.setattr("labkit.backends.lxd.config.INIT_CMD", "/labkit-no-such-init")

    def test_config_as_lxd_sees_it(self, backend):
        spec = InstanceSpec(vcpus=1, memory_mb=96, affinity="pinned")
        with instances(backend, spec) as (inst,):
            data = backend.client.instances.get(inst.name)
            assert data.profiles == []
            assert set(data.expanded_devices) == {"root"}  # no NIC at all
            assert data.expanded_devices["root"]["pool"] == backend.pool
            cfg = data.expanded_config
            assert cfg["limits.cpu"] == f"{inst.cpus[0]}-{inst.cpus[0]}"
            assert cfg["limits.memory"] == "96MiB"
            assert cfg["limits.memory.enforce"] == "hard"

    def test_fingerprint_names_the_pool_and_its_driver(self, backend):
        fp = backend.fingerprint()
        pool = backend.client.storage_pools.get(fp["storage_pool"])
        assert fp["storage_driver"] == pool.driver

    def test_image_import_is_cached_then_replaced(self, backend, tmp_path, monkeypatch, caplog):
        import pylxd

        alias = f"{PREFIX}-image"
        monkeypatch.setattr(lxd_image, "ALIAS", alias)
        tar = tiny_rootfs_tar(tmp_path / "rootfs.tar")
        caplog.set_level(logging.INFO, logger="labkit.images")
        fingerprints: set[str] = set()
        images = backend.client.images
        try:
            first = lxd_image.import_image(tar, "a" * 12)
            fingerprints.add(first["fingerprint"])
            assert first["built"]
            again = lxd_image.import_image(tar, "a" * 12)
            said = [r.getMessage() for r in caplog.records if r.name == "labkit.images"]
            assert not again["built"] and "nothing to do" in said[-1]
            newer = lxd_image.import_image(tar, "b" * 12)
            fingerprints.add(newer["fingerprint"])
            assert newer["built"] and newer["fingerprint"] != first["fingerprint"]
            target = images.get_by_alias(alias)
            assert target.fingerprint == newer["fingerprint"]
            assert target.properties["labkit.hash"] == "b" * 12
            assert not images.exists(first["fingerprint"])  # the stale image was deleted
        finally:
            for fp in fingerprints:
                try:
                    images.get(fp).delete(wait=True)
                except pylxd.exceptions.LXDAPIException:
                    pass

    def test_unprivileged_instances_are_copies_of_a_pre_shifted_base(self, backend):
        """An instance is copied from its image's base, which LXD has shifted once: the copy's
        disk is shifted before its first start (no "Remapping container filesystem" walk)."""
        fp = backend.client.images.get_by_alias(backend.image).fingerprint
        name = lxd_base.base_name(fp, backend._pool())
        with instances(backend, InstanceSpec(vcpus=1, memory_mb=96)) as (inst,):
            assert inst.metadata["base"] == name
            assert inst.exec(["true"]).ok
            base = backend.client.instances.get(name)
            assert lxd_base.is_ready(base.config, base.status)
            assert base.config["user.labkit.image"] == fp
            shifted = base.config["volatile.last_state.idmap"]
            assert backend.client.instances.get(inst.name).config["volatile.last_state.idmap"] == shifted
        assert name not in backend.list_labkit()  # a cache of the image, not a campaign's

    def test_a_half_made_base_is_not_used_then_made_again(self, backend, monkeypatch):
        """A base that is not ready (its maker died before starting it) is not copied: the
        instance comes from the image; once older than PATIENCE_S it is removed and made again.
        A base whose image is gone is removed when a base is made."""
        client, pool = backend.client, backend._pool()
        fp = client.images.get_by_alias(backend.image).fingerprint
        name = lxd_base.base_name(fp, pool)
        stale = lxd_base.PREFIX + "0" * 16
        root = {"root": {"type": "disk", "path": "/", "pool": pool}}
        try:
            client.instances.get(name).delete(wait=True)
        except Exception:
            pass
        client.instances.create(
            {
                "name": name,
                "source": {"type": "image", "alias": backend.image},
                "profiles": [],
                "devices": root,
            },
            wait=True,
        )  # never started
        client.instances.create(
            {
                "name": stale,
                "source": {"type": "image", "alias": backend.image},
                "profiles": [],
                "devices": root,
                "config": {"user.labkit.image": "0" * 64},
            },
            wait=True,
        )
        try:
            with instances(backend, InstanceSpec(vcpus=1, memory_mb=96)) as (inst,):
                assert inst.metadata["base"] is None and inst.exec(["true"]).ok
            assert client.instances.exists(name) and client.instances.exists(stale)
            monkeypatch.setattr(lxd_base, "PATIENCE_S", 0.0)
            with instances(backend, InstanceSpec(vcpus=1, memory_mb=96)) as (inst,):
                assert inst.metadata["base"] is None  # removed, not yet made again
            assert not client.instances.exists(name)
            with instances(backend, InstanceSpec(vcpus=1, memory_mb=96)) as (inst,):
                assert inst.metadata["base"] == name and inst.exec(["true"]).ok
            assert not client.instances.exists(stale)  # its image is gone
        finally:
            if client.instances.exists(stale):
                client.instances.get(stale).delete(wait=True)

    def test_privileged_instances_come_from_the_image(self):
        from labkit.backends import get_backend

        be = get_backend("lxd", privileged=True)
        try:
            with instances(be, InstanceSpec(vcpus=1, memory_mb=96)) as (inst,):
                assert inst.metadata["base"] is None and inst.exec(["true"]).ok
        finally:
            be.close()


@pytest.mark.lxd
def test_a_floating_vcpu_quota_is_never_reported_as_not_taken(tmp_path):
    """A floating instance's vCPUs on LXD are a CFS quota (``limits.cpu.allowance``). On a host with
    cgroup v1 controllers the container mounts no v1 cpu controller, so the quota cannot be read
    inside: the manipulation check says "not verified" there, and "taken" where the quota is
    visible (cgroup v2). It once read the CPUs the container may run on instead and reported the
    one-vCPU level as not taken (24 of 96 runs of affinity-platforms as first committed)."""
    from labkit.run.campaign import Campaign

    design = {
        "name": "lxd-vcpus",
        "factors": {"vcpus": [1, 2]},
        "replications": 1,
        "seed": 3,
        "telemetry": "off",
    }
    store = Campaign(
        design,
        backend="lxd",
        campaign_id="lxd-vcpus",
        data_dir=tmp_path,
        progress=False,
        workload="command",
        workload_params={"argv": ["true"]},
        defaults=InstanceSpec(vcpus=1, memory_mb=128, affinity="floating"),
    ).run()
    runs = store.runs()
    assert len(runs) == 2 and set(runs.status) == {"ok"}
    for r in runs.itertuples():
        check = r.metadata["treatments"]["vcpus"]
        assert r.metadata["treatment_failed"] == [], (r.vcpus, check)
        if check["verified"] is None:  # no cpu controller inside: the CPUs it may run on are recorded
            assert "no CPU controller visible" in check["how"] and check["observed"] >= r.vcpus
        else:
            assert check["verified"] is True and check["observed"] == r.vcpus, check
