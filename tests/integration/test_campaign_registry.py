"""Issue 28 on the real local backend (cgroups, network namespaces, real processes): a running
campaign survives a second start of its id from another data dir and a `labkit clean` without
an id; `clean` lists before it removes; `clean a` spares `a-b`; a SIGKILLed campaign's data dir
made read-only still cleans, and its resume says what to do.

The running campaign is a real ``Campaign`` in a child process whose workload holds each run
until the test lets it go (a file), so no step depends on timing. Campaign ids carry a random
token: the host's registry (/run/labkit) is shared with any other suite running meanwhile.
"""

import secrets
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from labkit.backends import get_backend
from labkit.core.ids import campaign_prefix
from labkit.core.instance import InstanceSpec
from labkit.run.campaign import Campaign
from labkit.store import Store
from tests.support.gated import labkit_cli as labkit
from tests.support.gated import start_gated

pytestmark = pytest.mark.root


def _gated(cid: str, data_dir: Path, tmp: Path):
    try:
        return start_gated(cid, data_dir, tmp)
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def local():
    be = get_backend("local")
    yield be
    be.close()


def _stored(data_dir: Path, cid: str) -> None:
    """A store for ``cid`` recording the local backend (what `clean <id>` reads)."""
    c = Campaign(
        {"factors": {"vcpus": [1, 2]}}, backend="local", campaign_id=cid, data_dir=data_dir, progress=False
    )
    with Store.for_campaign(data_dir, cid) as st:
        c._check_or_write_meta(st)


def _killed_registration(cid: str, data_dir: Path) -> None:
    """What a SIGKILLed campaign leaves in the host's registry: its entry, nobody holding it."""
    import os
    import sys

    code = (
        "import sys, time\nfrom labkit.core.registry import register\nregister(sys.argv[1], sys.argv[2])\n"
        "print('registered', flush=True)\ntime.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, cid, str(data_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert proc.stdout.readline().strip() == "registered"
    proc.kill()
    proc.wait()


def test_a_running_campaign_survives_a_duplicate_start_and_clean_without_id(tmp_path, local):
    token = secrets.token_hex(3)
    cid, killed, young = f"t-reg{token}", f"t-regk{token}", f"t-regy{token}"
    first, second = tmp_path / "first", tmp_path / "second"
    design = tmp_path / "d.yaml"
    design.write_text("factors:\n  vcpus: [1, 2]\nseed: 1\n")
    (left,) = local.provision(InstanceSpec(), prefix=campaign_prefix(killed))
    _killed_registration(killed, tmp_path / "killed")  # as after a SIGKILL: registered as stopped
    # a campaign no registry here knows (run from another network namespace or machine), made just now
    (recent,) = local.provision(InstanceSpec(), prefix=campaign_prefix(young))
    harness = f"labkit-test-{token}"  # a test harness's namespace host, as scripts/setup-fleet.sh makes
    subprocess.run(["ip", "netns", "add", harness], check=True)
    hosts = {harness} | {
        p.name for p in Path("/run/netns").glob("labkit-fleet-*")
    }  # scripts/setup-fleet.sh's
    proc, started, go = _gated(cid, first, tmp_path)
    try:
        live = local.list_labkit(campaign_prefix(cid))
        assert live == [started.read_text()]
        # finding 2: the same id from another data dir refuses before any clean-up
        r = labkit(
            "run",
            str(design),
            "--campaign-id",
            cid,
            "--data-dir",
            str(second),
            "--workload",
            "nqueens",
            "--param",
            "board=6",
        )
        assert r.returncode == 2, r.stdout + r.stderr
        assert str(first) in r.stderr and f"pid {proc.pid}" in r.stderr and "already running" in r.stderr
        assert local.list_labkit(campaign_prefix(cid)) == live
        # finding 1: without --yes (and no terminal) it lists and removes nothing
        r = labkit("clean", "--backend", "local", "--data-dir", str(second))
        assert r.returncode == 1, r.stdout + r.stderr
        assert f"local: {live[0]}: kept: campaign {cid} is running (data dir {first}" in r.stdout
        assert f"local: {left.name}: remove: campaign {killed} is registered as stopped" in r.stdout
        assert "nothing removed: pass --yes" in r.stdout
        assert local.list_labkit(campaign_prefix(killed)) == [left.name]
        # the young one is kept, said why: its instance's creation time, from the local backend
        assert (
            f"local: {recent.name}: kept: campaign {young} is not registered on this host, but its newest "
            f"sign of life (local object {recent.name} made) is only "
        ) in r.stdout
        assert "old and the grace period is 10 min" in r.stdout
        # with --yes: the stopped campaign's instance goes, the running one's stays
        r = labkit("clean", "--backend", "local", "--data-dir", str(second), "--yes")
        assert r.returncode == 0, r.stdout + r.stderr
        assert local.list_labkit(campaign_prefix(killed)) == []
        assert local.list_labkit(campaign_prefix(cid)) == live
        assert local.list_labkit(campaign_prefix(young)) == [recent.name]
        assert f"local: {harness}: kept: not made by a campaign" in r.stdout
        # --grace 0: a campaign no registry knows goes at once; the running one still stays
        r = labkit("clean", "--backend", "local", "--data-dir", str(second), "--yes", "--grace", "0")
        assert r.returncode == 0, r.stdout + r.stderr
        assert local.list_labkit(campaign_prefix(young)) == []
        assert local.list_labkit(campaign_prefix(cid)) == live
        assert hosts <= {p.name for p in Path("/run/netns").glob("labkit-*")}  # test hosts: kept
        assert proc.poll() is None
    finally:
        go.touch()
        out, err = proc.communicate(timeout=600)
        left.destroy()
        recent.destroy()
        subprocess.run(["ip", "netns", "delete", harness], check=False)
        from labkit.core.registry import run_dir

        for leftover in (f"{killed}.json", f"{killed}.lock"):  # the stopped entry the test made
            (run_dir() / leftover).unlink(missing_ok=True)
    assert proc.returncode == 0 and "STATUS ok,ok" in out, err[-2000:]
    assert local.list_labkit(campaign_prefix(cid)) == []


def test_clean_of_campaign_a_spares_campaign_a_b(tmp_path, local):
    a = f"t-reg{secrets.token_hex(3)}"
    made = {}
    try:
        for cid in (a, f"{a}-b"):
            (made[cid],) = local.provision(InstanceSpec(), prefix=campaign_prefix(cid))
            _stored(tmp_path, cid)
        r = labkit("clean", a, "--data-dir", str(tmp_path))
        assert r.returncode == 0, r.stdout + r.stderr
        assert local.list_labkit(campaign_prefix(a)) == []
        assert local.list_labkit(campaign_prefix(f"{a}-b")) == [made[f"{a}-b"].name]
    finally:
        for inst in made.values():
            inst.destroy()


def test_a_sigkilled_campaign_in_a_read_only_data_dir(tmp_path, local):
    """Low finding: after a kill, a read-only data dir blocked resume and `clean <id>` with no advice."""
    cid = f"t-regr{secrets.token_hex(3)}"
    data = tmp_path / "data"
    proc, started, _go = _gated(cid, data, tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    name = started.read_text()
    try:
        assert local.list_labkit(campaign_prefix(cid)) == [name]
        ro = f"mount --bind -o ro {shlex.quote(str(data))} {shlex.quote(str(data))}"
        design = tmp_path / "d.yaml"
        design.write_text("factors:\n  vcpus: [1, 2]\nreplications: 1\nseed: 3\n")
        r = labkit(
            "run",
            str(design),
            "--workload",
            "nqueens",
            "--campaign-id",
            cid,
            "--data-dir",
            str(data),
            wrap=ro,
        )
        assert r.returncode == 2
        (line,) = [x for x in r.stderr.splitlines() if x.startswith("labkit: error:")]
        assert "Read-only file system" in line and f"make {data} writable" in line and "--data-dir" in line
        assert local.list_labkit(campaign_prefix(cid)) == [name]  # it cleaned nothing up
        r = labkit("clean", cid, "--data-dir", str(data), wrap=ro)
        assert r.returncode == 0, r.stdout + r.stderr
        assert local.list_labkit(campaign_prefix(cid)) == []
    finally:
        local.cleanup(campaign_prefix(cid))
