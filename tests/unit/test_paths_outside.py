"""labkit outside its repository (issue 44): "the checkout" is only this repository (its own marker,
never any folder with pyproject.toml and data/); outside it relative paths start from the working
directory as ``Campaign(data_dir="data")``'s do; the notebooks and the papers' tables ship with the
package, ``labkit notebooks copy`` writes them into a user's folder, the dashboard finds its explorer
without a checkout, and an installed labkit names the commit it was built from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit import cli
from labkit.core import fingerprint, paths
from labkit.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A user's project folder that looks like the old markers (pyproject.toml and data/), no checkout
    above it, and this package not seen as one either."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LABKIT_ROOT", raising=False)
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)
    monkeypatch.setattr(paths, "_PACKAGE", tmp_path / "site-packages" / "labkit")
    return tmp_path


def test_the_checkout_is_found_by_its_own_marker():
    assert (ROOT / paths.MARKER).is_file()
    assert paths.checkout(ROOT / "labkit" / "core") == ROOT
    assert paths.repo_root() == ROOT


def test_a_project_with_pyproject_and_data_is_not_the_checkout(elsewhere):
    assert paths.checkout() is None
    with pytest.raises(ConfigError, match="no labkit checkout"):
        paths.repo_root()


def test_relative_paths_start_from_the_working_directory_outside_a_checkout(elsewhere):
    assert paths.data_dir("data") == elsewhere / "data"
    assert paths.data_dir() == elsewhere / "data"
    assert paths.resolve("figs", "out") == elsewhere / "figs"
    assert paths.data_dir("/abs/x") == Path("/abs/x")


def test_the_data_dir_environment_variable_is_the_default(elsewhere, monkeypatch):
    monkeypatch.setenv(paths.DATA_DIR_ENV, "/srv/campaigns")
    assert paths.data_dir() == Path("/srv/campaigns")
    assert paths.data_dir("mine") == elsewhere / "mine"


def test_reference_data_and_notebooks_come_with_the_package():
    assert (paths.reference_dir() / "affinity_influence.csv").is_file()
    assert (paths.notebooks_dir() / "01_affinity_factorial.ipynb").is_file()
    from labkit.studies import sweeps, verdicts

    assert verdicts.reference_dir() == paths.reference_dir()
    assert sweeps.reference_file().parent == paths.reference_dir()


def test_notebooks_copy_writes_them_into_a_user_folder(tmp_path, capsys):
    dest = tmp_path / "mine"
    assert cli.main(["notebooks", "copy", str(dest)]) == 0
    names = sorted(p.name for p in dest.glob("*.ipynb"))
    assert "00_explorer.ipynb" in names and "01_affinity_factorial.ipynb" in names
    nb = json.loads((dest / "01_affinity_factorial.ipynb").read_text())
    params = "".join(
        next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))["source"]
    )
    assert "data_dir = None" in params and "reference_dir = None" in params
    (dest / "00_explorer.ipynb").write_text("mine")
    assert cli.main(["notebooks", "copy", str(dest)]) == 0
    assert (dest / "00_explorer.ipynb").read_text() == "mine"  # kept without --force
    assert "kept" in capsys.readouterr().err


def test_the_dashboard_serves_the_packaged_explorer_over_any_data_dir(elsewhere, monkeypatch):
    from labkit.report import dashboard

    monkeypatch.setattr(paths, "_PACKAGE", ROOT / "labkit")  # the package data, as installed
    monkeypatch.setattr(paths, "checkout", lambda start=None: None)  # and no checkout anywhere
    nb = dashboard.explorer_notebook()
    assert nb == ROOT / "labkit" / "studies" / "notebooks" / "00_explorer.ipynb"
    argv, env, _ = dashboard.voila_command(token="", data_dir="campaigns")
    assert str(nb) in argv and env[paths.DATA_DIR_ENV] == str(elsewhere / "campaigns")


def test_an_installed_labkit_names_the_commit_it_was_built_from(tmp_path, monkeypatch):
    pkg = tmp_path / "site-packages" / "labkit"
    (pkg / "core").mkdir(parents=True)
    (pkg / fingerprint.BUILD_COMMIT_FILE).write_text("0123456789ab\n")
    monkeypatch.setattr(fingerprint, "__file__", str(pkg / "core" / "fingerprint.py"))
    fingerprint.labkit_commit.cache_clear()
    try:
        assert fingerprint.labkit_commit() == "0123456789ab (installed)"
        (pkg / fingerprint.BUILD_COMMIT_FILE).unlink()
        fingerprint.labkit_commit.cache_clear()
        assert fingerprint.labkit_commit() == "n/a"
    finally:
        fingerprint.labkit_commit.cache_clear()
