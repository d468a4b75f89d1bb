"""The ``mounts`` option on real backends: a host directory (a stand-in for a user's PARSEC or
NPB install) is visible inside the instance, read-only by default, and written through when
``rw`` is asked; on libvirt over virtiofs."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from labkit.backends import get_backend, teardown
from labkit.core.instance import InstanceSpec

BACKENDS = [
    pytest.param("local", marks=pytest.mark.root),
    pytest.param("docker", marks=pytest.mark.docker),
    pytest.param("lxd", marks=pytest.mark.lxd),
]


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_host_directory_is_visible_read_only_and_rw_on_request(backend_name, tmp_path):
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir(), out.mkdir()
    for d in (tmp_path, suite, out):
        d.chmod(0o777)  # unprivileged LXD maps root to an unprivileged host uid
    (suite / "bin.sh").write_text("#!/bin/sh\necho suite-ran\n")
    (suite / "bin.sh").chmod(0o755)
    target = str(suite) if backend_name == "local" else "/opt/suite"
    rw_target = str(out) if backend_name == "local" else "/opt/out"
    be = get_backend(backend_name, mounts=f"{suite}:{target},{out}:{rw_target}:rw")
    insts = []
    try:
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=128, count=1), prefix="labkit-test-mounts--")
        inst = insts[0]
        assert inst.exec([f"{target}/bin.sh"], timeout=60).stdout.strip() == "suite-ran"
        if backend_name != "local":  # local shares the host's file system: no read-only there
            res = inst.exec(["sh", "-c", f"echo x > {target}/new"], check=False, timeout=60)
            assert not res.ok and "read-only" in res.stderr.lower(), res.stderr
            assert not (suite / "new").exists()
        inst.exec(["sh", "-c", f"echo written > {rw_target}/result"], timeout=60)
        assert (out / "result").read_text() == "written\n"
        assert inst.metadata.get("mounts", be.options.get("mounts"))
    finally:
        assert teardown(insts) == []
        be.cleanup("labkit-test-mounts--")
        be.close()


def _virtiofsd_serving(paths) -> list[str]:
    """Command lines of the virtiofsd processes whose share is one of ``paths``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:  # the process ended meanwhile
            continue
        if argv and argv[0].endswith("virtiofsd") and any(f"source={p}" in a for a in argv for p in paths):
            found.append(" ".join(argv))
    return found


@pytest.mark.libvirt
def test_libvirt_shares_host_directories_over_virtiofs(tmp_path):
    """One 256 MB TCG guest: a read-only share is seen at its target and refuses writes even
    after the guest remounts it read-write (the host side is a read-only bind mount); a
    read-write share writes through; after teardown no virtiofsd, bind mount or domain is left."""
    from labkit.backends.libvirt import mounts as libvirt_mounts

    owned = tmp_path / "vfs"
    suite, out = owned / "suite", owned / "out"
    for d in (owned, suite, out):
        d.mkdir(mode=0o700)  # private: virtiofsd runs as root, nothing else needs them
    (suite / "bin.sh").write_text("#!/bin/sh\necho suite-ran\n")
    (suite / "bin.sh").chmod(0o700)
    prefix = f"labkit-test-vfs{uuid.uuid4().hex[:6]}--"
    be = get_backend("libvirt", mounts=f"{suite}:/opt/suite,{out}:/opt/out:rw")
    insts = []
    try:
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=256, count=1), prefix=prefix)
        inst = insts[0]
        shared = [libvirt_mounts.RO_ROOT / inst.name / "0", out]
        assert len(_virtiofsd_serving(shared)) >= 2, "one virtiofsd per share"
        assert inst.exec(["/opt/suite/bin.sh"], timeout=60).stdout.strip() == "suite-ran"
        res = inst.exec(["sh", "-c", "echo x > /opt/suite/new"], check=False, timeout=60)
        assert not res.ok and "read-only" in res.stderr.lower(), res.stderr
        res = inst.exec(
            ["sh", "-c", "mount -o remount,rw /opt/suite && echo x > /opt/suite/new"], check=False, timeout=60
        )
        assert not res.ok and "read-only" in res.stderr.lower(), res.stderr
        assert sorted(p.name for p in suite.iterdir()) == ["bin.sh"]
        inst.exec(["sh", "-c", "echo written > /opt/out/result"], timeout=60)
        assert (out / "result").read_text() == "written\n"
        assert inst.metadata["mounts"][1] == {"source": str(out), "target": "/opt/out", "readonly": False}
    finally:
        assert teardown(insts) == []
        be.cleanup(prefix)
        left = be.list_labkit(prefix)
        be.close()
    assert left == [] and libvirt_mounts.leftovers(prefix) == []
    deadline = time.monotonic() + 30  # libvirt stops virtiofsd with the domain
    while _virtiofsd_serving(shared) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _virtiofsd_serving(shared) == []
