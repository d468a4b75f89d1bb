"""Issue 28, local isolation: real escape attempts from inside a ``local`` instance.

``rows()`` returns (section, row, count, must-be) for reliability/run.py. Two instances of
the default backend (isolation ``strict``) are made while a campaign is registered with its
own data dir; from inside the first one (issue 47: also every Unix socket of the host, /etc/shadow,
block devices, a root-only file, the host's /tmp both ways, home files outside the secrets
list, and the workload's host uid): enter the host's network namespace through every
``/proc/<pid>/ns/net`` it sees (and the controller's pid) and connect to a listener on the
host's 127.0.0.1; read a file in the registered campaign's data dir, in ``/run/labkit`` and
in the other instance's work dir; read a file in the data dir of a campaign that had already
finished (registered and stopped before the instances were made) and the secrets planted in the
controller's home ($HOME pointed at a temporary home: .ssh, .config, .aws, .azure, .netrc) and
root's real ~/.ssh; find a marker variable of the controller's environment;
start a child that double-forks, ``setsid()``s, writes itself into the root cgroups and
must still be gone once its command timed out; fork until ``pids_max``. Every count must
be 0. Needs root (a skipped row says so otherwise).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SECTION = "local isolation (escapes from an instance)"
PIDS_MAX = 64


def _tmp_leaks(inst) -> int:
    """1 if a file written to /tmp inside ``inst`` shows in the host's /tmp."""
    name = f"labkit-rel-leak-{secrets.token_hex(4)}"
    inst.exec(["sh", "-c", f"echo x > /tmp/{name}"], check=False, timeout=30)
    leaked = (Path("/tmp") / name).exists()
    (Path("/tmp") / name).unlink(missing_ok=True)
    return int(leaked)


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
        finished = trials.plant(tmp / "finished" / "done-campaign")
        home = tmp / "home"
        secrets_planted = [
            trials.plant(home / ".ssh", "id_ed25519"),
            trials.plant(home / ".config", "token"),
            trials.plant(home / ".aws", "credentials"),
            trials.plant(home / ".azure", "token.json"),
            trials.plant(home, ".netrc"),
        ]
        root_ssh = [p for p in Path("/root/.ssh").glob("*") if p.is_file() and p.stat().st_size]
        home_files = [
            trials.plant(home, ".pypirc"),
            trials.plant(home, ".vault-token"),
            trials.plant(home / ".local" / "share" / "jupyter" / "runtime", "jupyter_cookie_secret"),
        ]
        root_only = trials.plant(tmp / "root-only", "secret")
        os.chmod(tmp, 0o755)
        blocks = [str(p) for p in Path("/dev").iterdir() if p.is_block_device()][:8]
        host_tmp = trials.plant(Path(tempfile.mkdtemp(prefix="labkit-rel-hosttmp-")), "kernel-1.json")
        run = Path("/run/labkit")
        run.mkdir(mode=0o755, exist_ok=True)
        in_run = trials.plant(run, f"labkit-rel-{secrets.token_hex(4)}.json")
        old_env, old_home = os.environ.get(registry.ENV), os.environ.get("HOME")
        os.environ[registry.ENV] = str(tmp / "registry")
        os.environ["HOME"] = str(home)
        be = get_backend("local", pids_max=PIDS_MAX)
        insts = []
        try:
            with registry.register(f"rel-iso-{secrets.token_hex(3)}", str(tmp / "finished"), backend="local"):
                pass  # finished: its registry entry is gone, its data dir stays
            with registry.register(f"rel-iso-{secrets.token_hex(3)}", str(tmp / "data"), backend="local"):
                insts = be.provision(InstanceSpec(vcpus=1, memory_mb=512, count=2), prefix="labkit-rel-iso--")
            a, b = insts
            other = trials.plant(Path(b.workdir), "other.txt")
            status = trials.status_fields(a)
            roots = [f"{d.rsplit('/', 1)[0]}/cgroup.procs" for d in be.driver.dirs(a.name)]
            out += [
                (
                    SECTION,
                    "host network namespace reached (connections to the host's 127.0.0.1)",
                    trials.host_netns_reached(a),
                    "0",
                ),
                (
                    SECTION,
                    "foreign store, /run/labkit or other instance's file read",
                    len(trials.visible(a, [foreign, in_run, other])),
                    "0",
                ),
                (
                    SECTION,
                    "finished campaign's store (another data dir) read",
                    len(trials.visible(a, [finished])),
                    "0",
                ),
                (
                    SECTION,
                    f"home secrets read ({len(secrets_planted)} planted in $HOME, {len(root_ssh)} in "
                    "root's ~/.ssh)",
                    len(trials.visible(a, [*secrets_planted, *root_ssh])),
                    "0",
                ),
                (SECTION, "controller environment variable seen", trials.controller_env_seen(a), "0"),
                (
                    SECTION,
                    "process surviving its command's timeout (after leaving its cgroup)",
                    len(trials.survivors_after_timeout(a, roots)),
                    "0",
                ),
                (
                    SECTION,
                    "capabilities left (CapEff, CapBnd bits set)",
                    bin(int(status["CapEff"], 16)).count("1") + bin(int(status["CapBnd"], 16)).count("1"),
                    "0",
                ),
                (SECTION, "host processes seen in /proc", int(os.getpid() in trials.pids_seen(a)), "0"),
                (
                    SECTION,
                    f"forks beyond pids_max ({PIDS_MAX}) in a fork loop",
                    max(0, trials.forks_allowed(a, 300) - PIDS_MAX),
                    "0",
                ),
                # issue 47, finding 1: the workload as host root through the daemons' sockets
                (
                    SECTION,
                    "host Unix sockets accepting a connection (docker, containerd, LXD, libvirt, "
                    "MariaDB, munge, any other found below /; the host itself reaches "
                    f"{len(trials.sockets_reached(None))})",
                    len(trials.sockets_reached(a)),
                    "0",
                ),
                (
                    SECTION,
                    f"/etc/shadow, a root-only file, block devices ({len(blocks)}) read",
                    len(trials.readable(a, ["/etc/shadow", str(root_only), *blocks])),
                    "0",
                ),
                (
                    SECTION,
                    "host /tmp file seen, or a file written to /tmp reaching the host",
                    len(trials.readable(a, [host_tmp])) + _tmp_leaks(a),
                    "0",
                ),
                (
                    SECTION,
                    "home files outside the secrets list read (.pypirc, .vault-token, Jupyter's cookie)",
                    len(trials.visible(a, home_files)),
                    "0",
                ),
                (
                    SECTION,
                    "workload processes running as host uid 0",
                    int(0 in trials.host_uids_of_instance(a)),
                    "0",
                ),
            ]
        finally:
            teardown(insts)
            be.cleanup("labkit-rel-iso--")
            in_run.unlink(missing_ok=True)
            shutil.rmtree(host_tmp.parent, ignore_errors=True)
            for key, old in ((registry.ENV, old_env), ("HOME", old_home)):
                if old is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = old
    return out


if __name__ == "__main__":
    for row in rows():
        print(row)
