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


#: (importing package, backend) pairs allowed, with why
ALLOWED = {
    (
        "labkit.backends.clouds",
        "labkit.backends.ssh",
    ): "a cloud server is reached over SSH: the cloud providers hand their servers to the ssh backend"
}

#: modules split out of a flat backend module by what they own, which know their backend's class
PARTS = {"labkit.backends.ssh_instance": "labkit.backends.ssh"}


def test_no_backend_imports_another():
    """Every module of the backends package, subpackages (libvirt/, lxd/, clouds/) included."""
    backend_modules = {module for module, _cls, _extra in REGISTRY.values()}
    assert all(
        PARTS[m] in backend_modules and (PKG.parent / f"{m.replace('.', '/')}.py").is_file() for m in PARTS
    )

    def backend_of(module: str) -> str | None:
        """The backend a module belongs to: the backend's module, its subpackage's modules, and the
        parts split out of a flat backend module (:data:`PARTS`)."""
        return PARTS.get(module) or next(
            (b for b in backend_modules if module == b or module.startswith(b + ".")), None
        )

    paths = sorted((PKG / "backends").rglob("*.py"))
    assert any(p.parent.name == "libvirt" for p in paths)  # the subpackages are looked at
    for path in paths:
        me = ".".join(path.relative_to(PKG.parent).with_suffix("").parts).removesuffix(".__init__")
        others = {backend_of(m) for m in imported_modules(path)} - {None, backend_of(me)}
        others = {o for o in others if not any(me.startswith(a) and o == b for a, b in ALLOWED)}
        assert not others, f"{path.relative_to(PKG)} imports backend module(s) {sorted(others)}"


def test_images_import_no_backend_or_workload():
    for path in sorted((PKG / "images").glob("*.py")):
        bad = {m for m in imported_modules(path) if m.startswith(("labkit.backends", "labkit.workloads"))}
        assert not bad, f"images/{path.name} imports {sorted(bad)}"
