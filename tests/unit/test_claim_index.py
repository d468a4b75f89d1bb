"""The engine's claim path at scale, on simulated hosts (backends/testing.py, no sockets): the
store's claims read only their candidates, the claim index hides only stored runs, hundreds of
workers store each run once, and a resume on other hosts (a Slurm testbed's new allocation)
moves the runs of the hosts it no longer has."""

from __future__ import annotations

from labkit.backends.testing import SimulatedBackend
from labkit.design import Design
from labkit.run.campaign import Campaign
from labkit.run.claim_index import ClaimIndex
from labkit.run.engine import Dispatcher
from labkit.run.platforms import BackendPool, Platform
from labkit.run.testbed import Host, Testbed
from labkit.store import CLAIM_CHUNK, Store, now_iso


def plan(n: int, name: str = "c"):
    return Design.from_dict(
        {"name": name, "factors": {"vcpus": [1, 2]}, "replications": n // 2, "seed": 3}
    ).plan()


def test_a_claim_reads_its_candidates_a_chunk_at_a_time_and_respects_live_leases(tmp_path):
    runs = plan(2 * CLAIM_CHUNK + 100)
    ids = [r.run_id for r in runs]
    with Store(tmp_path / "s.sqlite") as st:
        for r in runs[: CLAIM_CHUNK + 50]:  # stored: the first free one is past the first chunk
            st.record_run(r, status="ok", started=now_iso(), duration_s=1.0)
        assert st.claim(ids, "h1", "me", 30) == ids[CLAIM_CHUNK + 50]
        assert st.claim(ids, "h2", "other", 30) == ids[CLAIM_CHUNK + 51]  # a live lease is another's
        assert st.claim_owner(ids[CLAIM_CHUNK + 51]) == "other" and st.claim_owner(ids[0]) is None
        assert st.claim(iter(()), "h1", "me", 30) is None
        st.claim(ids[-1:], "h3", "dead", -1)  # a lease that has run out...
        assert (
            st.claim(ids[-1:], "h1", "me", 30) == ids[-1] and st.claim_owner(ids[-1]) == "me"
        )  # ...is taken over
        assert st.claim(ids[: CLAIM_CHUNK + 50], "h1", "me", 30) is None


def test_the_claim_index_hides_only_stored_runs():
    idx = ClaimIndex()
    idx.reset({"r1"})
    builds = []

    def build():
        builds.append(1)
        return {"a": ["r1", "r2", "r3"], "b": ["r4"]}

    assert list(idx.claimable("a", build)) == ["r2", "r3"] and list(idx.claimable("b", build)) == ["r4"]
    idx.stored("r2")
    idx.stored("r3")
    assert list(idx.claimable("a", build)) == [] and len(builds) == 1  # built once for every host
    idx.forget(["r1", "r3"])  # deleted from the store (a block re-run whole): claimable again
    assert list(idx.claimable("a", build)) == ["r1", "r3"]
    idx.invalidate()
    assert list(idx.claimable("c", build)) == [] and len(builds) == 2


def fleet(tmp_path, hosts: list[str], design: Design, store: Store, assign: str = "blocks") -> Dispatcher:
    tb = Testbed(
        [Host(h, f"sim-{h}", platforms=("sim",)) for h in hosts],
        {"sim": Platform("sim", "simulated", {})},
        assign=assign,
        name="sim",
    )
    tb.prober = lambda host, timeout, thorough: (True, "")
    camp = Campaign(
        design,
        backend="sim",
        workload="command",
        workload_params={"argv": ["sleep", "0.01"]},
        campaign_id="t-claims",
        data_dir=tmp_path,
        testbed=tb,
        progress=False,
        telemetry=None,
    )
    return camp.dispatcher(
        tb, store, default_platform="sim", pool=BackendPool(opener=lambda p, o: SimulatedBackend())
    )


def dispatch(tmp_path, hosts: int, design: Design, store: Store, assign: str) -> list:
    """Run ``design``'s plan on ``hosts`` simulated hosts into ``store``; returns the plan."""
    store.set_meta(campaign_id="t-claims")
    f = fleet(tmp_path, [f"h{i:03d}" for i in range(hosts)], design, store, assign=assign)
    runs = design.plan()
    f.prepare(runs)
    f.run(runs, progress=False)
    f.close()
    return runs


def test_two_hundred_simulated_hosts_store_each_run_once(tmp_path):
    d = Design.from_dict({"name": "many", "factors": {"vcpus": [1, 2]}, "replications": 300, "seed": 1})
    with Store(tmp_path / "s.sqlite") as st:
        dispatch(tmp_path, 200, d, st, "random")
        stored = st.runs()
        assert len(stored) == 600 and stored.run_id.is_unique and set(stored.status) == {"ok"}
        assert st.claims() == [] and len(set(stored.metadata.map(lambda m: m["host"]))) > 100


def test_a_resume_on_other_hosts_moves_the_runs_of_the_hosts_it_lost(tmp_path):
    d = Design.from_dict({"name": "moves", "factors": {"vcpus": [1, 2]}, "replications": 6, "seed": 2})
    runs = d.plan()
    with Store(tmp_path / "s.sqlite") as st:
        st.set_meta(campaign_id="t-claims")
        first = fleet(tmp_path, ["a", "b", "c"], d, st)
        first.prepare(runs)
        first.run(runs, progress=False, max_runs=3)
        first.close()
        assigned = st.meta()["fleet_assignment"]
        assert set(assigned.values()) == {"a", "b", "c"} and len(st.runs()) == 3
        # the next start gets hosts a and d (another allocation): b's and c's pending runs move
        second = fleet(tmp_path, ["a", "d"], d, st)
        second.prepare(runs)
        moves = st.meta()["fleet_moves"]
        assert {m["from"] for m in moves} == {"b", "c"} and {m["to"] for m in moves} <= {"a", "d"}
        second.run(runs, progress=False)
        second.close()
        stored = st.runs()
        assert len(stored) == 12 and stored.run_id.is_unique and set(stored.status) == {"ok"}
        late = stored[stored.run_id.isin({m["run_id"] for m in moves})]
        assert set(late.metadata.map(lambda m: m["host"])) <= {"a", "d"}
        assert all(late.metadata.map(lambda m: m["moved_from"] in ("b", "c")))


def test_a_claim_takes_a_boots_free_runs_and_reads_the_groups_lazily(tmp_path):
    runs = plan(3 * CLAIM_CHUNK)
    ids = [r.run_id for r in runs]
    boots = [ids[i : i + 4] for i in range(0, len(ids), 4)]
    given = []

    def groups():
        for g in boots:
            given.append(g)
            yield g

    with Store(tmp_path / "s.sqlite") as st:
        for r in runs[: CLAIM_CHUNK + 2]:  # stored: the first boot with a free run is past the first chunk
            st.record_run(r, status="ok", started=now_iso(), duration_s=1.0)
        got = st.claim_group(groups(), "h1", "me", 30)
        assert got == ids[CLAIM_CHUNK + 2 : CLAIM_CHUNK + 4]  # the boot's two runs not stored, together
        assert len(given) == 2 * CLAIM_CHUNK // 4 < len(boots)  # read a chunk at a time: the third never
        assert st.claim_group(boots, "h2", "other", 30, limit=3) == ids[CLAIM_CHUNK + 4 : CLAIM_CHUNK + 7]
        assert {st.claim_owner(r) for r in got} == {"me"}
        assert st.claim_group(iter(()), "h1", "me", 30) == []
        assert st.claim(ids[: CLAIM_CHUNK + 4], "h3", "x", 30) is None  # one-run groups: the same path


def test_boots_on_two_hundred_simulated_hosts_stay_together_and_are_stored_once(tmp_path):
    """runs_per_instance 3 through the claim index: each boot's runs claimed together by one host,
    run there back to back on the same instances, each run stored once."""
    for assign in ("random", "blocks"):
        d = Design.from_dict(
            {
                "name": "boots",
                "factors": {"vcpus": [1, 2]},
                "replications": 150,
                "seed": 4,
                "runs_per_instance": 3,
            }
        )
        with Store(tmp_path / assign / "s.sqlite") as st:
            runs = dispatch(tmp_path, 200, d, st, assign)
            stored = st.runs()
        assert len(stored) == 300 and stored.run_id.is_unique and set(stored.status) == {"ok"}
        meta = stored.set_index("run_id").metadata
        by_boot: dict[str, list] = {}
        for r in runs:
            by_boot.setdefault(r.boot_group, []).append(meta[r.run_id])
        assert len(by_boot) == 100 and {len(v) for v in by_boot.values()} == {3}
        for mds in by_boot.values():
            assert len({m["host"] for m in mds}) == 1  # one host per boot
            assert len({m["instances"][0]["name"] for m in mds}) == 1  # one set of instances
            seqs = sorted(m["run_seq"] for m in mds)
            assert seqs == list(range(seqs[0], seqs[0] + 3))  # back to back
