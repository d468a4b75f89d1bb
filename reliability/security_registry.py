"""Issue 28, running campaigns and `labkit clean`: real trials on the local backend (root).

``rows()`` returns (section, row, count, must-be) for reliability/run.py. Each trial runs a real
campaign in a child process (tests/support/gated.py: its run holds until told to go) and attacks
it with the real CLI:

* **duplicate id**: the same campaign id started from another data dir while it runs: counts
  second starts not refused, first-campaign instances removed, first campaigns not ending ok;
* **clean without id**: ``labkit clean --yes`` while it runs: counts its instances removed and
  campaigns not ending ok; and ``labkit clean`` without ``--yes``: objects removed (must be 0);
* **killed campaign**: SIGKILLed mid-run, then ``labkit clean --yes``: leftovers remaining.

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


def rows() -> list[tuple[str, str, object, str]]:
    from labkit.backends import get_backend

    trials = int(os.environ.get("SECURITY_REGISTRY_TRIALS", "5"))
    counts = dict.fromkeys([
        "duplicate: second start not refused", "duplicate: first campaign's instances removed",
        "duplicate: first campaign not ending ok",
        "clean without --yes: running campaign's instances removed", "clean without --yes: campaign not ending ok",
        "clean --yes without id: running campaign's instances removed", "clean --yes without id: campaign not ending ok",
        "killed, clean --yes: leftovers remaining"], 0)
    local = get_backend("local")
    try:
        with tempfile.TemporaryDirectory(prefix="labkit-sec-reg-") as tmp:
            for attack in ("duplicate", "dry", "clean", "killed"):
                for i in range(trials):
                    work = Path(tmp) / f"{attack}-{i}"
                    work.mkdir()
                    _trial(work, local, counts, attack)
    finally:
        local.close()
    return [(SECTION, "trials of each attack", trials, "")] + [(SECTION, k, v, "0") for k, v in counts.items()]


if __name__ == "__main__":
    for row in rows():
        print(row)
