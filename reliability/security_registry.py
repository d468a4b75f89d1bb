"""Issue 28, running campaigns and `labkit clean`: real trials on the local backend (root).

``rows()`` returns (section, row, count, must-be) for reliability/run.py. Each trial runs a real
campaign in a child process (tests/support/gated.py: its run holds until told to go) and attacks
it with the real CLI:

* **duplicate id**: the same campaign id started from another data dir while it runs: counts
  second starts not refused, first-campaign instances removed, first campaigns not ending ok;
* **clean without id**: ``labkit clean --yes`` while it runs: counts its instances removed and
  campaigns not ending ok; and ``labkit clean`` without ``--yes``: objects removed (must be 0);
* **killed campaign**: SIGKILLed mid-run, then ``labkit clean --yes``: leftovers remaining;
* **unregistered campaign** (one run from another network namespace or machine: no registry here
  knows it): an instance made just now, then ``labkit clean --yes``: removed within the grace
  period (must be 0), and left after ``--grace 0`` (must be 0);
* **two users, one id**: two non-root users (uids 4242 and 4243, each with its own runtime dir,
  neither able to read the other's registry) start the same id: second starts not refused.

``SECURITY_REGISTRY_TRIALS`` (default 5) trials of each. Campaign ids carry a random token.
"""
from __future__ import annotations

import os
import secrets
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SECTION = "campaign registry and clean"


def _trial(tmp: Path, local, counts: dict, attack: str) -> None:
    from labkit.core.ids import campaign_prefix
    from tests.support.gated import labkit_cli, start_gated

    cid = f"sec-reg-{secrets.token_hex(4)}"
    proc, started, go = start_gated(cid, tmp / "first", tmp)
    try:
        mine = set(local.list_labkit(campaign_prefix(cid)))
        if attack == "duplicate":
            design = tmp / "d.yaml"
            design.write_text("factors:\n  vcpus: [1, 2]\nseed: 1\n")
            r = labkit_cli("run", str(design), "--campaign-id", cid, "--data-dir", str(tmp / "second"),
                           "--param", "board=6")
            counts["duplicate: second start not refused"] += r.returncode != 2
            key = "duplicate: first campaign's instances removed"
        elif attack == "dry":
            r = labkit_cli("clean", "--backend", "local", "--data-dir", str(tmp / "second"))
            key = "clean without --yes: running campaign's instances removed"
        elif attack == "clean":
            r = labkit_cli("clean", "--backend", "local", "--data-dir", str(tmp / "second"), "--yes")
            key = "clean --yes without id: running campaign's instances removed"
        else:   # killed
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            r = labkit_cli("clean", "--backend", "local", "--data-dir", str(tmp / "second"), "--yes")
            counts["killed, clean --yes: leftovers remaining"] += len(local.list_labkit(campaign_prefix(cid)))
            key = None
        if key:
            counts[key] += len(mine - set(local.list_labkit(campaign_prefix(cid))))
    finally:
        go.touch()
        out, _ = proc.communicate(timeout=600)
        local.cleanup(campaign_prefix(cid))
    if attack != "killed":
        label = {"duplicate": "duplicate: first", "dry": "clean without --yes:", "clean": "clean --yes without id:"}
        counts[f"{label[attack]} campaign not ending ok"] += proc.returncode != 0 or "STATUS ok,ok" not in out


def _unregistered(tmp: Path, local, counts: dict) -> None:
    from labkit.core.ids import campaign_prefix
    from labkit.core.instance import InstanceSpec
    from tests.support.gated import labkit_cli

    cid = f"sec-unreg-{secrets.token_hex(4)}"
    (inst,) = local.provision(InstanceSpec(), prefix=campaign_prefix(cid))
    try:
        labkit_cli("clean", "--backend", "local", "--data-dir", str(tmp), "--yes")
        counts["unregistered, made just now: removed by clean --yes (grace 10 min)"] += \
            not local.list_labkit(campaign_prefix(cid))
        labkit_cli("clean", "--backend", "local", "--data-dir", str(tmp), "--yes", "--grace", "0")
        counts["unregistered: left after clean --yes --grace 0"] += len(local.list_labkit(campaign_prefix(cid)))
    finally:
        inst.destroy()


def _two_users(counts: dict) -> None:
    import shutil

    from tests.support.other_users import HOLD, TRY, as_user
    cid = f"sec-users-{secrets.token_hex(4)}"
    base = Path(tempfile.mkdtemp(prefix="labkit-sec-users-"))   # in /tmp: each user reaches its own dir
    os.chmod(base, 0o755)
    first = as_user(4242, base / "a", HOLD, cid, str(base / "a" / "data"))
    try:
        line = first.stdout.readline().strip()
        if line != "registered":
            raise RuntimeError(f"user 4242 could not register {cid}: {line} {first.stderr.read()[-2000:]}")
        out, _ = as_user(4243, base / "b", TRY, cid, str(base / "b" / "data")).communicate(timeout=120)
        counts["two users, one id: second start not refused"] += not out.startswith("REFUSED")
    finally:
        first.kill()
        first.wait()
        shutil.rmtree(base)


def rows() -> list[tuple[str, str, object, str]]:
    from labkit.backends import get_backend

    trials = int(os.environ.get("SECURITY_REGISTRY_TRIALS", "5"))
    counts = dict.fromkeys([
        "duplicate: second start not refused", "duplicate: first campaign's instances removed",
        "duplicate: first campaign not ending ok",
        "clean without --yes: running campaign's instances removed", "clean without --yes: campaign not ending ok",
        "clean --yes without id: running campaign's instances removed", "clean --yes without id: campaign not ending ok",
        "killed, clean --yes: leftovers remaining",
        "unregistered, made just now: removed by clean --yes (grace 10 min)",
        "unregistered: left after clean --yes --grace 0", "two users, one id: second start not refused"], 0)
    local = get_backend("local")
    try:
        with tempfile.TemporaryDirectory(prefix="labkit-sec-reg-") as tmp:
            for attack in ("duplicate", "dry", "clean", "killed"):
                for i in range(trials):
                    work = Path(tmp) / f"{attack}-{i}"
                    work.mkdir()
                    _trial(work, local, counts, attack)
            for i in range(trials):
                work = Path(tmp) / f"users-{i}"
                work.mkdir()
                _unregistered(work, local, counts)
                _two_users(counts)
    finally:
        local.close()
    return [(SECTION, "trials of each attack", trials, "")] + [(SECTION, k, v, "0") for k, v in counts.items()]


if __name__ == "__main__":
    for row in rows():
        print(row)
