"""The layer rules of pyproject.toml (import-linter) fail ``lint-imports`` when broken.

Each case copies ``labkit/`` into a temporary directory, adds one import that breaks one rule, and
runs ``lint-imports`` with the project's contracts on the copy: the contract named must be
reported broken (and, on the untouched copy, every contract kept).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def contracts(tmp_path: Path, module: str | None = None, line: str = "") -> dict[str, str]:
    """Contract name -> KEPT or BROKEN, as ``lint-imports`` reports them on a copy of labkit with
    ``line`` appended to ``module`` (a path under labkit/)."""
    shutil.copytree(REPO / "labkit", tmp_path / "labkit", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    if module is not None:
        with open(tmp_path / "labkit" / module, "a") as f:
            f.write(f"\n{line}  # noqa\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}   # the copy before the installed labkit
    res = subprocess.run([str(LINT), "--no-cache", "--no-logo", "--config", "pyproject.toml"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    out = re.sub(r"\s*\n\s*", " ", res.stdout)   # the report wraps long contract names
    assert "Contracts:" in out, res.stdout + res.stderr
    assert (res.returncode != 0) == (" BROKEN" in out), res.stdout
    report = out.split("dependencies.", 1)[-1].split("Contracts:", 1)[0].strip(" -")
    parts = re.split(r" (KEPT|BROKEN)\b", report)   # name, status, name, status, ...
    return {name.strip(" -"): status for name, status in zip(parts[::2], parts[1::2])}


def test_the_project_keeps_every_contract(tmp_path):
    assert LINT.exists(), "lint-imports is missing: pip install -r requirements.txt"
    import tomllib
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert contracts(tmp_path) == {c["name"]: "KEPT" for c in declared}


@pytest.mark.parametrize("module, line, contract", [
    ("studies/disk.py", "from ..backends import base as _b", "studies use run"),
    ("studies/__init__.py", "from ..images import rootfs as _r", "studies use run"),
    ("studies/seeds.py", "from ..workloads import base as _w", "studies use run"),
    ("backends/output.py", "from ..run import hooks as _h", "backends use only the core"),
    ("backends/output.py", "from ..workloads import base as _w", "backends use only the core"),
    ("stats/summary.py", "from ..core import clock as _c", "stats uses only errors"),
    ("core/clock.py", "from .. import design as _d", "no cycle between the packages"),
    ("backends/docker.py", "from . import ssh as _s", "a backend never imports another backend"),
    ("run/engine.py", "from . import campaign as _c", "the run layer without its knot"),
    ("run/boot.py", "from . import engine as _e", "the run layer without its knot"),
    ("run/hooks.py", "from . import campaign as _c", "no cycle between the modules of labkit.run"),
])
def test_a_broken_rule_fails_lint_imports(tmp_path, module, line, contract):
    broken = [name for name, status in contracts(tmp_path, module, line).items() if status == "BROKEN"]
    assert any(name.startswith(contract) for name in broken), broken
