"""Fleet campaigns on real hosts: the namespace test hosts of scripts/setup-fleet.sh (marker ``fleet``).

* two platforms (local + docker) interleaved in one randomized campaign on this machine;
* a campaign on 4 SSH hosts (native runs with cgroups) where one host's sshd is killed and another's
  link is cut mid-campaign, then the controller is SIGKILLed and the campaign resumed: no run lost
  or stored twice, lost hosts' runs stored as host-lost and their pending runs moved (recorded),
  nothing left on any host.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.backends import get_backend
from labkit.backends.testing import required
from labkit.core.ids import campaign_prefix
from labkit.run.campaign import Campaign
from labkit.store import Store

ROOT = Path(__file__).resolve().parents[2]
KEY = "/root/.ssh/labkit_test_ed25519"
HOSTS = [(f"ns{i}", f"10.231.0.{10 + i}") for i in range(1, 5)]
TESTBED = {"hosts": [{"name": n, "address": a, "key": KEY} for n, a in HOSTS], "connect_timeout": 5}


def _hosts_up() -> tuple[bool, str]:
    from labkit.run.hosts import reachable
    from labkit.run.testbed import Testbed

    for h in Testbed.from_dict(TESTBED).hosts:
        ok, why = reachable(h, 3)
        if not ok:
            return False, f"fleet test host {h.name} down ({why}); run scripts/setup-fleet.sh"
    return True, ""


def fleet_or_skip() -> None:
    """Skip when a namespace test host is down; fail instead when LABKIT_REQUIRE names ``fleet``."""
    ok, why = _hosts_up()
    if not ok:
        if "fleet" in required():
            pytest.fail(f"fleet is required (LABKIT_REQUIRE) but unavailable: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def fleet_hosts():
    fleet_or_skip()
    yield HOSTS
    _restore()


def _restore() -> None:
    """Every test host back: links up, dead sshds restarted (setup-fleet.sh is idempotent)."""
    n = len(glob.glob("/run/netns/labkit-fleet-*")) or 4
    for i in range(1, n + 1):
        subprocess.run(["ip", "link", "set", f"lkf{i}h", "up"], check=False)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/setup-fleet.sh")],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,  # its proof tries each host up to 40 times (5 s each when a host does not answer)
        env={**os.environ, "LABKIT_FLEET_HOSTS": str(max(n, 4))},
    )
    if done.returncode:
        raise AssertionError(
            f"scripts/setup-fleet.sh exited {done.returncode} restoring the test hosts:\n"
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )


def _leftovers(prefix: str, *, remove: bool = False) -> dict[str, list[str]]:
    """Instances named ``prefix*`` on each test host (``remove``: removed through cleanup(prefix))."""
    out = {}
    for name, addr in HOSTS:
        be = get_backend("ssh", host=addr, port=22, user="root", key_filename=KEY, connect_timeout=5)
        try:
            out[name] = be.cleanup(prefix) if remove else be.list_labkit(prefix)
        finally:
            be.close()
    return out


@pytest.mark.fleet
@pytest.mark.docker
@pytest.mark.root
def test_local_and_docker_interleaved_in_one_campaign(tmp_path):
    d = {"factors": {"platform": ["local", "docker"], "vcpus": [1, 2]}, "replications": 2, "seed": 11}
    st = Campaign(
        d,
        workload="command",
        workload_params={"argv": ["true"]},
        campaign_id="t-plat",
        data_dir=tmp_path,
        progress=False,
    ).run()
    runs = st.runs().sort_values("run_order")
    assert len(runs) == 8 and set(runs.status) == {"ok"}, runs[["status", "error"]]
    seq = list(runs.platform)
    assert seq.count("docker") == 4 and sum(a != b for a, b in zip(seq, seq[1:])) >= 2
    names = runs.metadata.map(lambda m: m["instances"][0]["name"])
    assert all(n.startswith("labkit-t-plat--") for n in names)
    assert set(runs.metadata.map(lambda m: m["backend"])) == {"local", "docker"}
    for name in ("local", "docker"):
        be = get_backend(name)
        try:
            assert be.list_labkit(campaign_prefix("t-plat")) == []
        finally:
            be.close()


CONTROLLER = """
import sys
from labkit.run.campaign import Campaign
tb = {testbed!r}
d = {{"factors": {{"vcpus": [1, 2]}}, "replications": 10, "seed": 5}}
Campaign(d, workload="command", workload_params={{"argv": ["sleep", "2"]}}, campaign_id="t-fleet",
         data_dir=sys.argv[1], testbed=tb, progress=False, run_timeout=60).run()
"""


def _stored(data: Path) -> tuple[list, dict]:
    try:
        with Store.for_campaign(data, "t-fleet", readonly=True) as st:
            runs = st.runs()
            hosts = [] if runs.empty else list(runs.metadata.map(lambda m: m.get("host")))
            return hosts, st.meta()
    except Exception:
        return [], {}


def _wait(cond, what: str, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.fleet
def test_host_loss_controller_kill_and_resume(fleet_hosts, tmp_path):
    data = tmp_path / "data"
    script = tmp_path / "controller.py"
    script.write_text(CONTROLLER.format(testbed=TESTBED))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(data)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # ns1: kill its sshd (listener and sessions), once it has stored a run. Only sshd: the
        # namespace hosts share this machine's file system, and a shell killed in the middle of
        # its start-up files could leave a lock there that every host's logins then wait on.
        _wait(lambda: "ns1" in _stored(data)[0], "a first run on ns1")
        pids = subprocess.run(
            ["ip", "netns", "pids", "labkit-fleet-1"], capture_output=True, text=True
        ).stdout.split()
        for pid in pids:
            try:  # a session process may end between the listing and this read: the open then
                # fails with ENOENT, or the read after it with ESRCH (ProcessLookupError)
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if comm == "sshd":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        # ns2: cut its link while it runs
        _wait(lambda: "ns2" in _stored(data)[0], "a first run on ns2")
        subprocess.run(["ip", "link", "set", "lkf2h", "down"], check=True)
        _wait(
            lambda: set((_stored(data)[1].get("fleet_hosts") or {}).get("lost", {})) == {"ns1", "ns2"},
            "ns1 and ns2 marked lost",
            60,
        )
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        before = len(_stored(data)[0])
        assert before < 20
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    except BaseException:
        # the test failed before the resume that would reclaim them: the killed controller's
        # in-flight instances are removed as `labkit clean` would (cleanup of the campaign prefix)
        if proc.poll() is None:
            proc.kill()
        _restore()
        _leftovers(campaign_prefix("t-fleet"), remove=True)
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
        _restore()
    hosts, meta = _stored(data)
    moved = {m["from"] for m in meta.get("fleet_moves") or []}
    assert moved == {"ns1", "ns2"}, meta.get("fleet_moves")
    # resume: every host is back; no run lost, none twice, nothing left anywhere
    st = Campaign(
        {"factors": {"vcpus": [1, 2]}, "replications": 10, "seed": 5},
        workload="command",
        workload_params={"argv": ["sleep", "2"]},
        campaign_id="t-fleet",
        data_dir=data,
        testbed=TESTBED,
        progress=False,
        run_timeout=60,
    ).run()
    runs = st.runs()
    assert len(runs) == 20 and runs.run_id.is_unique and st.claims() == []
    assert set(runs.status) <= {"ok", "host-lost"}, runs[["status", "error"]]
    lost_runs = runs[runs.status == "host-lost"]
    assert set(lost_runs.metadata.map(lambda m: m["host"])) <= {"ns1", "ns2"} and 1 <= len(lost_runs) <= 2
    by_host = runs.metadata.map(lambda m: m["host"])
    assert set(by_host) >= {"ns3", "ns4"}
    moved_runs = runs[runs.metadata.map(lambda m: "moved_from" in m)]
    assert len(moved_runs) >= 1 and set(by_host[moved_runs.index]) <= {"ns3", "ns4"}
    assert "host" in st.tidy().columns and set(st.tidy().host) == set(by_host)
    assert _leftovers(campaign_prefix("t-fleet")) == {n: [] for n, _ in HOSTS}
