"""The libvirt backend on the real libvirtd, proved from inside the guests.

A handful of boots (TCG takes ~10-20 s each on 2 shared cores): one pinned VM,
one floating VM shared by the exec/put tests, two VMs running N-queens side by
side, one VM that fails to boot. Everything is named ``labkit-test-<hex>`` and
torn down in ``finally``; the class fixture (tests/integration/conftest.py)
fails if a ``labkit-`` domain was left behind, the ``backend`` fixture here
does the same for overlays and console logs.

Memory: MemTotal inside the guest is ``memory_mb`` minus what the kernel keeps
for itself at boot (its image, memmap, reserved ranges: ~40 MiB at 512 MiB
with the Debian cloud kernel). We accept ``memory_mb - 80 MiB < MemTotal <=
memory_mb`` and additionally that two sizes differ by their difference within
16 MiB, which shows ``<memory>`` is what the guest gets.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time

import pytest

from labkit.backends import get_backend, new_name, teardown
from labkit.core.instance import InstanceSpec
from labkit.errors import BackendError, CommandError, CommandTimeout, ConfigError

from .conftest import PREFIX, check_exec_contract, instances

pytestmark = pytest.mark.libvirt

KERNEL_RESERVE_MB = 80
MEM_SCALE_TOLERANCE_MB = 16
_memtotal: dict[int, float] = {}


def backend_files(*names) -> list[str]:
    return [f"{n}{ext}" for n in names for ext in (".qcow2", ".console.log")]


def killed_controller(backend, prefix: str) -> str:
    """Start a domain named ``prefix*`` from another process, SIGKILL that process; the name."""
    code = (
        "import json, sys; from labkit.backends import get_backend, new_name; "
        "from labkit.core.instance import InstanceSpec; "
        "be = get_backend('libvirt', **json.loads(sys.argv[2])); "
        "i = be._boot(InstanceSpec(memory_mb=256), new_name(sys.argv[1]), 0, None, be.domain_type()); "
        "print(i.name, flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, prefix, json.dumps(backend.options)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    try:
        name = proc.stdout.readline().strip()
        assert name.startswith(prefix), name
    finally:
        proc.kill()
        proc.wait(timeout=30)
    return name


def memtotal_mb(inst) -> float:
    out = inst.exec("grep MemTotal /proc/meminfo").stdout
    return int(re.search(r"MemTotal:\s+(\d+) kB", out)[1]) / 1024


def check_memory(inst, memory_mb: int) -> None:
    got = memtotal_mb(inst)
    assert memory_mb - KERNEL_RESERVE_MB < got <= memory_mb, (
        f"MemTotal {got:.0f} MiB for memory_mb={memory_mb}"
    )
    _memtotal[memory_mb] = got


@pytest.fixture(scope="class")
def backend(backend):
    """The shared fixture (domains left behind fail) plus the same check for overlays."""
    before = set(backend.list_overlays(PREFIX))
    yield backend
    left = set(backend.list_overlays(PREFIX)) - before
    assert not left, f"overlays or console logs left behind: {sorted(left)}"


@pytest.fixture(scope="class")
def floating_vm(backend):
    """One floating 1-vCPU, 256 MiB VM shared by the exec/put tests."""
    made = backend.provision(InstanceSpec(vcpus=1, memory_mb=256, affinity="floating"), prefix=PREFIX)
    try:
        yield made[0]
    finally:
        assert not teardown(made)


class TestLibvirt:
    backend_name = "libvirt"

    # -- the instance meaning of docs/design.md ---------------------------------------------
    def test_pinned_vm_vcpus_memory_and_pinning(self, backend):
        host = backend.host_cpus()
        spec = InstanceSpec(vcpus=2, memory_mb=512, affinity="pinned")
        want = spec.placement(host)[0]
        with instances(backend, spec) as (inst,):
            assert inst.exec("nproc").stdout.strip() == "2"
            check_memory(inst, 512)
            # read back from libvirt: one vcpupin per vCPU, each vCPU on exactly its CPU
            assert inst.cpus == want
            pins = inst.pinning()
            assert pins["vcpupin_xml"] == {j: [c] for j, c in enumerate(want)}
            assert pins["vcpupin"] == {j: [c] for j, c in enumerate(want)}
            assert inst.metadata["vcpupin"] == pins["vcpupin"]
            assert inst.metadata["libvirt_vcpus"] == 2 and inst.metadata["libvirt_memory_mb"] == 512
            assert inst.metadata["domain_type"] == backend.domain_type() in ("kvm", "qemu")
            assert inst.metadata["uri"] == backend.uri
            assert inst.metadata["boot_to_agent_s"] > 0

    def test_floating_vm_vcpus_memory_and_no_pinning(self, backend, floating_vm):
        inst = floating_vm
        host = backend.host_cpus()
        assert inst.cpus is None
        assert inst.exec("nproc").stdout.strip() == "1"
        check_memory(inst, 256)
        pins = inst.pinning()
        assert pins["vcpupin_xml"] == {}  # no <cputune><vcpupin>
        assert pins["vcpupin"] == {0: list(range(host))}  # the vCPU may run anywhere
        assert inst.metadata["vcpupin_xml"] == {}

    def test_memory_scales_with_memory_mb(self):
        if not {256, 512} <= set(_memtotal):
            pytest.skip("needs both memory tests above")
        diff = _memtotal[512] - _memtotal[256]
        assert abs(diff - 256) <= MEM_SCALE_TOLERANCE_MB, _memtotal

    def test_two_vms_run_nqueens_at_the_same_time(self, backend):
        from labkit.workloads.nqueens import NQueens

        wl = NQueens(board=10)
        spec = InstanceSpec(vcpus=1, memory_mb=256, affinity="floating", count=2)
        with instances(backend, spec) as insts:
            assert len({i.name for i in insts}) == 2
            assert all(i.name.startswith(PREFIX + "-") for i in insts)
            assert set(backend.list_labkit(PREFIX)) >= {i.name for i in insts}
            for inst in insts:
                wl.prepare(inst)
            # repeat the solver so each side runs for a few seconds, then check the overlap
            loop = "i=0; while [ $i -lt 8 ]; do {bin} 10 1 || exit 1; i=$((i+1)); done".format(
                bin=f"{insts[0].workdir}/{wl.remote_path}"
            )

            def run(inst):
                t0 = time.monotonic()
                res = inst.exec(loop, timeout=600)
                return t0, time.monotonic(), res.stdout

            with cf.ThreadPoolExecutor(2) as pool:
                outs = list(pool.map(run, insts))
            # and once through the workload, which validates the solution count
            for inst in insts:
                rows = {m.metric: m.value for m in wl.run(inst, wl.params_for({}, vcpus=1))}
                assert rows["solutions"] == 724
        for _, _, out in outs:
            assert out.count("solutions=724") == 8, out
        latest_start = max(s for s, _, _ in outs)
        earliest_end = min(e for _, e, _ in outs)
        assert latest_start < earliest_end, f"the runs did not overlap: {outs}"
        names = {i.name for i in insts}
        assert not names & set(backend.list_labkit(PREFIX))
        assert not [f for f in backend.list_overlays(PREFIX) if f.split(".")[0] in names]

    # -- exec, files, network ----------------------------------------------------------
    def test_exec_result_and_command_error(self, floating_vm):
        inst = floating_vm
        check_exec_contract(inst)
        assert inst.exec("exit 4", check=False).exit_code == 4
        assert inst.exec("echo $LABKIT_X", env={"LABKIT_X": "y z"}).stdout == "y z\n"
        assert inst.exec("kill -TERM $$", check=False).exit_code == 128 + 15

    def test_timeout_kills_the_command_tree(self, floating_vm):
        inst = floating_vm
        t0 = time.monotonic()
        with pytest.raises(CommandTimeout) as err:
            inst.exec("sleep 40 & (sleep 41 & sleep 42); echo never", timeout=1.5)
        assert time.monotonic() - t0 < 20
        r = err.value.result
        assert r.timed_out and not r.oom_killed and r.exit_code == 137, r.describe()
        assert r.duration_s >= 1.5 and "never" not in r.stdout
        ps = inst.exec("ps -eo args").stdout
        assert not re.search(r"^sleep 4[012]", ps, re.M), ps  # child, grandchildren: all gone
        assert inst.exec("echo alive").stdout == "alive\n"

    def test_oom_kill_is_reported_and_a_plain_sigkill_is_not(self, floating_vm):
        inst = floating_vm
        # a SIGKILL that is not the OOM killer's: exit 137, no OOM reported
        plain = inst.exec("kill -KILL $$", check=False)
        assert plain.exit_code == 137 and not plain.oom_killed and not plain.timed_out
        # tail buffers /dev/zero (no newline) until the 256 MiB guest's OOM killer ends it
        with pytest.raises(CommandError) as err:
            inst.exec(["tail", "/dev/zero"], timeout=600)
        r = err.value.result
        assert r.exit_code == 137 and r.oom_killed and not r.timed_out, r.describe()
        assert "OOM killer" in r.describe()
        vmstat = inst.exec("cat /proc/vmstat").stdout
        assert int(re.search(r"^oom_kill (\d+)$", vmstat, re.M)[1]) >= 1
        # the counter is cumulative: the next plain SIGKILL is again not an OOM kill
        assert not inst.exec("kill -KILL $$", check=False).oom_killed
        assert inst.exec("echo alive").stdout == "alive\n"

    def test_orphans_are_reaped(self, floating_vm):
        inst = floating_vm
        inst.exec("sleep 0.2 &")
        time.sleep(3)
        states = inst.exec("ps -eo stat=,args=").stdout
        assert not [s for s in states.splitlines() if s.strip().startswith("Z")], states

    def test_put_copies_a_file_with_its_mode(self, floating_vm):
        inst = floating_vm
        payload = os.urandom(300_000)  # several agent chunks
        with tempfile.NamedTemporaryFile("wb", delete=False) as f:
            f.write(payload)
        try:
            inst.put(f.name, "/tmp/labkit/sub/dir/blob", mode=0o640)
            assert inst.exec("stat -c '%a %s' /tmp/labkit/sub/dir/blob").stdout.split() == [
                "640",
                str(len(payload)),
            ]
            import hashlib

            assert (
                inst.exec("sha256sum /tmp/labkit/sub/dir/blob").stdout.split()[0]
                == hashlib.sha256(payload).hexdigest()
            )
        finally:
            os.unlink(f.name)

    def test_no_network_loopback_up_and_image_tools(self, floating_vm):
        inst = floating_vm
        ifaces = [
            line.split(":")[0].strip() for line in inst.exec("cat /proc/net/dev").stdout.splitlines()[2:]
        ]
        assert ifaces == ["lo"], ifaces
        assert int(inst.exec("cat /sys/class/net/lo/flags").stdout, 16) & 1  # IFF_UP
        for tool in ("sysbench", "ab", "apache2", "stress-ng", "fio", "iperf3", "timeout", "ps"):
            assert inst.exec(["sh", "-c", f"command -v {tool}"], check=False).ok, tool

    # -- failures and teardown ---------------------------------------------------------
    def test_boot_failure_raises_with_the_console_tail(self):
        be = get_backend("libvirt", boot_timeout=120)
        before = set(be.list_labkit(PREFIX)), set(be.list_overlays(PREFIX))
        try:
            img = dict(be.image_info())
            # PID 1 exits at once -> kernel panic -> panic=-1 reboots -> on_reboot destroys
            img["cmdline"] = img["cmdline"].replace("init=/sbin/labkit-init", "init=/bin/false panic=-1")
            be._image = img
            with pytest.raises(BackendError) as err:
                be.provision(InstanceSpec(memory_mb=256), prefix=PREFIX)
            msg = str(err.value)
            assert "stopped during boot" in msg and "serial console" in msg and "Kernel" in msg, msg
            assert set(be.list_labkit(PREFIX)) - before[0] == set()
            assert set(be.list_overlays(PREFIX)) - before[1] == set()
        finally:
            be.close()

    def test_provision_failure_leaves_nothing(self, backend, monkeypatch):
        before = set(backend.list_labkit(PREFIX)), set(backend.list_overlays(PREFIX))
        real = type(backend)._boot

        def flaky(self, spec, name, index, cpus, dtype, *network):
            if index == 1:
                raise RuntimeError("injected failure")
            return real(self, spec, name, index, cpus, dtype, *network)

        monkeypatch.setattr(type(backend), "_boot", flaky)
        with pytest.raises(RuntimeError, match="injected"):
            backend.provision(InstanceSpec(memory_mb=256, count=2), prefix=PREFIX)
        assert set(backend.list_labkit(PREFIX)) - before[0] == set()
        assert set(backend.list_overlays(PREFIX)) - before[1] == set()

    def test_cleanup_removes_exactly_its_prefix(self, backend):
        """Campaign ``x`` never touches campaign ``x-2``: domains, overlays and console logs."""
        tag = secrets.token_hex(3)
        mine, other = f"{PREFIX}-{tag}--", f"{PREFIX}-{tag}-2--"
        spec = InstanceSpec(memory_mb=256)
        dtype = backend.domain_type()
        # a controller killed with SIGKILL: its AUTODESTROY domain dies with it, the files stay
        left = killed_controller(backend, mine)
        deadline = time.monotonic() + 30
        while left in backend.list_labkit(mine) and time.monotonic() < deadline:
            time.sleep(0.5)
        # and a live campaign of each prefix (started, not waited for: cleanup needs no agent)
        live = [backend._boot(spec, new_name(p), 0, None, dtype) for p in (mine, other)]
        try:
            assert backend.list_labkit(mine) == [live[0].name]
            assert set(backend.list_overlays(mine)) == {
                f"{n}{ext}" for n in (left, live[0].name) for ext in (".qcow2", ".console.log")
            }
            removed = backend.cleanup(mine)
            assert removed == sorted([left, live[0].name])
            assert backend.list_labkit(mine) == [] and backend.list_overlays(mine) == []
            # the other campaign is untouched and still runs
            assert backend.list_labkit(other) == [live[1].name] and live[1]._alive()
            assert set(backend.list_overlays(other)) == set(backend_files(live[1].name))
            assert backend.cleanup(mine) == []
            with pytest.raises(ConfigError):
                backend.cleanup("")  # never "everything"
        finally:
            assert not teardown(live)
        assert backend.cleanup(other) == []

    def test_fingerprint_and_domain_type(self, backend):
        fp = backend.fingerprint()
        assert fp["backend"] == "libvirt" and fp["uri"] == backend.uri
        assert fp["domain_type"] in ("kvm", "qemu") and fp["domain_type_reason"]
        assert fp["hypervisor"] == "QEMU" and fp["libvirt_version"]
        assert fp["guest_kernel"].endswith("cloud-amd64")
