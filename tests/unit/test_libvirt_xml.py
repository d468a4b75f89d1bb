"""Domain XML from an InstanceSpec (labkit.backends.libvirt.xml): no libvirt needed."""

import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from labkit.backends.libvirt.xml import (
    AGENT_CHANNEL,
    Nic,
    domain_facts,
    domain_xml,
    guest_mac,
    network_xml,
    overlay_volume_xml,
    parse_cpuset,
    parse_pinning,
    pool_xml,
    uri_driver,
    uri_is_local,
)
from labkit.core.instance import InstanceSpec
from labkit.errors import BackendError, BackendUnavailable, ConfigError

PATHS = dict(
    disk="/pool/labkit-t.qcow2",
    kernel="/img/vmlinuz",
    initrd="/img/initrd.img",
    cmdline="root=/dev/vda rw console=ttyS0 init=/sbin/labkit-init quiet",
    console_log="/pool/labkit-t.console.log",
)


def make(spec, cpus=None, domain_type="qemu", name="labkit-t", **kw):
    return ET.fromstring(
        domain_xml(name=name, spec=spec, cpus=cpus, domain_type=domain_type, **{**PATHS, **kw})
    )


def test_vcpus_and_memory():
    dom = make(InstanceSpec(vcpus=3, memory_mb=768))
    assert dom.get("type") == "qemu"
    assert dom.findtext("name") == "labkit-t"
    assert dom.find("vcpu").text == "3" and dom.find("vcpu").get("placement") == "static"
    for tag in ("memory", "currentMemory"):
        assert (dom.find(tag).text, dom.find(tag).get("unit")) == ("768", "MiB")
    assert dom.find("devices/memballoon").get("model") == "none"  # the guest keeps all of it
    assert domain_facts(ET.tostring(dom, encoding="unicode")) == {
        "domain_type": "qemu",
        "vcpus": 3,
        "memory_mb": 768,
    }


def test_pinned_has_one_vcpupin_per_vcpu():
    spec = InstanceSpec(vcpus=2, memory_mb=256, affinity="pinned", count=2)
    cpus = spec.placement(4)[1]  # instance 1: CPUs 2 and 3
    dom = make(spec, cpus)
    pins = [(p.get("vcpu"), p.get("cpuset")) for p in dom.findall("cputune/vcpupin")]
    assert pins == [("0", "2"), ("1", "3")]
    assert parse_pinning(ET.tostring(dom, encoding="unicode")) == {0: [2], 1: [3]}


def test_floating_has_no_cputune():
    dom = make(InstanceSpec(vcpus=2, affinity="floating"))
    assert dom.find("cputune") is None
    assert parse_pinning(ET.tostring(dom, encoding="unicode")) == {}


def test_overcommitted_pinning_wraps_and_is_allowed():
    spec = InstanceSpec(vcpus=3, affinity="pinned")
    dom = make(spec, spec.placement(2)[0])
    assert [p.get("cpuset") for p in dom.findall("cputune/vcpupin")] == ["0", "1", "0"]


def test_pinning_must_match_the_spec():
    with pytest.raises(ConfigError, match="vCPUs"):
        make(InstanceSpec(vcpus=2, affinity="pinned"), [0])
    with pytest.raises(ConfigError, match="pinned"):
        make(InstanceSpec(vcpus=1, affinity="pinned"), None)


def test_domain_type_and_cpu_model():
    kvm = make(InstanceSpec(), domain_type="kvm")
    assert kvm.get("type") == "kvm" and kvm.find("cpu").get("mode") == "host-passthrough"
    tcg = make(InstanceSpec(), domain_type="qemu")
    assert tcg.find("cpu").get("mode") == "custom" and tcg.findtext("cpu/model") == "qemu64"
    with pytest.raises(ConfigError, match="domain type"):
        make(InstanceSpec(), domain_type="lxc")


def test_tcg_cpu_max_gives_a_qemu_guest_every_emulated_feature_and_leaves_kvm_alone():
    """``tcg_cpu: max``: QEMU's ``max`` CPU (x86-64-v2 and more) for a TCG guest, in which
    today's numpy wheels run (under ``qemu64`` they stop with SIGILL); a KVM guest keeps the host's."""
    tcg = make(InstanceSpec(), domain_type="qemu", tcg_cpu="max")
    cpu = tcg.find("cpu")
    assert (cpu.get("mode"), cpu.get("check"), cpu.find("model")) == ("maximum", "none", None)
    kvm = make(InstanceSpec(), domain_type="kvm", tcg_cpu="max")
    assert kvm.find("cpu").get("mode") == "host-passthrough"
    with pytest.raises(ConfigError, match=r"tcg_cpu='host'; use one of qemu64, max"):
        make(InstanceSpec(), domain_type="qemu", tcg_cpu="host")
    libvirt_backend = pytest.importorskip("labkit.backends.libvirt")
    assert libvirt_backend.LibvirtBackend(uri="qemu:///nowhere").tcg_cpu == "qemu64"
    assert libvirt_backend.LibvirtBackend(uri="qemu:///nowhere", tcg_cpu="max").tcg_cpu == "max"
    with pytest.raises(ConfigError, match=r"tcg_cpu='486'; use one of qemu64, max"):
        libvirt_backend.LibvirtBackend(uri="qemu:///nowhere", tcg_cpu="486")


def test_direct_kernel_boot_agent_channel_console_and_no_network():
    dom = make(InstanceSpec())
    assert dom.findtext("os/type") == "hvm"
    assert dom.findtext("os/kernel") == PATHS["kernel"]
    assert dom.findtext("os/initrd") == PATHS["initrd"]
    cmdline = dom.findtext("os/cmdline")
    assert "root=/dev/vda" in cmdline and "init=/sbin/labkit-init" in cmdline
    assert "labkit.hostname=labkit-t" in cmdline
    # a slow emulated guest must not panic on the IO-APIC timer test, and a panic must end the VM
    assert "no_timer_check" in cmdline.split() and "panic=-1" in cmdline.split()
    assert dom.findtext("on_reboot") == "destroy"
    disk = dom.find("devices/disk")
    assert disk.find("source").get("file") == PATHS["disk"]
    assert disk.find("driver").get("type") == "qcow2"
    assert disk.find("driver").get("cache") is None
    assert (disk.find("target").get("dev"), disk.find("target").get("bus")) == ("vda", "virtio")
    assert dom.find("devices/channel/target").get("name") == AGENT_CHANNEL
    assert dom.find("devices/serial/source").get("path") == PATHS["console_log"]
    assert dom.find("devices/interface") is None  # docs/design.md: no network by default
    assert dom.find("devices/graphics") is None
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        assert dom.findtext(event) == "destroy"


def test_disk_cache_option():
    dom = make(InstanceSpec(), disk_cache="none")
    assert dom.find("devices/disk/driver").get("cache") == "none"


def test_raw_disk_format_and_its_validation():
    dom = make(InstanceSpec(), disk="/pool/labkit-t.raw", disk_format="raw")
    assert dom.find("devices/disk/driver").get("type") == "raw"
    assert dom.find("devices/disk/source").get("file") == "/pool/labkit-t.raw"
    assert dom.find("metadata")[0].get("disk_format") == "raw"
    with pytest.raises(ConfigError, match=r"disk_format='vmdk'; use one of qcow2, raw"):
        make(InstanceSpec(), disk_format="vmdk")


def test_private_network_is_isolated_with_a_virtio_nic_per_guest():
    net = ET.fromstring(network_xml("labkit-c--net-1a2b3c4d", "lk1a2b3c4d", "10.201.3.1", 24))
    assert net.find("forward") is None  # nothing is routed or NATed out
    assert net.find("dhcp") is None and net.find("ip/dhcp") is None
    assert net.find("dns").get("enable") == "no"  # libvirt starts no dnsmasq
    assert net.find("bridge").attrib == {"name": "lk1a2b3c4d", "stp": "off", "delay": "0"}
    assert net.find("ip").attrib == {"address": "10.201.3.1", "prefix": "24"}
    for bad in (("other", "lk1"), ("labkit-x", "lk" + "0" * 14)):
        with pytest.raises(ConfigError):
            network_xml(*bad, "10.201.3.1", 24)

    macs = {guest_mac("labkit-c--net-1a2b3c4d", i) for i in range(50)}
    assert len(macs) == 50 and all(m.startswith("52:54:00:") and len(m) == 17 for m in macs)
    assert guest_mac("labkit-c--net-1a2b3c4d", 0) == guest_mac("labkit-c--net-1a2b3c4d", 0)
    nic = Nic("labkit-c--net-1a2b3c4d", "52:54:00:aa:bb:cc", "lk1a2b3c4dh0")
    iface = make(InstanceSpec(), nics=(nic,)).find("devices/interface")
    assert iface.get("type") == "network"
    assert iface.find("source").get("network") == nic.network
    assert iface.find("mac").get("address") == nic.mac
    assert iface.find("target").get("dev") == nic.device  # the tap tc shapes
    assert iface.find("model").get("type") == "virtio"
    assert make(InstanceSpec()).find("devices/interface") is None  # no network: no NIC at all


def test_bonded_network_gives_each_guest_one_nic_per_data_bridge():
    """nics: 3 -> the first NIC on the run's network, then one NIC on each of 3 address-less
    data networks, in order, each with its own MAC and a tap name tc can use (<= 15 chars)."""
    libvirt_net = pytest.importorskip("labkit.backends.libvirt.net")
    from labkit.backends.private_network import Network

    net = Network(
        name="labkit-c--net-1a2b3c4d",
        subnet="10.201.3.0/24",
        host_address="10.201.3.1",
        addresses=[f"10.201.3.{i + 2}" for i in range(200)],
        device="lk1a2b3c4d",
        backend=None,
        nics=3,
        data_subnet="10.202.7.0/24",
        data_addresses=[f"10.202.7.{i + 2}" for i in range(200)],
    )
    for index in (0, 199):
        nics = (libvirt_net.nic(net, index), *libvirt_net.data_nics(net, index))
        ifaces = make(InstanceSpec(), nics=nics).findall("devices/interface")
        assert [i.find("source").get("network") for i in ifaces] == [
            "labkit-c--net-1a2b3c4d",
            "labkit-c--net-1a2b3c4d-d1",
            "labkit-c--net-1a2b3c4d-d2",
            "labkit-c--net-1a2b3c4d-d3",
        ]
        taps = [i.find("target").get("dev") for i in ifaces]
        assert taps == [f"lk1a2b3c4dh{index}", *(f"lk1a2b3c4d{j}h{index}" for j in (1, 2, 3))]
        assert all(len(t) <= 15 for t in taps)
        assert len({i.find("mac").get("address") for i in ifaces}) == 4
    data = ET.fromstring(network_xml("labkit-c--net-1a2b3c4d-d1", "lk1a2b3c4d1", None, 24))
    assert data.find("ip") is None and data.find("forward") is None  # a switch: no host address, no route
    assert data.find("bridge").get("name") == "lk1a2b3c4d1"
    one = Network(
        name="labkit-c--net-1a2b3c4d",
        subnet="10.201.3.0/24",
        host_address="10.201.3.1",
        addresses=["10.201.3.2"],
        device="lk1a2b3c4d",
        backend=None,
    )
    assert libvirt_net.data_nics(one, 0) == ()


def test_bond_script_enslaves_every_data_nic_and_keeps_eth0_for_the_host():
    libvirt_net = pytest.importorskip("labkit.backends.libvirt.net")
    macs = ("52:54:00:00:00:01", "52:54:00:00:00:02")
    script = libvirt_net.guest_script("52:54:00:aa:bb:cc", "10.201.3.2", 24, macs, "10.202.7.2")
    assert "ip addr add 10.201.3.2/24 dev eth0" in script  # the host's address stays on eth0
    assert "type bond mode balance-rr" in script and "max_bonds=0" in script
    assert all(f"find_nic {m}" in script for m in macs)
    assert script.count("master bond0") == 2
    assert "ip addr add 10.202.7.2/24 dev bond0" in script
    assert "route" not in script and "default" not in script
    subprocess.run(["sh", "-n", "-c", script], check=True)
    assert "bond" not in libvirt_net.guest_script("52:54:00:aa:bb:cc", "10.201.3.2", 24)


def test_guest_network_script_names_eth0_and_adds_only_the_subnet():
    libvirt_net = pytest.importorskip("labkit.backends.libvirt.net")
    script = libvirt_net.guest_script("52:54:00:aa:bb:cc", "10.201.3.2", 24)
    assert "find_nic 52:54:00:aa:bb:cc" in script and "name eth0" in script
    assert "ip addr add 10.201.3.2/24 dev eth0" in script
    assert "route" not in script and "default" not in script  # no way out of the /24
    subprocess.run(["sh", "-n", "-c", script], check=True)  # it parses


def test_disk_format_is_validated_and_remote_uris_refuse_raw_disks_and_networks():
    libvirt_backend = pytest.importorskip("labkit.backends.libvirt")
    assert libvirt_backend.LibvirtBackend(uri="qemu:///nowhere").disk_format == "qcow2"
    assert libvirt_backend.LibvirtBackend(uri="qemu:///nowhere", disk_format="raw").disk_format == "raw"
    with pytest.raises(ConfigError, match=r"disk_format='qed'; use one of qcow2, raw"):
        libvirt_backend.LibvirtBackend(disk_format="qed")
    with pytest.raises(ConfigError, match="disk_format=raw needs a local URI"):
        libvirt_backend.LibvirtBackend(uri="qemu+ssh://h/system", disk_format="raw")
    # a private network's bridge, shaping and host end are on this machine: refused when remote
    with pytest.raises(ConfigError, match="network: private needs a local URI"):
        libvirt_backend.LibvirtBackend(uri="qemu+ssh://h/system")._create_network(None)


@pytest.mark.skipif(shutil.which("qemu-img") is None, reason="needs qemu-img (qemu-utils)")
def test_pool_disk_is_an_overlay_or_a_raw_copy(tmp_path, monkeypatch):
    """Pool.disk dispatches on the format; the raw copy is a private raw file holding the base's
    data (qemu-img convert of a small qcow2 made here, checked with qemu-img info/compare)."""
    storage = pytest.importorskip("labkit.backends.libvirt.storage")
    pool = storage.Pool(lambda: None, "labkit", str(tmp_path / "pool"))
    (tmp_path / "pool").mkdir()
    monkeypatch.setattr(pool, "pool", lambda: None)
    monkeypatch.setattr(pool, "overlay", lambda name, img: f"overlay of {name}")
    base = tmp_path / "base.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(base), "4M"], check=True)
    subprocess.run(["qemu-io", "-c", "write -P 0x5a 1M 64k", str(base)], check=True, capture_output=True)
    img = {"disk": str(base), "format": "qcow2"}
    assert pool.disk("labkit-t-1", img) == "overlay of labkit-t-1"
    path = pool.disk("labkit-t-1", img, "raw")
    assert path == f"{tmp_path}/pool/labkit-t-1.raw"
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "--output=json", path], check=True, capture_output=True, text=True
        ).stdout
    )
    assert info["format"] == "raw" and info["virtual-size"] == 4 << 20 and "backing-filename" not in info
    subprocess.run(["qemu-img", "compare", "-q", str(base), path], check=True)  # same contents
    assert os.stat(path).st_mode & 0o777 == 0o600
    with pytest.raises(BackendError, match="could not create"):  # never over an existing file
        pool.disk("labkit-t-1", img, "raw")
    with pytest.raises(BackendError, match="could not make the raw copy"):
        pool.disk("labkit-t-2", {"disk": str(tmp_path / "absent.qcow2"), "format": "qcow2"}, "raw")
    assert not (tmp_path / "pool/labkit-t-2.raw").exists()  # a failed copy leaves nothing


def test_pool_remove_waits_while_another_process_builds_a_volume(tmp_path, monkeypatch):
    """libvirt refuses to refresh a pool while a volume is being built in it (seen with
    concurrent campaigns: "pool 'labkit' has asynchronous jobs running", an internal error of
    the storage driver): retried, told by its code and domain whatever its (translated) text;
    the same text with another code is not retried."""
    import libvirt

    storage = pytest.importorskip("labkit.backends.libvirt.storage")
    from tests.support.libvirt_errors import libvirt_error

    def coded(message, code, domain):
        exc = libvirt_error(message)
        monkeypatch.setattr(exc, "get_error_code", lambda: code)
        monkeypatch.setattr(exc, "get_error_domain", lambda: domain)
        return exc

    busy = coded(
        "erreur interne : le pool 'labkit' a des travaux asynchrones en cours.",
        libvirt.VIR_ERR_INTERNAL_ERROR,
        libvirt.VIR_FROM_STORAGE,
    )
    calls = []

    class FakePool:
        def __init__(self, refusal):
            self.refusal = refusal

        def refresh(self, flags):
            calls.append(flags)
            if len(calls) < 3:
                raise self.refusal

        def storageVolLookupByName(self, name):
            return type("Vol", (), {"delete": lambda self, flags: calls.append("deleted")})()

    pool = storage.Pool(lambda: None, "labkit", str(tmp_path))
    monkeypatch.setattr(pool, "pool", lambda: FakePool(busy))
    monkeypatch.setattr("labkit.core.waiting.time.sleep", lambda s: None)
    pool.remove(f"{tmp_path}/labkit-t-1.raw")
    assert calls == [0, 0, 0, "deleted"]

    calls.clear()  # the same words with another code (a user's wrong pool, say): reported at once
    other = coded(
        "internal error: pool 'labkit' has asynchronous jobs running.",
        libvirt.VIR_ERR_OPERATION_FAILED,
        libvirt.VIR_FROM_STORAGE,
    )
    monkeypatch.setattr(pool, "pool", lambda: FakePool(other))
    with pytest.raises(BackendError, match="asynchronous jobs running"):
        pool.remove(f"{tmp_path}/labkit-t-1.raw")
    assert calls == [0]

    calls.clear()
    monkeypatch.setattr(pool, "pool", lambda: FakePool(busy))
    monkeypatch.setattr(storage, "BUSY_POOL_WAIT_S", 0)  # no time left: the error is reported
    with pytest.raises(BackendError, match="travaux asynchrones"):
        pool.remove(f"{tmp_path}/labkit-t-1.raw")
    assert calls == [0]


def test_xen_domain():
    dom = make(InstanceSpec(vcpus=2, affinity="pinned"), [0, 1], domain_type="xen")
    assert dom.get("type") == "xen"
    assert dom.find("os/type").get("machine") == "xenpv"
    assert "root=/dev/xvda" in dom.findtext("os/cmdline")
    assert dom.find("devices/disk/target").get("bus") == "xen"
    assert dom.find("devices/channel") is None
    assert len(dom.findall("cputune/vcpupin")) == 2


def test_names_must_start_with_labkit():
    with pytest.raises(ConfigError, match="labkit-"):
        make(InstanceSpec(), name="mine")


def test_metadata_records_the_spec():
    dom = make(InstanceSpec(vcpus=2, memory_mb=300, affinity="pinned"), [1, 0])
    inst = [el for el in dom.find("metadata")][0]
    assert inst.attrib == {
        "vcpus": "2",
        "memory_mb": "300",
        "affinity": "pinned",
        "cpus": "1,0",
        "disk_format": "qcow2",
    }


def test_overlay_volume_and_pool():
    vol = ET.fromstring(overlay_volume_xml("labkit-t.qcow2", "/img/base.qcow2", "qcow2", 1 << 30))
    assert vol.findtext("name") == "labkit-t.qcow2"
    assert vol.find("target/format").get("type") == "qcow2"
    assert vol.findtext("backingStore/path") == "/img/base.qcow2"
    assert vol.find("capacity").text == str(1 << 30)
    pool = ET.fromstring(pool_xml("labkit", "/var/lib/libvirt/images/labkit"))
    assert pool.get("type") == "dir" and pool.findtext("target/path") == "/var/lib/libvirt/images/labkit"


@pytest.mark.parametrize(
    "text,cpus", [("0", [0]), ("0-3", [0, 1, 2, 3]), ("0-3,^1", [0, 2, 3]), ("1,5-6", [1, 5, 6]), ("", [])]
)
def test_parse_cpuset(text, cpus):
    assert parse_cpuset(text) == cpus


@pytest.mark.parametrize(
    "uri,driver,local",
    [
        ("qemu:///system", "qemu", True),
        ("qemu+ssh://root@host/system", "qemu", False),
        ("qemu+unix:///system", "qemu", True),
        ("xen:///system", "xen", True),
        ("libxl:///", "xen", True),
        ("qemu+tcp://10.0.0.2/system", "qemu", False),
    ],
)
def test_uri_driver_and_locality(uri, driver, local):
    assert uri_driver(uri) == driver
    assert uri_is_local(uri) == local


# -- the VM image description (libvirt_storage.load_image), no libvirt daemon ---------------
def _image_dir(tmp_path, files=("base.qcow2", "vmlinuz", "initrd.img")):
    d = tmp_path / "vm-abc"
    d.mkdir()
    (d / "image.json").write_text(
        json.dumps(
            {"disk": "base.qcow2", "kernel": "vmlinuz", "initrd": "initrd.img", "cmdline": "root=/dev/vda"}
        )
    )
    for f in files:
        (d / f).write_bytes(b"x")
    return d


def test_load_image_missing_says_how_to_build(tmp_path, monkeypatch):
    storage = pytest.importorskip("labkit.backends.libvirt.storage")
    monkeypatch.setenv("LABKIT_IMAGE_CACHE", str(tmp_path))
    monkeypatch.delenv("LABKIT_VM_IMAGE", raising=False)
    with pytest.raises(BackendUnavailable, match=r"labkit images build --vm"):
        storage.load_image()
    d = _image_dir(tmp_path, files=("base.qcow2", "vmlinuz"))
    with pytest.raises(BackendUnavailable, match="initrd.img is missing"):
        storage.load_image(d)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(BackendUnavailable, match="absent"):
        storage.load_image(tmp_path / "elsewhere")


def test_load_image_from_option_env_or_the_current_pointer(tmp_path, monkeypatch):
    storage = pytest.importorskip("labkit.backends.libvirt.storage")
    monkeypatch.setenv("LABKIT_IMAGE_CACHE", str(tmp_path))
    monkeypatch.delenv("LABKIT_VM_IMAGE", raising=False)
    d = _image_dir(tmp_path)
    # the directory or its image.json, given as the option
    for given in (d, d / "image.json", str(d)):
        info = storage.load_image(given)
        assert info["disk"] == str(d / "base.qcow2") and info["dir"] == str(d)
        assert info["kernel"] == str(d / "vmlinuz") and info["cmdline"] == "root=/dev/vda"
    # the default: what `labkit images build --vm` points to, unless $LABKIT_VM_IMAGE says otherwise
    (tmp_path / "vm-current.json").write_text(json.dumps({"image": str(d)}))
    assert storage.load_image()["dir"] == str(d)
    monkeypatch.setenv("LABKIT_VM_IMAGE", str(tmp_path / "nowhere"))
    with pytest.raises(BackendUnavailable, match="nowhere"):
        storage.load_image()


def test_load_image_of_a_variant_by_name_or_pointer(tmp_path, monkeypatch):
    """`labkit images build --vm --profile mpi` writes vm-mpi.json; `image=mpi` or that file
    selects the variant, the base stays the default."""
    storage = pytest.importorskip("labkit.backends.libvirt.storage")
    monkeypatch.setenv("LABKIT_IMAGE_CACHE", str(tmp_path))
    monkeypatch.delenv("LABKIT_VM_IMAGE", raising=False)
    d = _image_dir(tmp_path)
    (tmp_path / "vm-mpi.json").write_text(json.dumps({"image": str(d)}))
    assert storage.load_image("mpi")["dir"] == str(d)
    assert storage.load_image(str(tmp_path / "vm-mpi.json"))["dir"] == str(d)
    with pytest.raises(BackendUnavailable, match=r"vm-disk\.json.*--vm --profile"):
        storage.load_image("disk")


def test_load_image_rejects_a_malformed_description(tmp_path):
    storage = pytest.importorskip("labkit.backends.libvirt.storage")
    d = _image_dir(tmp_path)
    (d / "image.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        storage.load_image(d)
    (d / "image.json").write_text(json.dumps({"disk": "base.qcow2", "kernel": 3}))
    with pytest.raises(ConfigError, match="disk, kernel, initrd, cmdline"):
        storage.load_image(d)


def test_unknown_backend_options_are_rejected_with_the_allowed_list():
    libvirt_backend = pytest.importorskip("labkit.backends.libvirt")
    with pytest.raises(ConfigError, match=r"unknown option\(s\) enforce_limit.*allowed: uri, domain_type"):
        libvirt_backend.LibvirtBackend(enforce_limit=False)
    for bad in ({"boot_timeout": "nan"}, {"boot_timeout": -1}, {"kvm_probe_timeout": "x"}):
        with pytest.raises(ConfigError, match="seconds > 0"):
            libvirt_backend.LibvirtBackend(**bad)
    with pytest.raises(ConfigError, match="domain_type"):
        libvirt_backend.LibvirtBackend(domain_type="lxc")


def test_host_kernel_needs_the_cloud_kernel(tmp_path):
    from labkit.images import vm

    with pytest.raises(BackendUnavailable, match="linux-image-cloud-amd64"):
        vm.host_kernel(str(tmp_path))
    assert vm._version_key("6.1.0-56-cloud-amd64") > vm._version_key("6.1.0-9-cloud-amd64")


def test_guest_init_is_packaged_and_needs_no_compiled_helper():
    from labkit.images import rootfs, vm

    init = vm._files("labkit-init").decode()
    assert init.startswith("#!/bin/sh") and "org.qemu.guest_agent.0" in init and "qemu-ga" in init
    # what it runs comes from the image's packages: insmod (kmod), ip (iproute2)
    assert "insmod" in init and "ip link set lo up" in init
    assert {"kmod", "iproute2", "qemu-guest-agent"} <= set(rootfs.PACKAGES)


def test_a_vm_below_the_bootable_memory_is_refused_before_anything_is_made():
    libvirt_backend = pytest.importorskip("labkit.backends.libvirt")
    be = libvirt_backend.LibvirtBackend(uri="qemu:///nowhere-never-opened")
    with pytest.raises(ConfigError, match=r"memory_mb=128 is too small.*at least 160 MiB"):
        be._boot(InstanceSpec(memory_mb=128), "labkit-t-1", 0, None, "qemu")


def test_remove_machine_cgroups_leaves_busy_and_foreign_groups(tmp_path):
    """Empty groups libvirt left for a stopped domain go (deepest first, on every controller);
    a group with a process (here: a file, which refuses rmdir as the kernel does for a
    populated cgroup) and other domains' groups stay."""
    from labkit.backends.libvirt import remove_machine_cgroups

    mine = "labkit-c1--0a1b2c3d"
    stale = [tmp_path / c / "machine" / f"qemu-7-{mine}.libvirt-qemu" for c in ("cpu", "memory")]
    for g in stale:
        (g / "emulator").mkdir(parents=True)
    busy = tmp_path / "cpuset" / "machine" / "qemu-8-labkit-c1--ffff0000.libvirt-qemu"
    busy.mkdir(parents=True)
    (busy / "cgroup.procs").write_text("4242\n")
    other = tmp_path / "cpu" / "machine" / "qemu-9-labkit-c2--0a1b2c3d.libvirt-qemu"
    other.mkdir(parents=True)
    assert remove_machine_cgroups(mine, root=str(tmp_path)) == sorted(str(g) for g in stale)
    assert not any(g.exists() for g in stale)
    assert remove_machine_cgroups("labkit-c1--*", root=str(tmp_path), wait_s=0.2) == []
    assert busy.exists() and other.exists()


def test_pool_listing_waits_while_another_process_builds_a_volume(tmp_path, monkeypatch):
    """Listing the pool's files refreshes it too: while another campaign builds a volume the refresh
    is refused (CI met "listing pool labkit: internal error: pool 'labkit' has asynchronous jobs
    running" with two libvirt campaigns at once); retried as remove() is."""
    import libvirt

    storage = pytest.importorskip("labkit.backends.libvirt.storage")
    from tests.support.libvirt_errors import libvirt_error

    busy = libvirt_error("internal error: pool 'labkit' has asynchronous jobs running.")
    monkeypatch.setattr(busy, "get_error_code", lambda: libvirt.VIR_ERR_INTERNAL_ERROR)
    monkeypatch.setattr(busy, "get_error_domain", lambda: libvirt.VIR_FROM_STORAGE)
    refreshes = []

    class Vol:
        def __init__(self, name):
            self._name = name

        def name(self):
            return self._name

    class FakePool:
        def refresh(self, flags):
            refreshes.append(flags)
            if len(refreshes) < 3:
                raise busy

        def listAllVolumes(self, flags):
            return [Vol("labkit-a-1.raw"), Vol("other.raw"), Vol("labkit-a-0.console.log")]

    pool = storage.Pool(lambda: None, "labkit", str(tmp_path))
    monkeypatch.setattr(pool, "pool", lambda: FakePool())
    monkeypatch.setattr("labkit.core.waiting.time.sleep", lambda s: None)
    assert pool.volumes("labkit-a-") == ["labkit-a-0.console.log", "labkit-a-1.raw"]
    assert refreshes == [0, 0, 0]
    refreshes.clear()
    monkeypatch.setattr(storage, "BUSY_POOL_WAIT_S", 0)  # no time left: the error is reported
    with pytest.raises(BackendError, match="listing pool labkit: .*asynchronous jobs running"):
        pool.volumes("labkit-a-")
