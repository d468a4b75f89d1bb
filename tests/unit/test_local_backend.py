"""The local backend's limits, proven from inside an instance (needs root and cgroups)."""

import json
import os
import secrets
import time
from pathlib import Path

import pytest

from labkit.backends import cgroups, get_backend, teardown
from labkit.core.instance import InstanceSpec
from labkit.errors import BackendUnavailable, CommandError, CommandTimeout

PY = "/usr/bin/python3"  # the instance sees the system's Python, not the controller's (under /root, hidden)
# this test run's own prefix: two test runs on one machine never clean up each other's instances
PREFIX = f"labkit-test-local-{secrets.token_hex(3)}"


@pytest.fixture
def backend():
    be = get_backend("local")
    yield be
    leftovers = be.cleanup(PREFIX + "-")
    assert leftovers == [], f"test left cgroups behind: {leftovers}"


@pytest.fixture
def make(backend):
    made = []

    def _make(**kw):
        insts = backend.provision(InstanceSpec(**kw), prefix=PREFIX)
        made.extend(insts)
        return insts

    yield _make
    assert teardown(made) == []


def pids(inst) -> set[int]:
    found = set()
    for f in inst.backend.driver.procs_files(inst.name):
        try:
            found.update(int(p) for p in Path(f).read_text().split())
        except FileNotFoundError:
            pass
    return found


def affinity_inside(inst):
    res = inst.exec([PY, "-c", "import os, json; print(json.dumps(sorted(os.sched_getaffinity(0))))"])
    return json.loads(res.stdout)


@pytest.mark.root
def test_pinned_instance_sees_only_its_cpus(backend, make):
    n = backend.host_cpus()
    insts = make(vcpus=1, memory_mb=64, affinity="pinned", count=min(2, n))
    for i, inst in enumerate(insts):
        assert affinity_inside(inst) == [backend._cpu_ids()[i % n]]
        assert inst.metadata["cpus"] == [i % n]


@pytest.mark.root
def test_floating_instance_may_use_every_cpu(backend, make):
    (inst,) = make(vcpus=1, memory_mb=64, affinity="floating")
    assert affinity_inside(inst) == backend._cpu_ids()


@pytest.mark.root
def test_pinning_wraps_around_when_overcommitted(backend, make):
    n = backend.host_cpus()
    insts = make(vcpus=n, memory_mb=64, affinity="pinned", count=2)
    assert affinity_inside(insts[0]) == affinity_inside(insts[1]) == backend._cpu_ids()


@pytest.mark.root
def test_allocation_beyond_memory_limit_fails(make):
    (inst,) = make(vcpus=1, memory_mb=64, affinity="floating")
    touch = "b = bytearray({mb} * 2**20); b[::4096] = b'x' * len(b[::4096]); print('ok')"
    assert inst.exec([PY, "-c", touch.format(mb=16)]).stdout.strip() == "ok"
    res = inst.exec([PY, "-c", touch.format(mb=128)], check=False)
    assert res.exit_code != 0 and "ok" not in res.stdout


BUSY = """
import os, resource, time
# two busy processes (not threads: the GIL would hold Python threads to one CPU anyway)
t0 = time.time()
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        end = time.time() + 3
        while time.time() < end:
            pass
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
wall = time.time() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print((ru.ru_utime + ru.ru_stime) / wall)
"""


@pytest.mark.root
def test_floating_vcpus1_gets_about_one_cpu_of_time(backend, make):
    if backend.host_cpus() < 2:
        pytest.skip("needs 2 host CPUs to tell 1 CPU of time from 2")
    (capped,) = make(vcpus=1, memory_mb=128, affinity="floating")
    (control,) = make(vcpus=2, memory_mb=128, affinity="floating")
    one = float(capped.exec([PY, "-c", BUSY]).stdout)
    # the cap: two busy processes never get more than 1 CPU of time under a 1-vCPU quota
    assert one < 1.2, one
    # the contrast: the same load under a 2-vCPU quota gets clearly more (unless the host is busy)
    two = 0.0
    for _ in range(3):
        two = max(two, float(control.exec([PY, "-c", BUSY]).stdout))
        if two >= 1.3:
            break
    if two < 1.3:
        pytest.skip(f"host too busy to show the contrast: uncapped control got {two:.2f} CPUs")
    assert one > 0.6, f"capped instance got only {one:.2f} CPUs while the control got {two:.2f}"
    assert affinity_inside(capped) == backend._cpu_ids()  # floating: not pinned, only capped


@pytest.mark.root
def test_count_instances_run_at_the_same_time(make, tmp_path):
    from labkit.run.boot import run_together
    from labkit.workloads import get_workload

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # a read-write mount the instances' uid may write (their /tmp is their own)
    be = get_backend("local", mounts=f"{shared}:rw")
    insts = be.provision(InstanceSpec(vcpus=1, memory_mb=64, affinity="floating", count=2), prefix=PREFIX)
    log = shared / "intervals"
    wl = get_workload(
        "command", argv=["sh", "-c", f"a=$(date +%s.%N); sleep 1; echo $a $(date +%s.%N) >> {log}"]
    )
    try:
        rows, seconds = run_together(wl, insts, wl.params_for({}, 1), None)
    finally:
        assert teardown(insts) == []
    intervals = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    assert len(rows) == 2 and len(intervals) == 2
    # they overlapped: the later start came before the earlier end (no nominal duration involved)
    assert max(s for s, _ in intervals) < min(e for _, e in intervals), intervals


@pytest.mark.root
def test_exec_result_error_and_timeout(make):
    (inst,) = make(vcpus=1, memory_mb=64, affinity="floating")
    r = inst.exec("echo out; echo err >&2")
    assert (r.ok, r.stdout, r.stderr.strip()) == (True, "out\n", "err") and r.duration_s >= 0
    with pytest.raises(CommandError) as err:
        inst.exec("exit 3")
    assert err.value.result.exit_code == 3
    t0 = time.time()
    with pytest.raises(CommandTimeout):
        inst.exec("sleep 30 & sleep 30; wait", timeout=0.5)
    assert time.time() - t0 < 5
    assert pids(inst) == set()  # the whole tree was killed, and exec waited until it was gone
    assert inst.exec("echo alive").stdout == "alive\n"


@pytest.mark.root
def test_oom_kill_is_reported_as_such(make):
    (inst,) = make(vcpus=1, memory_mb=64, affinity="floating")
    big = inst.exec([PY, "-c", "b = bytearray(400 << 20); print(len(b))"], check=False, timeout=60)
    assert big.exit_code == 137 and big.oom_killed, big.describe()
    assert "OOM" in big.describe()
    # a SIGKILL that is not the OOM killer's is not reported as one
    other = inst.exec("kill -KILL $$", check=False, timeout=30)
    assert other.exit_code == 137 and not other.oom_killed


@pytest.mark.root
def test_instances_have_no_network_but_loopback(make):
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        (inst,) = make(vcpus=1, memory_mb=64, affinity="floating")
        ifaces = inst.exec("cat /proc/net/dev").stdout.splitlines()[2:]
        assert [i.split(":")[0].strip() for i in ifaces] == ["lo"]
        probe = (
            f"import socket; s = socket.socket(); s.settimeout(3); print(s.connect_ex(('127.0.0.1', {port})))"
        )
        assert inst.exec([PY, "-c", probe]).stdout.strip() != "0"  # the host's listener is out of reach
        # loopback inside the instance works (servers and clients of one benchmark)
        both = (
            "import socket; a = socket.socket(); a.bind(('127.0.0.1', 0)); a.listen(1); "
            "b = socket.socket(); print(b.connect_ex(a.getsockname()))"
        )
        assert inst.exec([PY, "-c", both]).stdout.strip() == "0"
    finally:
        listener.close()


@pytest.mark.root
def test_cleanup_matches_only_its_own_campaign(backend):
    mine = backend.provision(InstanceSpec(memory_mb=64), prefix=PREFIX + "-x--")
    other = backend.provision(InstanceSpec(memory_mb=64), prefix=PREFIX + "-x-2--")
    try:
        other[0].exec("sleep 60 >/dev/null 2>&1 &")
        assert backend.cleanup(PREFIX + "-x--") == [mine[0].name]
        assert pids(other[0]) and other[0].exec("echo here").stdout == "here\n"
    finally:
        teardown(mine + other)


def test_workroot_owned_by_someone_else_is_refused(tmp_path):
    from labkit.backends.local_workroot import private_dir
    from labkit.errors import ConfigError

    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)  # nobody
    with pytest.raises(ConfigError, match="owned by uid 65534"):
        private_dir(str(theirs))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by group or others"):
        private_dir(str(shared))
    with pytest.raises(ConfigError, match="can be changed by another user"):
        private_dir(str(shared / "sub"))
    made = private_dir(str(tmp_path / "new" / "root"))
    assert (os.stat(made).st_mode & 0o777) == 0o700 and os.stat(made).st_uid == os.geteuid()


@pytest.mark.root
def test_put_and_workdir(make, tmp_path):
    (inst,) = make(vcpus=1, memory_mb=64, affinity="floating")
    src = tmp_path / "hello.sh"
    src.write_text("#!/bin/sh\necho hi\n")
    inst.put(src, f"{inst.workdir}/hello.sh")
    assert inst.exec([f"{inst.workdir}/hello.sh"]).stdout == "hi\n"


@pytest.mark.root
def test_teardown_kills_processes_and_removes_cgroup(backend):
    (inst,) = backend.provision(InstanceSpec(memory_mb=64), prefix=PREFIX)
    inst.exec("sleep 60 >/dev/null 2>&1 & echo started")
    assert pids(inst)
    inst.destroy()
    assert not any(Path(d).exists() for d in backend.driver.dirs(inst.name))
    assert not Path(inst.workdir).exists()
    inst.destroy()  # idempotent


def test_unenforced_limits_are_refused_unless_allowed(monkeypatch):
    def no_cgroups(*a, **k):
        raise BackendUnavailable("no usable cgroup hierarchy (test)")

    monkeypatch.setattr(cgroups, "detect", no_cgroups)
    with pytest.raises(BackendUnavailable, match="enforce_limits=False"):
        get_backend("local")
    be = get_backend("local", enforce_limits=False)
    (inst,) = be.provision(InstanceSpec(vcpus=1, affinity="pinned"), prefix=PREFIX)
    try:
        assert inst.metadata["limits_enforced"] is False
        assert be.fingerprint()["limits_enforced"] is False
        res = inst.exec([PY, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"])
        assert res.stdout.strip() == str([sorted(os.sched_getaffinity(0))[0]])  # taskset still pins
    finally:
        inst.destroy()
