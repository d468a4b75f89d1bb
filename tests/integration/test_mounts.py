"""The ``mounts`` option on real backends: a host directory (a stand-in for a user's PARSEC or
NPB install) is visible inside the instance, read-only by default, and written through when
``rw`` is asked."""
from __future__ import annotations

import pytest

from labkit.backends import get_backend, teardown
from labkit.instance import InstanceSpec

BACKENDS = [pytest.param("local", marks=pytest.mark.root), pytest.param("docker", marks=pytest.mark.docker),
            pytest.param("lxd", marks=pytest.mark.lxd)]


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_host_directory_is_visible_read_only_and_rw_on_request(backend_name, tmp_path):
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir(), out.mkdir()
    for d in (tmp_path, suite, out):
        d.chmod(0o777)   # unprivileged LXD maps root to an unprivileged host uid
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
        if backend_name != "local":   # local shares the host's file system: no read-only there
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
