"""Image building without daemons: apt mirror discovery, cache keys and the caches
themselves (a second build does no work), LXD metadata, and the pure parts of the
docker/lxd backends' mapping of an InstanceSpec."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from labkit.core.instance import InstanceSpec
from labkit.errors import BackendError, ConfigError
from labkit.images import rootfs as rf
from labkit.images.builder import check_targets
from labkit.images.lxd_image import metadata_tarball

DEB822 = """\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

ONE_LINE = """\
# a comment
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/k.gpg] http://other.example/debian-security bookworm-security main
deb http://one.example/debian bookworm main contrib   # trailing comment
"""


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_deb822_picks_the_bookworm_suite_not_security(tmp_path):
    path = _write(tmp_path, "debian.sources", DEB822)
    src = rf.debian_mirror("bookworm", patterns=(path,))
    assert src.uri == "http://mirror.example/debian"
    assert src.signed_by == "/usr/share/keyrings/debian-archive-keyring.gpg"
    assert src.origin == path


def test_one_line_format_with_options_and_comments(tmp_path):
    path = _write(tmp_path, "sources.list", ONE_LINE)
    sources = rf.apt_sources(patterns=(path,))
    assert [s.uri for s in sources] == ["http://other.example/debian-security", "http://one.example/debian"]
    assert sources[0].signed_by == "/k.gpg"
    assert rf.debian_mirror("bookworm", patterns=(path,)).uri == "http://one.example/debian"


def test_deb822_disabled_stanza_and_deb_src_are_ignored(tmp_path):
    text = (
        "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nComponents: main\n"
        "Enabled: no\n\nTypes: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n"
        "Components: main\n\nTypes: deb deb-src\nURIs: http://on.example/debian\n"
        "Suites: bookworm\nComponents: main\n"
    )
    path = _write(tmp_path, "x.sources", text)
    assert rf.debian_mirror("bookworm", patterns=(path,)).uri == "http://on.example/debian"


def test_files_are_read_in_apt_order(tmp_path):
    a = _write(tmp_path, "sources.list", "")
    d = tmp_path / "d"
    d.mkdir()
    _write(d, "b.sources", "Types: deb\nURIs: http://b.example/debian\nSuites: bookworm\n")
    _write(d, "a.list", "deb http://a.example/debian bookworm main\n")
    src = rf.debian_mirror("bookworm", patterns=(a, str(d / "*.list"), str(d / "*.sources")))
    assert src.uri == "http://a.example/debian"


def test_no_mirror_names_the_files_and_the_override(tmp_path):
    path = _write(tmp_path, "sources.list", "deb http://x.example/debian trixie main\n")
    with pytest.raises(ConfigError, match="LABKIT_APT_MIRROR") as err:
        rf.debian_mirror("bookworm", patterns=(path,))
    assert path in str(err.value)


def test_mirror_override_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_APT_MIRROR", "http://override.example/debian")
    assert rf.debian_mirror("bookworm", patterns=()).uri == "http://override.example/debian"


def test_this_machines_sources_parse():
    # every source read from this machine's files names a URI that stands in the file it came from
    sources = rf.apt_sources()
    assert sources, "no deb source read from this machine's apt files (a Debian machine has one)"
    for src in sources:
        assert src.uri and src.uri.split("://")[0] in ("http", "https", "file", "cdrom", "mirror+file")
        assert Path(src.origin).is_file() and src.uri.rstrip("/") in Path(src.origin).read_text()


def test_inputs_hash_is_stable_and_sensitive():
    a = rf.inputs_hash(rf.inputs())
    assert a == rf.inputs_hash(rf.inputs())
    assert a != rf.inputs_hash(rf.inputs(packages=rf.PACKAGES + ("htop",)))
    assert len(a) == 12
    for tool in ("sysbench", "apache2", "apache2-utils", "stress-ng", "fio", "iperf3", "qemu-guest-agent"):
        assert tool in rf.PACKAGES


def test_unfinished_rootfs_has_no_stamp(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_IMAGE_CACHE", str(tmp_path))
    path = rf.rootfs_path("abc")
    path.mkdir()
    assert rf.read_stamp(path) is None  # a half-built tree is never reused
    with pytest.raises(BackendError, match="not built"):
        rf.image_hash(path)
    rf._write_stamp(path, {"hash": "abc"})
    assert rf.read_stamp(path)["hash"] == "abc"
    assert rf.image_hash(path) == "abc"


@pytest.fixture
def fake_debootstrap(tmp_path, monkeypatch):
    """build_rootfs with debootstrap replaced by a counter that makes a tiny tree."""
    monkeypatch.setenv("LABKIT_IMAGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LABKIT_APT_MIRROR", "http://mirror.example/debian")
    monkeypatch.setattr(rf.os, "geteuid", lambda: 0)
    monkeypatch.setattr(rf.shutil, "which", lambda tool: f"/usr/sbin/{tool}")
    calls = []
    real_run = rf.run_host

    def run(cmd, what, **kw):
        if cmd[0] == "dpkg":  # the architecture (an input of the hash) is read for real
            return real_run(cmd, what=what, **kw)
        calls.append(cmd)
        assert cmd[0] == "debootstrap" and cmd[-1] == "http://mirror.example/debian"
        root = tmp_path / cmd[-2]
        (root / "var/lib/dpkg").mkdir(parents=True)
        (root / "var/lib/dpkg/status").write_text("Package: base-files\n")
        (root / "etc").mkdir()

    monkeypatch.setattr(rf, "run_host", run)
    return calls


def said(caplog) -> list[str]:
    """What the image builders logged (the ``labkit.images`` logger) since caplog's last clear."""
    return [r.getMessage() for r in caplog.records if r.name == "labkit.images"]


def test_rootfs_build_is_cached_on_its_inputs(fake_debootstrap, caplog):
    caplog.set_level(logging.INFO, logger="labkit.images")
    first = rf.build_rootfs()
    assert any(m.startswith("rootfs built at") for m in said(caplog))
    assert len(fake_debootstrap) == 1
    assert "--include=" + ",".join(sorted(rf.PACKAGES)) in fake_debootstrap[0]
    stamp = rf._stamp(first)
    mtime = stamp.stat().st_mtime_ns
    caplog.clear()
    assert rf.build_rootfs() == first
    assert len(fake_debootstrap) == 1, "a second build with the same inputs must not debootstrap"
    assert stamp.stat().st_mtime_ns == mtime
    assert said(caplog) == [f"rootfs {first} is up to date (inputs {rf.inputs_hash()}); nothing to do"]
    rf.build_rootfs(force=True)
    assert len(fake_debootstrap) == 2
    # nothing but the packages' own files is baked in (no benchmark binary)
    assert not (first / "usr/local/bin").exists()
    assert rf.image_hash(first) == rf.inputs_hash()


def test_vm_image_build_is_cached_on_its_inputs(tmp_path, monkeypatch):
    from labkit.images import vm

    for tool in ("mkfs.ext4", "qemu-img"):
        if not vm.shutil.which(tool):
            pytest.skip(f"{tool} not installed")
    if vm.os.geteuid() != 0:
        pytest.skip("the VM image build runs as root")
    monkeypatch.setenv("LABKIT_IMAGE_CACHE", str(tmp_path / "cache"))
    boot = tmp_path / "boot"
    boot.mkdir()
    (boot / "vmlinuz-9.9.9-cloud-amd64").write_bytes(b"kernel")
    (boot / "initrd.img-9.9.9-cloud-amd64").write_bytes(b"initrd")
    monkeypatch.setattr(
        vm,
        "host_kernel",
        lambda: (
            "9.9.9-cloud-amd64",
            boot / "vmlinuz-9.9.9-cloud-amd64",
            boot / "initrd.img-9.9.9-cloud-amd64",
        ),
    )
    monkeypatch.setattr(vm, "HEADROOM_MB", 8)
    root = tmp_path / "rootfs"
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text("Package: base-files\n")
    (root / "etc").mkdir()
    (root / "sbin").mkdir()
    real_run, steps = vm.run_host, []
    monkeypatch.setattr(
        vm, "run_host", lambda cmd, what, **kw: steps.append(what) or real_run(cmd, what=what, **kw)
    )

    out = vm.build_vm_image(root)
    assert any("mkfs.ext4" in s for s in steps) and any("qemu-img" in s for s in steps)
    info = json.loads((out / "image.json").read_text())
    assert {info[k] for k in ("disk", "kernel", "initrd")} == {"base.qcow2", "vmlinuz", "initrd.img"}
    assert "init=/sbin/labkit-init" in info["cmdline"] and info["kernel_version"] == "9.9.9-cloud-amd64"
    assert vm.current_image() == out
    mtime = (out / "base.qcow2").stat().st_mtime_ns
    done = len(steps)
    assert vm.build_vm_image(root) == out
    assert len(steps) == done, f"a cached build ran {steps[done:]}"
    assert (out / "base.qcow2").stat().st_mtime_ns == mtime
    # a changed input (the rootfs content) makes a new image and points the backend at it
    (root / "var/lib/dpkg/status").write_text("Package: base-files\nPackage: kmod\n")
    other = vm.build_vm_image(root)
    assert other != out and vm.current_image() == other
    assert vm.remove_stale() == [out] and not out.exists()


def test_finish_rootfs_strips_docs_keeps_copyright(tmp_path):
    root = tmp_path / "root"
    (root / "usr/share/doc/pkg").mkdir(parents=True)
    (root / "usr/share/doc/pkg/copyright").write_text("c")
    (root / "usr/share/doc/pkg/changelog.gz").write_text("x")
    (root / "usr/share/man/man1").mkdir(parents=True)
    (root / "usr/share/locale/de").mkdir(parents=True)
    (root / "usr/share/locale/locale.alias").write_text("a")
    (root / "etc/apt").mkdir(parents=True)
    (root / "etc/apt/sources.list").write_text("deb http://mirror.example/debian bookworm main\n")
    rf._finish_rootfs(root)
    assert (root / "usr/share/doc/pkg/copyright").exists()
    assert not (root / "usr/share/doc/pkg/changelog.gz").exists()
    assert not (root / "usr/share/man/man1").exists()
    assert (root / "usr/share/locale/locale.alias").exists()
    assert "mirror.example" not in (root / "etc/apt/sources.list").read_text()
    assert (root / "tmp/labkit").is_dir()


def test_targets_validation():
    assert check_targets("docker,lxd") == ("docker", "lxd")
    assert check_targets(["lxd"]) == ("lxd",)
    assert check_targets("") == ()
    with pytest.raises(ConfigError, match="allowed: docker, lxd"):
        check_targets("podman")


def test_lxd_metadata_is_deterministic_and_carries_the_hash():
    a = metadata_tarball("abc123", created=1700000000)
    assert a == metadata_tarball("abc123", created=1700000000)
    with tarfile.open(fileobj=io.BytesIO(a)) as tf:
        assert tf.getnames() == ["metadata.yaml"]
        text = tf.extractfile("metadata.yaml").read().decode()
    assert 'labkit.hash: "abc123"' in text
    assert "architecture:" in text and "creation_date: 1700000000" in text


# --- backend mappings that need no daemon -------------------------------------------
def test_lxd_cpu_set_never_reads_as_a_count():
    from labkit.backends.lxd import cpu_set

    assert cpu_set([1]) == "1-1"
    assert cpu_set([0, 1]) == "0,1"
    assert cpu_set([1, 0, 1]) == "0,1"  # overcommitted wrap-around


def test_lxd_instance_config_pinned_and_floating():
    from labkit.backends.lxd import instance_config

    pinned, meta = instance_config(
        InstanceSpec(vcpus=2, memory_mb=256, affinity="pinned"), [0, 1], host_cpus=2
    )
    assert pinned["limits.cpu"] == "0,1" and "limits.cpu.allowance" not in pinned
    assert pinned["limits.memory"] == "256MiB" and pinned["limits.memory.enforce"] == "hard"
    floating, meta = instance_config(InstanceSpec(vcpus=3, memory_mb=128), None, host_cpus=2)
    assert "limits.cpu" not in floating
    assert floating["limits.cpu.allowance"] == "300ms/100ms"
    assert meta["cpu_quota_cpus"] == 2


def test_backend_options_are_validated():
    from labkit.backends.docker import DockerBackend
    from labkit.backends.lxd import LxdBackend

    with pytest.raises(ConfigError, match="allowed: image"):
        DockerBackend(imgae="x")
    with pytest.raises(ConfigError, match="allowed: image"):
        LxdBackend(pool_name="x")


def test_unreachable_daemons_say_which_socket_and_how_to_start(tmp_path):
    from labkit.backends.docker import DockerBackend
    from labkit.backends.lxd import LxdBackend
    from labkit.errors import BackendUnavailable

    sock = tmp_path / "nothing.sock"
    with pytest.raises(BackendUnavailable) as err:
        DockerBackend(base_url=f"unix://{sock}").check()
    assert str(sock) in str(err.value) and "dockerd" in str(err.value)
    with pytest.raises(BackendUnavailable) as err:
        LxdBackend(socket=str(sock)).check()
    assert str(sock) in str(err.value) and "lxd --group root" in str(err.value)


def test_missing_sdk_gives_the_pip_command(monkeypatch):
    import builtins

    from labkit.backends import docker as dmod
    from labkit.backends import lxd as lmod
    from labkit.errors import BackendUnavailable

    real = builtins.__import__

    def fake(name, *a, **k):
        if name in ("docker", "pylxd"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(BackendUnavailable, match="pip install docker"):
        dmod._sdk()
    with pytest.raises(BackendUnavailable, match="pip install pylxd"):
        lmod.sdk()


def test_pinned_cpus_must_exist_on_the_host():
    from labkit.backends.base import check_cpus

    check_cpus(None, 2)
    check_cpus([0, 1, 0], 2)  # wrap-around of an overcommitted placement is fine
    with pytest.raises(ConfigError, match=r"\[5\] do not exist.*0-1"):
        check_cpus([0, 5], 2)


def test_stale_rootfs_trees_are_pruned_after_a_build(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="labkit.images")
    keep = tmp_path / "rootfs-aaaaaaaaaaaa"
    keep.mkdir()
    (tmp_path / "rootfs-aaaaaaaaaaaa.stamp").write_text("{}")
    (tmp_path / "rootfs-bbbbbbbbbbbb").mkdir()
    (tmp_path / "rootfs-bbbbbbbbbbbb.stamp").write_text("{}")
    (tmp_path / "rootfs-cccccccccccc.tar").write_text("")  # tarballs are handled by rootfs_tarball
    (tmp_path / "vm-bbbbbbbbbbbb").mkdir()  # not ours
    rf._prune_stale(keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rootfs-aaaaaaaaaaaa",
        "rootfs-aaaaaaaaaaaa.stamp",
        "rootfs-cccccccccccc.tar",
        "vm-bbbbbbbbbbbb",
    ]
    assert sorted(said(caplog)) == [
        f"removed stale {tmp_path / n}" for n in ("rootfs-bbbbbbbbbbbb", "rootfs-bbbbbbbbbbbb.stamp")
    ]


def test_variant_from_profile_packages_and_name():
    assert rf.variant() is rf.BASE and rf.BASE.dirname("a" * 12) == "rootfs-" + "a" * 12
    mpi = rf.variant("mpi")
    assert mpi.name == "mpi" and mpi.extra == tuple(sorted(rf.PROFILES["mpi"]))
    assert set(mpi.packages) == set(rf.PACKAGES) | set(rf.PROFILES["mpi"])
    assert rf.variant(packages="hpcc, openmpi-bin").extra == mpi.extra
    custom = rf.variant(packages="mariadb-server,bonnie++")
    assert custom.name.startswith("x") and len(custom.name) == 9
    assert custom == rf.variant(packages=["bonnie++", "mariadb-server"])  # order does not matter
    assert rf.variant(packages="fio") is rf.BASE  # already in every image
    assert rf.variant(packages="bonnie++", name="disk").dirname("b" * 12) == "rootfs-disk-" + "b" * 12
    # the base image's cache key does not move when variants exist
    assert rf.inputs_hash(rf.inputs(rf.BASE.packages)) == rf.inputs_hash(rf.inputs())
    assert rf.inputs_hash(rf.inputs(mpi.packages)) != rf.inputs_hash(rf.inputs())


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"profile": "nope"}, r"unknown profile 'nope'.*mpi"),
        ({"packages": "hpcc,Bad;rm"}, r"'Bad;rm' is not a Debian package name"),
        ({"packages": "hpcc", "name": "Has-Dash"}, r"'Has-Dash' must be 1-16 lower-case"),
        ({"name": "lonely"}, r"no extra packages"),
    ],
)
def test_variant_validation(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        rf.variant(kw.get("profile"), kw.get("packages"), kw.get("name"))


def test_variant_build_is_cached_beside_the_base_and_prunes_only_its_own(fake_debootstrap):
    base = rf.build_rootfs()
    mpi = rf.variant("mpi")
    path = rf.build_rootfs(var=mpi)
    assert path.name.startswith("rootfs-mpi-") and path != base
    assert "--include=" + ",".join(mpi.packages) in fake_debootstrap[-1]
    assert rf.read_stamp(path)["variant"] == "mpi"
    assert rf.build_rootfs(var=mpi) == path and len(fake_debootstrap) == 2
    # an older build of the variant goes, the base stays (and building the base keeps the variant)
    stale = path.with_name("rootfs-mpi-" + "0" * 12)
    stale.mkdir()
    rf.build_rootfs(force=True, var=mpi)
    assert not stale.exists() and base.exists() and rf.read_stamp(base)
    rf.build_rootfs(force=True)
    assert path.exists() and rf.read_stamp(path)


def test_variant_image_names():
    from labkit.images import docker_image, lxd_image, vm

    h = "c" * 12
    assert docker_image.image_names(h) == (f"labkit/debian:12-{h}", "labkit/debian:12")
    assert docker_image.image_names(h, "mpi") == (f"labkit/debian:12-mpi-{h}", "labkit/debian:12-mpi")
    assert lxd_image.alias() == "labkit-debian-12" and lxd_image.alias("mpi") == "labkit-debian-12-mpi"
    assert vm.pointer().name == "vm-current.json" and vm.pointer("mpi").name == "vm-mpi.json"


@pytest.mark.parametrize(
    "argv, line",
    [
        (["labkit.images", "build", "--only", ""], "rootfs {} is up to date (inputs {}); nothing to do"),
        (
            ["labkit", "images", "build", "--only", "none"],
            "INFO labkit.images: rootfs {} is up to date (inputs {}); nothing to do",
        ),
    ],
    ids=["python -m labkit.images", "labkit images build"],
)
def test_command_line_builds_show_their_progress(tmp_path, argv, line):
    """``python -m labkit.images build`` and ``labkit images build`` set up logging so that the
    builders' progress lines (INFO on ``labkit.images``) reach the terminal: here a cached rootfs."""
    if os.geteuid() != 0:
        pytest.skip("building the rootfs runs as root")
    env = {**os.environ, "LABKIT_IMAGE_CACHE": str(tmp_path)}
    h = rf.inputs_hash()
    path = tmp_path / rf.BASE.dirname(h)
    path.mkdir()
    rf._write_stamp(path, {"hash": h})
    proc = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert line.format(path, h) in proc.stderr.splitlines()
