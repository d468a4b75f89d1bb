"""Python run as other, non-root users (no passwd entry needed): each with its own home and runtime
dir, as a user's labkit finds its registry (issue 28: two users and one campaign id). Needs root
(``setpriv``). Used by tests/unit/test_registry.py and reliability/security_registry.py.

:func:`real_user` makes a real passwd user (issue 47: root reads every user's registry and
data-dir record it finds through ``pwd.getpwall()``), and :func:`run_as` runs a command as it,
so what a test plants is that user's own doing."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]

#: register campaign argv[1] with data dir argv[2], say "registered", then hold it
HOLD = textwrap.dedent("""
    import sys, time
    from labkit.core.registry import register
    register(sys.argv[1], sys.argv[2])
    print("registered", flush=True)
    time.sleep(600)
""")

#: try to register campaign argv[1] (data dir argv[2]): "REFUSED <message>" or "REGISTERED <registry dir>"
TRY = textwrap.dedent("""
    import sys
    from labkit.core import registry
    from labkit.errors import StoreError
    try:
        reg = registry.register(sys.argv[1], sys.argv[2])
    except StoreError as exc:
        print("REFUSED", exc)
    else:
        print("REGISTERED", reg.directory)
""")


def as_user(uid: int, home: Path, code: str, *args: str) -> subprocess.Popen:
    """``python -c code args`` as ``uid`` (and gid ``uid``, no other group), HOME and XDG_RUNTIME_DIR
    ``home`` (made 0700, the user's), no LABKIT_RUN_DIR: a non-root user's registry as labkit finds
    it. ``home``'s parent must let the user through (e.g. a 0755 directory in /tmp)."""
    home.mkdir(mode=0o700)
    os.chown(home, uid, uid)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(home), "XDG_RUNTIME_DIR": str(home)}
    return subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd="/",
    )


class User(NamedTuple):
    """A real passwd user (:func:`real_user`)."""

    name: str
    uid: int
    gid: int
    home: Path


def real_user(name: str = "labkit-other") -> User:
    """The passwd user ``name``, made if missing (``useradd --system --create-home``, home
    ``/var/lib/<name>``, no login shell): a user root's ``pwd.getpwall()`` finds. Idempotent; its
    home is made again (0700, the user's) if it was removed. Needs root; RuntimeError if ``useradd``
    fails and the user still does not exist."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        res = subprocess.run(
            [
                "useradd",
                "--system",
                "--create-home",
                "--home-dir",
                f"/var/lib/{name}",
                "--shell",
                "/usr/sbin/nologin",
                "--user-group",
                name,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        try:  # another process may have made it meanwhile (useradd then fails: the user exists)
            pw = pwd.getpwnam(name)
        except KeyError:
            raise RuntimeError(f"useradd {name} failed ({res.returncode}): {res.stderr.strip()}") from None
    home = Path(pw.pw_dir)
    if not home.is_dir():
        home.mkdir(mode=0o700, parents=True)
        os.chown(home, pw.pw_uid, pw.pw_gid)
    return User(pw.pw_name, pw.pw_uid, pw.pw_gid, home)


def run_as(user: User, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """``argv`` run as ``user`` (its uid, gid and groups; HOME its home), checked: what it makes
    is that user's. Needs root."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(user.home), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=timeout,
        check=True,
    )


def remove_user(user: User) -> None:
    """Remove ``user`` and its home (``userdel --remove``; for throwaway users a benchmark made)."""
    subprocess.run(["userdel", "--remove", user.name], capture_output=True, text=True, timeout=60, check=True)


#: as another user: in the sticky directory argv[1], plant link "out" to argv[2]
PLANT_LINK = textwrap.dedent("""
    import os, sys
    os.symlink(sys.argv[2], os.path.join(sys.argv[1], "out"))
    print("planted", flush=True)
""")


def planted_dir_link(base: Path, uid: int) -> tuple[Path, Path, str]:
    """In ``base`` (made 0755, e.g. a directory in /tmp the other user can reach): ``root-private``
    (root's, 0700) and ``shared`` (1777, like /tmp), in which ``uid`` plants ``shared/out`` ->
    ``root-private``. Returns (the target, the link, what the planting printed and said on stderr)."""
    os.chmod(base, 0o755)
    target = base / "root-private"
    target.mkdir(mode=0o700)
    shared = base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    out, err = as_user(uid, base / "user", PLANT_LINK, str(shared), str(target)).communicate(timeout=60)
    return target, shared / "out", out + err
