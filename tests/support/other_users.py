"""Python run as other, non-root users (no passwd entry needed): each with its own home and runtime
dir, as a user's labkit finds its registry (issue 28: two users and one campaign id). Needs root
(``setpriv``). Used by tests/unit/test_registry.py and reliability/security_registry.py."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
    return subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable,
                             "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd="/")
