"""The ssh backend against a real sshd, proven from inside each remote instance (marker ``ssh``).

The host is found through LABKIT_SSH_HOST/_PORT/_USER/_KEY (``bash scripts/setup-ssh.sh``
starts one on 127.0.0.1:2222 and prints them). Only shell tools run inside instances.
Everything is named ``labkit-test-ssh-<hex>`` and removed in ``finally``; the module's
backend fixture fails if any such cgroup or work dir is left on the host.
"""

from __future__ import annotations

import concurrent.futures as cf
import re
import secrets
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from labkit.backends import cgroups, get_backend, teardown
from labkit.backends.cgroups import parse_cpulist
from labkit.core.instance import InstanceSpec
from labkit.errors import BackendUnavailable, CommandTimeout

from .conftest import check_exec_contract
from .conftest import instances as _instances

pytestmark = pytest.mark.ssh
PREFIX = "labkit-test-ssh"


def mine(backend) -> set[str]:
    return {n for n in backend.list_labkit() if n.startswith(PREFIX + "-")}


@pytest.fixture(scope="module")
def backend():
    be = get_backend("ssh")
    try:
        before = mine(be)
        yield be
        left = mine(be) - before
        assert not left, f"ssh instances left behind: {sorted(left)}"
    finally:
        be.close()


def pids(backend, name: str) -> set[int]:
    """Processes in instance ``name``'s cgroup on the host (empty when it has none)."""
    files = " ".join(map(shlex.quote, backend.driver.procs_files(name))) if backend.driver else ""
    out = backend.run_script(f"cat {files} 2>/dev/null; true", "listing pids").stdout if files else ""
    return {int(p) for p in out.split()}


def exists(backend, name: str) -> bool:
    return name in backend.list_labkit(name)


def instances(backend, spec: InstanceSpec, prefix: str = PREFIX):
    """``with instances(be, spec) as insts:`` provision with this file's prefix, tear down on every path."""
    return _instances(backend, spec, prefix)


def allowed_cpus(inst) -> list[int]:
    out = inst.exec("grep Cpus_allowed_list /proc/self/status").stdout
    return parse_cpulist(out.split(":", 1)[1])


# two busy loops for WALL seconds; bash's `time` reports the CPU time they got (user + sys)
BUSY = (
    "TIMEFORMAT='%U %S'; { time ( for i in 1 2; do timeout {wall} sh -c 'while :; do :; done' & done; "
    "wait ) ; } 2>&1 | tail -n 1"
)


def cpus_worth(inst, wall: float = 3.0) -> float:
    out = inst.exec(["bash", "-c", BUSY.replace("{wall}", str(wall))], timeout=wall + 60).stdout.split()
    return (float(out[0]) + float(out[1])) / wall


# -- the instance meaning of docs/design.md ----------------------------------------------------------


def test_pinned_instances_see_only_their_cpus(backend):
    ids, n = backend._cpu_ids(), backend.host_cpus()
    spec = InstanceSpec(vcpus=1, memory_mb=64, affinity="pinned", count=min(2, n))
    with instances(backend, spec) as insts:
        for inst, want in zip(insts, spec.placement(n)):
            assert inst.cpus == want and inst.metadata["host_cpu_ids"] == [ids[c] for c in want]
            assert allowed_cpus(inst) == [ids[c] for c in want]
            assert inst.exec("taskset -pc $$").stdout.split(":")[-1].strip() == str(ids[want[0]])
            assert inst.exec("nproc").stdout.strip() == "1"
            assert inst.metadata["limits_enforced"] is True and inst.metadata["ssh_host"] == backend.target
    if n >= 2:
        with instances(backend, InstanceSpec(vcpus=2, memory_mb=64, affinity="pinned")) as (inst,):
            assert allowed_cpus(inst) == ids[:2]


def test_pinning_wraps_around_when_overcommitted(backend):
    n = backend.host_cpus()
    with instances(backend, InstanceSpec(vcpus=n, memory_mb=64, affinity="pinned", count=2)) as insts:
        assert allowed_cpus(insts[0]) == allowed_cpus(insts[1]) == backend._cpu_ids()


def test_floating_vcpus1_is_capped_at_one_cpu_of_time(backend):
    if backend.host_cpus() < 2:
        pytest.skip("needs 2 host CPUs to tell 1 CPU of time from 2")
    with (
        instances(backend, InstanceSpec(vcpus=1, memory_mb=128, affinity="floating")) as (capped,),
        instances(backend, InstanceSpec(vcpus=2, memory_mb=128, affinity="floating")) as (control,),
    ):
        assert allowed_cpus(capped) == backend._cpu_ids()  # floating: any CPU, only capped
        one = cpus_worth(capped)
        # the cap: two busy loops never get more than 1 CPU of time under a 1-vCPU quota
        assert one < 1.2, f"vcpus=1 instance got {one:.2f} CPUs"
        # the contrast: the same load under a 2-vCPU quota gets clearly more (unless the host is busy)
        two = 0.0
        for _ in range(3):
            two = max(two, cpus_worth(control))
            if two >= 1.3:
                break
    if two < 1.3:
        pytest.skip(f"host too busy to show the contrast: the vcpus=2 control got {two:.2f} CPUs")
    assert one > 0.6, f"capped instance got only {one:.2f} CPUs while the control got {two:.2f}"


def test_memory_limit_is_enforced(backend):
    with instances(backend, InstanceSpec(vcpus=1, memory_mb=128, affinity="floating")) as (inst,):
        # tail holds a newline-free stream whole: that is its memory use
        small = inst.exec("head -c 48m /dev/zero | tail | wc -c", timeout=60, check=False)
        assert small.ok and small.stdout.strip() == str(48 << 20), small.describe()
        big = inst.exec("head -c 400m /dev/zero | tail | wc -c", timeout=60, check=False)
        assert not big.ok or big.stdout.strip() != str(400 << 20), big.describe()
        # one process the OOM killer must stop: it exits 128 + SIGKILL, as in a local shell
        oom = inst.exec("head -c 400m /dev/zero | tail > /dev/null", timeout=60, check=False)
        assert oom.exit_code == 137, oom.describe()
        assert inst.exec("echo alive").stdout.strip() == "alive"


def test_count_instances_run_at_the_same_time(backend):
    spec = InstanceSpec(vcpus=1, memory_mb=64, affinity="floating", count=2)
    script = "date +%s.%N; sleep 2; date +%s.%N"
    with instances(backend, spec) as insts:
        assert len({i.name for i in insts}) == 2
        with cf.ThreadPoolExecutor(len(insts)) as pool:
            outs = list(pool.map(lambda i: i.exec(script, timeout=60).stdout.split(), insts))
    intervals = [(float(o[0]), float(o[1])) for o in outs]
    assert max(s for s, _ in intervals) < min(e for _, e in intervals), f"no overlap: {intervals}"


# -- exec, files, teardown --------------------------------------------------------------------------


def test_exec_result_errors_and_env(backend):
    with instances(backend, InstanceSpec(memory_mb=64)) as (inst,):
        check_exec_contract(inst)
        assert inst.exec(["labkit-no-such-command"], check=False).exit_code == 127
        assert inst.exec(["printf", "%s|", "a b", "it's", "$HOME"]).stdout == "a b|it's|$HOME|"
        assert inst.exec("echo $LABKIT_X", env={"LABKIT_X": "y 'z'"}).stdout == "y 'z'\n"
        assert inst.exec("pwd").stdout.strip() == inst.workdir
        assert inst.exec(["cat"], timeout=30).stdout == ""  # no stdin: reading gets EOF


def test_timeout_kills_the_whole_remote_tree(backend):
    a, b = 900 + secrets.randbelow(90), 990 + secrets.randbelow(9)
    with instances(backend, InstanceSpec(memory_mb=64)) as (inst,):
        t0 = time.monotonic()
        with pytest.raises(CommandTimeout) as err:
            # a child that leaves the session too: only the marker or the cgroup can find it
            inst.exec(f"setsid sleep {a} & sleep {b}; echo never", timeout=1.5)
        assert time.monotonic() - t0 < 15
        assert err.value.result.duration_s >= 1.4 and "never" not in err.value.result.stdout
        assert pids(backend, inst.name) == set()
        ps = inst.exec("ps -eo args").stdout
        assert not re.search(rf"^sleep ({a}|{b})$", ps, re.M), ps
        assert inst.exec("echo still usable").stdout == "still usable\n"


def test_put_copies_a_file_with_its_mode(backend, tmp_path):
    src = tmp_path / "hello.sh"
    src.write_text("#!/bin/sh\necho hello from labkit\n")
    with instances(backend, InstanceSpec(memory_mb=64)) as (inst,):
        inst.put(src, "sub/dir/hello.sh", mode=0o750)  # relative: in the work dir
        path = f"{inst.workdir}/sub/dir/hello.sh"
        assert inst.exec([path]).stdout == "hello from labkit\n"
        assert inst.exec(["stat", "-c", "%a", path]).stdout.strip() == "750"
        inst.put(src, f"{inst.workdir}/abs.sh")
        assert inst.exec(["stat", "-c", "%a", f"{inst.workdir}/abs.sh"]).stdout.strip() == "755"


def test_teardown_kills_processes_and_removes_cgroup_and_workdir(backend):
    (inst,) = backend.provision(InstanceSpec(memory_mb=64), prefix=PREFIX)
    try:
        assert inst.workdir == f"{backend.workroot}/{inst.name}" and "/.cache/labkit/" in inst.workdir
        inst.exec("sleep 600 >/dev/null 2>&1 & echo started")
        assert pids(backend, inst.name) and exists(backend, inst.name)
        assert inst.name in backend.list_labkit()
    finally:
        inst.destroy()
    assert not exists(backend, inst.name) and pids(backend, inst.name) == set()
    assert inst.name not in backend.list_labkit()
    check = subprocess.run(
        [
            "sh",
            "-c",
            f"ls -d /sys/fs/cgroup/*/{inst.name} /sys/fs/cgroup/{inst.name} "
            f"{backend.workroot}/{inst.name} 2>/dev/null",
        ],
        capture_output=True,
        text=True,
    )
    if backend.host in ("127.0.0.1", "localhost", "::1"):  # the remote is this machine: look ourselves
        assert check.stdout == ""
    inst.destroy()  # idempotent


def test_cleanup_removes_what_a_killed_campaign_left(backend):
    prefix = f"{PREFIX}-crash{secrets.token_hex(2)}--"
    insts = backend.provision(InstanceSpec(memory_mb=64, count=2), prefix=prefix)
    other = backend.provision(InstanceSpec(memory_mb=64), prefix=prefix[:-2] + "-2--")
    try:
        insts[0].exec("sleep 600 >/dev/null 2>&1 &")
        other[0].exec("sleep 600 >/dev/null 2>&1 &")
        # the controller died here: nothing was torn down
        removed = backend.cleanup(prefix)
        assert removed == sorted(i.name for i in insts)
        for i in insts:
            assert not exists(backend, i.name) and pids(backend, i.name) == set()
        assert backend.cleanup(prefix) == []
        # a campaign whose id only extends this one's is not touched
        assert exists(backend, other[0].name) and pids(backend, other[0].name)
    finally:
        teardown(insts + other)


def test_first_listing_rides_in_the_connection_probe(backend, monkeypatch):
    """A campaign's clean-up right after connecting costs no SSH command of its own (each costs the
    remote login shell's start-up): the probe's listing answers it, once; a listing after an
    instance was made, or a second one, asks the host again and sees the change."""
    with instances(backend, InstanceSpec(vcpus=1)) as [inst]:
        fresh = get_backend("ssh")
        try:
            sent = []
            monkeypatch.setattr(
                fresh, "run_script", lambda *a, **k: sent.append(a) or type(fresh).run_script(fresh, *a, **k)
            )
            prefix = inst.name[: inst.name.rindex("-") + 1]
            assert fresh.list_labkit(prefix) == [inst.name] and sent == []  # from the probe
            assert fresh.list_labkit(inst.name) == [inst.name] and len(sent) == 1
            assert fresh.list_labkit(PREFIX + "-none-") == [] and len(sent) == 2
            [mine] = fresh.provision(InstanceSpec(vcpus=1), prefix=prefix)
            try:
                assert fresh.list_labkit(prefix) == sorted([inst.name, mine.name])
            finally:
                teardown([mine])
            assert fresh.list_labkit(prefix) == [inst.name]
        finally:
            fresh.close()


def test_provision_failure_leaves_nothing(backend, monkeypatch):
    before = mine(backend)
    real = type(backend)._create

    def flaky(self, spec, name, index, cpus):
        if index == 1:
            raise RuntimeError("injected failure")
        return real(self, spec, name, index, cpus)

    monkeypatch.setattr(type(backend), "_create", flaky)
    with pytest.raises(RuntimeError, match="injected"):
        backend.provision(InstanceSpec(memory_mb=64, count=2), prefix=PREFIX)
    assert mine(backend) - before == set()


def test_fingerprint(backend):
    fp = backend.fingerprint()
    assert fp["backend"] == "ssh" and fp["ssh_host"] == backend.target
    assert fp["kernel"] and fp["cgroup_version"] in (1, 2) and fp["limits_enforced"] is True
    assert fp["cpus"] == backend.host_cpus() >= 1
    # read in the connection's probe (the fleet's host identity checks compare them across hosts)
    smt = Path("/sys/devices/system/cpu/smt/active")  # the test sshd runs on this machine
    assert fp["smt"] == (smt.read_text().strip() if smt.exists() else "n/a") and fp["governor"]


# -- without cgroups: refused, or recorded --------------------------------------------------------


def test_unenforced_limits_are_refused_unless_allowed(monkeypatch):
    def no_cgroups(*args):
        raise BackendUnavailable("no usable cgroup hierarchy on the remote host (test)")

    monkeypatch.setattr(cgroups, "detect", no_cgroups)
    with pytest.raises(BackendUnavailable, match="enforce_limits=False"):
        get_backend("ssh")
    be = get_backend("ssh", enforce_limits=False)
    try:
        assert be.fingerprint()["limits_enforced"] is False
        ids = be._cpu_ids()
        with instances(be, InstanceSpec(vcpus=1, memory_mb=64, affinity="pinned")) as (inst,):
            assert inst.metadata["limits_enforced"] is False and inst.metadata["cgroup_version"] is None
            assert allowed_cpus(inst) == [ids[0]]  # taskset still pins
            with pytest.raises(CommandTimeout):
                inst.exec("sleep 613 & sleep 614", timeout=1)
            ps = inst.exec("ps -eo args").stdout  # the command's session was killed
            assert not re.search(r"^sleep 61[34]$", ps, re.M), ps
        assert not exists(be, inst.name)
    finally:
        be.close()


def test_wrong_key_says_which_host_user_and_key(tmp_path):
    probe = get_backend("ssh")
    host, port, user = probe.host, probe.port, probe.user
    probe.close()
    key = tmp_path / "not_authorized"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    with pytest.raises(BackendUnavailable) as err:
        get_backend("ssh", host=host, port=port, user=user, key_filename=str(key), connect_timeout=5)
    msg = str(err.value)
    assert "authentication failed" in msg and f"{user}@{host}:{port}" in msg and str(key) in msg


# -- a real campaign --------------------------------------------------------------------------------


def test_nqueens_campaign_over_ssh(tmp_path, backend):
    from labkit.design import Design
    from labkit.run.campaign import Campaign

    design = Design.from_dict(
        {"factors": {"affinity": ["floating", "pinned"], "count": [1, 2]}, "replications": 1, "seed": 7}
    )
    cid = f"test-ssh-nq{secrets.token_hex(2)}"
    st = Campaign(
        design,
        backend="ssh",
        workload="nqueens",
        workload_params={"board": 8},
        campaign_id=cid,
        data_dir=tmp_path,
        run_timeout=120,
        progress=False,
    ).run()
    runs, tidy = st.runs(), st.tidy()
    assert len(runs) == 4 and set(runs.status) == {"ok"}, runs[["status", "error"]]
    assert set(tidy[tidy.metric == "solutions"].value) == {92.0}
    two = tidy[(tidy["count"] == 2) & (tidy.metric == "wall_time_s")]
    assert sorted(two.instance_index.unique()) == [0, 1]
    md = runs.metadata.iloc[0]
    assert all(i["limits_enforced"] is True and i["ssh_host"] == backend.target for i in md["instances"])
    pinned = runs[runs.affinity == "pinned"].metadata.iloc[0]
    assert all(i["cpus"] is not None for i in pinned["instances"])
    assert not {n for n in backend.list_labkit() if n.startswith(f"labkit-{cid}")}
