"""Issue 28: the host's registry of running campaigns (labkit.core.registry), a campaign id unique per host
across data dirs, data dirs another user could change, and campaign ids in every CLI verb.

Liveness is proved with a real child process that is SIGKILLed; the registry is a temporary
directory (LABKIT_RUN_DIR) so these tests never meet another suite's campaigns.
"""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from labkit import cli
from labkit.core import registry
from labkit.core.paths import check_data_dir
from labkit.errors import StoreError
from tests.unit.test_reliability_campaign import FakeBackend, campaign

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def run_dir(tmp_path, monkeypatch):
    d = tmp_path / "run"
    monkeypatch.setenv("LABKIT_RUN_DIR", str(d))
    return d


REGISTERED = textwrap.dedent("""
    import sys, time
    from labkit.core.registry import register
    register(sys.argv[1], sys.argv[2], backend="local", prefix="labkit-" + sys.argv[1] + "--")
    print("registered", flush=True)
    time.sleep(120)
""")


def _child(cid: str, data_dir) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", REGISTERED, cid, str(data_dir)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout.readline().strip() == "registered"
    return proc


def test_entry_appears_while_registered_and_goes_on_release(tmp_path, run_dir):
    with registry.register("reg-a", tmp_path / "d", backend="local", prefix="labkit-reg-a--") as reg:
        (e,) = registry.running()
        assert (e.campaign_id, e.data_dir, e.pid, e.backend, e.prefix, e.kind) == (
            "reg-a",
            str(tmp_path / "d"),
            os.getpid(),
            "local",
            "labkit-reg-a--",
            "run",
        )
        assert registry.find("reg-a") == e and registry.find("reg-b") is None
        assert (
            reg.path.stat().st_mode & 0o777 == 0o644
            and (run_dir / "reg-a.lock").stat().st_mode & 0o777 == 0o600
        )
        assert run_dir.stat().st_mode & 0o777 == 0o755
    assert registry.entries() == [] and registry.running() == []
    # the lock goes with the entry: the directory does not keep a file per id ever run
    assert not [p.name for p in run_dir.iterdir() if p.suffix in (".lock", ".json")]
    with registry.register("reg-a", tmp_path / "d"):  # and the id registers again
        assert registry.find("reg-a").data_dir == str(tmp_path / "d")


def test_a_sigkilled_holder_is_seen_stopped_and_its_id_can_run_again(tmp_path):
    proc = _child("reg-k", tmp_path / "first")
    try:
        (e,) = registry.running()
        assert e.pid == proc.pid and e.data_dir == str(tmp_path / "first")
        with pytest.raises(StoreError) as err:  # held by a live process: refused, naming it
            registry.register("reg-k", tmp_path / "second")
        assert str(tmp_path / "first") in str(err.value) and f"pid {proc.pid}" in str(err.value)
        assert e.started in str(err.value)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (e,) = registry.entries()  # the entry stays, the kernel dropped the lock
    assert e.campaign_id == "reg-k" and e.running is False and registry.running() == []
    with registry.register("reg-k", tmp_path / "second"):
        assert registry.find("reg-k").data_dir == str(tmp_path / "second")


@pytest.mark.parametrize("make", ["world-writable", "symlink", "other-owner"])
def test_an_unsafe_registry_dir_is_refused(tmp_path, run_dir, make):
    if make == "other-owner" and os.geteuid() != 0:
        pytest.skip("needs root to give the directory to another user")
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    if make == "world-writable":
        run_dir.mkdir()
        os.chmod(run_dir, 0o777)
    elif make == "symlink":
        run_dir.symlink_to(real)
    else:
        run_dir.mkdir()
        os.chown(run_dir, 65534, 65534)
    with pytest.raises(StoreError, match="registry of running campaigns"):
        registry.register("reg-u", tmp_path)
    assert list(real.iterdir()) == []


def test_a_planted_entry_link_is_not_followed(tmp_path, run_dir):
    run_dir.mkdir(mode=0o755)
    target = tmp_path / "victim"
    target.write_text("keep")
    (run_dir / "reg-l.json").symlink_to(target)
    (run_dir / "reg-l.lock").symlink_to(tmp_path / "victim2")
    with pytest.raises(StoreError, match="cannot create the registry lock"):
        registry.register("reg-l", tmp_path)
    os.unlink(run_dir / "reg-l.lock")
    with registry.register("reg-l", tmp_path):
        assert not (run_dir / "reg-l.json").is_symlink()
    assert target.read_text() == "keep" and not (tmp_path / "victim2").exists()


def test_same_id_from_another_data_dir_refuses_before_any_cleanup(tmp_path):
    """Finding 2: the second start cleaned up `labkit-<id>--*`, killing the first one's instances."""
    proc = _child("t-dup", tmp_path / "first")
    try:
        be = FakeBackend()
        with pytest.raises(StoreError, match="already running on this host") as err:
            campaign(tmp_path / "second", backend=be, campaign_id="t-dup").run()
        assert be.cleaned == [] and be.destroyed == []  # nothing touched, nothing created
        assert str(tmp_path / "first") in str(err.value) and f"pid {proc.pid}" in str(err.value)
        assert not (tmp_path / "second" / "t-dup" / "store.sqlite").exists()
    finally:
        proc.kill()
        proc.wait()
    be = FakeBackend()
    assert len(campaign(tmp_path / "second", backend=be, campaign_id="t-dup").run().runs()) == 4
    assert be.cleaned == ["labkit-t-dup--"] and registry.running() == []  # unregistered at the end


def test_clean_of_one_campaign_refuses_while_it_runs_elsewhere(tmp_path, capsys):
    from labkit.store import Store

    c = campaign(tmp_path, backend=FakeBackend(), campaign_id="t-cl")
    with Store.for_campaign(tmp_path, "t-cl") as st:
        c._check_or_write_meta(st)
    proc = _child("t-cl", tmp_path / "elsewhere")
    try:
        assert cli.main(["clean", "t-cl", "--data-dir", str(tmp_path)]) == 2
        assert f"pid {proc.pid}" in capsys.readouterr().err
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_data_dir_others_can_change_is_refused(tmp_path, mode):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    be = FakeBackend()
    with pytest.raises(StoreError, match="writable by group or others"):
        campaign(shared / "data", backend=be).run()
    assert be.cleaned == [] and not (shared / "data").exists()
    os.chmod(shared, mode | 0o1000)  # sticky, as /tmp: nobody replaces another's entries
    assert check_data_dir(shared / "data") == shared / "data"


def test_a_data_dir_owned_by_another_user_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give the directory to another user")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(StoreError, match="owned by uid 65534"):
        campaign(theirs, backend=FakeBackend()).run()


@pytest.mark.parametrize("verb", ["report", "show", "status", "analyze", "export"])
@pytest.mark.parametrize("cid", ["../x", "/etc", "a/../../b"])
def test_every_verb_refuses_a_campaign_id_that_is_a_path(tmp_path, capsys, verb, cid):
    (tmp_path / "data").mkdir()
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "store.sqlite").write_text("")  # what `../x` would reach
    args = [verb, cid, "--data-dir", str(tmp_path / "data")] + (
        ["-o", str(tmp_path / "r.html")] if verb == "report" else []
    )
    assert cli.main(args) == 2  # a ConfigError (exit 2) saying the id rule
    err = capsys.readouterr().err
    assert "campaign_id" in err and "lowercase letters" in err and not (tmp_path / "r.html").exists()


def test_a_platform_campaign_registers_and_refuses_a_duplicate_id(tmp_path, monkeypatch):
    """The fleet path (a `platform` factor: a testbed of this machine) registers too."""
    import labkit.backends
    from labkit.run.campaign import Campaign
    from tests.unit.test_fleet import DESIGN, Fake, Nap

    made = []

    def get_backend(name="local", **options):
        be = Fake()  # opened from several threads at once (one per platform)
        be.name = name
        made.append(be)
        if registry.find("t-fl") is None or registry.find("t-fl").data_dir != str(tmp_path / "a"):
            raise AssertionError("a backend was opened while the campaign was not registered")
        return be

    monkeypatch.setattr(labkit.backends, "get_backend", get_backend)
    proc = _child("t-fl", tmp_path / "other")
    try:
        with pytest.raises(StoreError, match="already running on this host") as err:
            Campaign(
                DESIGN, workload=Nap(), campaign_id="t-fl", data_dir=tmp_path / "a", progress=False
            ).run()
        assert str(tmp_path / "other") in str(err.value) and made == []
    finally:
        proc.kill()
        proc.wait()
    st = Campaign(DESIGN, workload=Nap(), campaign_id="t-fl", data_dir=tmp_path / "a", progress=False).run()
    assert set(st.runs().status) == {"ok"} and made and registry.running() == []
    assert {be.name for be in made if ("cleanup", "labkit-t-fl--") in be.log} == {"local", "docker"}


def test_another_user_sees_a_campaign_by_pid_and_start_time_until_it_is_killed(tmp_path, monkeypatch):
    """A reader who may not open the 0600 lock (another user reading root's registry) tells a live
    campaign from a killed one by its pid and that process's start time, not the pid alone."""
    if os.geteuid() != 0:
        pytest.skip("needs root to read as another user")
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="labkit-test-reg-"))  # /tmp: others may look in
    os.chmod(shared, 0o755)
    run_dir = shared / "run"
    monkeypatch.setenv("LABKIT_RUN_DIR", str(run_dir))
    proc = _child("reg-x", tmp_path / "d")
    reader = textwrap.dedent("""
        import sys
        from labkit.core import registry
        print(",".join(f"{e.campaign_id}:{e.running}:{e.pid}" for e in registry.entries()))
    """)

    def read_as_nobody() -> str:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LABKIT_RUN_DIR": str(run_dir), "HOME": "/"}
        return subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", reader],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            cwd="/",
        ).stdout.strip()

    try:
        try:
            assert read_as_nobody() == f"reg-x:True:{proc.pid}"
        finally:
            proc.kill()
            proc.wait()
        assert read_as_nobody() == f"reg-x:False:{proc.pid}"
    finally:
        shutil.rmtree(shared)


def test_two_non_root_users_cannot_run_one_campaign_id(tmp_path, monkeypatch):
    """The README's claim made true: users 4242 and 4243 register in their own runtime dirs, which
    neither can read; the second start of the id still refuses, naming the first's pid and uid
    (the kernel's SO_PEERCRED on its claim), and succeeds once the first is killed."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as two other users")
    import secrets
    import shutil
    import tempfile

    monkeypatch.delenv("LABKIT_RUN_DIR")
    cid = f"t-xu{secrets.token_hex(3)}"
    base = Path(tempfile.mkdtemp(prefix="labkit-test-users-"))  # /tmp: both users can reach their own dirs
    os.chmod(base, 0o755)
    from tests.support.other_users import HOLD, TRY, as_user

    try:
        first = as_user(4242, base / "a", HOLD, cid, str(base / "a" / "data"))
        try:
            assert first.stdout.readline().strip() == "registered", first.stderr.read()
            out, err = as_user(4243, base / "b", TRY, cid, str(base / "b" / "data")).communicate(timeout=60)
            assert out.startswith("REFUSED"), out + err
            assert f"campaign {cid!r} is already running on this host: pid {first.pid} of another user" in out
            assert "uid 4242" in out
            assert cid in registry.claimed()  # what root's `labkit clean` sees as running
        finally:
            first.kill()
            first.wait()
        out, err = as_user(4243, base / "c", TRY, cid, str(base / "c" / "data")).communicate(timeout=60)
        assert out.startswith(f"REGISTERED {base / 'c'}/labkit/campaigns"), out + err
    finally:
        shutil.rmtree(base)


def test_a_claim_is_host_wide_named_by_the_kernel_and_scoped_by_the_run_dir(tmp_path, monkeypatch):
    """labkit.core.id_sockets: one holder per id; anyone learns its pid and uid (SO_PEERCRED) and sees the
    id in /proc/net/unix; the kernel frees it with its holder; LABKIT_RUN_DIR scopes the names."""
    from labkit.core import id_sockets as claims

    first = claims.claim("cl-a")
    try:
        assert first is not None and claims.claim("cl-a") is None
        assert claims.holder("cl-a") == (os.getpid(), os.geteuid()) and "cl-a" in claims.bound()
        monkeypatch.setenv("LABKIT_RUN_DIR", str(tmp_path / "elsewhere"))  # another scope: free there
        other = claims.claim("cl-a")
        assert other is not None and "cl-a" in claims.bound()
        other.close()
    finally:
        monkeypatch.setenv("LABKIT_RUN_DIR", str(tmp_path / "run"))
        first.close()
    assert claims.holder("cl-a") is None and "cl-a" not in claims.bound()
    proc = _child("cl-b", tmp_path / "d")  # registered (claimed) in a child, then SIGKILLed
    assert "cl-b" in registry.claimed() and registry.holder_text("cl-b").startswith(f"pid {proc.pid} of")
    proc.kill()
    proc.wait()
    assert "cl-b" not in registry.claimed() and claims.claim("cl-b") is not None
