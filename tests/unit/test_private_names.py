"""No labkit module reaches into another module's private names (issue 33).

A name with one leading underscore is private to the module that defines it. Over the AST of
every module of ``labkit/``: ``obj._name`` (``obj`` not ``self``/``cls``) and ``from m import
_name`` are allowed only when ``_name`` is defined in the same module (a function, a class, a
method, an attribute set on ``self``/``cls`` or at module level: the module's own protocol,
such as a backend calling its instances' hooks), or when ``_name`` is a private module of the
importing module's own package (``from . import _cells`` inside ``labkit.stats``). The few
third-party internals labkit must touch are listed below with the reason.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "labkit"

#: (module, name): why a third-party private is touched (never a labkit module's)
THIRD_PARTY = {
    ("backends/docker_ssh.py", "_custom_adapter"): "docker-py has no public hook for an SSH adapter "
                                                   "that applies labkit's host-key policy",
    ("backends/docker_ssh.py", "_version"): "docker-py's APIClient keeps the API version there",
    ("backends/docker_ssh.py", "_retrieve_server_version"): "docker-py's own call, made again once "
                                                            "the adapter is in place",
    ("backends/libvirt/relay.py", "_exit"): "os._exit is the documented way to end a forked child",
    ("studies/seeds.py", "_asdict"): "namedtuple's public API is underscore-prefixed",
}


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def own_names(tree: ast.AST) -> set[str]:
    """Names the module defines: functions, classes, methods, module-level names, and attributes
    assigned on ``self``/``cls``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def violations(path: Path) -> list[str]:
    rel = path.relative_to(PKG).as_posix()
    tree = ast.parse(path.read_text())
    own = own_names(tree)
    here = path.parent
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if not private(alias.name):
                    continue
                same_package_module = node.level == 1 and node.module is None \
                    and (here / f"{alias.name}.py").is_file()
                if not same_package_module:
                    out.append(f"{rel}:{node.lineno}: from {'.' * node.level}{node.module or ''} "
                               f"import {alias.name}")
        elif isinstance(node, ast.Attribute) and private(node.attr):
            value = node.value
            if isinstance(value, ast.Name) and value.id in ("self", "cls"):
                continue
            if node.attr in own or (rel, node.attr) in THIRD_PARTY:
                continue
            out.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_module_uses_another_modules_private_names():
    found = [v for path in sorted(PKG.rglob("*.py")) for v in violations(path)]
    assert found == [], "private names used across modules:\n" + "\n".join(found)


@pytest.mark.parametrize("source, bad", [
    ("from .campaign import _forget_failed\n", True),
    ("from .stats import _cells\n", True),             # another package's private module
    ("def f(c):\n    return c._measure()\n", True),
    ("class A:\n    def _h(self):\n        pass\n    def g(self, other):\n        return other._h()\n", False),
    ("import os\nos._exit(0)\n", True),                  # only where THIRD_PARTY says why
])
def test_the_rule_itself(tmp_path, monkeypatch, source, bad):
    pkg = tmp_path / "labkit"
    pkg.mkdir()
    mod = pkg / "mod.py"
    mod.write_text(source)
    monkeypatch.setattr(f"{__name__}.PKG", pkg)
    assert bool(violations(mod)) is bad
