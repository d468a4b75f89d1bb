"""The set-up scripts' pid-file check (scripts/pidfile.sh), used before they start a daemon.

A session that ends kills its daemons and leaves their pid files; the next set-up on the same
machine may find a pid there that an unrelated process has since been given. dockerd took such a
process for its containerd and waited until it gave up ("timeout waiting for containerd to start").
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

HELPER = Path(__file__).resolve().parents[2] / "scripts" / "pidfile.sh"


def _bash(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f'. "$0"; {script}', str(HELPER), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture
def other_process():
    """A live process that is not the daemon: `sleep`, as a reused pid would be."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_pid_file_naming_another_command_is_dropped(tmp_path, other_process):
    f = tmp_path / "containerd.pid"
    f.write_text(f"{other_process.pid}\n")
    alive = _bash('pid_alive "$1" containerd', str(f))
    assert alive.returncode != 0 and alive.stdout == ""
    dropped = _bash('drop_stale_pidfile "$1" containerd', str(f))
    assert dropped.returncode == 0, dropped.stderr
    assert not f.exists()
    assert "stale" in dropped.stdout


def test_a_pid_file_of_a_running_daemon_is_kept(tmp_path, other_process):
    f = tmp_path / "sleep.pid"
    f.write_text(f"{other_process.pid}\n")
    assert _bash('pid_alive "$1" sleep', str(f)).stdout.strip() == str(other_process.pid)
    kept = _bash('drop_stale_pidfile "$1" sleep', str(f))
    assert kept.returncode == 0 and kept.stdout == ""
    assert f.exists()


def test_a_dead_pid_empty_file_or_missing_file_is_handled(tmp_path):
    proc = subprocess.Popen(["true"])
    proc.wait()
    dead, empty = tmp_path / "dead.pid", tmp_path / "empty.pid"
    dead.write_text(f"{proc.pid}\n")
    empty.write_text("")
    for f in (dead, empty):
        assert _bash('drop_stale_pidfile "$1" dockerd', str(f)).returncode == 0
        assert not f.exists()
    assert _bash('drop_stale_pidfile "$1" dockerd', str(tmp_path / "none.pid")).returncode == 0
