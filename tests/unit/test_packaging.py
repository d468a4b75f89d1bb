"""labkit as a package that stands alone (issue 44): every package a module imports is declared (in the
base when the base install reaches the module, else in each extra that enables it), every lock pin
(requirements.txt) is inside its declared range, and the notebooks and reference data ship as package
data. The built wheel itself is installed and imported in tests/integration/test_wheel.py."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.packaging import extras_of, modules

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

#: import name -> distribution (the ones whose names differ)
DISTRIBUTION = {
    "yaml": "PyYAML",
    "zmq": "pyzmq",
    "IPython": "ipython",
    "libvirt": "libvirt-python",
    "libvirt_qemu": "libvirt-python",
    "openstack": "openstacksdk",
    "azure.core": "azure-core",
    "azure.identity": "azure-identity",
    "azure.mgmt.compute": "azure-mgmt-compute",
}


def requirements(extra: str | None = None) -> list[Requirement]:
    """The base's requirements, or an extra's (``labkit[x,y]`` self-references expanded)."""
    reqs = [
        Requirement(r)
        for r in (PYPROJECT["dependencies"] if extra is None else PYPROJECT["optional-dependencies"][extra])
    ]
    out = []
    for r in reqs:
        if canonicalize_name(r.name) == "labkit":
            for e in sorted(r.extras):
                out += requirements(e)
        else:
            out.append(r)
    return out


def declared(extra: str | None = None) -> set[str]:
    return {canonicalize_name(r.name) for r in requirements(extra)}


def lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements.txt: {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version
    return pins


def third_party_imports(path: Path) -> set[str]:
    """Every import of ``path`` (module level or in a function) that is neither stdlib nor labkit,
    as its distribution name."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in ("labkit", "__future__"):
                continue
            key = (
                ".".join(name.split(".")[: 3 if name.startswith("azure.mgmt") else 2])
                if top == "azure"
                else top
            )
            out.add(canonicalize_name(DISTRIBUTION.get(key, key)))
    return out


def test_every_import_is_declared_in_the_base_or_in_each_extra_that_enables_the_module():
    base = declared()
    missing = []
    for name, path in modules().items():
        extras = extras_of(name)
        for dist in sorted(third_party_imports(path)):
            if dist in base:
                continue
            if extras is None:
                missing.append(f"{name} imports {dist}: not in the base dependencies")
            for e in extras or []:
                if dist not in declared(e):
                    missing.append(f"{name} imports {dist}: not in labkit[{e}]")
    assert not missing, "\n".join(missing)


def test_psutil_is_a_base_dependency():
    """Telemetry and the quiet-host guard need it; without it no run is measured."""
    assert "psutil" in declared()


def test_every_lock_pin_is_inside_its_declared_range_and_every_declared_package_is_pinned():
    pins = lock()
    wrong, unpinned = [], []
    for extra in [None, *PYPROJECT["optional-dependencies"]]:
        for r in requirements(extra):
            name = canonicalize_name(r.name)
            if name not in pins:
                unpinned.append(f"{r} ({extra or 'base'})")
            elif not r.specifier.contains(pins[name], prereleases=True):
                wrong.append(f"{r} ({extra or 'base'}) but requirements.txt pins {pins[name]}")
    assert not wrong, "\n".join(wrong)
    assert not unpinned, "declared but not pinned in requirements.txt:\n" + "\n".join(unpinned)


def test_libvirt_bindings_do_not_resolve_past_the_tested_major():
    """``pip install labkit[libvirt]`` resolved 12.8.0 (built from source) while the lock pins 9.0.0."""
    (req,) = [r for r in requirements("libvirt") if canonicalize_name(r.name) == "libvirt-python"]
    assert req.specifier.contains(lock()["libvirt-python"])
    assert not req.specifier.contains("12.8.0")


def test_the_lock_pins_what_labkit_imports_directly():
    """A package labkit imports (any module) is pinned in the lock: the README's install has it."""
    pins = lock()
    imported = set().union(*(third_party_imports(p) for p in modules().values()))
    assert not sorted(imported - set(pins))


def test_notebooks_and_reference_data_ship_as_package_data():
    from labkit.core import paths

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "labkit.studies"
    ]
    shipped = {p.name for pattern in data for p in (ROOT / "labkit" / "studies").glob(pattern)}
    in_repo = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert in_repo and in_repo <= shipped
    refs = {p.name for p in (ROOT / "data" / "reference").iterdir() if p.is_file()}
    assert refs and refs <= shipped, f"not shipped: {sorted(refs - shipped)}"
    # one source of truth: the package's folders are the repository's
    assert paths.notebooks_dir().resolve() == (ROOT / "notebooks").resolve()
    assert paths.reference_dir().resolve() == (ROOT / "data" / "reference").resolve()


def test_no_study_notebook_reads_reference_data_through_the_checkout():
    """The study notebooks take ``reference_dir`` (default: the packaged copy) and never need a
    checkout for it (``paths.repo_root()`` or ``data/reference`` from the checkout)."""
    bad = []
    for nb in sorted((ROOT / "notebooks").glob("0[1-9]*.ipynb")):
        text = nb.read_text()
        if re.search(r"repo_root\(|data_dir\(\) / \\\"reference|resolve\(None, \\\"data/reference", text):
            bad.append(nb.name)
        if "data/reference" in text and "paths.reference_dir(reference_dir)" not in text:
            bad.append(nb.name + " (no reference_dir parameter)")
    assert not bad
