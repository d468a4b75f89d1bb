"""Issue 28, local isolation: real escape attempts from inside a ``local`` instance.

``rows()`` returns (section, row, count, must-be) for reliability/run.py. Two instances of
the default backend (isolation ``strict``) are made while a campaign is registered with its
own data dir; from inside the first one: enter the host's network namespace through every
``/proc/<pid>/ns/net`` it sees (and the controller's pid) and connect to a listener on the
host's 127.0.0.1; read a file in the registered campaign's data dir, in ``/run/labkit`` and
in the other instance's work dir; find a marker variable of the controller's environment;
start a child that double-forks, ``setsid()``s, writes itself into the root cgroups and
must still be gone once its command timed out; fork until ``pids_max``. Every count must
be 0. Needs root (a skipped row says so otherwise).
"""
from __future__ import annotations

import os
import secrets
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SECTION = "local isolation (escapes from an instance)"
PIDS_MAX = 64


def rows() -> list[tuple[str, str, object, str]]:
    from labkit.backends import get_backend, teardown
    from labkit.core import registry
    from labkit.core.instance import InstanceSpec
    from tests.support import isolation_trials as trials

    if os.geteuid() != 0:
        return [(SECTION, "skipped: needs root (cgroups and namespaces)", 0, "")]
    out = []
    with tempfile.TemporaryDirectory(prefix="labkit-rel-iso-") as tmp:
        tmp = Path(tmp)
        foreign = trials.plant(tmp / "data" / "other-campaign")
        run = Path("/run/labkit")
        run.mkdir(mode=0o755, exist_ok=True)
        in_run = trials.plant(run, f"labkit-rel-{secrets.token_hex(4)}.json")
        old_env = os.environ.get(registry.ENV)
        os.environ[registry.ENV] = str(tmp / "registry")
        be = get_backend("local", pids_max=PIDS_MAX)
        insts = []
        try:
            with registry.register(f"rel-iso-{secrets.token_hex(3)}", str(tmp / "data"), backend="local"):
                insts = be.provision(InstanceSpec(vcpus=1, memory_mb=512, count=2), prefix="labkit-rel-iso--")
            a, b = insts
            other = trials.plant(Path(b.workdir), "other.txt")
            status = trials.status_fields(a)
            roots = [f"{d.rsplit('/', 1)[0]}/cgroup.procs" for d in be.driver.dirs(a.name)]
            out += [
                (SECTION, "host network namespace reached (connections to the host's 127.0.0.1)",
                 trials.host_netns_reached(a), "0"),
                (SECTION, "foreign store, /run/labkit or other instance's file read",
                 len(trials.visible(a, [foreign, in_run, other])), "0"),
                (SECTION, "controller environment variable seen", trials.controller_env_seen(a), "0"),
                (SECTION, "process surviving its command's timeout (after leaving its cgroup)",
                 len(trials.survivors_after_timeout(a, roots)), "0"),
                (SECTION, "capabilities left (CapEff, CapBnd bits set)",
                 bin(int(status["CapEff"], 16)).count("1") + bin(int(status["CapBnd"], 16)).count("1"), "0"),
                (SECTION, "host processes seen in /proc", int(os.getpid() in trials.pids_seen(a)), "0"),
                (SECTION, f"forks beyond pids_max ({PIDS_MAX}) in a fork loop",
                 max(0, trials.forks_allowed(a, 300) - PIDS_MAX), "0"),
            ]
        finally:
            teardown(insts)
            be.cleanup("labkit-rel-iso--")
            in_run.unlink(missing_ok=True)
            if old_env is None:
                os.environ.pop(registry.ENV, None)
            else:
                os.environ[registry.ENV] = old_env
    return out


if __name__ == "__main__":
    for row in rows():
        print(row)
