"""Manipulation checks (issue 41, item 4): what is read inside an instance and on the host is
parsed and judged right (fixtures: what the check's command prints on cgroup v1 and v2 and in a
VM), a check that cannot read says so instead of failing the run, and :func:`untaken` says which
treatments did not take."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pandas as pd
import pytest

from labkit.core.instance import InstanceSpec
from labkit.errors import CommandTimeout, ConfigError
from labkit.report.treatments import COLUMNS, untaken
from labkit.run.hooks import RunContext
from labkit.run.treatments import (
    KsmWatch,
    TreatmentChecks,
    check_affinity,
    check_ksm,
    check_memory,
    check_neighbours,
    check_vcpus,
    parse_cpulist,
    parse_inside,
)

# what INSIDE printed in a local instance (cgroup v1: pinned to CPU 1, 192 MiB)
LOCAL_V1 = """Cpus_allowed_list:\t1
nproc: 1
MemTotal:       24684092 kB
memory_limit_v1: 201326592
cpu_quota_v1: -1 100000
"""
# a Docker container on cgroup v2 (floating, nano_cpus 1.5, 512 MiB)
DOCKER_V2 = """Cpus_allowed_list:\t0-3
nproc: 4
MemTotal:       16303312 kB
memory_max_v2: 536870912
cpu_max_v2: 150000 100000
"""
# an LXD container on a host with cgroup v1 controllers (floating, limits.cpu.allowance for 1 vCPU,
# 512 MiB): the quota is the host's lxc.payload.<name>/cpu.cfs_quota_us, and the container mounts
# no v1 cpu controller, so INSIDE prints no cpu line (seen in affinity-platforms, 2026-11-29)
LXD_V1 = """Cpus_allowed_list:\t0-1
nproc: 2
MemTotal:         524288 kB
memory_limit_v1: 536870912
"""
# a VM (2 vCPUs, 1024 MiB: the guest kernel keeps some), no memory cgroup inside
VM = """Cpus_allowed_list:\t0-1
nproc: 2
MemTotal:        1001236 kB
memory_max_v2: max
cpu_max_v2: max 100000
"""


def test_cpu_lists_parse_and_bad_text_is_a_config_error():
    assert parse_cpulist("0-2,5") == [0, 1, 2, 5]
    assert parse_cpulist("3\n") == [3]
    with pytest.raises(ConfigError, match="not a CPU list"):
        parse_cpulist("0-a")


def test_what_the_instance_printed_is_parsed():
    assert parse_inside(LOCAL_V1) == {
        "cpus_allowed": [1],
        "nproc": 1,
        "memtotal_mb": 24105.6,
        "memory_limit_mb": 192.0,
        "cpu_quota": None,
    }
    assert parse_inside(DOCKER_V2) == {
        "cpus_allowed": [0, 1, 2, 3],
        "nproc": 4,
        "memtotal_mb": 15921.2,
        "memory_limit_mb": 512.0,
        "cpu_quota": 1.5,
    }
    assert parse_inside(VM)["memory_limit_mb"] is None and parse_inside(VM)["cpu_quota"] is None
    assert parse_inside("memory_limit_v1: 9223372036854771712\n") == {
        "memory_limit_mb": None
    }  # v1 "no limit"
    assert parse_inside("garbage\nnproc: many\ncpu_max_v2: 1\n") == {}


def test_affinity_is_judged_against_the_recorded_placement():
    seen = parse_inside(LOCAL_V1)
    ok = check_affinity("pinned", seen, expected=[1], vcpus=1, host_cpus=None, vm=False)
    assert ok["verified"] is True and ok["observed"] == [1] and "Cpus_allowed_list" in ok["how"]
    assert (
        check_affinity("pinned", seen, expected=[0], vcpus=1, host_cpus=None, vm=False)["verified"] is False
    )
    # floating may run anywhere: an instance held to one CPU of four did not float
    assert (
        check_affinity("floating", seen, expected=None, vcpus=1, host_cpus=4, vm=False)["verified"] is False
    )
    assert (
        check_affinity("floating", parse_inside(DOCKER_V2), expected=None, vcpus=2, host_cpus=4, vm=False)[
            "verified"
        ]
        is True
    )
    vm = check_affinity("pinned", parse_inside(VM), expected=[0, 1], vcpus=2, host_cpus=None, vm=True)
    assert vm["verified"] is None and vm["how"].startswith("not verified") and "vcpupin" in vm["how"]
    assert check_affinity("pinned", {}, expected=[1], vcpus=1, host_cpus=None, vm=False)["verified"] is None


def test_vcpus_and_memory_are_judged_from_the_limits_read_inside():
    assert check_vcpus(1, parse_inside(LOCAL_V1), vm=False)["verified"] is True  # no quota: 1 CPU allowed
    docker = check_vcpus(2, parse_inside(DOCKER_V2), vm=False)
    assert docker["verified"] is False and docker["observed"] == 1.5 and "quota" in docker["how"]
    assert check_vcpus(2, parse_inside(VM), vm=True)["verified"] is True
    # no cpu controller inside: a quota on the host is unseen, so more CPUs allowed is not a failure
    lxd = check_vcpus(1, parse_inside(LXD_V1), vm=False)
    assert lxd["verified"] is None and lxd["observed"] == 2 and lxd["how"].startswith("not verified")
    assert "no CPU controller visible" in lxd["how"]
    assert check_vcpus(2, parse_inside(LXD_V1), vm=False)["verified"] is True  # 2 CPUs allowed: taken
    # a controller read with no quota, and more CPUs allowed than the level: did not take
    no_quota = parse_inside(LXD_V1 + "cpu_quota_v1: -1 100000\n")
    assert check_vcpus(1, no_quota, vm=False)["verified"] is False
    assert check_vcpus(3, parse_inside(LXD_V1), vm=False)["verified"] is False  # fewer CPUs than vCPUs
    assert check_memory(192, parse_inside(LOCAL_V1), vm=False)["verified"] is True
    assert check_memory(256, parse_inside(LOCAL_V1), vm=False)["verified"] is False
    unlimited = check_memory(512, {"memory_limit_mb": None}, vm=False)
    assert unlimited["verified"] is False and unlimited["observed"] == "unlimited"
    assert check_memory(1024, parse_inside(VM), vm=True)["verified"] is True  # 978 of 1024 MiB
    assert check_memory(2048, parse_inside(VM), vm=True)["verified"] is False
    assert check_memory(512, {}, vm=False)["verified"] is None


def test_ksm_on_takes_only_when_pages_were_merged():
    merged = {"merged": 265, "pages_sharing_max": 157, "run_values": [1], "polls": 5, "attributed": True}
    assert check_ksm("on", merged)["verified"] is True
    none = {**merged, "merged": 0, "pages_sharing_max": 0, "attributed": False}
    on = check_ksm("on", none)
    assert on["verified"] is False and "pages_sharing" in on["how"]
    assert check_ksm("off", {**none, "run_values": [2]})["verified"] is True
    assert check_ksm("off", {**merged, "run_values": [2]})["verified"] is False
    assert check_ksm("on", {**merged, "run_values": [0]})["verified"] is False  # ksmd never ran
    others = check_ksm("on", {**none, "merged": None, "pages_sharing_max": 40})  # someone else's pages
    assert others["verified"] is None and "attributed" in others["how"]
    assert check_ksm("on", {"error": "no KSM"})["verified"] is None


def test_neighbours_must_use_the_cpu():
    assert check_neighbours("noise", "cpu", [95.0], "cpu")["verified"] is True
    idle = check_neighbours("noise", "cpu", [0.3], "cpu")
    assert idle["verified"] is False and idle["observed"]["cpu_pct"] == [0.3]
    assert check_neighbours("neighbours", 3, [90.0, 80.0], "cpu")["verified"] is False  # one missing
    assert check_neighbours("noise", "none", [], None)["verified"] is True
    assert check_neighbours("noise", "cpu", [None], "cpu")["verified"] is None


def fake_ksm(tmp_path, run="1", sharing="0"):
    root = tmp_path / "ksm"
    root.mkdir(exist_ok=True)
    (root / "run").write_text(run + "\n")
    (root / "pages_sharing").write_text(sharing + "\n")
    return root


def fake_proc(tmp_path, procs):
    proc = tmp_path / "proc"
    for pid, (cgroup, pages) in procs.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(cgroup)
        (proc / str(pid) / "ksm_merging_pages").write_text(f"{pages}\n")
    return str(proc)


def test_ksm_pages_are_counted_for_the_runs_own_processes_only(tmp_path):
    root = fake_ksm(tmp_path, sharing="500")
    proc = fake_proc(
        tmp_path, {10: ("4:memory:/labkit/labkit-c-0001\n", 120), 11: ("4:memory:/other\n", 380)}
    )
    ctx = SimpleNamespace(instances=[SimpleNamespace(name="labkit-c-0001")])
    seen = KsmWatch(ctx, root, 0.01, proc=proc).start().stop()  # type: ignore[arg-type]
    assert seen["polls"] >= 1
    assert seen["attributed"] is True and seen["merged"] == 120 and seen["pages_sharing_max"] == 500
    # none of the run's processes found while another's pages are merged: not attributable
    seen = (
        KsmWatch(
            SimpleNamespace(instances=[SimpleNamespace(name="labkit-x")]),
            root,
            0.01,  # type: ignore[arg-type]
            proc=proc,
        )
        .start()
        .stop()
    )
    assert seen["merged"] is None and check_ksm("on", seen)["verified"] is None
    assert "no KSM" in KsmWatch(ctx, tmp_path / "absent", 0.01).start().stop()["error"]  # type: ignore[arg-type]


class Inst:
    def __init__(self, out=None, exc=None, name="labkit-t-0001", cpus=None):
        self.out, self.exc, self.name, self.cpus, self.host_cpu_ids = out, exc, name, cpus, cpus
        self.calls = 0

    def exec(self, argv, check=True, timeout=None, logged=True):
        self.calls += 1
        if self.exc:
            raise self.exc
        return SimpleNamespace(stdout=self.out, ok=True)


def context(levels, spec, instances, tmp_path):
    run = SimpleNamespace(levels=levels, run_id="r1")
    backend = SimpleNamespace(name="local", host_cpus=lambda: 4)
    return RunContext(run, spec, {}, backend, "labkit-t-", instances=instances)  # type: ignore[arg-type]


def test_the_hook_reads_each_instance_factor_with_one_command(tmp_path):
    inst = Inst(LOCAL_V1, cpus=[1])
    ctx = context(
        {"affinity": "pinned", "memory_mb": 192, "vcpus": 1},
        InstanceSpec(1, 192, "pinned", 1),
        [inst],
        tmp_path,
    )
    with TreatmentChecks().around_run(ctx):
        pass
    t = ctx.metadata["treatments"]
    assert inst.calls == 1 and set(t) == {"affinity", "memory_mb", "vcpus"}
    assert all(rec["verified"] is True for rec in t.values()) and ctx.metadata["treatment_failed"] == []
    assert t["affinity"]["level"] == "pinned" and t["memory_mb"]["level"] == 192


def test_a_check_that_cannot_read_never_fails_the_run(tmp_path):
    inst = Inst(exc=CommandTimeout("sh -c ... timed out after 15 s"))
    ctx = context({"memory_mb": 256}, InstanceSpec(1, 256, "floating", 1), [inst], tmp_path)
    with TreatmentChecks().around_run(ctx):
        pass
    rec = ctx.metadata["treatments"]["memory_mb"]
    assert rec["verified"] is None and rec["how"].startswith("not read") and "timed out" in rec["how"]
    assert ctx.metadata["treatment_failed"] == []


def test_the_runs_error_passes_through_after_the_check(tmp_path):
    ctx = context(
        {"memory_mb": 256}, InstanceSpec(1, 256, "floating", 1), [Inst("memory_limit_v1: 1\n")], tmp_path
    )
    with pytest.raises(RuntimeError), TreatmentChecks().around_run(ctx):
        raise RuntimeError("the workload failed")
    assert ctx.metadata["treatment_failed"] == ["memory_mb"]


def test_factors_it_does_not_know_cost_nothing(tmp_path):
    inst = Inst(LOCAL_V1)
    ctx = context({"n": 8}, InstanceSpec(), [inst], tmp_path)
    cm = TreatmentChecks().around_run(ctx)
    assert isinstance(cm, contextlib.nullcontext)
    with cm:
        pass
    assert inst.calls == 0 and "treatments" not in ctx.metadata
    with pytest.raises(ConfigError, match="poll_s"):
        TreatmentChecks(poll_s=0)


def md(**checks):
    return {
        "treatments": {
            f: {"level": lv, "verified": v, "observed": None, "how": "x"} for f, (lv, v) in checks.items()
        }
    }


def test_untaken_counts_failed_runs_per_factor_and_level():
    runs = pd.DataFrame(
        {
            "metadata": [md(ksm=("on", False), affinity=("pinned", True))] * 30
            + [md(ksm=("off", True), affinity=("pinned", None))] * 30
            + [{}, None]
        }
    )
    out = untaken(runs)
    assert list(out.columns) == COLUMNS
    rows = {(r.factor, r.level): r for r in out.itertuples()}
    on = rows[("ksm", "on")]
    assert (on.runs, on.failed, on.verified, on.unknown) == (30, 30, 0, 0)
    assert on.sentence == "KSM on merged no pages in 30 of 30 runs: the treatment did not take"
    assert rows[("ksm", "off")].sentence is None and rows[("ksm", "off")].verified == 30
    pinned = rows[("affinity", "pinned")]
    assert (pinned.runs, pinned.verified, pinned.unknown, pinned.failed) == (60, 30, 30, 0)
    assert list(out.factor) == ["affinity", "ksm", "ksm"] and list(out.level[1:]) == ["on", "off"]


def test_untaken_in_part_and_without_checks():
    runs = pd.DataFrame({"metadata": [md(memory_mb=(256, False)), md(memory_mb=(256, True))]})
    assert untaken(runs).sentence[0] == (
        "memory_mb 256 was not seen inside the instance (its memory limit "
        "differed) in 1 of 2 runs: the treatment did not take in part"
    )
    assert untaken(pd.DataFrame({"metadata": [{}, {"spec": {}}]})).empty
    link = untaken(pd.DataFrame({"metadata": [md(link=("50mbit/", False))]}))
    assert link.sentence[0] == (
        "link 50mbit/ was not what the link carried (its qdisc was missing or another, or "
        "traffic beat its rate) in 1 of 1 runs: the treatment did not take"
    )
    assert list(untaken(pd.DataFrame()).columns) == COLUMNS
