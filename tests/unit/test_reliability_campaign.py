"""Regression tests of issue 13 (campaign side): one process per campaign (3), a second Ctrl-C
during teardown (4), ``labkit clean`` (4), OOM said (11), drawn seed kept (8), resume compares
every setting (12), campaign ids and prefixes (2, interface with the backends).

A small in-memory backend stands in for a real one where the test is about the campaign's logic;
the tests that need real cgroups are marked ``root``.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import labkit.backends
from labkit import cli
from labkit.backends.base import Backend, Instance, RawResult, StatsUnavailable
from labkit.core.ids import campaign_prefix, check_campaign_id
from labkit.core.instance import InstanceSpec
from labkit.core.lock import LOCK_NAME, CampaignLock
from labkit.design import Design
from labkit.errors import CommandError, ConfigError, StoreError
from labkit.run.campaign import Campaign, Interrupted, _Signals
from labkit.store import Store
from labkit.workloads import Measurement, Workload

ROOT = Path(__file__).resolve().parents[2]


class FakeInstance(Instance):
    def _start(self, argv, env):
        return argv

    def _wait(self, handle, timeout):
        return RawResult(0, "", "")

    def _kill(self, handle):
        pass

    def _oom_kills(self):
        return 0

    def stats(self):
        raise StatsUnavailable("a fake instance has no counters")

    def put(self, local_path, remote_path, mode=0o755):
        pass

    def _destroy(self):
        self.backend.destroyed.append(self.name)


class FakeBackend(Backend):
    name = "fake"
    OPTIONS = ("host", "password", "zone")

    def check(self):
        pass

    def fingerprint(self):
        return {"backend": self.name}

    def __init__(self, **options):
        super().__init__(**options)
        self.cleaned, self.destroyed, self.cpus = [], [], 2
        self.listed = list(LISTED)  # names list_labkit shows (as left by killed campaigns)

    def host_cpus(self):
        return self.cpus

    def _create(self, spec, name, index, cpus):
        return FakeInstance(self, name, spec, index, cpus)

    def cleanup(self, prefix):
        self.cleaned.append(prefix)
        gone = [n for n in self.listed if n.startswith(prefix)]
        self.listed = [n for n in self.listed if n not in gone]
        return gone

    def list_labkit(self, prefix="labkit-"):
        return [n for n in self.listed if n.startswith(prefix)]


LISTED: list[str] = []


class Quick(Workload):
    name = "quick"
    defaults = {"size": 1}

    def run(self, instance, params):
        return [Measurement("wall_time_s", 0.001, "s", instance.index)]


DESIGN = {"factors": {"vcpus": [1, 2]}, "replications": 2, "seed": 5}


def campaign(tmp_path, design=DESIGN, **kw):
    kw.setdefault("backend", FakeBackend())
    kw.setdefault("workload", Quick())
    kw.setdefault("campaign_id", "t-rel")
    return Campaign(design, data_dir=tmp_path, progress=False, **kw)


# -- 2: campaign ids and the instance-name prefix --------------------------------------------
@pytest.mark.parametrize("bad", ["x--y", "x-", "-x", "X", "a" * 42, "x y", "x/../y", ""])
def test_campaign_id_rule(bad, tmp_path):
    with pytest.raises(ConfigError, match="campaign_id"):
        check_campaign_id(bad)


def test_prefix_delimits_the_campaign(tmp_path):
    assert check_campaign_id("x-2_b") == "x-2_b"
    assert campaign_prefix("x") == "labkit-x--"
    assert not campaign_prefix("x-2").startswith(campaign_prefix("x"))  # x never matches x-2's names
    be = FakeBackend()
    campaign(tmp_path, backend=be, campaign_id="x").run()
    assert be.cleaned == ["labkit-x--"]


# -- 3: one process per campaign ----------------------------------------------------------------
HOLDER = textwrap.dedent("""
    import sys, time
    from labkit.core.lock import CampaignLock
    CampaignLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(60)
""")


def _hold(path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_process_on_a_campaign_fails_at_once_naming_the_holder(tmp_path):
    lock = tmp_path / "t-rel" / LOCK_NAME
    proc = _hold(lock)
    try:
        be = FakeBackend()
        with pytest.raises(
            StoreError,
            match=rf"already running: pid {proc.pid} on host "
            rf"{socket.gethostname()}, started 20",
        ):
            campaign(tmp_path, backend=be).run()
        assert be.cleaned == []  # it never touched the holder's instances
    finally:
        proc.kill()
        proc.wait()
    # the lock died with its holder (SIGKILL): the campaign now runs, taking the stale file over
    st = campaign(tmp_path).run()
    assert len(st.runs()) == 4
    assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert oct(lock.stat().st_mode & 0o777) == "0o600"


def test_stale_lock_file_is_taken_over(tmp_path):
    path = tmp_path / "c" / LOCK_NAME
    path.parent.mkdir()
    path.write_text(json.dumps({"pid": 999999, "host": "gone", "started": "2020-01-01"}))
    with CampaignLock(path):
        assert json.loads(path.read_text())["pid"] == os.getpid()
        with pytest.raises(StoreError, match=f"pid {os.getpid()}"):
            CampaignLock(path).acquire()  # a second holder, even in the same process
    CampaignLock(path).acquire().release()  # released on exit


def test_lock_refuses_a_symlink(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / LOCK_NAME).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StoreError, match="cannot create the campaign lock"):
        CampaignLock(tmp_path / "c" / LOCK_NAME).acquire()


# -- 4: a second Ctrl-C during teardown waits until teardown is done ---------------------------
def test_sigint_during_teardown_is_deferred():
    sig = _Signals()
    reached = []
    with sig.installed():
        with pytest.raises(Interrupted):
            with sig.deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.01)
                reached.append("teardown finished")
    assert reached == ["teardown finished"]
    with sig.installed(), pytest.raises(Interrupted):  # outside teardown: interrupts at once
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)


def test_interrupt_during_teardown_still_tears_down_every_instance(tmp_path):
    """Ctrl-C while the first instance is torn down: every instance made is torn down, once. (The
    signal reaches the engine's waiting thread a moment later: a run that ends in that moment is
    stored whole, one that has not ended is torn down and not stored.)"""
    be = FakeBackend()
    created, destroyed = [], []

    class Slow(FakeInstance):
        def _destroy(self):
            if not destroyed:
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the first one is torn down
                time.sleep(0.01)
            destroyed.append(self.name)

    def create(spec, name, index, cpus):
        created.append(name)
        return Slow(be, name, spec, index, cpus)

    be._create = create
    d = {"factors": {"count": [2, 3]}, "seed": 1}
    with pytest.raises(KeyboardInterrupt):
        campaign(tmp_path, d, backend=be).run()
    assert len(created) >= 2 and sorted(destroyed) == sorted(created)
    with Store.for_campaign(tmp_path, "t-rel", readonly=True) as st:
        assert (
            set(st.runs().get("status", [])) <= {"ok"} and not st.claims()
        )  # nothing partial, nothing left claimed


# -- 4: labkit clean ----------------------------------------------------------------------------
@pytest.fixture
def fake_backends(monkeypatch):
    made = []

    def get_backend(name="local", **options):
        if name not in labkit.backends.REGISTRY and name != "fake":
            raise ConfigError(f"unknown backend {name!r}")
        if name == "docker":
            raise labkit.backends.BackendUnavailable("docker: daemon down")
        be = FakeBackend(**options)
        be.name = name
        made.append(be)
        return be

    monkeypatch.setattr(labkit.backends, "get_backend", get_backend)
    return made


def test_clean_one_campaign_uses_its_backend_and_prefix(tmp_path, fake_backends, capsys):
    c = campaign(
        tmp_path, backend=FakeBackend(), campaign_id="x", backend_options={"host": "h", "password": "s3cret"}
    )
    with Store.for_campaign(tmp_path, "x") as st:
        c._check_or_write_meta(st)
    assert cli.main(["clean", "x", "--data-dir", str(tmp_path), "--backend-option", "password=again"]) == 0
    (be,) = fake_backends
    assert be.name == "fake" and be.cleaned == ["labkit-x--"]
    assert be.options == {"host": "h", "password": "again"}  # the store kept no password
    assert cli.main(["clean", "nope", "--data-dir", str(tmp_path)]) == 2
    assert not (tmp_path / "nope").exists()


def test_clean_everything_skips_unavailable_backends_and_spares_running_campaigns(
    tmp_path, fake_backends, capsys, monkeypatch
):
    """Issue 28: `labkit clean` without an id removed every labkit-* object, also those of campaigns
    running from other data dirs and test fixtures; now it lists first, keeps running campaigns'
    objects (registered anywhere, or locked under the data dir) and names no campaign made."""
    import labkit.run.slurm_testbed
    from labkit.core.registry import register
    from labkit.errors import BackendUnavailable

    def no_slurm():
        raise BackendUnavailable("squeue is not installed here")

    monkeypatch.setattr(
        labkit.run.slurm_testbed, "QueuedJobs", no_slurm
    )  # the queue's jobs: tests/integration/test_slurm.py
    monkeypatch.setenv("LABKIT_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(
        sys.modules[__name__],
        "LISTED",
        [
            "labkit-busy--0a",
            "labkit-elsewhere--0b",
            "labkit-gone--0c",
            "labkit-gone--noise0d",
            "labkit-test-0e",
        ],
    )
    with CampaignLock(tmp_path / "busy" / LOCK_NAME), register("elsewhere", tmp_path / "other-checkout"):
        assert cli.main(["clean", "--data-dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "docker: skipped (docker: daemon down)" in out
        assert "slurm: skipped (squeue is not installed here)" in out
        assert {b.name for b in fake_backends} == set(labkit.backends.REGISTRY) - {"docker", "slurm"}
        # gone: no registry knows it and no one says how old its objects are: kept (the grace period)
        assert (
            "local: labkit-gone--0c: kept: campaign gone is not registered on this host and no one tells"
            in out
        )
        assert "local: labkit-test-0e: kept" in out and "nothing to remove" in out
        assert f"campaign elsewhere is running (data dir {tmp_path / 'other-checkout'}" in out
        fake_backends.clear()
        assert (
            cli.main(["clean", "--data-dir", str(tmp_path), "--grace", "0"]) == 1
        )  # no --yes, no terminal: list only
        out = capsys.readouterr().out
        assert all(b.cleaned == [] for b in fake_backends) and "nothing removed: pass --yes" in out
        assert "local: labkit-gone--0c: remove" in out
        fake_backends.clear()
        assert cli.main(["clean", "--data-dir", str(tmp_path), "--yes", "--grace", "0"]) == 0
        assert all(b.cleaned == ["labkit-gone--"] for b in fake_backends)
        assert all(
            b.listed == ["labkit-busy--0a", "labkit-elsewhere--0b", "labkit-test-0e"] for b in fake_backends
        )
        assert cli.main(["clean", "busy", "--data-dir", str(tmp_path)]) == 2  # no store there: an error
        assert "no result store" in capsys.readouterr().err
    fake_backends.clear()
    assert cli.main(["clean", "--data-dir", str(tmp_path), "--yes", "--include-unknown", "--grace", "0"]) == 0
    assert all(b.listed == [] for b in fake_backends)  # nothing runs any more: everything goes


# -- 11: an OOM kill is stored as such -----------------------------------------------------------
class OomWorkload(Quick):
    def run(self, instance, params):
        result = SimpleNamespace(exit_code=137, oom_killed=True, stdout="", stderr="Killed")
        raise CommandError("command exited 137", result)


def test_oom_kill_is_stored_saying_oom(tmp_path):
    runs = campaign(tmp_path, workload=OomWorkload()).run().runs()
    assert set(runs.status) == {"failed"}
    assert all(e.startswith("OOM: ") and "memory limit 512 MB" in e for e in runs.error)
    assert all(m["oom_killed"] is True for m in runs.metadata)


def test_host_cpus_failure_is_a_failed_run_not_an_aborted_campaign(tmp_path):
    be = FakeBackend()
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise labkit.backends.base.BackendError("daemon hiccup")
        return 2

    be.host_cpus = flaky
    runs = campaign(tmp_path, backend=be).run().runs()
    assert len(runs) == 4 and sorted(runs.status) == ["failed", "ok", "ok", "ok"]
    assert "daemon hiccup" in runs.loc[runs.status == "failed", "error"].iloc[0]


def test_run_timeout_covers_prepare(tmp_path):
    class SlowPrepare(Quick):
        def prepare(self, instance):
            time.sleep(3)

    runs = (
        campaign(
            tmp_path,
            workload=SlowPrepare(),
            run_timeout=0.2,
            design={"factors": {"vcpus": [1, 2]}, "seed": 1},
        )
        .run()
        .runs()
    )
    assert set(runs.status) == {"timeout"}
    assert all("preparing the workload" in e for e in runs.error)


# -- 8: a design without seed: drawn once, stored, said, reused on resume -----------------------
def test_drawn_seed_is_stored_said_and_reused(tmp_path, caplog):
    no_seed = {"factors": {"vcpus": [1, 2], "affinity": ["floating", "pinned"]}, "replications": 3}
    d1 = Design.from_dict(no_seed)
    assert d1.seed_drawn
    with caplog.at_level("WARNING", logger="labkit.run.campaign"):
        st = campaign(tmp_path, d1, campaign_id="noseed").run(max_runs=4)
    assert f"drew seed {d1.seed}" in caplog.text
    assert st.meta()["design"]["seed"] == d1.seed and st.meta()["seed_drawn"] is True
    first = st.runs().run_id.tolist()
    d2 = Design.from_dict(no_seed)  # another seed is drawn...
    st2 = campaign(tmp_path, d2, campaign_id="noseed").run()  # ...but the stored one is used
    assert d2.seed == d1.seed
    runs = st2.runs()
    assert len(runs) == 12 and runs.run_id.tolist()[:4] == first
    assert sorted(runs.run_id) == sorted(r.run_id for r in d1.plan())


# -- 12: resume compares every setting and shows the differences -------------------------------
@pytest.mark.parametrize(
    "change, shown",
    [
        ({"defaults": InstanceSpec(vcpus=2)}, "defaults.vcpus: stored 1, now 2"),
        ({"backend_options": {"zone": "b"}}, "backend_options.zone: stored 'a', now 'b'"),
        ({"workload": Quick(size=2)}, "workload.params.size: stored 1, now 2"),
    ],
)
def test_resume_with_other_settings_is_refused_with_the_difference(tmp_path, change, shown):
    campaign(tmp_path, backend_options={"zone": "a"}).run(max_runs=1)
    kw = {"backend_options": {"zone": "a"}, **change}
    with pytest.raises(StoreError, match="other settings") as err:
        campaign(tmp_path, **kw).run()
    assert shown in str(err.value)
    assert len(Store.for_campaign(tmp_path, "t-rel", readonly=True).runs()) == 1


def test_resume_on_another_host_is_refused(tmp_path, monkeypatch):
    campaign(tmp_path).run(max_runs=1)
    import labkit.run.campaign as lc

    real = lc.host_fingerprint
    monkeypatch.setattr(lc, "host_fingerprint", lambda: {**real(), "kernel": "9.9.9-other"})
    with pytest.raises(StoreError, match="host.kernel: stored"):
        campaign(tmp_path).run()


def test_resume_survives_what_varies_between_starts(tmp_path, monkeypatch):
    """CPU frequency and labkit's commit are recorded per run, but do not block a resume."""
    campaign(tmp_path).run(max_runs=1)
    import labkit.core.fingerprint as lf
    import labkit.run.campaign as lc

    real = lf.host_fingerprint
    changed = lambda: {**real(), "cpu_mhz": 1234.5, "labkit_commit": "0123abc"}  # noqa: E731
    monkeypatch.setattr(lc, "host_fingerprint", changed)  # the resume check
    monkeypatch.setattr(lf, "host_fingerprint", changed)  # the runs' fingerprint (the engine's host facts)
    st = campaign(tmp_path).run()
    assert len(st.runs()) > 1 and len(st.fingerprints()) == 2


# -- 2 + 4 on the real local backend: clean removes one campaign's leftovers, not x-2's -----------
def _cgroups(prefix):
    found = set()
    for d in ("/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup"):
        if Path(d).exists():
            found |= {x.name for x in Path(d).glob(prefix + "*")}
    return found


@pytest.mark.root
def test_labkit_clean_removes_a_killed_campaigns_leftovers_only(tmp_path, capsys):
    from labkit.backends import get_backend

    be = get_backend("local")
    marker = f"sleep 6[12].{os.getpid()}"
    left = {}
    for n, cid in enumerate(("x", "x-2")):
        (inst,) = be.provision(
            InstanceSpec(), prefix=campaign_prefix(cid)
        )  # never torn down: as after SIGKILL
        inst.exec(["sh", "-c", f"sleep 6{n + 1}.{os.getpid()} >/dev/null 2>&1 &"])
        left[cid] = inst
        c = campaign(tmp_path, backend="local", campaign_id=cid, workload="nqueens")
        with Store.for_campaign(tmp_path, cid) as st:
            c._check_or_write_meta(st)
    try:
        assert _cgroups("labkit-x--") and _cgroups("labkit-x-2--")
        assert cli.main(["clean", "x", "--data-dir", str(tmp_path)]) == 0
        assert _cgroups("labkit-x--") == set()
        assert _cgroups("labkit-x-2--") != set()  # the other campaign is untouched
        ps = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout.splitlines()
        assert [p.split(None, 1)[1] for p in ps] == [f"sleep 62.{os.getpid()}"]  # x's workload is gone
    finally:
        left["x-2"].destroy()
        left["x"].destroy()
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout == b""
