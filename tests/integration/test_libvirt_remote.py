"""The libvirt backend over a remote URI: ``qemu+ssh://`` through the test sshd.

The "remote" host is this machine reached through scripts/setup-ssh.sh's sshd
(127.0.0.1:2222, key from LABKIT_SSH_KEY), so libvirt runs its ssh transport
for real: the client spawns ``ssh``, the far side runs ``virt-ssh-helper``,
and every call (domain XML, storage-pool overlays, guest-agent commands,
console log) crosses that tunnel. The KVM probe runs again for the remote URI
(nothing is cached for remote hosts) and its verdict must agree with the local one.
"""

from __future__ import annotations

import os
import secrets

import pytest

from labkit.backends import get_backend, new_name, teardown
from labkit.core.instance import InstanceSpec

from .conftest import PREFIX, check_exec_contract, instances

pytestmark = [pytest.mark.libvirt, pytest.mark.ssh]


def ssh_uri() -> str:
    """The test sshd from the LABKIT_SSH_* variables (the Makefile sets them)."""
    host = os.environ.get("LABKIT_SSH_HOST")
    if not host:
        pytest.skip("LABKIT_SSH_HOST is not set (make integration sets the test sshd's address)")
    key = os.environ.get("LABKIT_SSH_KEY")
    query = "no_tty=1" + (f"&keyfile={key}" if key else "")  # host key: known (setup-ssh.sh records it)
    user, port = os.environ.get("LABKIT_SSH_USER", "root"), os.environ.get("LABKIT_SSH_PORT", "22")
    return f"qemu+ssh://{user}@{host}:{port}/system?{query}"


@pytest.fixture(scope="module")
def remote():
    be = get_backend("libvirt", uri=ssh_uri())
    local = get_backend("libvirt")
    before = set(local.list_labkit(PREFIX)), set(local.list_overlays(PREFIX))
    try:
        yield be, local
        assert set(local.list_labkit(PREFIX)) - before[0] == set(), "domains left behind"
        assert set(local.list_overlays(PREFIX)) - before[1] == set(), "overlays left behind"
    finally:
        be.close()
        local.close()


def test_a_vm_over_qemu_ssh_is_provisioned_driven_and_removed(remote):
    be, local = remote
    assert not be.local and be.uri.startswith("qemu+ssh://")
    host = be.host_cpus()
    assert host == local.host_cpus()
    spec = InstanceSpec(vcpus=1, memory_mb=256, affinity="pinned")
    want = spec.placement(host)[0]
    with instances(be, spec, prefix=PREFIX + "-ssh") as (inst,):
        # the domain is on the daemon both connections reach
        assert inst.name in local.list_labkit(PREFIX)
        assert inst.metadata["uri"] == be.uri
        assert inst.metadata["domain_type"] == local.domain_type()
        assert inst.exec("nproc").stdout.strip() == "1"
        assert inst.pinning()["vcpupin"] == {0: want}
        check_exec_contract(inst)
        inst.put(__file__, "/tmp/labkit/remote_test.py", mode=0o644)
        assert inst.exec("wc -c < /tmp/labkit/remote_test.py").stdout.strip() == str(
            len(open(__file__, "rb").read())
        )
    assert inst.name not in local.list_labkit(PREFIX)
    fp = be.fingerprint()
    assert fp["uri"] == be.uri and fp["domain_type"] == local.domain_type()


def test_cleanup_over_qemu_ssh_removes_exactly_its_prefix(remote):
    be, local = remote
    tag = secrets.token_hex(3)
    mine, other = f"{PREFIX}-ssh{tag}--", f"{PREFIX}-ssh{tag}-2--"
    dtype = be.domain_type()
    # started, not waited for: listing and cleanup need no guest agent
    made = [be._boot(InstanceSpec(memory_mb=256), new_name(p), 0, None, dtype) for p in (mine, other)]
    try:
        assert be.list_labkit(mine) == [made[0].name] and be.list_labkit(other) == [made[1].name]
        files = [f"{made[0].name}{ext}" for ext in (".console.log", ".qcow2")]
        assert be.list_overlays(mine) == files
        assert be.cleanup(mine) == [made[0].name]
        assert local.list_labkit(mine) == [] and local.list_overlays(mine) == []
        assert local.list_labkit(other) == [made[1].name] and made[1]._alive()
    finally:
        assert not teardown(made)
    assert be.cleanup(other) == []
