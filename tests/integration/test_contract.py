"""One contract, every backend: local, docker, lxd, libvirt and ssh on their real daemons.

What ``Instance.exec`` promises (base.py) proved from inside an instance of each
backend: output and exit codes, a non-zero exit as CommandError, a timeout that
kills the command's whole process tree (``timed_out``), an OOM kill reported as
``oom_killed`` (and a plain SIGKILL not), background processes (``spawn``),
limits seen from inside, and ``cleanup(prefix)`` that removes exactly one
campaign's instances. One instance per backend serves most tests (VMs boot
slowly under TCG); every test leaves nothing behind.
"""

from __future__ import annotations

import re
import secrets
import time

import pytest

from labkit.backends import get_backend, teardown
from labkit.core.instance import InstanceSpec
from labkit.errors import CommandError, CommandTimeout

from .conftest import allowed_cpus, check_exec_contract

BACKENDS = [
    pytest.param("local", marks=pytest.mark.root),
    pytest.param("docker", marks=pytest.mark.docker),
    pytest.param("lxd", marks=pytest.mark.lxd),
    pytest.param("libvirt", marks=pytest.mark.libvirt),
    pytest.param("ssh", marks=pytest.mark.ssh),
]
# one prefix per backend: local and ssh (to localhost) share this machine's cgroup hierarchy
TAG = secrets.token_hex(2)


#: memory of the test instances: a VM needs room to unpack its initrd (libvirt refuses < 160 MB)
MEMORY_MB = {"libvirt": 256}


def memory(backend_name: str) -> int:
    return MEMORY_MB.get(backend_name, 128)


def prefix(backend_name: str) -> str:
    return f"labkit-test-ct{TAG}-{backend_name}--"


pytestmark = pytest.mark.parametrize("backend_name", BACKENDS)


@pytest.fixture(scope="module")
def pool():
    """backend name -> (backend, one 1-vCPU pinned instance); all torn down at the end."""
    made: dict = {}
    yield made
    for be, inst in made.values():
        try:
            assert teardown([inst]) == []
            left = be.list_labkit(prefix(be.name))
            assert left == [], f"{be.name}: left behind {left}"
        finally:
            be.close()


#: backend name -> (time.time() before, after) the provisioning of its pool instance
MADE_AT: dict = {}


@pytest.fixture
def inst(pool, backend_name):
    if backend_name not in pool:
        be = get_backend(backend_name)
        t0 = time.time()
        (one,) = be.provision(
            InstanceSpec(vcpus=1, memory_mb=memory(backend_name), affinity="pinned"),
            prefix=prefix(backend_name),
        )
        MADE_AT[backend_name] = (t0, time.time())
        pool[backend_name] = (be, one)
    return pool[backend_name][1]


def test_created_says_when_an_instance_was_made(inst, backend_name, pool):
    """What `labkit clean` ages unregistered campaigns by: the backend's own record of when each object
    was made (a clock reading, not a duration: it lies between the two readings around the provisioning;
    docker's is in whole seconds, hence the second of slack). libvirt's pool files keep no birth time
    on this file system, so it reports their last change: never before the provisioning (an age too
    young keeps a campaign longer, never shorter). ssh reports none."""
    be = pool[backend_name][0]
    got = be.created([inst.name, "labkit-test-nosuch--x"])
    if backend_name == "ssh":
        assert got == {}
        return
    t0, t1 = MADE_AT[backend_name]
    latest = time.time() if backend_name == "libvirt" else t1 + 0.5
    assert set(got) == {inst.name} and t0 - 1.5 <= got[inst.name] <= latest, (got, t0, t1)


def test_exec_output_exit_codes_and_env(inst):
    check_exec_contract(inst)
    assert inst.exec("exit 4", check=False).exit_code == 4
    assert inst.exec(["labkit-no-such-command"], check=False).exit_code == 127
    assert inst.exec(["printf", "%s|", "a b", "it's", "$HOME"]).stdout == "a b|it's|$HOME|"
    assert inst.exec("echo $LABKIT_X", env={"LABKIT_X": "y 'z'"}).stdout == "y 'z'\n"
    assert inst.exec(["cat"], timeout=60).stdout == ""  # no stdin: a read gets EOF at once


def test_long_output_keeps_head_and_tail_with_exact_totals(inst):
    # 2.5 MiB + 8 bytes on stdout (more than the 1 MiB head + 1 MiB tail a sink keeps, less than
    # the ~3 MiB libvirt carries in one guest agent reply), 4 on stderr
    size = 5 * 2**19 + 8
    res = inst.exec(
        "printf START; head -c 2560K /dev/zero | tr '\\0' b; printf END; printf oops >&2", timeout=300
    )
    assert (res.stdout_bytes, res.stderr_bytes, res.truncated) == (size, 4, True)
    assert res.stdout.startswith("STARTbbb") and res.stdout.endswith("bbbEND") and res.stderr == "oops"
    assert f"bytes omitted; total {size} bytes" in res.stdout and len(res.stdout) < 2**21 + 200


def test_timeout_kills_the_whole_tree(inst):
    a, b = 700 + secrets.randbelow(90), 790 + secrets.randbelow(9)
    with pytest.raises(CommandTimeout) as err:
        inst.exec(f"sleep {a} & sleep {b}; echo never", timeout=2)
    res = err.value.result
    assert res.timed_out and not res.ok and not res.oom_killed and "never" not in res.stdout
    assert res.duration_s >= 2
    ps = inst.exec("ps -eo args", timeout=60).stdout
    assert not re.search(rf"^sleep ({a}|{b})$", ps, re.M), ps
    assert inst.exec("echo still usable", timeout=60).stdout == "still usable\n"


def test_oom_kill_is_reported_and_a_plain_sigkill_is_not(inst):
    # one process that holds 400 MB in a 128-256 MB instance: the OOM killer must end it
    oom = inst.exec("head -c 400m /dev/zero | tail > /dev/null", timeout=120, check=False)
    assert oom.exit_code == 137 and oom.oom_killed, oom.describe()
    assert "OOM" in oom.describe()
    with pytest.raises(CommandError) as err:
        inst.exec("kill -KILL $$", timeout=60)
    assert err.value.result.exit_code == 137 and not err.value.result.oom_killed
    assert inst.exec("echo alive", timeout=60).stdout == "alive\n"


def test_spawn_runs_in_the_background_until_stopped(inst):
    proc = inst.spawn("sleep 733")
    try:
        time.sleep(0.5)
        assert proc.running()
        assert re.search(r"^sleep 733$", inst.exec("ps -eo args", timeout=60).stdout, re.M)
    finally:
        res = proc.stop()
    assert res is not None and not proc.running()
    assert not re.search(r"^sleep 733$", inst.exec("ps -eo args", timeout=60).stdout, re.M)


def test_pinned_instance_sees_exactly_its_cpu(inst):
    assert allowed_cpus(inst) == set(inst.cpus) == {0}
    assert inst.exec("nproc", timeout=60).stdout.strip() == "1"


def test_cleanup_removes_exactly_one_campaigns_instances(inst, backend_name, pool):
    be = pool[backend_name][0]
    mine = f"labkit-test-cl{secrets.token_hex(2)}--"
    other = mine[:-2] + "-2--"  # a campaign id that extends the first one's
    made = []
    try:
        made += be.provision(InstanceSpec(vcpus=1, memory_mb=memory(backend_name)), prefix=mine)
        made += be.provision(InstanceSpec(vcpus=1, memory_mb=memory(backend_name)), prefix=other)
        assert be.list_labkit(mine) == [made[0].name] and be.list_labkit(other) == [made[1].name]
        assert be.cleanup(mine) == [made[0].name]
        assert be.list_labkit(mine) == []
        assert made[1].exec("echo untouched", timeout=60).stdout == "untouched\n"
        assert inst.exec("echo untouched", timeout=60).stdout == "untouched\n"
    finally:
        teardown(made)
    assert be.list_labkit(other) == []
