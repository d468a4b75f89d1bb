"""labkit in a researcher's own environment (issue 44): the built wheel in a fresh venv, used from a
folder outside the repository by a non-root user (``labkit-other``, made by the test set-up):
``labkit run`` on the local backend unconfined (``--backend-option enforce_limits=false``, as the
error tells a user without cgroups to write it), the store checked, the unconfined mode said at the
start and by ``labkit show``; then ``labkit notebooks copy`` and notebook 01 in view mode (papermill)
over a committed campaign copied into that folder. Nothing of the checkout is on the user's path.
The wheel and venv are built once per test process (tests/support/wheel.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support import wheel
from tests.support.other_users import real_user

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="makes a user: needs root")]

ROOT = Path(__file__).resolve().parents[2]
DESIGN = "name: tiny\nfactors:\n  vcpus: [1, 2]\nreplications: 1\nseed: 7\n"


@pytest.fixture(scope="module")
def study():
    """A folder of ``labkit-other``'s outside the repository, and that user."""
    user = real_user()
    d = Path(tempfile.mkdtemp(prefix="labkit-study-"))
    d.chmod(0o755)
    folder = d / "study"
    folder.mkdir()
    os.chown(folder, user.uid, user.gid)
    try:
        yield user, folder
    finally:
        shutil.rmtree(d, ignore_errors=True)


def as_user(user, venv: Path, folder: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``venv/bin/<argv[0]> argv[1:]`` as ``user`` in ``folder``: its HOME, no PYTHONPATH, no LABKIT_ROOT."""
    env = {"PATH": f"{venv}/bin:/usr/bin:/bin", "HOME": str(user.home), "LANG": "C.UTF-8"}
    res = subprocess.run(["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups",
                          str(venv / "bin" / argv[0]), *argv[1:]], capture_output=True, text=True, env=env,
                         cwd=folder, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(argv)} as {user.name}: {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


def test_labkit_run_unconfined_as_a_user_outside_the_repository(study):
    user, folder = study
    venv = wheel.venv()
    design = folder / "tiny.yaml"
    design.write_text(DESIGN)
    os.chown(design, user.uid, user.gid)
    run = as_user(user, venv, folder, "labkit", "run", "tiny.yaml", "--backend", "local", "--workload", "command",
                  "--param", 'argv=["sleep", "0"]', "--backend-option", "enforce_limits=False",
                  "--campaign-id", "tiny-unconfined", "--telemetry", "off")
    said = run.stdout + run.stderr
    assert "unconfined: the local backend runs with enforce_limits=false" in said
    store = folder / "data" / "tiny-unconfined" / "store.sqlite"       # ./data: no checkout needed
    assert store.is_file() and store.stat().st_uid == user.uid
    check = as_user(user, venv, folder, "labkit", "check", "tiny-unconfined")
    assert check.returncode == 0
    show = as_user(user, venv, folder, "labkit", "show", "tiny-unconfined").stdout
    assert "runs       2: {'ok': 2}" in show
    assert "unconfined: 2 of 2 runs ran without enforced limits" in show
    # the installed labkit recorded the commit its wheel was built from
    fp = as_user(user, venv, folder, "python", "-c",
                 "from labkit.store import Store\n"
                 "st = Store.for_campaign('data', 'tiny-unconfined', readonly=True)\n"
                 "print([fp.get('host', fp).get('labkit_commit') for fp in st.fingerprints().values()])").stdout
    assert "(installed)" in fp and "n/a" not in fp


def test_notebook_01_in_view_mode_from_the_copied_notebooks(study):
    user, folder = study
    venv = wheel.venv(("notebooks",))
    as_user(user, venv, folder, "labkit", "notebooks", "copy", "nbs")
    assert (folder / "nbs" / "01_affinity_factorial.ipynb").is_file()
    data = folder / "data"
    data.mkdir(exist_ok=True)
    shutil.copytree(ROOT / "data" / "affinity-local", data / "affinity-local",
                    ignore=shutil.ignore_patterns("output"))
    for p in [data, *data.rglob("*")]:
        os.chown(p, user.uid, user.gid)
    kernel = as_user(user, venv, folder, "python", "-m", "ipykernel", "install", "--user", "--name", "python3")
    assert kernel.returncode == 0
    run = as_user(user, venv, folder, "papermill", "nbs/01_affinity_factorial.ipynb", "out.ipynb",
                  "-p", "mode", "view", "-p", "data_dir", "data", "-p", "interactive", "False",
                  "-p", "figures_dir", "figs", timeout=600)
    assert run.returncode == 0
    text = (folder / "out.ipynb").read_text()
    assert "mode view, campaign 'affinity-local'" in text
    # the paper's Table 3, read from the reference data that ships with the package (no checkout)
    # (its 134.78 s shown to 4 significant digits, as the notebook shows every number)
    assert "Table 3, paper (Xen, N-queens)" in text and "best_affinity" in text and "134.8" in text
    assert any((folder / "figs").glob("*.png"))
