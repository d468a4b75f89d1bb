"""The package's layering (issue "Backends on one small contract"): no backend module imports
another backend's module (shared code lives in base.py, cgroups.py or a private ``_`` module,
and a backend built on another gets its class from the registry), and ``labkit.images``
imports nothing from ``labkit.backends`` or ``labkit.workloads``."""
from __future__ import annotations

import ast
from pathlib import Path

from labkit.backends import REGISTRY

PKG = Path(__file__).resolve().parents[2] / "labkit"


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved), at any depth."""
    package = ".".join(path.relative_to(PKG.parent).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            mod = ".".join(p for p in (base, node.module) if p)
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def test_no_backend_imports_another():
    backend_modules = {module for module, _cls, _extra in REGISTRY.values()}
    for path in sorted((PKG / "backends").glob("*.py")):
        me = f"labkit.backends.{path.stem}"
        others = (imported_modules(path) & backend_modules) - {me}
        assert not others, f"backends/{path.name} imports backend module(s) {sorted(others)}"


def test_images_import_no_backend_or_workload():
    for path in sorted((PKG / "images").glob("*.py")):
        bad = {m for m in imported_modules(path) if m.startswith(("labkit.backends", "labkit.workloads"))}
        assert not bad, f"images/{path.name} imports {sorted(bad)}"
