"""The ``local`` backend as a user, in a cgroup v2 subtree systemd delegates, on a real kernel.

This machine mounts cgroup v1, so the test runs in a libvirt guest booting the image variant
``systemd`` (``labkit images build --only none --vm --profile systemd``; scripts/setup-libvirt.sh
builds it): systemd is PID 1 with the unified hierarchy. As root in the guest the test makes a user,
gives ``user@.service`` ``Delegate=cpu cpuset memory pids`` (a drop-in, :data:`DROP_IN`) and
starts the user's manager (``loginctl enable-linger``). Then, as that user, in a scope of its
manager made with ``systemd-run --user --scope -p Delegate=yes``, ``/usr/bin/python3`` runs
:data:`DRIVER`: labkit's ``local`` backend (its code read-only from this checkout, a virtiofs
share; the backend needs nothing but the standard library) provisions a pinned and a floating
instance, runs a busy loop, an allocation past ``memory.max`` and a fork bomb in them, and
destroys them.

The driver stops after each step until the test, as root, has read the kernel's files: the
instances' cgroups are under the user's delegated subtree (the scope, owned by the user),
``cpuset.cpus``, ``cpu.max``, ``memory.max`` and ``pids.max`` hold the limits, the kernel throttled
the busy loop (``cpu.stat``), OOM-killed the allocation (``memory.events``), refused the fork
bomb's forks past ``pids.max`` (``pids.events``), and nothing of the user's is left after.

Then the whole ``labkit run`` CLI, as the same user in a delegated scope, on the ``local`` backend
(:data:`DESIGN`: affinity pinned and floating, one replication, ``--backend-option pids_max``): the
guest's Debian ``/usr/bin/python3`` (3.11) runs it with labkit from the share and its dependencies
from the site-packages of the Python running this test (the checkout's venv, shared too: another
CPython 3.11 build, the same ABI). The workload is ``command``, a script that reads its own cgroup
from the kernel (``/proc/self/cgroup``, then that cgroup's ``cpuset.cpus.effective``, ``cpu.max``,
``memory.max``, ``pids.max``, and ``nr_throttled`` after two busy loops); the guest has no C
compiler for labkit's own kernels (nqueens is compiled on the controller). The test reads the store
with the same Python: every run ok, each instance's metadata (limits enforced, cgroup v2, its name)
matches the cgroup the kernel put the command in, under the user's scope, with the design's limits
(the pinned instance on its recorded CPU, the floating one throttled at its quota), the telemetry
sampled the host and the instance, and nothing is left (no instance cgroup in the scope when
``labkit run`` ends, no process, no work dir).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import sysconfig
import time
from pathlib import Path

import pytest

import labkit
from labkit.backends import get_backend, teardown
from labkit.backends.cgroups import LEAF
from labkit.backends.libvirt.storage import load_image
from labkit.backends.local import DEFAULT_PIDS_MAX
from labkit.backends.testing import required
from labkit.core.instance import InstanceSpec
from labkit.errors import BackendUnavailable

from .conftest import PREFIX

pytestmark = pytest.mark.libvirt

#: the VM image variant booting systemd (labkit/images/rootfs.py PROFILES["systemd"])
IMAGE = "systemd"
USER = "labkit-deleg"
#: this checkout, shared read-only at the same path in the guest
REPO = str(Path(labkit.__file__).resolve().parents[1])
CG = "/sys/fs/cgroup"
#: what the user's manager is given to hand on (Debian's user@.service delegates pids memory cpu)
DROP_IN = "[Service]\nDelegate=cpu cpuset memory pids\n"
PIDS_MAX = 48
MEMORY_MB = 64
WALL_S = 3.0
#: where the driver writes each step's report and waits for the test's go-ahead (the user's own)
STEPS = "/tmp/labkit/deleg"
#: the longest one driver step may take in an emulated guest on a loaded host
STEP_TIMEOUT_S = 420

#: where labkit's dependencies come from in the guest: this Python's site-packages (the
#: checkout's venv), shared read-only at the same path unless it lies in the checkout already
SITE = sysconfig.get_paths()["purelib"]
#: the campaign ``labkit run`` makes in the guest, in the user's home
CAMPAIGN = "deleg"
#: ``--backend-option pids_max``: not the default, to see the option reach the kernel
RUN_PIDS_MAX = DEFAULT_PIDS_MAX // 64
#: the longest the whole ``labkit run`` may take in the guest (about 2 minutes under TCG)
RUN_TIMEOUT_S = 900
#: what each run's instance runs: its own cgroup and that cgroup's limits, read from the kernel,
#: then two busy loops for 2 s (one vCPU's quota throttles them when floating) and the throttling
INSIDE = (
    'cg=$(sed -n "s/^0:://p" /proc/self/cgroup); d=/sys/fs/cgroup$cg; echo "cgroup $cg"; '
    'for f in cpuset.cpus.effective cpu.max memory.max pids.max; do echo "$f $(cat $d/$f)"; done; '
    "grep Cpus_allowed_list /proc/self/status; "
    "for i in 1 2; do timeout 2 sh -c 'while :; do :; done' & done; wait; "
    'echo "nr_throttled $(sed -n "s/^nr_throttled //p" $d/cpu.stat)"'
)
#: the design ``labkit run`` runs (JSON is YAML): two runs, a pinned and a floating instance
DESIGN = {
    "name": CAMPAIGN,
    "factors": {"affinity": ["pinned", "floating"]},
    "replications": 1,
    "seed": 7,
    "workload": {"name": "command", "params": {"argv": ["sh", "-c", INSIDE]}},
}
#: run as the user after the campaign: the store's runs, their output and telemetry, as JSON
#: (``python3 READER DATA_DIR CAMPAIGN``)
READER = r"""
import json, sys
from labkit.store import Store

st = Store.for_campaign(sys.argv[1], sys.argv[2], readonly=True)
out = []
for r in st.runs().to_dict("records"):
    s = st.samples(r["run_id"])
    inst = s[s["instance"].notna()]
    out.append({"run_id": r["run_id"], "status": r["status"], "error": r["error"],
                "affinity": r["affinity"], "metadata": r["metadata"], "output": st.run_output(r["run_id"]),
                "host_samples": int(s["instance"].isna().sum()),
                "instance_samples": {str(k): int(v) for k, v in inst.groupby("instance").size().items()},
                "instance_metrics": sorted(set(inst["metric"]))})
print(json.dumps(out, default=str))
"""

#: run as the user: ``python3 DRIVER STEPS PREFIX PIDS_MAX MEMORY_MB WALL_S``; each step writes
#: ``STEPS/step-<n>.json`` and waits for ``STEPS/go-<n>``
DRIVER = r"""
import json, os, sys, threading, time
from labkit.backends import teardown
from labkit.backends.local import LocalBackend
from labkit.core.instance import InstanceSpec
from labkit.errors import CommandTimeout

steps, prefix, pids_max, memory_mb, wall = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]


def step(n, data):
    with open(f"{steps}/step-{n}.json.tmp", "w") as fh:
        json.dump(data, fh)
    os.replace(f"{steps}/step-{n}.json.tmp", f"{steps}/step-{n}.json")
    while not os.path.exists(f"{steps}/go-{n}"):
        time.sleep(0.1)


def run(inst, script, timeout=120):
    r = inst.exec(["sh", "-c", script], timeout=timeout, check=False)
    return {"exit": r.exit_code, "stdout": r.stdout, "stderr": r.stderr[-2000:]}


be = LocalBackend(pids_max=pids_max)
be.check()
insts = []
try:
    insts += be.provision(InstanceSpec(vcpus=1, memory_mb=memory_mb, affinity="pinned"), prefix=prefix)
    insts += be.provision(InstanceSpec(vcpus=1, memory_mb=memory_mb, affinity="floating"), prefix=prefix)
    pinned, floating = insts
    inside = "cat /proc/self/cgroup; grep Cpus_allowed_list /proc/self/status; nproc"
    step(1, {"own": open("/proc/self/cgroup").read(), "pid": os.getpid(), "uid": os.getuid(),
             "root": be.driver.root, "leaf": be.driver.leaf, "has_pids": be.driver.has_pids,
             "workroot": be.workroot, "pinned": pinned.name, "floating": floating.name,
             "metadata": [i.metadata for i in insts], "inside": [run(i, inside) for i in insts]})

    busy = run(floating, "s=$(cat /proc/uptime); for i in 1 2; do timeout " + wall
               + " sh -c 'while :; do :; done' & done; wait; e=$(cat /proc/uptime); echo ${s%% *} ${e%% *}")
    small = run(pinned, "head -c 16m /dev/zero | tail | wc -c")
    big = run(pinned, "head -c 256m /dev/zero | tail > /dev/null")
    # the fork bomb: pids.current is read while it runs; the timeout's kill empties the cgroup
    current = []
    stop = threading.Event()

    def sample():
        while not stop.wait(0.5):
            with open(f"{be.driver.root}/{pinned.name}/pids.current") as fh:
                current.append(int(fh.read()))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        bomb = run(pinned, "bomb() { bomb | bomb & }; bomb; sleep 30", timeout=8)
    except CommandTimeout as exc:
        bomb = {"timeout": True, "exit": exc.result.exit_code}
    finally:
        stop.set()
        sampler.join()
    after = {"alive": run(pinned, "echo alive"),
             "pids_current": open(f"{be.driver.root}/{pinned.name}/pids.current").read()}
    step(2, {"busy": busy, "small": small, "big": big, "bomb": bomb, "pids_sampled": current,
             "after_bomb": after})
finally:
    errors = teardown(insts)
left = be.list_labkit(prefix)
step(3, {"teardown_errors": [str(e) for e in errors], "left": left,
         "workroot_entries": sorted(os.listdir(be.workroot))})
"""


def sh(inst, script: str, timeout: float = 120, check: bool = True):
    return inst.exec(["sh", "-c", script], timeout=timeout, check=check)


def read(inst, path: str) -> str:
    return sh(inst, f"cat {shlex.quote(path)}").stdout


def wait_for(inst, what: str, script: str, timeout: float = STEP_TIMEOUT_S) -> None:
    """Poll ``script`` in the guest until it exits 0 (a guest under TCG is slow to settle)."""
    deadline = time.monotonic() + timeout
    while sh(inst, script, check=False).exit_code != 0:
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(1)


def step(inst, n: int) -> dict:
    """The driver's report of step ``n`` (its log in the failure message when it died)."""
    path = f"{STEPS}/step-{n}.json"
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while sh(inst, f"test -e {path}", check=False).exit_code != 0:
        log = sh(
            inst,
            f"cat {STEPS}/driver.log 2>/dev/null; echo; "
            f"pgrep -u {USER} -f labkit-deleg-driver >/dev/null && echo RUNNING",
            check=False,
        ).stdout
        if "RUNNING" not in log or time.monotonic() > deadline:
            pytest.fail(f"the driver did not reach step {n}; its log:\n{log[-4000:]}")
        time.sleep(1)
    return json.loads(read(inst, path))


def go(inst, n: int) -> None:
    sh(inst, f"touch {STEPS}/go-{n}")


def as_user(uid: int, argv: str, path: str = REPO) -> str:
    """``argv`` (shell words) run as :data:`USER`, with its manager's bus and its home, labkit
    importable (``path``: the PYTHONPATH)."""
    env = (
        f"XDG_RUNTIME_DIR=/run/user/{uid} DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/{uid}/bus "
        f"HOME=/home/{USER} LANG=C.UTF-8 PYTHONPATH={shlex.quote(path)} PYTHONDONTWRITEBYTECODE=1 "
        "PATH=/usr/bin:/bin:/usr/sbin:/sbin"
    )
    return f"runuser -u {USER} -- env -i {env} {argv}"


def keyed(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}


def kernel_view(output: str | None) -> dict[str, str | None]:
    """What :data:`INSIDE` printed in a run's kept output: ``cgroup``, the cgroup's files,
    ``Cpus_allowed_list:`` and ``nr_throttled`` (None: the line is missing)."""
    keys = ("cgroup", "cpuset.cpus.effective", "cpu.max", "memory.max", "pids.max")
    found = {}
    for key in (*keys, "Cpus_allowed_list:", "nr_throttled"):
        m = re.search(rf"^{re.escape(key)}[ \t]+(\S.*)$", output or "", re.M)
        found[key] = m.group(1).strip() if m else None
    return found


@pytest.fixture(scope="module")
def guest():
    """A 2-vCPU guest booted with systemd, this checkout (and :data:`SITE`) mounted read-only, and
    the user whose manager delegates cpu, cpuset, memory and pids; (instance, uid)."""
    if os.geteuid() != 0:
        pytest.skip("sharing this checkout read-only with the guest needs root (a read-only bind mount)")
    try:
        load_image(IMAGE)
    except BackendUnavailable as exc:
        why = (
            f"the VM image variant {IMAGE!r} (systemd as PID 1) is not built: {exc}; build it with "
            f"`labkit images build --only none --vm --profile {IMAGE}` (scripts/setup-libvirt.sh does)"
        )
        if "libvirt" in required():  # LABKIT_REQUIRE: a missing image fails, as a missing daemon does
            pytest.fail(why)
        pytest.skip(why)
    mounts = [{"source": REPO, "target": REPO, "readonly": True}]
    if not SITE.startswith(REPO + os.sep):
        mounts.append({"source": SITE, "target": SITE, "readonly": True})
    # tcg_cpu=max: under TCG the default qemu64 CPU lacks x86-64-v2, which the venv's numpy and
    # pyarrow wheels need (their import dies with SIGILL there); a KVM guest gets the host's CPU
    be = get_backend("libvirt", image=IMAGE, boot_timeout=STEP_TIMEOUT_S, mounts=mounts, tcg_cpu="max")
    insts = []
    try:
        insts = be.provision(InstanceSpec(vcpus=2, memory_mb=1024, affinity="floating"), prefix=PREFIX)
        inst = insts[0]
        # the agent starts early in the boot: wait for the rest (logind above all)
        state = sh(inst, "systemctl is-system-running --wait", timeout=STEP_TIMEOUT_S, check=False).stdout
        assert state.strip() in ("running", "degraded"), state
        sh(
            inst,
            f"useradd --create-home --shell /bin/sh {USER}; mkdir -p /etc/systemd/system/user@.service.d; "
            f"printf %s {shlex.quote(DROP_IN)} > /etc/systemd/system/user@.service.d/delegate.conf; "
            f"systemctl daemon-reload; loginctl enable-linger {USER}",
        )
        uid = int(sh(inst, f"id -u {USER}").stdout)
        wait_for(inst, f"user@{uid}.service", f"systemctl is-active --quiet user@{uid}.service")
        yield inst, uid
    finally:
        errors = teardown(insts)
        be.close()
        assert not errors, errors


def test_local_backend_as_a_user_in_a_systemd_delegated_subtree(guest):
    inst, uid = guest
    manager = f"{CG}/user.slice/user-{uid}.slice/user@{uid}.service"
    # the drop-in reached the kernel: the user's manager was given the four controllers
    assert {"cpu", "cpuset", "memory", "pids"} <= set(read(inst, f"{manager}/cgroup.controllers").split())

    scope = f"labkit-deleg-{uid}.scope"
    sh(inst, f"rm -rf {STEPS}; mkdir -p {STEPS}; chown {USER}: {STEPS}; chmod 700 {STEPS}")
    driver = f"{STEPS}/labkit-deleg-driver.py"
    sh(inst, f"cat > {driver} <<'LABKIT_EOF'\n{DRIVER}\nLABKIT_EOF\nchown {USER}: {driver}")
    argv = (
        f"systemd-run --user --quiet --scope -p Delegate=yes --unit={scope} /usr/bin/python3 {driver} "
        f"{STEPS} {PREFIX} {PIDS_MAX} {MEMORY_MB} {WALL_S}"
    )
    sh(inst, f"cd {STEPS} && nohup {as_user(uid, argv)} > {STEPS}/driver.log 2>&1 < /dev/null &")

    # 1: two instances made: where their cgroups are, who owns them, what the kernel holds
    one = step(inst, 1)
    own = f"/user.slice/user-{uid}.slice/user@{uid}.service/app.slice/{scope}"
    # the driver runs in the scope's leaf: it moved itself there before enabling controllers
    assert one["uid"] == uid and one["own"].strip() == f"0::{own}/labkit-self"
    root = f"{CG}{own}"
    assert one["root"] == root and one["leaf"] == f"{root}/labkit-self" and one["has_pids"] is True
    # delegated: systemd gave the scope to the user, and the driver moved itself to the leaf
    assert (
        sh(inst, f"stat -c %u {root} {root}/cgroup.procs {root}/cgroup.subtree_control").stdout.split()
        == [str(uid)] * 3
    )
    assert str(one["pid"]) in read(inst, f"{root}/labkit-self/cgroup.procs").split()
    assert read(inst, f"{root}/cgroup.procs").split() == []
    assert {"cpuset", "cpu", "memory", "pids"} <= set(read(inst, f"{root}/cgroup.subtree_control").split())
    assert all(m["limits_enforced"] and m["cgroup_version"] == 2 for m in one["metadata"])
    pinned, floating = f"{root}/{one['pinned']}", f"{root}/{one['floating']}"
    for d in (pinned, floating):
        assert read(inst, f"{d}/memory.max").strip() == str(MEMORY_MB << 20)
        assert read(inst, f"{d}/pids.max").strip() == str(PIDS_MAX)
    assert read(inst, f"{pinned}/cpuset.cpus").strip() == "0"
    assert read(inst, f"{pinned}/cpuset.cpus.effective").strip() == "0"
    assert read(inst, f"{pinned}/cpu.max").split() == ["max", "100000"]
    assert read(inst, f"{floating}/cpuset.cpus").strip() == "0-1"
    assert read(inst, f"{floating}/cpu.max").split() == ["100000", "100000"]
    # a command of each instance runs in its cgroup, on its CPUs
    for name, cpus, out in zip((one["pinned"], one["floating"]), ("0", "0-1"), one["inside"]):
        assert out["exit"] == 0, out
        cgroup, allowed, nproc = out["stdout"].splitlines()
        assert cgroup == f"0::{own}/{name}"
        assert allowed.split(":", 1)[1].strip() == cpus and nproc == str(len(cpus.split("-")))
    go(inst, 1)

    # 2: the limits enforced, read from the kernel's counters
    two = step(inst, 2)
    start, end = map(float, two["busy"]["stdout"].split())
    wall = end - start
    cpu = keyed(read(inst, f"{floating}/cpu.stat"))
    used = cpu["usage_usec"] / 1e6
    assert cpu["nr_throttled"] > 0, cpu
    # quota 1 CPU, two loops on two vCPUs: about the wall time, not twice it (the bound is the
    # midpoint, as in test_cgroup_v2.py: under TCG a descheduled vCPU is still charged)
    assert used <= wall * 1.5, f"{used:.2f}s of CPU in {wall:.2f}s with quota 1 CPU"
    assert used > 0.2 * wall, f"the busy loops barely ran ({used:.2f}s in {wall:.2f}s)"
    assert two["small"]["exit"] == 0 and two["small"]["stdout"].strip() == str(16 << 20), two["small"]
    assert two["big"]["exit"] == 137, two["big"]
    assert keyed(read(inst, f"{pinned}/memory.events"))["oom_kill"] >= 1
    assert keyed(read(inst, f"{pinned}/pids.events"))["max"] > 0  # forks refused at pids.max
    assert two["pids_sampled"] and max(two["pids_sampled"]) <= PIDS_MAX, two["pids_sampled"]
    assert two["after_bomb"]["alive"]["stdout"] == "alive\n", two["after_bomb"]
    assert read(inst, f"{pinned}/pids.current").strip() == "0"
    go(inst, 2)

    # 3: destroyed: no instance cgroup, work dir or process of the user's is left
    three = step(inst, 3)
    assert three == {"teardown_errors": [], "left": [], "workroot_entries": []}, three
    assert sh(inst, f"test -e {pinned} || test -e {floating}", check=False).exit_code == 1
    go(inst, 3)
    wait_for(inst, "the driver's scope to end", f"! test -e {root}", timeout=60)
    procs = sh(inst, f"ps -u {USER} -o comm=", check=False).stdout.split()
    assert set(procs) <= {"systemd", "(sd-pam)"}, procs
    assert sh(inst, f"cat {STEPS}/driver.log").stdout == ""


def test_labkit_run_as_a_user_in_a_systemd_delegated_scope(guest):
    """``labkit run`` as a whole, as the user, in a scope with ``Delegate=yes``, on ``local``: the
    runs are ok, each recorded its limits as enforced on cgroup v2, the kernel put each run's
    command in that instance's cgroup under the scope with the design's limits, the telemetry
    sampled, and nothing is left."""
    inst, uid = guest
    path = f"{REPO}:{SITE}"
    ours = "{}.{}".format(*sys.version_info[:2])
    theirs = sh(inst, "/usr/bin/python3 -c 'import sys; print(*sys.version_info[:2], sep=\".\")'").stdout
    if theirs.strip() != ours:
        pytest.skip(f"the guest's Python is {theirs.strip()}; the compiled modules of {SITE} are for {ours}")
    # the scientific stack of this Python's site-packages loads in the guest's (Debian's build)
    probe = "import numpy, pandas, scipy, statsmodels, psutil, pyarrow; print(numpy.__file__)"
    r = sh(inst, as_user(uid, f"/usr/bin/python3 -c {shlex.quote(probe)}", path), timeout=300, check=False)
    # the option reached the guest: its CPU has x86-64-v2's SSE4.2 and POPCNT
    v2 = sh(inst, "grep -qw sse4_2 /proc/cpuinfo && grep -qw popcnt /proc/cpuinfo", check=False)
    assert v2.exit_code == 0, "the guest's CPU lacks sse4_2/popcnt: tcg_cpu=max did not take"
    assert r.exit_code == 0 and r.stdout.startswith(SITE), r.describe()

    home = f"/home/{USER}"
    study, data = f"{home}/study", f"{home}/data"
    sh(
        inst,
        f"rm -rf {study} {data}; mkdir -p {study}; "
        f"cat > {study}/design.yaml <<'LABKIT_EOF'\n{json.dumps(DESIGN)}\nLABKIT_EOF\n"
        f"chown -R {USER}: {study}",
    )
    scope = f"labkit-run-{uid}.scope"
    own = f"/user.slice/user-{uid}.slice/user@{uid}.service/app.slice/{scope}"
    root = f"{CG}{own}"
    # the scope's shell lists the scope's cgroups once labkit has ended, before systemd removes them
    run = (
        f"/usr/bin/python3 -m labkit run design.yaml --backend local --campaign-id {CAMPAIGN} "
        f"--data-dir {data} --backend-option pids_max={RUN_PIDS_MAX} --no-quarantine; rc=$?; "
        f"find {root} -mindepth 1 -maxdepth 1 -type d > {study}/left; exit $rc"
    )
    argv = f"systemd-run --user --quiet --scope -p Delegate=yes --unit={scope} sh -c {shlex.quote(run)}"
    r = sh(inst, f"cd {study} && {as_user(uid, argv, path)}", timeout=RUN_TIMEOUT_S, check=False)
    assert r.exit_code == 0, r.describe()
    assert "unconfined" not in r.stdout + r.stderr, r.describe()

    reader = f"/usr/bin/python3 -c {shlex.quote(READER)} {data} {CAMPAIGN}"
    runs = json.loads(sh(inst, as_user(uid, reader, path), timeout=300).stdout.splitlines()[-1])
    assert sorted(x["affinity"] for x in runs) == ["floating", "pinned"], runs
    spec = InstanceSpec()
    for x in runs:
        assert x["status"] == "ok", (x["run_id"], x["error"], x["output"])
        (meta,) = x["metadata"]["instances"]
        assert meta["limits_enforced"] is True and meta["cgroup_version"] == 2, meta
        assert meta["name"].startswith(f"labkit-{CAMPAIGN}--"), meta
        assert meta["isolation"]["pids_max"] == RUN_PIDS_MAX, meta
        # the kernel's view from inside the run's command: the recorded instance's cgroup, in the
        # user's delegated scope, holding the design's limits
        seen = kernel_view(x["output"])
        assert seen["cgroup"] == f"{own}/{meta['name']}", (seen, x["output"])
        assert seen["memory.max"] == str(spec.memory_mb << 20), seen
        assert seen["pids.max"] == str(RUN_PIDS_MAX), seen
        cpus = seen["cpuset.cpus.effective"]
        assert seen["Cpus_allowed_list:"] == cpus, seen
        if x["affinity"] == "pinned":
            assert len(meta["host_cpu_ids"]) == 1 and cpus == str(meta["host_cpu_ids"][0]), (meta, seen)
            assert seen["cpu.max"] == "max 100000", seen
        else:  # every CPU, a quota of one vCPU's time that throttled the two loops
            assert meta["host_cpu_ids"] is None and cpus == "0-1", (meta, seen)
            assert seen["cpu.max"] == f"{spec.vcpus * 100000} 100000", seen
            assert int(seen["nr_throttled"] or 0) > 0, seen
        tel = x["metadata"]["telemetry"]
        assert tel["collected"] and tel["host"] == "sampled" and tel["instance_cpu"] == "cgroups", tel
        assert x["host_samples"] > 0 and x["instance_samples"], x
        assert "instance_cpu_pct" in x["instance_metrics"], x

    # nothing left: when labkit ended only its own leaf was in the scope; then the scope went,
    # the user's processes (but its manager) and the instances' work dirs
    assert read(inst, f"{study}/left").split() == [f"{root}/{LEAF}"]
    wait_for(inst, "the run's scope to end", f"! test -e {root}", timeout=60)
    procs = sh(inst, f"ps -u {USER} -o comm=", check=False).stdout.split()
    assert set(procs) <= {"systemd", "(sd-pam)"}, procs
    workroot = f"/run/user/{uid}/labkit/instances"
    assert sh(inst, f"test -d {workroot} && find {workroot} -mindepth 1").stdout == ""


def test_a_scope_without_delegation_is_refused_with_the_fix(guest):
    """Without ``Delegate=yes`` the scope gets no controller of its own to hand on: the backend
    refuses to run with limits, naming the cgroup, what it lacks and the fix, and leaves nothing.
    (The user's manager runs as the user, so every cgroup under it is the user's, a scope
    without ``Delegate=yes`` too: what tells them apart here is the controllers the scope was
    given, cpuset and cpu missing while no delegated unit runs beside it.)"""
    inst, uid = guest
    scope = f"labkit-nodeleg-{uid}.scope"
    check = "from labkit.backends.local import LocalBackend; LocalBackend().check()"
    r = sh(
        inst,
        as_user(
            uid, f"systemd-run --user --quiet --scope --unit={scope} /usr/bin/python3 -c {shlex.quote(check)}"
        ),
        check=False,
    )
    where = f"/user.slice/user-{uid}.slice/user@{uid}.service/app.slice/{scope}"
    assert r.exit_code != 0, r.describe()
    refusal = re.search(
        rf"cgroup v2: controllers? ([a-z, ]+) not delegated to {re.escape(CG + where)} ", r.stderr
    )
    assert refusal and "cpuset" in refusal.group(1).split(", "), r.stderr
    assert "systemd-run --user --scope -p Delegate=yes" in r.stderr and "enforce_limits=false" in r.stderr
    wait_for(inst, "the refused scope to end", f"! test -e {CG}{where}", timeout=60)
