"""The build backend of labkit (pyproject.toml ``[build-system]``): setuptools', plus the commit a
wheel is built from.

``build_wheel`` writes ``labkit/_build_commit.txt`` (``$LABKIT_BUILD_COMMIT``, else ``git rev-parse``
of the source tree with ``+dirty`` when it has local changes; nothing when neither is known) for the
wheel's duration and removes it afterwards, so an installed labkit records the commit it was built
from (:func:`labkit.core.fingerprint.labkit_commit`). Editable installs need no file: they read the
checkout's git.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403 (every hook setuptools has)

COMMIT_FILE = Path("labkit") / "_build_commit.txt"


def _git(*args: str) -> str | None:
    try:
        res = subprocess.run(["git", *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def source_commit() -> str | None:
    """``$LABKIT_BUILD_COMMIT``, else the source tree's commit (``+dirty`` with local changes), else None."""
    given = os.environ.get("LABKIT_BUILD_COMMIT", "").strip()
    if given:
        return given
    if not Path(".git").exists():
        return None
    head = _git("rev-parse", "--short=12", "HEAD")
    if not head:
        return None
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return head + ("+dirty" if dirty else "")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    commit = source_commit()
    written = False
    if commit and not COMMIT_FILE.exists():
        COMMIT_FILE.write_text(commit + "\n", encoding="utf-8")
        written = True
    try:
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    finally:
        if written:
            COMMIT_FILE.unlink(missing_ok=True)
