"""labkit built as a wheel and installed into a fresh venv, once per test process (issue 44).

:func:`wheel` builds it (``pip wheel --no-deps`` on a copy of the sources: the checkout is left as it
is) with the checkout's commit recorded; :func:`venv` makes one venv with ``python -m venv`` and
installs the wheel into it with the extras asked for, added one extra at a time, the versions held to
requirements.txt (``-c``: the lock, which installs only what the wheel itself declares). The venv and
the wheel live in a 0755 temporary folder (other users run them: tests/integration/test_outside_repo.py),
removed when the process ends."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: seconds a pip step may take (a first run downloads numpy, scipy, pandas ... from PyPI)
PIP_TIMEOUT = 900

_state: dict = {}


def _tmp() -> Path:
    if "tmp" not in _state:
        d = Path(tempfile.mkdtemp(prefix="labkit-wheel-"))
        d.chmod(0o755)
        atexit.register(shutil.rmtree, d, True)
        _state["tmp"] = d
    return _state["tmp"]


def _run(argv: list[str], timeout: float = PIP_TIMEOUT, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if res.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, argv))} failed ({res.returncode}):\n{res.stdout[-3000:]}\n"
            f"{res.stderr[-3000:]}"
        )
    return res


def wheel() -> Path:
    """The labkit wheel built from this checkout's working tree (cached for the process)."""
    if "wheel" not in _state:
        from labkit.core.fingerprint import labkit_commit

        src = _tmp() / "src"
        src.mkdir()
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "_build_commit.txt")
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, src / name)
        for d in ("labkit", "notebooks", "data/reference"):
            shutil.copytree(ROOT / d, src / d, symlinks=True, ignore=ignore)
        (src / "scripts").mkdir()
        shutil.copy2(ROOT / "scripts" / "labkit_build_backend.py", src / "scripts")
        dist = _tmp() / "dist"
        env = {**os.environ, "LABKIT_BUILD_COMMIT": labkit_commit()}
        _run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(dist), str(src)],
            env=env,
        )
        (whl,) = dist.glob("labkit-*.whl")
        _state["wheel"] = whl
    return _state["wheel"]


def base_python() -> str:
    """The interpreter the venv is made from: the system's python3 when it is this Python's version
    (any user may run it, as a researcher's would be), else this one's."""
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system:
        res = subprocess.run(
            [system, "-c", "import sys, venv; print(sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if res.returncode == 0 and res.stdout.strip() == str(tuple(sys.version_info[:2])):
            return system
    return sys.executable


def venv(extras: tuple[str, ...] = (), *, name: str = "venv") -> Path:
    """The venv ``name`` (its folder) with the wheel installed, with at least ``extras``: extras only
    ever add, so a test that needs the base install alone (test_wheel.py) must have a venv no other
    test adds extras to: other tests pass a ``name`` of their own."""
    whl = wheel()
    d = _tmp() / name
    if name not in _state:
        _run([base_python(), "-m", "venv", str(d)], timeout=120)
        _state[name] = set()
        _install(d, whl, "")
    for extra in extras:
        if extra not in _state[name]:
            _install(d, whl, f"[{extra}]")
            _state[name].add(extra)
    return d


def _install(d: Path, whl: Path, extras: str) -> None:
    _run(
        [
            str(d / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-c",
            str(ROOT / "requirements.txt"),
            f"{whl}{extras}",
        ]
    )


def python(d: Path, code: str, *, cwd: str | Path = "/", check: bool = True) -> subprocess.CompletedProcess:
    """``python -c code`` of venv ``d``, from ``cwd`` (default ``/``: nothing of the checkout on its path)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LABKIT_ROOT", "VIRTUAL_ENV")}
    res = subprocess.run(
        [str(d / "bin" / "python"), "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )
    if check and res.returncode != 0:
        raise AssertionError(
            f"python -c failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
        )
    return res
