"""The layer rules of pyproject.toml (import-linter) fail ``lint-imports`` when broken.

Each case copies ``labkit/`` into a temporary directory, adds one import that breaks one rule, and
runs ``lint-imports`` with the project's contracts on the copy: the contract named must be
reported broken (and, on the untouched copy, every contract kept).
"""

from __future__ import annotations

import ast
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
    shutil.copytree(
        REPO / "labkit", tmp_path / "labkit", ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    if module is not None:
        with open(tmp_path / "labkit" / module, "a") as f:
            f.write(f"\n{line}  # noqa\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # the copy before the installed labkit
    res = subprocess.run(
        [str(LINT), "--no-cache", "--no-logo", "--config", "pyproject.toml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = re.sub(r"\s*\n\s*", " ", res.stdout)  # the report wraps long contract names
    assert "Contracts:" in out, res.stdout + res.stderr
    assert (res.returncode != 0) == (" BROKEN" in out), res.stdout
    report = out.split("dependencies.", 1)[-1].split("Contracts:", 1)[0].strip(" -")
    parts = re.split(r" (KEPT|BROKEN)\b", report)  # name, status, name, status, ...
    return {name.strip(" -"): status for name, status in zip(parts[::2], parts[1::2])}


def test_the_project_keeps_every_contract(tmp_path):
    assert LINT.exists(), "lint-imports is missing: pip install -r requirements.txt"
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert contracts(tmp_path) == {c["name"]: "KEPT" for c in declared}


@pytest.mark.parametrize(
    "module, line, contract",
    [
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
    ],
)
def test_a_broken_rule_fails_lint_imports(tmp_path, module, line, contract):
    broken = [name for name, status in contracts(tmp_path, module, line).items() if status == "BROKEN"]
    assert any(name.startswith(contract) for name in broken), broken


# -- thin faces (issue 46): no module imports its package's __init__ ----------------------------------
#
# A package's __init__.py (its "face") only gathers the public names of its modules; a module of the
# package that imported a name from it would make the face something the package's own code builds on
# (and import in a circle with it). Read over the AST of every module of labkit/: an import of a
# package the module is in (its own or an enclosing one: ``from . import X``, ``from .. import X`` in
# a subpackage, ``from labkit.design import X``, ``import labkit.backends``) may name only that
# package's modules (``from . import fractional``), never a name its face defines or re-exports. labkit's
# own face is left out: it holds ``__version__``, which modules read from it.

PKG = REPO / "labkit"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    """Whether ``labkit.x.y`` is a module or package of labkit (not a name defined in one)."""
    path = REPO.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def face_imports(path: Path, source: str | None = None) -> list[str]:
    """The imports of module ``path`` (its text ``source``, default the file's) that take a name from
    the face of a package enclosing it, as ``file:line: import``; none for a face itself."""
    if path.name == "__init__.py":
        return []
    package = module_name(path).rsplit(".", 1)[0]
    # labkit itself is left out: its face holds ``__version__``, which modules read from it
    enclosing = {".".join(package.split(".")[:i]) for i in range(2, package.count(".") + 2)}
    rel = path.relative_to(PKG).as_posix()
    out = []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            mod = ".".join(p for p in (base, node.module) if p)
            if mod in enclosing:
                names = [a.name for a in node.names if not is_module(f"{mod}.{a.name}")]
                out += [f"{rel}:{node.lineno}: from {mod} import {n}" for n in names]
        elif isinstance(node, ast.Import):
            out += [f"{rel}:{node.lineno}: import {a.name}" for a in node.names if a.name in enclosing]
    return out


def test_no_module_imports_its_packages_face():
    """Every module of every package: report and store, studies, design, backends (with clouds,
    libvirt and lxd) and images, and all the others."""
    paths = sorted(PKG.rglob("*.py"))
    assert {p.parent.name for p in paths} >= {
        "report",
        "store",
        "studies",
        "design",
        "backends",
        "clouds",
        "libvirt",
        "lxd",
        "images",
    }
    found = [line for path in paths for line in face_imports(path)]
    assert not found, "modules importing their package's face:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "module, line, found",
    [
        (
            "studies/disk.py",
            "from . import with_stages_total",
            ["from labkit.studies import with_stages_total"],
        ),
        (
            "studies/disk.py",
            "from . import seeds, with_stages_total",
            ["from labkit.studies import with_stages_total"],
        ),
        ("studies/disk.py", "from . import seeds", []),  # a module of the package
        ("studies/disk.py", "from .. import stats", []),  # a package of labkit
        ("design/structure.py", "from labkit.design import Design", ["from labkit.design import Design"]),
        ("backends/ssh_hosts.py", "import labkit.backends", ["import labkit.backends"]),
        (
            "backends/clouds/base.py",
            "from .. import get_backend",
            ["from labkit.backends import get_backend"],
        ),
        ("backends/clouds/base.py", "from .. import hostkeys", []),
        (
            "backends/clouds/base.py",
            "from . import get_provider",
            ["from labkit.backends.clouds import get_provider"],
        ),
        (
            "backends/libvirt/net.py",
            "from ...backends import REGISTRY",
            ["from labkit.backends import REGISTRY"],
        ),
        ("images/docker_image.py", "from . import build", ["from labkit.images import build"]),
        ("report/html.py", "from labkit.report import analyze", ["from labkit.report import analyze"]),
        ("store/runs.py", "from . import Store", ["from labkit.store import Store"]),
    ],
)
def test_an_import_of_the_face_is_found(module, line, found):
    path = PKG / module
    lines = face_imports(path, path.read_text() + f"\n{line}\n")
    assert [x.split(": ", 1)[1] for x in lines] == found


#: faces that still define code of their own (functions, classes), with why; the list may only shrink
FAT_FACES = {
    "cli/__init__.py": "the command line's parser and entry point",
    "workloads/__init__.py": "the workload registry's lookups",
}


def test_faces_only_gather_names():
    """A package's __init__.py imports, lists ``__all__`` and names aliases, nothing more (a lazy face's
    module ``__getattr__`` and ``__dir__``, PEP 562, only gather names)."""
    fat = {}
    lazy = {"__getattr__", "__dir__"}
    for path in sorted(PKG.rglob("__init__.py")):
        tree = ast.parse(path.read_text())
        defs = [
            n.name
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name not in lazy
        ]
        if defs:
            fat[path.relative_to(PKG).as_posix()] = defs
    assert sorted(fat) == sorted(FAT_FACES), fat
