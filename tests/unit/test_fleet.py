"""Fleet execution with a fake backend: claims, blocks per host, host loss, resume (no daemons)."""

import socket
import threading
import time

import pytest

import labkit.backends
from labkit.backends.base import Backend
from labkit.errors import BackendError, ConfigError
from labkit.run.campaign import Campaign
from labkit.store import Store
from labkit.workloads import Measurement, Workload
from tests.unit.test_reliability_campaign import FakeInstance as Inst


class Fake(Backend):
    """Options: host (where it runs), fail_after (runs before every later run fails)."""

    name = "fake"
    OPTIONS = ("host", "port", "user", "key_filename", "fail_after", "base_url")

    def __init__(self, **options):
        super().__init__(**options)
        self.log, self.runs, self.destroyed = [], 0, []

    def check(self):
        pass

    def fingerprint(self):
        return {"backend": self.name, "kernel": "6.1", "cpu_model": "fake-cpu", "cpus": 2}

    def host_cpus(self):
        return 2

    def _create(self, spec, name, index, cpus):
        self.runs += 1
        fail_after = self.options.get("fail_after")
        if fail_after is not None and self.runs > fail_after:
            raise BackendError("SSH connection failed (fake)")
        return Inst(self, name, spec, index, cpus)

    def cleanup(self, prefix):
        self.log.append(("cleanup", prefix))
        return []

    def list_labkit(self, prefix="labkit-"):
        return []


class Nap(Workload):
    """Records which thread ran it; takes a short while so hosts overlap."""

    name = "nap"
    defaults = {"size": 1}
    threads: set = set()

    def run(self, instance, params):
        Nap.threads.add(threading.current_thread().name)
        time.sleep(0.02)
        return [Measurement("wall_time_s", 0.02, "s", instance.index)]


@pytest.fixture
def fakes(monkeypatch):
    made = {}

    def get_backend(name="local", **options):
        be = Fake(**{k: v for k, v in options.items() if k in Fake.OPTIONS})
        be.name = name
        made.setdefault((name, options.get("host") or options.get("base_url")), []).append(be)
        return be

    monkeypatch.setattr(labkit.backends, "get_backend", get_backend)
    return made


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


DESIGN = {"factors": {"platform": ["local", "docker"], "vcpus": [1, 2]}, "replications": 4, "seed": 7}


def run(tmp_path, testbed=None, design=DESIGN, cid="t-fleet", max_runs=None, **kw):
    return Campaign(
        design, workload=Nap(), testbed=testbed, campaign_id=cid, data_dir=tmp_path, progress=False, **kw
    ).run(max_runs=max_runs)


def test_platform_factor_without_testbed_runs_interleaved_on_this_machine(tmp_path, fakes):
    st = run(tmp_path)
    runs = st.runs()
    assert len(runs) == 16 and set(runs.status) == {"ok"}
    # one randomized plan across both platforms: the platform changes along the run order
    seq = list(runs.sort_values("run_order").platform)
    assert sum(a != b for a, b in zip(seq, seq[1:])) >= 3
    md = runs.metadata
    assert set(md.map(lambda m: m["backend"])) == {"local", "docker"}
    assert set(md.map(lambda m: m["host"])) == {"local"}
    assert set(st.tidy().host) == {"local"}
    # each platform's backend opened once, cleaned up at start
    assert len(fakes[("local", None)]) == 1 and len(fakes[("docker", None)]) == 1
    assert fakes[("docker", None)][0].log[0] == ("cleanup", "labkit-t-fleet--")
    assert st.meta()["testbed"]["hosts"][0]["name"] == "local"


TESTBED = {
    "platforms": {
        "kvm": {"backend": "libvirt", "uri": "qemu+ssh://{user}@{address}/system", "password": "hunter2"}
    },
    "hosts": [{"name": f"h{i}", "platforms": ["local", "docker"]} for i in range(3)],
}


def test_blocks_run_on_one_host_each_in_parallel(tmp_path, fakes):
    Nap.threads = set()
    st = run(tmp_path, TESTBED)
    runs = st.runs()
    assert len(runs) == 16 and set(runs.status) == {"ok"}
    hosts = runs.metadata.map(lambda m: m["host"])
    by_block = {rep: set(hosts[runs.replicate == rep]) for rep in range(1, 5)}
    assert all(len(v) == 1 for v in by_block.values())  # a block never spans hosts
    assert by_block[1] == {"h0"} and by_block[4] == {"h0"} and by_block[2] == {"h1"}
    assert len(Nap.threads) == 3  # one worker thread per host
    assert st.meta()["fleet_assignment"]["c0000r002"] == "h1"
    # secrets of declared platforms are redacted in the stored testbed
    assert st.meta()["testbed"]["platforms"]["kvm"]["options"]["password"] == "<redacted>"


def test_random_assignment_spreads_runs(tmp_path, fakes):
    st = run(tmp_path, {**TESTBED, "assign": "random"})
    hosts = st.runs().metadata.map(lambda m: m["host"])
    assert len(st.runs()) == 16 and hosts.nunique() >= 2


def test_platform_no_host_offers_fails_before_the_first_run(tmp_path, fakes):
    tb = {"hosts": [{"name": "a", "platforms": ["local"]}, {"name": "b", "platforms": ["docker"]}]}
    with pytest.raises(ConfigError, match="no host .* offers every platform"):
        run(tmp_path, tb)
    tb = {"hosts": [{"name": "a", "platforms": ["local"]}], "assign": "random"}
    with pytest.raises(ConfigError, match="offers platform 'docker'"):
        run(tmp_path, tb)


def test_resume_with_another_testbed_is_refused(tmp_path, fakes):
    run(tmp_path, TESTBED, cid="t-re")
    other = {**TESTBED, "hosts": TESTBED["hosts"][:2]}
    with pytest.raises(Exception, match="testbed"):
        run(tmp_path, other, cid="t-re")


def test_blocks_of_a_lost_host_move_and_fail_block_reruns_them(tmp_path, fakes):
    design = {"factors": {"vcpus": [1, 2]}, "replications": 4, "seed": 3}
    for mode in ("move", "fail-block"):
        tb = {
            "platforms": {"flaky": {"backend": "ssh", "fail_after": 1}},
            "hosts": [
                {"name": "a", "platforms": ["local"]},
                {"name": "b", "address": "127.0.0.1", "port": closed_port(), "platforms": ["local"]},
            ],
            "on_host_loss": mode,
        }
        # b is remote but offers "local"? not allowed: give it the flaky ssh platform instead
        with pytest.raises(ConfigError, match="local backend"):
            run(tmp_path, tb, design, cid=f"t-{mode}", backend="local")
        tb["hosts"] = [
            {"name": "a", "platforms": ["flaky"]},
            {"name": "b", "address": "127.0.0.1", "port": closed_port(), "platforms": ["flaky"]},
        ]
        tb["platforms"]["flaky"] = {"backend": "ssh"}
        fakes.clear()
        st = _run_with_b_failing(tmp_path, tb, design, f"t-{mode}")
        assert st.meta()["backend"] == "flaky"
        runs = st.runs()
        hosts = runs.metadata.map(lambda m: m["host"])
        meta = st.meta()
        assert "b" in meta["fleet_hosts"]["lost"]
        assert len(runs) == 8 and len(set(runs.run_id)) == 8
        if mode == "move":
            # b stored 1 ok run and 1 host-lost run; its other runs moved to a (recorded)
            assert sorted(runs[hosts == "b"].status) == ["host-lost", "ok"]
            moved = runs[runs.metadata.map(lambda m: m.get("moved_from") == "b")]
            assert len(moved) == 2 and set(hosts[moved.index]) == {"a"}
            assert {m["to"] for m in meta["fleet_moves"]} == {"a"}
        else:
            # b's blocks re-ran whole on a; what b did is kept in the meta only
            assert set(hosts) == {"a"} and set(runs.status) == {"ok"}
            assert {s["status"] for s in meta["fleet_superseded"]} == {"ok", "host-lost"}


def _run_with_b_failing(tmp_path, tb, design, cid):
    real = labkit.backends.get_backend

    def get_backend(name="local", **options):
        if options.get("port") == tb["hosts"][1]["port"]:
            options["fail_after"] = 1
        return real(name, **options)

    mp = pytest.MonkeyPatch()
    mp.setattr(labkit.backends, "get_backend", get_backend)
    try:
        return run(tmp_path, tb, design, cid=cid, backend="flaky")
    finally:
        mp.undo()


def test_stale_claims_of_a_killed_controller_run_again_once(tmp_path, fakes):
    st = run(tmp_path, TESTBED, cid="t-claim", max_runs=5)
    assert len(st.runs()) == 5
    st.close()
    # a controller killed mid-run leaves a claim; the next start releases it and runs it once
    with Store.for_campaign(tmp_path, "t-claim") as w:
        assert w.claim(["c0003r004"], "h0", "dead:1:x", 30) == "c0003r004"
        assert w.claim(["c0003r004"], "h1", "other", 30) is None  # a live lease is exclusive
    st = run(tmp_path, TESTBED, cid="t-claim")
    runs = st.runs()
    assert len(runs) == 16 and runs.run_id.is_unique and st.claims() == []


class Slow(Nap):
    name = "slow"
    started = None  # a threading.Event set when the first run starts measuring

    def run(self, instance, params):
        if Slow.started is not None:
            Slow.started.set()
        time.sleep(0.3)
        return [Measurement("wall_time_s", 0.3, "s", instance.index)]


def test_interrupt_stops_workers_releases_claims_and_resume_completes(tmp_path, fakes):
    import signal

    main = threading.get_ident()
    Slow.started = threading.Event()

    def interrupt_once_running():  # once a run is stored, whatever the machine's load
        import sqlite3

        if not Slow.started.wait(120):
            return
        db, deadline = tmp_path / "t-int" / "store.sqlite", time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
                    if con.execute("SELECT count(*) FROM runs").fetchone()[0] >= 1:
                        break
            except sqlite3.Error:
                pass
            time.sleep(0.05)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt_once_running, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        Campaign(
            DESIGN, workload=Slow(), testbed=TESTBED, campaign_id="t-int", data_dir=tmp_path, progress=False
        ).run()
    with Store.for_campaign(tmp_path, "t-int", readonly=True) as st:
        assert st.claims() == [] and 0 < len(st.runs()) < 16
    destroyed = [n for bes in fakes.values() for be in bes for n in be.destroyed]
    assert len(destroyed) == len(set(destroyed))
    Slow.started = None
    st = Campaign(
        DESIGN, workload=Slow(), testbed=TESTBED, campaign_id="t-int", data_dir=tmp_path, progress=False
    ).run()
    assert len(st.runs()) == 16 and st.runs().run_id.is_unique


def test_clean_and_status_of_a_testbed_campaign(tmp_path, fakes, capsys):
    from labkit.cli import main

    run(tmp_path, TESTBED, cid="t-cli")
    fakes.clear()
    assert main(["clean", "t-cli", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "h0/local: removed 0" in out and "h2/docker: removed 0" in out
    cleaned = [e for bes in fakes.values() for be in bes for e in be.log if e[0] == "cleanup"]
    assert len(cleaned) == 6 and {p for _, p in cleaned} == {"labkit-t-cli--"}
    assert main(["status", "t-cli", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "16 of 16 runs stored" in out
    assert [ln.split()[:3] for ln in out.splitlines() if ln.split()[:1] in (["h0"], ["h1"], ["h2"])] == [
        ["h0", "8", "8"],
        ["h1", "4", "4"],
        ["h2", "4", "4"],
    ]


def test_clean_testbed_drops_redacted_host_keys_or_uses_the_given_testbed(monkeypatch, tmp_path):
    """A store keeps a host's ``key`` redacted: cleaning must not try the path '<redacted>' (it
    falls back to the agent/default keys), and ``--testbed`` supplies the real key."""
    import labkit.run.clean as fleet
    from labkit.core.redact import REDACTED
    from labkit.run.platforms import BackendPool

    seen = []

    class Cleaner:
        def cleanup(self, prefix):
            return [f"{prefix}0"]

        def close(self):
            pass

    monkeypatch.setattr(
        fleet, "BackendPool", lambda: BackendPool(opener=lambda p, opts: seen.append(opts) or Cleaner())
    )
    host = {"name": "h1", "address": "10.231.0.11", "port": 22, "user": "root", "platforms": ["ssh"]}
    meta = {"backend": "ssh", "testbed": {"hosts": [{**host, "key": REDACTED}], "platforms": {}}}
    assert fleet.clean_testbed(meta, "labkit-c1--") == {"h1/ssh": ["labkit-c1--0"]}
    assert "key_filename" not in seen[-1] and REDACTED not in seen[-1].values()
    key = tmp_path / "id"
    key.write_text("k")
    fleet.clean_testbed(meta, "labkit-c1--", {"hosts": [{**host, "key": str(key)}]})
    assert seen[-1]["key_filename"] == str(key) and seen[-1]["host"] == "10.231.0.11"
