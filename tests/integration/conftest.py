"""Shared contract for the container backends, proved from inside each instance.

``ContainerContract`` holds the tests; test_docker.py and test_lxd.py subclass it
with their backend name and marker. Everything is named ``labkit-test<run>-<hex>``
(``<run>``: a token of this pytest session, so that two suites, or a campaign, running
on the same daemons never see each other's instances) and removed in ``finally``; the
``backend`` fixture fails the last test of a class if any instance of this session
was left behind.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import re
import secrets
import tempfile
import time

import pytest

from labkit.backends import get_backend, teardown
from labkit.core.instance import InstanceSpec
from labkit.errors import CommandError, CommandTimeout

PREFIX = f"labkit-test{secrets.token_hex(3)}"


@pytest.fixture(scope="module")
def capped_levels_store(tmp_path_factory):
    """A store of a real local campaign with runs_per_instance 3 whose boots' instances are capped at
    different CPU shares on purpose (:func:`tests.support.levels.capped_store`): the levels
    (instance, boot, run_seq, iteration) and a large instance variance component. Needs root."""
    if os.geteuid() != 0:
        pytest.skip("the local backend's cgroups need root")
    from tests.support.levels import capped_store

    return capped_store(tmp_path_factory.mktemp("levels"), f"levels-capped-{secrets.token_hex(2)}")


def leftovers(backend) -> set[str]:
    """This session's instances on ``backend`` (never another suite's or campaign's)."""
    return set(backend.list_labkit(PREFIX))


@pytest.fixture(scope="class")
def backend(request):
    be = get_backend(request.cls.backend_name)
    before = leftovers(be)
    try:
        yield be
        # a test run leaves nothing behind: every labkit- instance made meanwhile is gone
        deadline = time.monotonic() + 30
        while True:
            left = leftovers(be) - before
            if not left or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert not left, f"{request.cls.backend_name}: instances left behind: {sorted(left)}"
    finally:
        be.close()


class instances:
    """``with instances(be, spec) as insts:`` provision, and tear down on every path."""

    def __init__(self, backend, spec: InstanceSpec, prefix: str = PREFIX):
        self.backend, self.spec, self.prefix, self.made = backend, spec, prefix, []

    def __enter__(self):
        self.made = self.backend.provision(self.spec, prefix=self.prefix)
        return self.made

    def __exit__(self, *exc):
        errors = teardown(self.made)
        assert not errors, errors


def check_exec_contract(inst) -> None:
    """The exec contract every backend shares: output, duration, CommandError with its result."""
    ok = inst.exec(["sh", "-c", "echo out; echo err >&2"])
    assert (ok.exit_code, ok.stdout, ok.stderr) == (0, "out\n", "err\n")
    assert ok.duration_s > 0 and ok.instance == inst.name
    with pytest.raises(CommandError) as err:
        inst.exec("echo partial; echo bad >&2; exit 3")
    r = err.value.result
    assert (r.exit_code, r.stdout, r.stderr) == (3, "partial\n", "bad\n")
    assert not isinstance(err.value, CommandTimeout)


def allowed_cpus(inst) -> set[int]:
    """The CPUs the kernel lets a process in ``inst`` run on (util-linux-free: /proc)."""
    out = inst.exec("grep Cpus_allowed_list /proc/self/status").stdout
    return parse_cpu_list(out.split(":", 1)[1].strip())


def parse_cpu_list(text: str) -> set[int]:
    cpus = set()
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.update(range(int(a), int(b) + 1))
        elif part:
            cpus.add(int(part))
    return cpus


# two busy loops for WALL seconds; bash's `time` reports the CPU time the loops got
BUSY = (
    "cd /tmp; TIMEFORMAT='%U %S'; "
    "{ time ( for i in $(seq {loops}); do timeout {wall} sh -c 'while :; do :; done' & done; "
    "wait ) ; } 2>&1 | tail -n 1"
)


def cpu_seconds(inst, loops: int, wall: float) -> float:
    out = inst.exec(
        ["bash", "-c", BUSY.replace("{loops}", str(loops)).replace("{wall}", str(wall))], timeout=wall + 30
    ).stdout.split()
    return float(out[0]) + float(out[1])


def tiny_rootfs_tar(path):
    """A small tarball that stands in for a rootfs when testing image import and caching."""
    import io
    import tarfile

    with tarfile.open(path, "w") as tf:
        data = b"labkit image import test\n"
        info = tarfile.TarInfo("./etc/labkit-test")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return path


class ContainerContract:
    backend_name = "?"

    # -- the instance meaning of docs/design.md --------------------------------------------
    def test_pinned_instances_see_exactly_their_cpus(self, backend):
        host = backend.host_cpus()
        spec = InstanceSpec(vcpus=1, memory_mb=128, affinity="pinned", count=min(2, host))
        with instances(backend, spec) as insts:
            for inst, want in zip(insts, spec.placement(host)):
                assert inst.cpus == want
                assert allowed_cpus(inst) == set(want)
                assert inst.exec("nproc").stdout.strip() == "1"
        if host >= 2:
            spec = InstanceSpec(vcpus=2, memory_mb=128, affinity="pinned")
            with instances(backend, spec) as (inst,):
                assert allowed_cpus(inst) == {0, 1}
                assert inst.exec("nproc").stdout.strip() == "2"

    def test_floating_instance_is_capped_at_vcpus_of_cpu_time(self, backend):
        host = backend.host_cpus()
        spec = InstanceSpec(vcpus=1, memory_mb=128, affinity="floating")
        wall = 3.0
        with instances(backend, spec) as (inst,):
            # floating: may run on any host CPU...
            assert allowed_cpus(inst) == set(range(host))
            # ...but two busy loops get at most one CPU's worth of time
            used = cpu_seconds(inst, loops=2, wall=wall)
        assert used <= spec.vcpus * wall * 1.15, f"{used:.2f}s of CPU in {wall}s with vcpus=1"
        assert used > 0.2 * wall, f"the busy loops barely ran ({used:.2f}s)"

    def test_memory_limit_is_enforced(self, backend):
        spec = InstanceSpec(vcpus=1, memory_mb=128, affinity="floating")
        with instances(backend, spec) as (inst,):
            # tail must hold a newline-free stream whole: that is its memory use
            small = inst.exec("head -c 48m /dev/zero | tail | wc -c", timeout=60, check=False)
            assert small.ok and small.stdout.strip() == str(48 << 20), small.describe()
            big = inst.exec("head -c 400m /dev/zero | tail | wc -c", timeout=60, check=False)
            assert not big.ok or big.stdout.strip() != str(400 << 20), big.describe()
            # the same allocation again, as one process the OOM killer must stop
            oom = inst.exec("head -c 400m /dev/zero | tail > /dev/null", timeout=60, check=False)
            assert oom.exit_code == 137, oom.describe()
            assert inst.exec("echo alive").stdout.strip() == "alive"

    def test_count_instances_run_at_the_same_time(self, backend):
        spec = InstanceSpec(vcpus=1, memory_mb=64, affinity="floating", count=2)
        script = "date +%s.%N; timeout 2 sh -c 'while :; do :; done'; date +%s.%N"
        with instances(backend, spec) as insts:
            assert len(insts) == 2 and len({i.name for i in insts}) == 2
            with cf.ThreadPoolExecutor(len(insts)) as pool:
                outs = list(
                    pool.map(
                        lambda i: i.exec(["sh", "-c", script + " || true"], timeout=30).stdout.split(), insts
                    )
                )
        intervals = [(float(o[0]), float(o[1])) for o in outs]
        latest_start = max(s for s, _ in intervals)
        earliest_end = min(e for _, e in intervals)
        assert latest_start < earliest_end, f"runs did not overlap: {intervals}"

    # -- exec, files, network, names -----------------------------------------------------
    def test_exec_result_and_command_error(self, backend):
        with instances(backend, InstanceSpec(memory_mb=64)) as (inst,):
            check_exec_contract(inst)
            assert inst.exec("exit 4", check=False).exit_code == 4
            assert inst.exec(["labkit-no-such-command"], check=False).exit_code == 127
            env = inst.exec("echo $LABKIT_X", env={"LABKIT_X": "y z"}).stdout
            assert env == "y z\n"

    def test_timeout_kills_the_command(self, backend):
        with instances(backend, InstanceSpec(memory_mb=64)) as (inst,):
            t0 = time.monotonic()
            with pytest.raises(CommandTimeout) as err:
                inst.exec("sleep 40 & sleep 41; echo never", timeout=1.5)
            assert time.monotonic() - t0 < 15
            assert err.value.result.duration_s >= 1.4
            ps = inst.exec("ps -eo args").stdout
            assert not re.search(r"^sleep 4[01]", ps, re.M), ps

    def test_put_copies_a_file_with_its_mode(self, backend):
        with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
            f.write("#!/bin/sh\necho hello from labkit\n")
        try:
            with instances(backend, InstanceSpec(memory_mb=64)) as (inst,):
                inst.put(f.name, "/tmp/labkit/sub/dir/hello.sh", mode=0o750)
                assert inst.exec("/tmp/labkit/sub/dir/hello.sh").stdout == "hello from labkit\n"
                assert inst.exec("stat -c %a /tmp/labkit/sub/dir/hello.sh").stdout.strip() == "750"
        finally:
            os.unlink(f.name)

    def test_no_network_and_image_tools(self, backend):
        with instances(backend, InstanceSpec(memory_mb=64)) as (inst,):
            ifaces = [
                line.split(":")[0].strip() for line in inst.exec("cat /proc/net/dev").stdout.splitlines()[2:]
            ]
            assert ifaces == ["lo"], ifaces
            for tool in (
                "sysbench",
                "ab",
                "apache2",
                "stress-ng",
                "fio",
                "iperf3",
                "timeout",
                "ps",
                "taskset",
            ):
                assert inst.exec(["sh", "-c", f"command -v {tool}"], check=False).ok, tool

    def test_names_and_teardown_on_failure(self, backend):
        spec = InstanceSpec(memory_mb=64, count=2)
        insts = backend.provision(spec, prefix=PREFIX)
        try:
            assert all(i.name.startswith(PREFIX + "-") for i in insts)
            assert {i.name for i in insts} <= leftovers(backend)
        finally:
            teardown(insts)
        teardown(insts)  # twice is harmless
        assert not ({i.name for i in insts} & leftovers(backend))

    def test_provision_failure_leaves_nothing(self, backend, monkeypatch):
        before = leftovers(backend)
        calls = []
        real = type(backend)._create

        def flaky(self, spec, name, index, cpus):
            calls.append(name)
            if index == 1:
                raise RuntimeError("injected failure")
            return real(self, spec, name, index, cpus)

        monkeypatch.setattr(type(backend), "_create", flaky)
        with pytest.raises(RuntimeError, match="injected"):
            backend.provision(InstanceSpec(memory_mb=64, count=2), prefix=PREFIX)
        assert len(calls) == 2
        assert leftovers(backend) - before == set()

    def break_start(self, monkeypatch):
        """Make the next instance fail to start (after it was created)."""
        raise NotImplementedError

    def test_a_start_that_fails_leaves_nothing(self, backend, monkeypatch):
        from labkit.backends import new_name
        from labkit.errors import BackendError, ConfigError

        name = new_name(PREFIX)
        with pytest.raises(ConfigError, match="do not exist"):
            backend._create(InstanceSpec(memory_mb=64, affinity="pinned"), name, 0, [97])
        self.break_start(monkeypatch)
        with pytest.raises(BackendError):
            backend._create(InstanceSpec(memory_mb=64), name, 0, None)
        assert name not in leftovers(backend)

    def test_a_name_clash_never_removes_the_other_instance(self, backend):
        from labkit.errors import BackendError

        with instances(backend, InstanceSpec(memory_mb=64)) as (other,):
            with pytest.raises(BackendError):
                backend._create(InstanceSpec(memory_mb=64), other.name, 0, None)
            assert other.name in leftovers(backend)
            assert other.exec("echo still here").stdout == "still here\n"

    def test_fingerprint(self, backend):
        fp = backend.fingerprint()
        assert fp["backend"] == self.backend_name
        assert fp["storage_driver"] and fp["cgroup_version"] in (1, 2, "1", "2")
