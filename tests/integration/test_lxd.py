"""The lxd backend on a real LXD (marker ``lxd``): the instance meaning of docs/design.md
proved from inside each container, plus LXD-specific guarantees."""
from __future__ import annotations

import pytest

from labkit.images import lxd_image
from labkit.instance import InstanceSpec

from .conftest import PREFIX, ContainerContract, instances, tiny_rootfs_tar
from .contract_lifecycle import LifecycleContract


@pytest.mark.lxd
class TestLxd(ContainerContract, LifecycleContract):
    backend_name = "lxd"

    def stop(self, backend, inst):
        inst.model.stop(force=True, wait=True)

    def break_start(self, monkeypatch):
        monkeypatch.setattr("labkit.backends.lxd.INIT_CMD", "/labkit-no-such-init")

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

    def test_image_import_is_cached_then_replaced(self, backend, tmp_path, monkeypatch):
        import pylxd
        alias = f"{PREFIX}-image"
        monkeypatch.setattr(lxd_image, "ALIAS", alias)
        tar = tiny_rootfs_tar(tmp_path / "rootfs.tar")
        said, fingerprints = [], set()
        images = backend.client.images
        try:
            first = lxd_image.import_image(tar, "a" * 12, echo=said.append)
            fingerprints.add(first["fingerprint"])
            assert first["built"]
            again = lxd_image.import_image(tar, "a" * 12, echo=said.append)
            assert not again["built"] and "nothing to do" in said[-1]
            newer = lxd_image.import_image(tar, "b" * 12, echo=said.append)
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
