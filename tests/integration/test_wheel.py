"""The built wheel stands alone (issue 44): installed into a fresh venv (``python -m venv``, then
``pip install labkit-*.whl[extra]``), it imports every module of the base with the base install only,
and every backend module with only the extra that enables it; it ships the notebooks and the reference
data, and it records the commit it was built from. Builds and installs once per test process
(tests/support/wheel.py, shared with test_outside_repo.py): a few minutes on a first run (PyPI)."""

from __future__ import annotations

import json

import pytest

from labkit.core.fingerprint import labkit_commit
from tests.support import wheel
from tests.support.packaging import extras_of, modules

pytestmark = pytest.mark.slow

#: each extra in turn, added to the venv: a module is imported right after its extra is installed,
#: before any later extra can supply what its own one lacks (docker first: paramiko came with ssh)
ORDER = ("docker", "lxd", "libvirt", "ssh", "notebooks", "openstack", "cloudstack", "azure")

IMPORT_ALL = """
import importlib, json, sys
failed = {}
for name in json.loads(sys.argv[1] if len(sys.argv) > 1 else %r):
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failed))
"""


def _import(venv, names: list[str]) -> dict:
    res = wheel.python(venv, IMPORT_ALL % json.dumps(names))
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_every_module_imports_from_the_wheel_with_only_its_declared_extras():
    by_extra: dict[str, list[str]] = {}
    base = []
    for name in modules():
        if name.endswith("__main__"):  # `python -m labkit`: runs the CLI when imported
            continue
        extras = extras_of(name)
        if extras is None:
            base.append(name)
        else:
            by_extra.setdefault(min(extras, key=ORDER.index), []).append(name)
    venv = wheel.venv()
    assert _import(venv, base) == {}, "base modules that the base install cannot import"
    # the docker backend says which extra it needs, and after exactly that install it works
    got = wheel.python(
        venv,
        "from labkit.backends import backend_class\n"
        "try:\n    backend_class('docker')\nexcept Exception as e:\n    print(e)",
    )
    assert "pip install 'labkit[docker]'" in got.stdout
    for extra in ORDER:
        venv = wheel.venv((extra,))
        names = by_extra.get(extra, [])
        if extra == "notebooks":
            # papermill first, as `papermill --engine labkit` loads it: importing labkit.report.papermill_engine
            # on its own makes papermill load that entry point while it is half imported (a cycle of its own)
            names = ["papermill", *names]
        assert _import(venv, names) == {}, f"labkit[{extra}] does not install what its modules import"


def test_the_wheel_ships_the_notebooks_and_reference_data_and_records_its_commit():
    venv = wheel.venv()
    out = wheel.python(
        venv,
        "import json, labkit\n"
        "from labkit.core import paths\n"
        "from labkit.core.fingerprint import labkit_commit\n"
        "print(json.dumps({'nb': sorted(p.name for p in paths.notebooks_dir().glob('*.ipynb')),\n"
        "  'ref': sorted(p.name for p in paths.reference_dir().iterdir()),\n"
        "  'checkout': str(paths.checkout()), 'file': labkit.__file__,\n"
        "  'commit': labkit_commit(), 'version': labkit.__version__}))",
    ).stdout
    got = json.loads(out)
    assert "site-packages" in got["file"] and got["checkout"] == "None"
    assert "00_explorer.ipynb" in got["nb"] and "01_affinity_factorial.ipynb" in got["nb"]
    assert {"affinity_influence.csv", "sweeps.csv", "reproduction.yaml"} <= set(got["ref"])
    assert got["version"]
    assert got["commit"] == f"{labkit_commit()} (installed)"
