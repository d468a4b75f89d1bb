"""Issue 32, items 1-3 (logic): runs_per_instance plans, the levels every stored row carries (host,
instance, boot, run_seq, iteration) in new and old stores, the boot engine on an in-memory backend
(one provisioning per boot, a failure mid-boot, resume on a fresh boot, quarantine), the counters
each backend's stats interface gives, per-instance telemetry rows, and the quiet-host guard's
verdicts and start check. Real daemons: tests/integration/test_levels_*.py.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import time
from collections import namedtuple
from pathlib import Path

import pandas as pd
import pytest

from labkit.backends import cgroup_counters, cgroups
from labkit.backends.base import StatsUnavailable, parse_proc_stat
from labkit.backends.docker import docker_stats
from labkit.backends.lxd import lxd_stats
from labkit.backends.native import MARK, MISSING, split_marked
from labkit.core import registry
from labkit.design import Design
from labkit.errors import ConfigError, StoreError
from labkit.run.campaign import Campaign
from labkit.run.guard import QuietHost, verdict
from labkit.run.telemetry import Reading, delta_rows, summarize
from labkit.store import Store
from labkit.store.levels import run_levels
from labkit.workloads import Measurement, Workload
from tests.unit.test_fleet import _run_with_b_failing, closed_port, fakes  # noqa: F401 (a fixture)
from tests.unit.test_reliability_campaign import FakeBackend, FakeInstance

ROOT = Path(__file__).resolve().parents[2]
# data/affinity-local as committed before levels existed (the campaign was run again since, with them)
OLD_STORE = ROOT / "tests" / "vectors" / "affinity-local-before-levels.sqlite"
# data/affinity-lxd-libvirt as committed before levels existed (2 runs per configuration; run again since)
OLD_FLEET = (
    ROOT / "tests" / "vectors" / "affinity-lxd-libvirt-before-levels.sqlite"
)  # platform factor, host recorded


@pytest.fixture(autouse=True)
def own_registry(tmp_path, monkeypatch):
    """A registry of running campaigns of this test's own: other campaigns on the machine unseen."""
    monkeypatch.setenv(registry.ENV, str(tmp_path / "registry"))


def design(**extra):
    return Design.from_dict(
        {
            "factors": {"vcpus": [1, 2], "affinity": ["floating", "pinned"]},
            "replications": 6,
            "seed": 11,
            **extra,
        }
    )


# -- the design option and the plan -----------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", None, 10**6])
def test_runs_per_instance_must_be_a_whole_number_from_one(bad):
    with pytest.raises(ConfigError, match="runs_per_instance"):
        design(runs_per_instance=bad)


def test_runs_per_instance_refuses_what_it_cannot_honour():
    with pytest.raises(ConfigError, match="more than replications"):
        design(runs_per_instance=7)
    with pytest.raises(ConfigError, match="adaptive"):
        Design.from_dict(
            {
                "factors": {"vcpus": [1, 2]},
                "replications": {"target_ci": 0.1, "min": 3, "max": 9},
                "seed": 1,
                "runs_per_instance": 2,
            }
        )
    with pytest.raises(ConfigError, match="straddle"):
        design(runs_per_instance=2, blocks={"by": "day", "count": 2})  # 3 replicates per block
    with pytest.raises(ConfigError, match="by factor"):
        design(runs_per_instance=2, blocks={"by": "factor", "factor": "affinity"})


def test_default_is_todays_plan_and_digest():
    """runs_per_instance 1 (or absent) changes nothing: same plan, same digest as a design that
    never heard of it (a store of before resumes)."""
    base, one = design(), design(runs_per_instance=1)
    assert "runs_per_instance" not in base.to_dict() and base.digest() == one.digest()
    assert [(r.run_id, r.order) for r in base.plan()] == [(r.run_id, r.order) for r in one.plan()]
    assert {r.boot for r in base.plan()} == {0} and all(r.boot_group == r.run_id for r in base.plan())
    assert design(runs_per_instance=3).digest() != base.digest()


@pytest.mark.parametrize("k", [2, 3, 4])
def test_plan_randomizes_boots_and_runs_a_boots_runs_back_to_back(k):
    d = design(runs_per_instance=k)
    plan = d.plan()
    assert sorted(r.run_id for r in plan) == sorted(r.run_id for r in design().plan())  # every run once
    assert [r.order for r in plan] == list(range(len(plan)))
    groups: dict[str, list] = {}
    for r in plan:
        groups.setdefault(r.boot_group, []).append(r)
    for runs in groups.values():
        orders = [r.order for r in runs]
        assert orders == list(range(orders[0], orders[0] + len(runs)))  # back to back
        assert [r.replicate for r in runs] == sorted(r.replicate for r in runs)  # in replicate order
        assert len({r.config for r in runs}) == 1 and len(runs) <= k
        assert {(r.replicate - 1) // k + 1 for r in runs} == {runs[0].boot}
    assert len(groups) == 4 * -(-6 // k)
    sizes = sorted(len(v) for v in groups.values())
    assert sizes == sorted([k] * (4 * (6 // k)) + ([6 % k] * 4 if 6 % k else []))
    boot_order = list(dict.fromkeys((r.config, r.boot) for r in plan))
    assert boot_order != sorted(boot_order, key=lambda cb: (cb[1], cb[0]))  # shuffled
    assert [r.run_id for r in plan] == [r.run_id for r in design(runs_per_instance=k).plan()]  # by seed


def test_blocks_of_whole_replicates_hold_whole_boots():
    d = design(runs_per_instance=3, blocks={"by": "day", "count": 2})
    plan = d.plan()
    assert [r.block for r in plan] == sorted(r.block for r in plan)  # block after block
    for r in plan:
        assert r.block == (r.replicate - 1) // 3 + 1
    assert "runs per instance: 3" in d.describe()


def test_execution_options_are_validated_and_left_out_of_the_digest():
    d = design(telemetry="off", exclusive=True, quarantine=True, thresholds={"other_cpu_pct": 25})
    assert d.telemetry == "off" and d.exclusive is True and d.quarantine is True
    assert d.thresholds == {"other_cpu_pct": 25.0, "steal_pct": 5.0, "pinned_throttled": True}
    assert d.digest() == design().digest()
    assert Design.from_dict(d.to_dict()).thresholds == d.thresholds
    assert design(telemetry=0.5).telemetry == 0.5
    for bad, match in (
        ({"telemetry": -1}, "telemetry"),
        ({"exclusive": "yes"}, "exclusive"),
        ({"thresholds": {"cpu": 1}}, "unknown key"),
        ({"thresholds": {"steal_pct": -2}}, "steal_pct"),
        ({"quarantine": 1}, "quarantine"),
    ):
        with pytest.raises(ConfigError, match=match):
            design(**bad)


# -- the boot engine on an in-memory backend ----------------------------------------------------
class CountingInstance(FakeInstance):
    def stats(self):
        self.backend.stats_calls += 1
        return {"cpu_s": 1.0 + self.backend.stats_calls, "memory_bytes": 2.0**20}


class CountingBackend(FakeBackend):
    """The in-memory backend of the reliability tests, counting the instances it makes."""

    def __init__(self, **options):
        super().__init__(**options)
        self.created, self.stats_calls = [], 0

    def _create(self, spec, name, index, cpus):
        self.created.append(name)
        return CountingInstance(self, name, spec, index, cpus)


class Iterating(Workload):
    """Three iterations per run (wall_time_s with iteration 1..3); fails when ``fail_on`` names
    the call number (1-based, over the campaign)."""

    name = "iterating"
    defaults = {"size": 1}

    def __init__(self, fail_on=(), **kw):
        super().__init__(**kw)
        self.calls, self.fail_on = 0, set(fail_on)

    def run(self, instance, params):
        self.calls += 1
        if self.calls in self.fail_on:
            raise ConfigError(f"call {self.calls} fails on purpose")
        return [Measurement("wall_time_s", 0.1 * i, "s", instance.index, i) for i in (1, 2, 3)] + [
            Measurement("solutions", 1.0, "count", instance.index)
        ]


def reuse_campaign(tmp_path, k=3, workload=None, factors=None, **kw):
    d = Design.from_dict(
        {
            "factors": factors or {"vcpus": [1, 2], "count": [1, 2]},
            "replications": 3,
            "seed": 4,
            "runs_per_instance": k,
        }
    )
    kw.setdefault("backend", CountingBackend())
    kw.setdefault("telemetry", 0.05)
    return Campaign(
        d, workload=workload or Iterating(), campaign_id="t-levels", data_dir=tmp_path, progress=False, **kw
    )


class Pausing(Iterating):
    """Iterating, each run lasting 0.15 s: several of the sampler's 0.05-s readings fall in it
    (instance stats are read by the campaign's sampler thread only, not at a run's ends)."""

    def run(self, instance, params):
        time.sleep(0.15)
        return super().run(instance, params)


def test_a_boot_provisions_once_and_every_row_carries_its_levels(tmp_path):
    be = CountingBackend()
    st = reuse_campaign(tmp_path, backend=be, workload=Pausing()).run()
    runs, tidy = st.runs(), st.tidy()
    assert len(runs) == 12 and set(runs.status) == {"ok"}
    # 4 boots (one per configuration), instances: count 1 and 2 -> 2 x (1 + 2) = 6, each made and torn down once
    assert len(be.created) == 6 and sorted(be.destroyed) == sorted(be.created)
    rows = tidy[tidy.metric == "wall_time_s"]
    assert set(rows.iteration) == {1, 2, 3} and tidy[tidy.metric == "solutions"].iteration.isna().all()
    assert set(rows.instance) == set(be.created) and set(rows.boot) == {1}
    per_instance = rows.groupby("instance").run_id.nunique()
    assert set(per_instance) == {3}  # each instance ran its boot's 3 runs
    assert rows.groupby(["run_id", "instance_index"]).instance.nunique().max() == 1
    assert sorted(runs.run_seq) == list(range(1, 13))  # one host: execution order
    assert list(runs.sort_values("started").run_seq) == list(range(1, 13))
    assert set(runs.host) == {"local"} and not runs.suspect.any()
    by_boot = runs.groupby(runs.metadata.map(lambda m: m["boot_group"]))
    assert set(by_boot.size()) == {3}
    for _, group in by_boot:
        assert sorted(m["boot_position"] for m in group.metadata) == [1, 2, 3]
    # the instances' own counters, sampled each interval with the instance's id
    s = st.samples()
    inst = s[s.instance.notna()]
    assert set(inst.instance) <= set(be.created) and {"instance_cpu_pct", "instance_memory_mb"} <= set(
        inst.metric
    )


class Echoing(Iterating):
    """Each run echoes its call number in its instances: what that run's output file must hold."""

    name = "echoing"

    def run(self, instance, params):
        instance.exec(["echo", f"call-{self.calls + 1:02d}"])
        return super().run(instance, params)


def test_each_run_of_a_boot_keeps_its_own_commands_output(tmp_path, monkeypatch):
    """Runs sharing instances keep their own output files: each file holds the commands of its run
    only (the instances' logs start afresh after each run), not those of the boot's earlier runs."""
    monkeypatch.setenv("LABKIT_RUN_OUTPUT", "all")
    st = reuse_campaign(tmp_path, factors={"vcpus": [1, 2]}, workload=Echoing()).run()
    runs = st.runs().sort_values("started")
    assert len(runs) == 6 and set(runs.status) == {"ok"} and set(st.run_outputs()) == set(runs.run_id)
    for n, rid in enumerate(runs.run_id, start=1):
        text = st.run_output(rid)
        assert text.count("$ echo call-") == 1 and f"$ echo call-{n:02d}" in text, (rid, text)


def test_a_failure_mid_boot_stores_what_it_has_and_the_rest_failed_then_resume_boots_fresh(tmp_path):
    be = CountingBackend()
    one = {"vcpus": [1, 2], "affinity": ["floating", "pinned"]}  # one instance per run: call n is run n
    c = reuse_campaign(tmp_path, backend=be, workload=Iterating(fail_on={2}), factors=one)
    st = c.run()
    runs = st.runs().sort_values("run_order")
    first = runs.iloc[:3]  # the first boot: run 1 ok, run 2 failed, run 3 not run
    assert list(first.status) == ["ok", "failed", "failed"]
    assert "fails on purpose" in first.iloc[1].error and first.iloc[2].error.startswith("not run: run ")
    assert first.iloc[2].metadata["not_run"] is True and pd.isna(first.iloc[2].run_seq)
    assert set(runs.iloc[3:].status) == {"ok"}
    made = len(be.created)
    assert sorted(be.destroyed) == sorted(be.created)  # torn down once, after the failure
    # --retry-failed: the two runs run again together, on a fresh boot
    st = reuse_campaign(tmp_path, backend=be, factors=one).run(retry_failed=True)
    runs = st.runs().set_index("run_id")
    again = first.run_id.iloc[1:]
    assert set(runs.loc[again, "status"]) == {"ok"} and len(st.attempts()) == 2
    new = be.created[made:]
    tidy = st.tidy()
    assert set(tidy[tidy.run_id.isin(again)].instance.dropna()) == set(new)
    assert tidy[tidy.run_id == first.run_id.iloc[0]].instance.iloc[0] not in new
    assert list(runs.loc[again, "run_seq"]) == [12, 13]  # numbered on: 11 runs ran in the first pass


def test_quarantine_runs_suspect_runs_again_keeping_the_first_attempt(tmp_path):
    registry_dir = Path(registry.run_dir())
    other = registry.register("t-other", tmp_path / "other", backend="local")
    try:
        st = reuse_campaign(tmp_path, quarantine=True).run()
    finally:
        other.release()
    runs, attempts = st.runs(), st.attempts()
    assert registry_dir.is_dir()
    # every run saw t-other: flagged, run once more at the end (still flagged: it still ran), not twice
    assert len(attempts) == 12 and set(attempts.run_id) == set(runs.run_id)
    assert all("t-other" in m["suspect"] for m in attempts.metadata)
    assert runs.suspect.all() and set(runs.status) == {"ok"}


# -- stores: new rows, old rows, migration --------------------------------------------------------
def test_a_store_of_before_reads_with_levels_filled_from_what_it_holds():
    with Store(OLD_STORE, readonly=True) as st:
        tidy, runs, samples = st.tidy(), st.runs(), st.samples()
    ok = tidy[tidy.metric.notna()]
    assert (ok.instance == ok.run_id + ":" + ok.instance_index.astype(str)).all()
    assert set(ok.boot) == {1} and tidy.iteration.isna().all() and not tidy.suspect.any()
    # run_seq: the runs' start-time order on their host (here one host, not recorded: None)
    expect = runs.sort_values("started").run_id.tolist()
    assert runs.sort_values("run_seq").run_id.tolist() == expect
    assert sorted(runs.run_seq) == list(range(1, len(runs) + 1))
    assert list(samples.columns) == ["run_id", "t", "metric", "value", "instance"]


def test_a_results_table_of_before_gets_the_levels_the_store_gives_it():
    """One filling of stores and tables of before (labkit.store.levels): the analysis's with_levels on
    a table without the level columns (an old results.csv: ``instance`` the index) gives what
    Store.tidy gives for the same old store, and keeps the store's own columns when it has them."""
    from labkit.report.level_analysis import with_levels

    for path in (OLD_STORE, OLD_FLEET):
        with Store(path, readonly=True) as st:
            tidy = st.tidy()
        old = tidy.drop(columns=["instance", "boot", "run_seq", "iteration", "suspect", "suspect_reason"])
        old = old.rename(columns={"instance_index": "instance"})
        cols = ["run_id", "instance", "instance_index", "boot", "run_seq", "iteration", "suspect"]
        filled, kept = with_levels(old)[cols], with_levels(tidy)[cols]
        pd.testing.assert_frame_equal(filled, kept)
        pd.testing.assert_frame_equal(kept, tidy[cols])


def test_a_fleet_store_of_before_numbers_runs_per_host():
    with Store(OLD_FLEET, readonly=True) as st:
        runs = st.runs()
    for _host, group in runs.groupby("host"):
        assert group.sort_values("run_seq").started.is_monotonic_increasing
        assert sorted(group.run_seq) == list(range(1, len(group) + 1))


def test_opening_a_store_of_before_for_writing_migrates_it_losing_nothing(tmp_path):
    copy = tmp_path / "old" / "store.sqlite"
    copy.parent.mkdir()
    shutil.copy(OLD_STORE, copy)
    with Store(OLD_STORE, readonly=True) as st:
        before = st.tidy()
    with Store(copy) as st:
        after = st.tidy()
        st.record_samples(
            before.run_id.iloc[0], [(0.5, "instance_cpu_pct", 12.0, "x1"), (0.5, "cpu_pct", 3.0)]
        )
        s = st.samples()
    pd.testing.assert_frame_equal(before, after)
    assert s.instance.isna().tolist() == [True, False] and s.instance.iloc[1] == "x1"
    db = sqlite3.connect(copy)
    pk = [r[1] for r in db.execute("PRAGMA table_info(measurements)") if r[5]]
    assert pk == ["run_id", "instance", "metric", "iteration"]


def test_iterations_are_part_of_a_measurements_key(tmp_path):
    from labkit.design import Run

    with Store(tmp_path / "s" / "store.sqlite") as st:
        run = Run("c0000r001", 0, 0, 1, {"vcpus": 1})
        st.record_run(
            run,
            status="ok",
            started="2026-01-01T00:00:00+00:00",
            duration_s=1.0,
            measurements=[
                Measurement("t", 1.0, "s", 0, 1),
                Measurement("t", 2.0, "s", 0, 2),
                Measurement("n", 3.0, "count", 0),
            ],
        )
        with pytest.raises(StoreError, match="iteration must be"):
            st.record_run(
                Run("c0000r002", 1, 0, 2, {}),
                status="ok",
                started="x",
                duration_s=1.0,
                measurements=[Measurement("t", 1.0, "s", 0, 0)],
            )
        with pytest.raises(StoreError, match="stored once"):
            st.record_run(
                Run("c0000r003", 2, 0, 3, {}),
                status="ok",
                started="x",
                duration_s=1.0,
                measurements=[Measurement("t", 1.0, "s", 0, 1), Measurement("t", 1.0, "s", 0, 1)],
            )
        tidy = st.tidy()
    assert tidy[tidy.metric == "n"].iteration.isna().all()
    assert sorted(tidy[tidy.metric == "t"].iteration) == [1, 2]
    assert list(tidy[tidy.metric == "t"].sort_values("iteration").value) == [1.0, 2.0]


def test_claim_group_takes_a_boots_pending_runs_together(tmp_path):
    with Store(tmp_path / "s" / "store.sqlite") as st:
        got = st.claim_group([["a", "b", "c"], ["d"]], "h", "me", 30)
        assert got == ["a", "b", "c"]
        assert st.claim_group([["a", "b", "c"], ["d"]], "h", "other", 30) == ["d"]
        assert st.claim_group([["a", "b", "c"], ["d"]], "h", "other", 30) == []
        st.release_claims(run_id="b")
        assert st.claim_group([["a", "b", "c"]], "h", "x", 30, limit=5) == ["b"]


def test_run_levels_reads_recorded_levels():
    md = {
        "host": "h1",
        "run_seq": 7,
        "suspect": "why",
        "instances": [{"name": "labkit-a--1", "index": 0, "boot": 2}],
    }
    lv = run_levels([("r1", 0, "2026", md), ("r2", 1, "2025", {"host": "h1"})])
    assert lv["r1"].instance(0) == ("labkit-a--1", 2) and lv["r1"].instance(1) == ("r1:1", 1)
    assert lv["r1"].run_seq == 7 and lv["r1"].suspect_reason == "why" and lv["r1"].recorded
    assert lv["r2"].run_seq == 1 and not lv["r2"].recorded and lv["r2"].instance(None) == (None, None)


# -- the backends' stats interfaces (parsing; the calls: tests/integration/test_levels_backends.py) --
def test_cgroup_counters_v1_and_v2():
    v2 = cgroups.CgroupV2("/sys/fs/cgroup")
    paths = cgroup_counters.stat_paths(v2, "labkit-x--1")
    assert paths["cpu"] == "/sys/fs/cgroup/labkit-x--1/cpu.stat" and paths["memory"].endswith(
        "memory.current"
    )
    stat = "usage_usec 2500000\nuser_usec 1\nnr_periods 10\nnr_throttled 4\nthrottled_usec 300000\n"
    assert cgroup_counters.parse_stats(v2, {"cpu": stat, "throttle": stat, "memory": "4096\n"}) == {
        "cpu_s": 2.5,
        "throttled_periods": 4.0,
        "throttled_s": 0.3,
        "memory_bytes": 4096.0,
    }
    v1 = cgroups.CgroupV1(
        {"cpu": "/c/cpu", "cpuacct": "/c/cpuacct", "cpuset": "/c/cpuset", "memory": "/c/memory"}
    )
    paths = cgroup_counters.stat_paths(v1, "n")
    assert paths == {
        "cpu": "/c/cpuacct/n/cpuacct.usage",
        "throttle": "/c/cpu/n/cpu.stat",
        "memory": "/c/memory/n/memory.usage_in_bytes",
    }
    got = cgroup_counters.parse_stats(
        v1,
        {
            "cpu": "1500000000\n",
            "throttle": "nr_periods 3\nnr_throttled 2\nthrottled_time 5000000\n",
            "memory": None,
        },
    )
    assert got == {"cpu_s": 1.5, "throttled_periods": 2.0, "throttled_s": 0.005}


def test_proc_stat_steal():
    text = "cpu  100 5 50 1000 10 1 2 40 30 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
    assert parse_proc_stat(text) == {"steal_s": 0.4, "cpu_total_s": 12.08}
    assert parse_proc_stat("intr 1\n") == {}


def test_docker_and_lxd_counters():
    raw = {
        "cpu_stats": {
            "cpu_usage": {"total_usage": 2_000_000_000},
            "throttling_data": {"periods": 5, "throttled_periods": 2, "throttled_time": 30_000_000},
        },
        "memory_stats": {"usage": 1024},
    }
    assert docker_stats(raw) == {
        "cpu_s": 2.0,
        "throttled_periods": 2.0,
        "throttled_s": 0.03,
        "memory_bytes": 1024.0,
    }
    with pytest.raises(StatsUnavailable):
        docker_stats({"cpu_stats": {}, "memory_stats": {}})
    assert lxd_stats("Running", {"usage": 3_000_000_000}, {"usage": 2048}) == {
        "cpu_s": 3.0,
        "memory_bytes": 2048.0,
    }
    with pytest.raises(StatsUnavailable, match="Stopped"):
        lxd_stats("Stopped", {"usage": 0}, {})


def test_ssh_marked_output_splits_per_file():
    out = f"{MARK}cpu\nusage_usec 5\n{MARK}memory\n{MISSING}\n{MARK}proc_stat\ncpu 1 2\n"
    assert split_marked(out, ["cpu", "memory", "proc_stat"]) == {
        "cpu": "usage_usec 5\n",
        "memory": None,
        "proc_stat": "cpu 1 2\n",
    }


# -- per-instance telemetry rows -------------------------------------------------------------------
CPU = namedtuple("CPU", "user system idle iowait")


def test_instance_rows_and_campaign_cpu_from_the_instances_counters():
    # the host: 1.5 CPU-seconds busy in 2 s; the run's instance and its neighbour: 1.0 of them
    a = Reading(
        0.0,
        cpus=[CPU(1.0, 0.0, 9.0, 0.0), CPU(1.0, 0.0, 9.0, 0.0)],
        instances={"i1": {"cpu_s": 1.0, "throttled_periods": 2, "steal_s": 1.0, "cpu_total_s": 10.0}},
        members=frozenset({"i1", "n1"}),
        campaign_cpu_s=3.0,
    )
    b = Reading(
        2.0,
        cpus=[CPU(2.0, 0.0, 10.0, 0.0), CPU(1.5, 0.0, 10.5, 0.0)],
        instances={
            "i1": {
                "cpu_s": 2.0,
                "throttled_periods": 5,
                "steal_s": 1.5,
                "cpu_total_s": 14.0,
                "memory_bytes": 2.0**21,
            }
        },
        members=frozenset({"i1", "n1"}),
        campaign_cpu_s=4.0,
    )
    rows = delta_rows(a, b)
    inst = {m: v for m, v, *i in rows if i == ["i1"]}
    assert inst == {
        "instance_cpu_pct": 50.0,
        "instance_throttled_periods": 3,
        "instance_steal_pct": 12.5,
        "instance_memory_mb": 2.0,
    }
    host = {m: v for m, v, *i in rows if not i}
    assert host["campaign_cpu_pct"] == 50.0 and host["cpu_other_pct"] == pytest.approx(25.0)
    b.members = frozenset({"i1"})  # an instance appeared or went: the campaign's CPU is unknown
    assert not any(r[0] in ("campaign_cpu_pct", "cpu_other_pct") for r in delta_rows(a, b))
    remote = [r for r in delta_rows(Reading(0.0, instances=a.instances), Reading(2.0, instances=b.instances))]
    assert all(len(r) == 3 for r in remote)  # without the host's counters: the instance's rows only
    s = summarize(
        [
            (1.0, "instance_cpu_pct", 40.0, "i1"),
            (1.0, "instance_cpu_pct", 60.0, "i2"),
            (1.0, "instance_throttled_periods", 3.0, "i1"),
            (2.0, "instance_throttled_periods", 1.0, "i2"),
        ]
    )
    assert s["instance_cpu_mean_pct"] == 50.0 and s["instance_cpu_max_pct"] == 60.0
    assert s["instance_throttled_periods"] == 4.0


# -- the quiet-host guard ----------------------------------------------------------------------
T = {"other_cpu_pct": 10.0, "steal_pct": 5.0, "pinned_throttled": True}


def test_verdicts():
    assert verdict({}, "floating", T) is None
    assert (
        verdict(
            {"quiet_check": {"other_cpu_pct": 9.9}, "telemetry": {"cpu_other_mean_pct": 10.0}}, "pinned", T
        )
        is None
    )
    assert "other campaign" in verdict({"others_running": ["b"]}, "floating", T)
    assert "before the run" in verdict({"quiet_check": {"other_cpu_pct": 30}}, "floating", T)
    assert "during the run" in verdict(
        {"telemetry": {"cpu_other_mean_pct": 12, "cpu_other_max_pct": 40}}, "floating", T
    )
    assert "steal time in an instance" in verdict(
        {"telemetry": {"instance_steal_mean_pct": 6}}, "floating", T
    )
    assert "host's steal" in verdict({"telemetry": {"steal_mean_pct": 6}}, "floating", T)
    throttled = {"telemetry": {"instance_throttled_periods": 3}}
    assert "pinned instance was throttled" in verdict(throttled, "pinned", T)
    assert verdict(throttled, "floating", T) is None  # a floating instance is capped by design
    assert verdict(throttled, "pinned", {**T, "pinned_throttled": False}) is None
    both = verdict({"others_running": ["b", "c"], "quiet_check": {"other_cpu_pct": 50}}, "floating", T)
    assert "b, c" in both and "; " in both


def test_start_check_warns_or_refuses(tmp_path, caplog):
    other = registry.register("t-busy", tmp_path / "d", backend="docker")
    try:
        with caplog.at_level(logging.WARNING, logger="labkit.run.guard"):
            assert QuietHost("t-me").check_start() == ["t-busy"]
        assert "another campaign runs on this host: t-busy" in caplog.text
        with pytest.raises(StoreError, match="this campaign is exclusive.*t-busy"):
            QuietHost("t-me", exclusive=True).check_start()
    finally:
        other.release()
    strict = registry.register("t-strict", tmp_path / "d", backend="local", exclusive=True)
    try:
        with pytest.raises(StoreError, match="t-strict run exclusive"):
            QuietHost("t-me").check_start()
    finally:
        strict.release()
    assert QuietHost("t-me", exclusive=True).check_start() == []


def test_the_guard_reads_the_registry_once_for_all_the_runs_in_flight(tmp_path, monkeypatch):
    """A fleet's runs in flight share the guard's readings of the registry (one watcher, readings at a
    run's start and end shared when recent): 100 runs at once cost a few readings, not a thread and
    a reading a second each; a campaign that appears mid-run is in every overlapping run's record."""
    import threading
    import time
    from types import SimpleNamespace

    from labkit.backends.testing import SimulatedBackend
    from labkit.core.instance import InstanceSpec
    from labkit.run import guard

    reads = []
    entry = SimpleNamespace(describe=lambda: "pid 1")
    others = {"t-early": entry}

    def fake_others(cid):
        reads.append(time.monotonic())
        return dict(others)

    monkeypatch.setattr(guard, "other_campaigns", fake_others)
    q = QuietHost("t-me", poll_s=0.2)
    ctxs = [SimpleNamespace(metadata={}, spec=InstanceSpec(), backend=SimulatedBackend()) for _ in range(100)]
    started = threading.Barrier(101)

    def run(ctx):
        with q.around_run(ctx):
            started.wait()
            time.sleep(1.0)

    threads = [threading.Thread(target=run, args=(c,)) for c in ctxs]
    for t in threads:
        t.start()
    started.wait()
    others["t-late"] = entry  # appears while every run is in flight
    for t in threads:
        t.join()
    assert all(c.metadata["others_running"] == ["t-early", "t-late"] for c in ctxs)
    assert all("other campaign" in c.metadata["suspect"] for c in ctxs)
    assert len(reads) <= 20, len(reads)  # ~1.5 s at one reading per 0.05-0.2 s, whatever the number of runs
    time.sleep(0.5)  # no run in flight: the watcher is gone
    assert not any(t.name == "labkit-guard" and t.is_alive() for t in threading.enumerate())


def test_an_exclusive_campaign_refuses_before_making_a_store(tmp_path):
    other = registry.register("t-busy", tmp_path / "d", backend="local")
    try:
        with pytest.raises(StoreError, match="exclusive"):
            reuse_campaign(tmp_path, exclusive=True).run()
    finally:
        other.release()
    assert not (tmp_path / "t-levels" / "store.sqlite").exists()
    assert registry.find("t-levels") is None  # its registration was released


def test_cli_options_override_the_designs(tmp_path):
    from labkit.cli import parser
    from labkit.cli.run import _guard_options

    args = parser().parse_args(["run", "d.yaml", "--telemetry", "off", "--exclusive", "--no-quarantine"])
    assert _guard_options(args) == {"telemetry": "off", "exclusive": True, "quarantine": False}
    assert _guard_options(parser().parse_args(["run", "d.yaml", "--telemetry", "0.5"])) == {"telemetry": 0.5}
    assert _guard_options(parser().parse_args(["run", "d.yaml"])) == {}
    c = reuse_campaign(tmp_path, telemetry="off", exclusive=None)
    assert c.telemetry is None and c.exclusive is False and c.quarantine is False
    d = Design.from_dict(
        {
            "factors": {"vcpus": [1, 2]},
            "seed": 1,
            "telemetry": 0.5,
            "exclusive": True,
            "quarantine": True,
            "thresholds": {"steal_pct": 1},
        }
    )
    c = Campaign(d, backend=CountingBackend(), workload=Iterating(), campaign_id="t-opt", data_dir=tmp_path)
    assert (c.telemetry, c.exclusive, c.quarantine, c.thresholds["steal_pct"]) == (0.5, True, True, 1.0)
    c = Campaign(
        d,
        backend=CountingBackend(),
        workload=Iterating(),
        campaign_id="t-opt",
        data_dir=tmp_path,
        telemetry=2,
        exclusive=False,
        quarantine=False,
        thresholds={"steal_pct": 3},
    )
    assert (c.telemetry, c.exclusive, c.quarantine, c.thresholds["steal_pct"]) == (2.0, False, False, 3.0)
    with pytest.raises(ConfigError, match="exclusive"):
        Campaign(
            d,
            backend=CountingBackend(),
            workload=Iterating(),
            campaign_id="t-opt",
            data_dir=tmp_path,
            exclusive="no",
        )


def test_pre_run_load_says_when_it_is_not_measured():
    from types import SimpleNamespace

    from labkit.core.instance import InstanceSpec
    from labkit.run.guard import pre_run_load
    from labkit.run.hooks import RunContext

    run = design().plan()[0]
    remote = RunContext(run, InstanceSpec(), {}, SimpleNamespace(name="ssh"), "labkit-x--")
    assert pre_run_load(remote) == {
        "measured": False,
        "reason": "backend 'ssh' runs its instances on another machine",
    }
    here = RunContext(run, InstanceSpec(), {}, SimpleNamespace(name="local"), "labkit-x--")
    assert pre_run_load(here, 0)["measured"] is False
    got = pre_run_load(here, 0.25)  # this machine, nothing of the campaign running: all is "other"
    assert got["measured"] is True and got["seconds"] == 0.25 and got["other_cpu_pct"] >= 0


def test_a_lost_host_frees_the_rest_of_its_boot_for_another_host(tmp_path, fakes):
    """runs_per_instance 2 on hosts a and b; b's second boot fails to provision and b does not
    answer: that run is stored host-lost, the other run of its boot (claimed with it) is released and
    moved to a, which runs it; every run stored once."""
    design = {"factors": {"vcpus": [1, 2]}, "replications": 4, "seed": 3, "runs_per_instance": 2}
    tb = {
        "platforms": {"flaky": {"backend": "ssh"}},
        "hosts": [
            {"name": "a", "platforms": ["flaky"]},
            {"name": "b", "address": "127.0.0.1", "port": closed_port(), "platforms": ["flaky"]},
        ],
    }
    st = _run_with_b_failing(tmp_path, tb, design, "t-lost-boot")
    runs = st.runs()
    assert len(runs) == 8 and runs.run_id.is_unique
    on_b = runs[runs.host == "b"]
    assert sorted(on_b.status) == ["host-lost", "ok", "ok"]
    ok_b = on_b[on_b.status == "ok"]
    assert ok_b.metadata.map(lambda m: m["instances"][0]["name"]).nunique() == 1  # one boot, reused
    moved = runs[runs.metadata.map(lambda m: m.get("moved_from") == "b")]
    assert len(moved) >= 1 and set(moved.host) == {"a"} and set(moved.status) == {"ok"}
    assert st.claims() == []
