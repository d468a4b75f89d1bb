"""The docker backend on a real dockerd (marker ``docker``): the instance meaning of
docs/design.md proved from inside each container, plus docker-specific guarantees."""

from __future__ import annotations

import logging

import pytest

from labkit.backends.docker import DEFAULT_IMAGE
from labkit.core.instance import InstanceSpec
from labkit.images import docker_image

from .conftest import PREFIX, ContainerContract, instances, leftovers, tiny_rootfs_tar
from .contract_lifecycle import LifecycleContract


@pytest.mark.docker
class TestDocker(ContainerContract, LifecycleContract):
    backend_name = "docker"

    def stop(self, backend, inst):
        backend.client.containers.get(inst.id).stop(timeout=0)

    def break_start(self, monkeypatch):
        monkeypatch.setattr("labkit.backends.docker.MAIN_COMMAND", ["/labkit-no-such-init"])

    def test_limits_as_docker_sees_them(self, backend):
        spec = InstanceSpec(vcpus=1, memory_mb=96, affinity="floating")
        with instances(backend, spec) as (inst,):
            hc = backend.api.inspect_container(inst.id)["HostConfig"]
            assert hc["NetworkMode"] == "none"
            assert hc["NanoCpus"] == 10**9 and not hc["CpusetCpus"]
            assert hc["Memory"] == hc["MemorySwap"] == 96 << 20

    def test_a_campaign_never_touches_a_container_it_did_not_create(self, backend):
        foreign = f"{PREFIX}-foreign"
        api = backend.api
        cid = api.create_container(
            DEFAULT_IMAGE,
            command=["sleep", "infinity"],
            name=foreign,
            host_config=api.create_host_config(network_mode="none"),
        )["Id"]
        try:
            api.start(cid)
            with instances(backend, InstanceSpec(memory_mb=64, count=2)):
                pass
            assert api.inspect_container(cid)["State"]["Running"]
            assert foreign in leftovers(backend)
        finally:
            api.remove_container(cid, force=True)

    def test_image_import_is_cached_then_replaced(self, backend, tmp_path, monkeypatch, caplog):
        repo = f"{PREFIX}-image"
        monkeypatch.setattr(docker_image, "REPOSITORY", repo)
        tar = tiny_rootfs_tar(tmp_path / "rootfs.tar")
        caplog.set_level(logging.INFO, logger="labkit.images")
        try:
            first = docker_image.import_image(tar, "a" * 12)
            assert first["built"] and first["image"] == f"{repo}:12-{'a' * 12}"
            again = docker_image.import_image(tar, "a" * 12)
            said = [r.getMessage() for r in caplog.records if r.name == "labkit.images"]
            assert not again["built"] and "nothing to do" in said[-1]
            newer = docker_image.import_image(tar, "b" * 12)
            assert newer["built"]
            tags = {t for img in backend.api.images(name=repo) for t in img.get("RepoTags") or []}
            assert tags == {f"{repo}:12-{'b' * 12}", f"{repo}:12"}  # the stale tag is gone
            labels = backend.api.inspect_image(f"{repo}:12")["Config"]["Labels"]
            assert labels["labkit.hash"] == "b" * 12
        finally:
            for img in backend.api.images(name=repo):
                for tag in img.get("RepoTags") or []:
                    backend.api.remove_image(tag, force=True)
