"""The README's commands work as printed on a fresh clone.

The shell blocks of README.md marked ``<!-- runnable ... -->`` run, each as one ``bash -e``
script, in a fresh copy of the clone (the files git tracks or would track: no ``out/``, no
stray stores), after what ``make setup`` leaves there: ``.venv`` (this one, linked) and
``labkit`` on PATH through ``scripts/link-cli.sh`` (into a bin directory of the test's own instead
of /usr/local/bin). PATH is then that directory and the system's, with no virtualenv
active, as in a new shell. Each block must exit 0 without a traceback.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARK = re.compile(r"<!--\s*runnable\b[^>]*-->\s*\n```(?:sh|bash)\n(.*?)\n```", re.S)


def runnable_blocks(text: str) -> list[str]:
    """The bodies of the ``sh``/``bash`` fences right after a ``<!-- runnable -->`` comment."""
    return MARK.findall(text)


def test_runnable_blocks_are_found():
    blocks = runnable_blocks((REPO / "README.md").read_text())
    assert len(blocks) >= 2
    assert any("labkit --version" in b for b in blocks)
    assert runnable_blocks("<!-- runnable -->\n```sh\necho hi\n```\n```sh\nnot this\n```") == ["echo hi"]


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory) -> tuple[Path, dict]:
    if not (REPO / ".venv" / "bin" / "labkit").exists():
        pytest.skip("no .venv/bin/labkit: run scripts/setup-core.sh")
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    base = tmp_path_factory.mktemp("readme")
    clone = base / "clone"
    files = (
        subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        src = REPO / name
        if src.is_file() and not src.is_symlink():
            dst = clone / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    (clone / ".venv").symlink_to(REPO / ".venv")  # what scripts/setup-core.sh made
    bin_dir = base / "bin"
    env = {
        "PATH": f"{bin_dir}:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(base),
        "LANG": "C.UTF-8",
        "LABKIT_BIN_DIR": str(bin_dir),
        "MPLBACKEND": "Agg",
    }
    res = subprocess.run(["bash", "scripts/link-cli.sh"], cwd=clone, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (bin_dir / "labkit").resolve() == (REPO / ".venv" / "bin" / "labkit").resolve()
    return clone, env


@pytest.mark.parametrize("index", range(len(runnable_blocks((REPO / "README.md").read_text()))))
def test_readme_block_runs_as_printed(fresh_clone, index):
    clone, env = fresh_clone
    block = runnable_blocks((clone / "README.md").read_text())[index]
    res = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"README block {index} failed:\n{block}\n---\n{out[-4000:]}"
    assert "Traceback" not in out and "command not found" not in out
    if "labkit --version" in block:
        from labkit import __version__

        assert f"labkit {__version__}" in res.stdout
    if "labkit report" in block:
        page = (clone / "out" / "report.html").read_text()
        assert (
            page.startswith("<!DOCTYPE html>")
            and (os.stat(clone / "out" / "report.html").st_mode & 0o777) == 0o600
        )


def test_link_cli_leaves_another_install_alone(tmp_path):
    """scripts/link-cli.sh never replaces a labkit that is not its link."""
    if not (REPO / ".venv" / "bin" / "labkit").exists():
        pytest.skip("no .venv/bin/labkit")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(mode=0o755)
    (bin_dir / "labkit").write_text("#!/bin/sh\necho other\n")
    res = subprocess.run(
        ["bash", str(REPO / "scripts" / "link-cli.sh")],
        env={**os.environ, "LABKIT_BIN_DIR": str(bin_dir)},
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0 and "left alone" in res.stderr
    assert (bin_dir / "labkit").read_text().endswith("echo other\n")
    os.chmod(bin_dir, 0o777)
    (bin_dir / "labkit").unlink()
    res = subprocess.run(
        ["bash", str(REPO / "scripts" / "link-cli.sh")],
        env={**os.environ, "LABKIT_BIN_DIR": str(bin_dir)},
        capture_output=True,
        text=True,
    )
    assert "writable by others" in res.stderr and not (bin_dir / "labkit").exists()
