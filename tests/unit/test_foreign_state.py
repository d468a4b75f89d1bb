"""Issue 47, findings 2 and 3: what another user writes cannot hang, slow or steer root's campaigns.

Everything is planted by a real second user (``labkit-other``, made by
:func:`tests.support.other_users.real_user`, found by root's ``pwd.getpwall()``) in the places
root's labkit reads: its registry (``~/.cache/labkit/campaigns`` and
``$XDG_RUNTIME_DIR/labkit/campaigns`` = ``/run/user/<uid>/...``), its data-dir record
(``~/.local/state/labkit/data-dirs.list``), its data dirs and the abstract sockets of claims.
Root's side runs in a child process with a deadline (:func:`_as_root`), without ``LABKIT_RUN_DIR``
(as ``labkit run`` does), so a regression that blocks on a FIFO fails here instead of hanging.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from labkit.backends.local_hidden import HIDDEN_RECORDED
from tests.support.other_users import User, real_user, run_as

ROOT = Path(__file__).resolve().parents[2]
#: seconds root's reads get: what took milliseconds must never wait on a FIFO
DEADLINE_S = 60

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


@pytest.fixture
def other():
    """The real second user; what the tests plant in its home and runtime dir is removed after."""
    user = real_user()
    runtime = Path(f"/run/user/{user.uid}")
    made_runtime = not runtime.exists()
    try:
        yield user
    finally:
        for d in (
            user.home / ".cache" / "labkit",
            user.home / ".local" / "state" / "labkit",
            user.home / "data",
        ):
            shutil.rmtree(d, ignore_errors=True)
        if made_runtime:
            shutil.rmtree(runtime, ignore_errors=True)
        else:
            shutil.rmtree(runtime / "labkit", ignore_errors=True)


def _plant(user: User, code: str, *args: str) -> str:
    """``code`` (stdlib Python) run as ``user``: what it makes is that user's own doing."""
    return run_as(user, ["python3", "-c", textwrap.dedent(code), *args]).stdout


def _as_root(code: str) -> str:
    """``code`` run by root in a child (labkit importable, no LABKIT_RUN_DIR), its stdout; the test
    fails, naming the hang, if it does not finish within :data:`DEADLINE_S`."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/root"}
    try:
        res = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            env=env,
            cwd="/",
            timeout=DEADLINE_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"root's read of another user's state did not finish within {DEADLINE_S} s (blocked on a FIFO?)"
        )
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def _registry(user: User, where: str) -> Path:
    runtime = Path(f"/run/user/{user.uid}")
    if where == "runtime" and not runtime.exists():  # as pam_systemd makes it: the user's, 0700
        runtime.mkdir(mode=0o700, parents=True)
        os.chown(runtime, user.uid, user.gid)
    return (runtime if where == "runtime" else user.home / ".cache") / "labkit" / "campaigns"


def _cid() -> str:
    return f"t-fs{uuid.uuid4().hex[:8]}"


MAKE_ENTRIES = """
    import json, os, sys
    directory = sys.argv[1]
    os.makedirs(directory, mode=0o755, exist_ok=True)
    for spec in sys.argv[2:]:
        name, kind, data_dir, pid = spec.split("|")
        path = os.path.join(directory, name)
        if kind == "fifo":
            os.mkfifo(path, 0o644)
        else:
            pid = int(pid)
            start = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]) if pid > 0 else None
            with open(path, "w") as fh:
                json.dump({"campaign_id": name[:-5], "data_dir": data_dir or None, "pid": pid,
                           "pid_start": start, "started": "2026-01-01T00:00:00"}, fh)
"""


def test_a_fifo_planted_as_another_users_registry_entry_does_not_hang_root(other):
    """Finding 2: a FIFO as ``<id>.json`` in the user's registry blocked root's ``open`` forever;
    now it is refused (not a regular file) and the user's other entries are still read."""
    fifo, real = _cid(), _cid()
    directory = _registry(other, "home")
    _plant(other, MAKE_ENTRIES, str(directory), f"{fifo}.json|fifo||0", f"{real}.json|entry||0")
    out = _as_root("""
        from labkit.core import registry
        print(" ".join(sorted(e.campaign_id for e in registry.entries())))
    """).split()
    assert real in out and fifo not in out


def test_a_fifo_planted_as_another_users_lock_does_not_hang_root_nor_lends_a_pid(other):
    """Finding 2: a FIFO as ``<id>.lock`` (in the user's ``$XDG_RUNTIME_DIR`` registry) blocked
    root's ``open`` before ``flock``; now it is refused, and the fallback (the entry's pid and its
    start time) counts only a process of that user: an entry naming root's init is not running."""
    cid = _cid()
    directory = _registry(other, "runtime")
    _plant(other, MAKE_ENTRIES, str(directory), f"{cid}.json|entry||1", f"{cid}.lock|fifo||0")
    out = _as_root(f"""
        from labkit.core import registry
        print([(e.campaign_id, e.running) for e in registry.entries() if e.campaign_id == {cid!r}])
    """)
    assert out.strip() == f"[('{cid}', False)]"


def test_a_fifo_planted_as_a_campaign_lock_in_another_users_data_dir_does_not_hang_root(other):
    """Finding 2: ``labkit clean`` asks whether each known data dir's ``<id>/campaign.lock`` is held;
    a FIFO there blocked root's ``open``. Now it is not a lock: not held."""
    lock = other.home / "data" / "c1" / "campaign.lock"
    _plant(
        other, "import os, sys; os.makedirs(os.path.dirname(sys.argv[1])); os.mkfifo(sys.argv[1])", str(lock)
    )
    out = _as_root(f"""
        from labkit.core.lock import is_locked, lock_state
        print(is_locked({str(lock)!r}), lock_state({str(lock)!r}))
    """)
    assert out.split() == ["False", "None"]


MAKE_RECORD = """
    import os, sys
    record, kind = sys.argv[1], sys.argv[2]
    os.makedirs(os.path.dirname(record), mode=0o700, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(record, 0o600)
    else:
        with open(record, "w") as fh:
            fh.write("".join(p + "\\n" for p in sys.argv[3:]))
            if kind == "oversized":   # past the bound: not a record labkit wrote
                fh.write("#" * (5 << 20) + "\\n")
"""


def _record(user: User) -> Path:
    return user.home / ".local" / "state" / "labkit" / "data-dirs.list"


def _user_dirs(user: User, count: int, base: str = "data") -> list[str]:
    """``count`` data dirs of ``user`` (made by it, oldest first)."""
    root = user.home / base
    _plant(
        user,
        "import os, sys\nfor i in range(int(sys.argv[2])): os.makedirs(f'{sys.argv[1]}/d{i:05}')",
        str(root),
        str(count),
    )
    return [str(root / f"d{i:05}") for i in range(count)]


@pytest.mark.parametrize("kind", ["fifo", "oversized"])
def test_a_fifo_or_an_oversized_data_dir_record_of_another_user_is_ignored(other, kind):
    """Finding 2: a FIFO as ``data-dirs.list`` blocked root's ``open`` (each local instance reads
    the records); a record past the size bound was read up to it and trusted. Both are now
    refused as a whole (logged), in bounded time."""
    (mine,) = _user_dirs(other, 1)
    _plant(other, MAKE_RECORD, str(_record(other)), kind, mine)
    out = _as_root("""
        from labkit.core import datadirs
        print(" ".join(datadirs.known()))
    """).split()
    assert mine not in out


def test_records_naming_others_or_system_dirs_are_not_hidden_by_roots_instances(other, tmp_path):
    """Finding 3: a forged stopped registry entry named ``/usr/lib/x86_64-linux-gnu`` as its data dir
    and root's instances hid it; so did a record line naming a directory of root's (here through a
    link the user made). A user's records now count only for directories that user owns, and no
    record for a system directory; the entry's data dir reads as None."""
    (mine,) = _user_dirs(other, 1)
    roots = tmp_path / "roots-data"
    roots.mkdir()
    link = other.home / "data" / "to-etc"
    _plant(other, "import os, sys; os.symlink('/etc/ssl', sys.argv[1])", str(link))
    system = "/usr/lib/x86_64-linux-gnu" if os.path.isdir("/usr/lib/x86_64-linux-gnu") else "/usr/lib"
    _plant(other, MAKE_RECORD, str(_record(other)), "record", system, str(roots), str(link), mine)
    cid = _cid()
    _plant(other, MAKE_ENTRIES, str(_registry(other, "home")), f"{cid}.json|entry|{system}|0")
    out = json.loads(
        _as_root(f"""
        import json
        from labkit.backends.local import LocalBackend
        from labkit.core import registry
        (entry,) = [e for e in registry.entries() if e.campaign_id == {cid!r}]
        print(json.dumps({{"hidden": LocalBackend().hidden_dirs(), "entry": entry.data_dir}}))
    """)
    )
    hidden = out["hidden"]
    assert mine in hidden and out["entry"] is None
    assert not {system, str(roots), "/etc/ssl", "/usr/lib"} & set(hidden)


HOLD_CAMPAIGN = """
    import fcntl, json, os, sys, time
    directory, cid, data_dir = sys.argv[1:]
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd = os.open(os.path.join(directory, cid + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    with open(os.path.join(directory, cid + ".json"), "w") as fh:
        json.dump({"campaign_id": cid, "data_dir": data_dir, "pid": os.getpid(), "started": "now"}, fh)
    print("held", flush=True)
    time.sleep(300)
"""


def test_an_instance_hides_a_bounded_set_however_many_data_dirs_another_user_recorded(other):
    """Finding 3: 5,000 data dirs in a user's record made every root instance mount 5,000+ hidden
    paths (a campaign 60 times slower). Now an instance hides the newest HIDDEN_RECORDED of them
    (and the data dirs of campaigns running now, however old: here the user's oldest).
    Whether start-up costs the same with 1 and 5,000 records is shown by benchmarks/bench_hidden.py."""
    dirs = _user_dirs(other, 5000)
    _plant(other, MAKE_RECORD, str(_record(other)), "record", *dirs)
    cid = _cid()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(other.home)}
    holder = subprocess.Popen(
        [
            "setpriv",
            f"--reuid={other.uid}",
            f"--regid={other.gid}",
            "--init-groups",
            "python3",
            "-c",
            textwrap.dedent(HOLD_CAMPAIGN),
            str(_registry(other, "home")),
            cid,
            dirs[0],
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd="/",
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        out = json.loads(
            _as_root("""
            import json
            from labkit.backends import local
            print(json.dumps(local.LocalBackend().hidden_dirs()))
        """)
        )
    finally:
        holder.kill()
        holder.wait()
    hidden = set(out)
    assert dirs[0] in hidden and dirs[-1] in hidden  # the running campaign's, and the newest recorded
    assert len(hidden & set(dirs)) <= 2 * HIDDEN_RECORDED + 1  # + the running one; was all 5,000


def test_a_name_bound_under_the_claims_prefix_that_is_no_campaign_id_is_not_a_claim(other):
    """Finding 2 (claims): any user may bind ``@labkit/campaign/<anything>``; a name that is no
    valid campaign id (a path, upper case, blanks) was reported to root's ``labkit clean`` as a
    running campaign id. Now it is ignored (logged)."""
    names = ["../../etc", "UPPER", "two words"]
    code = """
        import socket, sys, time
        socks = []
        for name in sys.argv[1:]:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind("\\0labkit/campaign/" + name)
            s.listen(1)
            socks.append(s)
        print("bound", flush=True)
        time.sleep(300)
    """
    env = {"PATH": "/usr/bin:/bin", "HOME": str(other.home)}
    proc = subprocess.Popen(
        [
            "setpriv",
            f"--reuid={other.uid}",
            f"--regid={other.gid}",
            "--init-groups",
            "python3",
            "-c",
            textwrap.dedent(code),
            *names,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd="/",
    )
    try:
        assert proc.stdout.readline().strip() == "bound"
        out = json.loads(
            _as_root("""
            import json
            from labkit.core import id_sockets as claims
            print(json.dumps(sorted(claims.bound())))
        """)
        )
    finally:
        proc.kill()
        proc.wait()
    assert not {"../../etc", "UPPER", "two", "two words"} & set(out)
