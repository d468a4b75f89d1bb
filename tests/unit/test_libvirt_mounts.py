"""libvirt mounts as virtiofs shares: the domain XML, the host side's bookkeeping, the guest
script's arguments. No libvirt needed (the real boot: tests/integration/test_mounts.py)."""

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from labkit.backends.libvirt.xml import MAX_TAG, Share, domain_xml, mount_tag
from labkit.core.instance import InstanceSpec
from labkit.core.mounts import Mount
from labkit.errors import BackendError, BackendUnavailable, ConfigError

PATHS = dict(
    disk="/pool/labkit-t.qcow2",
    kernel="/img/vmlinuz",
    initrd="/img/initrd.img",
    cmdline="root=/dev/vda rw console=ttyS0 init=/sbin/labkit-init quiet",
    console_log="/pool/labkit-t.console.log",
)


def make(shares=(), domain_type="qemu", spec=None):
    return ET.fromstring(
        domain_xml(
            name="labkit-t",
            spec=spec or InstanceSpec(memory_mb=256),
            cpus=None,
            domain_type=domain_type,
            shares=shares,
            **PATHS,
        )
    )


def test_no_mounts_no_shared_memory_and_no_filesystem():
    dom = make()
    assert dom.find("memoryBacking") is None and dom.find("devices/filesystem") is None


def test_each_share_is_a_virtiofs_filesystem_on_shared_memfd_memory_of_the_same_size():
    shares = (Share("/run/labkit/virtiofs/labkit-t/0", mount_tag(0)), Share("/srv/out", mount_tag(1)))
    dom = make(shares)
    # libvirt kbase "Sharing files with Virtiofs": memfd source + shared access for vhost-user
    assert dom.find("memoryBacking/source").get("type") == "memfd"
    assert dom.find("memoryBacking/access").get("mode") == "shared"
    assert dom.find("memoryBacking/hugepages") is None
    assert (dom.findtext("memory"), dom.findtext("currentMemory")) == ("256", "256")
    fss = dom.findall("devices/filesystem")
    assert [(fs.get("type"), fs.get("accessmode")) for fs in fss] == [("mount", "passthrough")] * 2
    assert [fs.find("driver").get("type") for fs in fss] == ["virtiofs", "virtiofs"]
    assert [fs.find("source").get("dir") for fs in fss] == [s.source for s in shares]
    assert [fs.find("target").get("dir") for fs in fss] == ["labkit0", "labkit1"]
    # libvirt 9.0 refuses <readonly/> on virtiofs; read-only is done by the host bind mount
    assert all(fs.find("readonly") is None and fs.find("binary") is None for fs in fss)


def test_share_validation():
    assert mount_tag(7) == "labkit7"
    with pytest.raises(ConfigError, match="integer >= 0"):
        mount_tag(-1)
    with pytest.raises(ConfigError, match="unique"):
        make((Share("/a", "labkit0"), Share("/b", "labkit0")))
    with pytest.raises(ConfigError, match=f"1-{MAX_TAG} bytes"):
        make((Share("/a", "x" * (MAX_TAG + 1)),))
    with pytest.raises(ConfigError, match="absolute path"):
        make((Share("rel/dir", "labkit0"),))
    with pytest.raises(ConfigError, match="QEMU domain, not xen"):
        make((Share("/a", "labkit0"),), domain_type="xen")


def test_backend_parses_mounts_and_needs_a_local_uri(tmp_path):
    libvirt_backend = pytest.importorskip("labkit.backends.libvirt")
    be = libvirt_backend.LibvirtBackend(
        uri="qemu:///nowhere", mounts=f"{tmp_path}:/opt/suite,{tmp_path}:/o:rw"
    )
    assert be.mounts == (Mount(str(tmp_path), "/opt/suite", True), Mount(str(tmp_path), "/o", False))
    assert be.options["mounts"][1] == {"source": str(tmp_path), "target": "/o", "readonly": False}
    with pytest.raises(ConfigError, match="mounts needs a local URI"):
        libvirt_backend.LibvirtBackend(uri="qemu+ssh://h/system", mounts=str(tmp_path))
    with pytest.raises(ConfigError, match="libvirt option mounts"):
        libvirt_backend.LibvirtBackend(mounts="relative/dir")


def test_read_write_shares_are_their_source_and_a_failed_bind_mount_leaves_nothing(tmp_path, monkeypatch):
    lm = pytest.importorskip("labkit.backends.libvirt.mounts")
    root = tmp_path / "virtiofs"
    assert lm.prepare("labkit-t-1", (Mount("/srv/out", "/o", False),), root) == (
        Share("/srv/out", "labkit0"),
    )
    assert not root.exists()  # nothing to bind for a read-write share

    def refuse(argv, what, **kw):
        raise BackendError(f"{what}: refused")

    monkeypatch.setattr(lm, "run_host", refuse)
    with pytest.raises(BackendError, match="read-only bind mount of /srv/suite for labkit-t-1"):
        lm.prepare("labkit-t-1", (Mount("/srv/out", "/o", False), Mount("/srv/suite", "/s")), root)
    assert lm.leftovers("labkit-t-", root) == [] and list(root.iterdir()) == []
    assert (root.stat().st_mode & 0o777) == 0o700


def test_leftovers_are_found_by_prefix_and_released(tmp_path):
    lm = pytest.importorskip("labkit.backends.libvirt.mounts")
    for name in ("labkit-a--1", "labkit-a--2", "labkit-b--1"):
        (tmp_path / name / "0").mkdir(parents=True)
    assert lm.leftovers("labkit-a--", tmp_path) == ["labkit-a--1", "labkit-a--2"]
    lm.release("labkit-a--1", tmp_path)
    lm.release("labkit-a--1", tmp_path)  # idempotent
    assert lm.leftovers("labkit-", tmp_path) == ["labkit-a--2", "labkit-b--1"]
    assert lm.leftovers("labkit-", tmp_path / "absent") == []


class FakeGuest:
    """Records the argv it is given and answers with one canned result."""

    name = "labkit-t-1"

    def __init__(self, code=0, stderr=""):
        self.code, self.stderr, self.argv = code, stderr, None

    def exec(self, argv, timeout=None, check=True):
        from labkit.backends.base import ExecResult

        self.argv = argv
        return ExecResult(argv, self.code, "", self.stderr, 0.0)


def test_guest_mounts_each_tag_at_its_target_with_its_mode():
    lm = pytest.importorskip("labkit.backends.libvirt.mounts")
    subprocess.run(["sh", "-n", "-c", lm.GUEST_SCRIPT], check=True)  # it parses
    guest = FakeGuest()
    lm.mount_in_guest(guest, (Mount("/srv/suite", "/opt/my suite"), Mount("/srv/out", "/o", False)))
    assert guest.argv[:2] == ["sh", "-c"] and guest.argv[3] == "sh"
    # values are arguments, never spliced into the script
    assert guest.argv[4:] == ["labkit0", "/opt/my suite", "ro", "labkit1", "/o", "rw"]
    assert "mount -t virtiofs" in guest.argv[2] and "insmod" in guest.argv[2]
    with pytest.raises(BackendError, match="no virtiofs module.*labkit images build --vm"):
        lm.mount_in_guest(FakeGuest(lm.NO_MODULE, "no loadable fuse module"), (Mount("/a", "/a"),))
    with pytest.raises(BackendError, match="mounting the host directories failed.*no such device"):
        lm.mount_in_guest(FakeGuest(4, "mount: no such device"), (Mount("/a", "/a"),))


def test_the_vm_image_carries_the_virtiofs_modules_of_the_cloud_kernel():
    from labkit.images import vm

    assert {"kernel/fs/fuse/fuse", "kernel/fs/fuse/virtiofs"} <= set(vm.GUEST_MODULES)
    try:
        version = vm.host_kernel()[0]
    except Exception:
        pytest.skip("no Debian cloud kernel installed")
    config = Path(f"/boot/config-{version}").read_text()
    assert "CONFIG_VIRTIO_FS=m" in config.splitlines() or "CONFIG_VIRTIO_FS=y" in config.splitlines()
    for module in vm.GUEST_MODULES:
        assert list(Path(f"/lib/modules/{version}").glob(f"{module}.ko*")), module


def test_an_image_without_the_virtiofs_module_is_refused_before_anything_is_made(tmp_path):
    libvirt_backend = pytest.importorskip("labkit.backends.libvirt")
    be = libvirt_backend.LibvirtBackend(uri="qemu:///nowhere-never-opened", mounts=str(tmp_path))
    be._image = {"dir": "/cache/vm-old", "modules": ["virtio_console"]}  # built before virtiofs
    with pytest.raises(BackendUnavailable, match="vm-old has no virtiofs module.*images build --vm"):
        be._boot(InstanceSpec(memory_mb=256), "labkit-t-1", 0, None, "qemu", None, be.mounts)
