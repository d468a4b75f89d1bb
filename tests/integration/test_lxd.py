"""The lxd backend on a real LXD (marker ``lxd``): the instance meaning of DESIGN.md
proved from inside each container, plus LXD-specific guarantees."""
from __future__ import annotations

import pytest

from labkit.images import lxd_image
from labkit.instance import InstanceSpec

from .conftest import PREFIX, ContainerContract, instances, tiny_rootfs_tar


@pytest.mark.lxd
class TestLxd(ContainerContract):
    backend_name = "lxd"

    def break_start(self, monkeypatch):
        monkeypatch.setattr("labkit.backends.lxd.INIT_CMD", "/labkit-no-such-init")

    def test_config_as_lxd_sees_it(self, backend):
        spec = InstanceSpec(vcpus=1, memory_mb=96, affinity="pinned")
        with instances(backend, spec) as (inst,):
            data = backend._call("get", f"instances/{inst.name}")["metadata"]
            assert data["profiles"] == []
            assert set(data["expanded_devices"]) == {"root"}  # no NIC at all
            cfg = data["expanded_config"]
            assert cfg["limits.cpu"] == f"{inst.cpus[0]}-{inst.cpus[0]}"
            assert cfg["limits.memory"] == "96MiB"
            assert cfg["limits.memory.enforce"] == "hard"

    def test_image_import_is_cached_then_replaced(self, backend, tmp_path, monkeypatch):
        import pylxd
        alias = f"{PREFIX}-image"
        monkeypatch.setattr(lxd_image, "ALIAS", alias)
        tar = tiny_rootfs_tar(tmp_path / "rootfs.tar")
        said, fingerprints = [], set()
        try:
            first = lxd_image.import_image(tar, "a" * 12, echo=said.append)
            fingerprints.add(first["fingerprint"])
            assert first["built"]
            again = lxd_image.import_image(tar, "a" * 12, echo=said.append)
            assert not again["built"] and "nothing to do" in said[-1]
            newer = lxd_image.import_image(tar, "b" * 12, echo=said.append)
            fingerprints.add(newer["fingerprint"])
            assert newer["built"] and newer["fingerprint"] != first["fingerprint"]
            target = backend._call("get", f"images/aliases/{alias}")["metadata"]["target"]
            assert target == newer["fingerprint"]
            props = backend._call("get", f"images/{target}")["metadata"]["properties"]
            assert props["labkit.hash"] == "b" * 12
            with pytest.raises(pylxd.exceptions.NotFound):  # the stale image was deleted
                backend._call("get", f"images/{first['fingerprint']}")
        finally:
            for path in (f"images/aliases/{alias}", *(f"images/{fp}" for fp in fingerprints)):
                try:
                    backend._call("delete", path)
                except Exception:
                    pass
