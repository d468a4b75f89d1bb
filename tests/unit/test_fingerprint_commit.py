"""The labkit commit a fingerprint records is the checkout's (found from the module's own place
in the package, which moved into labkit/core/)."""

import re
from pathlib import Path

import pytest

from labkit.core.fingerprint import labkit_commit

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
def test_the_commit_of_this_checkout_is_recorded():
    assert re.fullmatch(r"[0-9a-f]{12}(\+dirty)?", labkit_commit())


def test_a_campaigns_every_start_forks_nothing_for_the_fingerprint(monkeypatch):
    """The commit and the virtualization are read once per process: a campaign run step by step
    (``Campaign.run(max_runs=1)``) forked git twice and systemd-detect-virt once per step, CPU the
    quiet-host guard's first look of 0.25 s counted as other processes' (11.7 % of a CPU)."""
    import subprocess

    from labkit.core import fingerprint

    fingerprint.labkit_commit.cache_clear()
    calls = []
    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a[0][0]) or real(*a, **k))
    fingerprint.host_fingerprint()
    forks = len(calls)
    assert forks >= (2 if (ROOT / ".git").exists() else 0)  # git rev-parse, git status
    fingerprint.host_fingerprint()
    assert len(calls) == forks
