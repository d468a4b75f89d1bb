"""Issue 28, host keys: real attack trials against the test sshd on every SSH path labkit uses.

``rows()`` returns (section, row, count, must-be) for reliability/run.py. For each path of
tests/support/hostkey_trials.py (the ``ssh`` backend, the ``ssh`` binary of an MPI launch agent,
docker over ``ssh://``, the libvirt backend on a ``qemu+ssh://`` URI, a cloud server's readiness
wait, and the relay an MPI launch agent runs for a libvirt guest) the trials
connect to the real sshd of scripts/setup-ssh.sh (127.0.0.1:2222) with a known_hosts file that
lists a different key for it (a man-in-the-middle, as the client sees one) under ``strict`` and
``accept-new``, and with no entry for it under ``strict``; every acceptance is counted (must be
0), and so is every refusal of a changed key not said in labkit's words (the host, the known_hosts
file and line of the old key; the ``ssh`` binary's own words excepted: mpirun shows them). Controls (no must-be): accept-new trusts an unknown host and records its key. HOME is a
temporary directory during the trials: root's real ~/.ssh/known_hosts is not read or changed.
Needs the test sshd (``bash scripts/setup-ssh.sh``); libvirt rows need libvirtd.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SECTION = "host keys"
TRIALS = 3  # per path and case: a refusal must not depend on timing or on a retry


def rows() -> list[tuple[str, str, object, str]]:
    from labkit.backends.testing import available
    from tests.support import hostkey_trials as trials

    ok, why = available("ssh")
    if not ok:
        return [(SECTION, f"test sshd unavailable ({why[:80]}): run scripts/setup-ssh.sh", "n/a", "")]
    paths = [p for p in trials.PATHS if p not in trials.LIBVIRT_PATHS or available("libvirt")[0]]
    out = [
        (
            SECTION,
            f"ssh backend, no option: changed key in ~/.ssh/known_hosts accepted (of {TRIALS})",
            sum(_default_accepts(trials) for _ in range(TRIALS)),
            "0",
        )
    ]
    for path in paths:
        changed = {"strict": 0, "accept-new": 0}
        unknown = recorded = unclear = 0
        for _ in range(TRIALS):
            with trials.private_home() as home:
                for policy in changed:
                    kh = trials.changed_file(home)
                    ok, why = trials.attempt(path, policy, kh)
                    changed[policy] += ok
                    unclear += (
                        not ok and path != "ssh binary" and not ("CHANGED" in why and f"{kh} line 2" in why)
                    )
                kh = trials.unknown_file(home)
                unknown += trials.attempt(path, "strict", kh)[0]
                recorded += trials.attempt(path, "accept-new", kh)[0] and bool(trials.recorded_keys(kh))
        out += [
            (SECTION, f"{path}: changed key accepted under strict (of {TRIALS})", changed["strict"], "0"),
            (
                SECTION,
                f"{path}: changed key accepted under accept-new (of {TRIALS})",
                changed["accept-new"],
                "0",
            ),
            (SECTION, f"{path}: unknown key accepted under strict (of {TRIALS})", unknown, "0"),
            *(
                []
                if path == "ssh binary"
                else [
                    (
                        SECTION,
                        f"{path}: changed key refused without naming it and its known_hosts line "
                        f"(of {2 * TRIALS})",
                        unclear,
                        "0",
                    )
                ]
            ),
            (
                SECTION,
                f"{path}: unknown key trusted and recorded under accept-new (of {TRIALS})",
                recorded,
                "",
            ),
        ]
    return out


def _default_accepts(trials) -> bool:
    """The finding as reported: options as a user writes them (none), the old key in the user's file."""
    from labkit.backends.ssh import SshBackend

    with trials.private_home() as home:
        (home / ".ssh" / "known_hosts").write_text(trials.changed_file(home).read_text())
        be = SshBackend(**trials.target(), connect_timeout=10)
        try:
            be.connection()
            return True
        except Exception:  # refused (BackendUnavailable naming the old key's line)
            return False
        finally:
            be.close()


if __name__ == "__main__":
    for row in rows():
        print(" | ".join(map(str, row)))
