"""The reproduction manifest (data/reference/reproduction.yaml) against the repository: every
notebook and campaign it names exists, every seed file it names is a seed the reference files
cite, and the README's study table is the one it generates."""
import subprocess
from pathlib import Path

import pytest

from labkit.errors import ConfigError
from labkit.studies import manifest

REPO = Path(__file__).resolve().parents[2]


def test_every_notebook_and_campaign_named_exists():
    entries = manifest.load_manifest()
    assert manifest.problems(entries) == []
    assert {e["seed"] for e in entries} == {"000", "001", "002", "003", "004"}
    cited = (REPO / "data" / "reference" / "README.md").read_text(encoding="utf-8") + "".join(
        p.read_text(encoding="utf-8") for p in (REPO / "data" / "reference").glob("*.csv"))
    for e in entries:
        assert e["file"] in cited, e["file"]


def committed_campaigns() -> set[str]:
    """The campaigns whose store git tracks: ``make demo`` leaves a campaign of its own in data/
    (affinity-local-<date>), which is the user's, not the repository's; outside a git checkout,
    every store in data/."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "data/*/store.sqlite"], cwd=REPO, capture_output=True,
                             check=True, timeout=60).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return {p.parent.name for p in (REPO / "data").glob("*/store.sqlite")}
    return {Path(p).parent.name for p in out.split("\0") if p}


def test_every_committed_seed_campaign_is_in_the_manifest():
    named = {c for e in manifest.load_manifest() for c in e["campaigns"]}
    committed = committed_campaigns()
    assert committed <= named, sorted(committed - named)


def test_the_readme_table_is_generated_from_the_manifest():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert manifest.rewrite_readme(readme, manifest.load_manifest()) == readme, \
        "README.md is stale: python -m labkit.studies.manifest --readme"
    assert manifest.main(["--check"]) == 0


def test_a_bad_manifest_is_refused_with_where(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("seeds:\n  '000':\n    file: x.txt\n    title: t\n    experiments:\n"
                   "      - {name: a, status: done, notebook: n.ipynb}\n")
    with pytest.raises(ConfigError, match=r"seeds.000.experiments\[0\]: status 'done'"):
        manifest.load_manifest(bad)
    bad.write_text("seeds:\n  '000':\n    file: x.txt\n    title: t\n    experiments:\n"
                   "      - {name: a, status: substituted, notebook: n.ipynb}\n")
    with pytest.raises(ConfigError, match="says 'by' what"):
        manifest.load_manifest(bad)
    entries = [{"seed": "9", "name": "x", "notebook": "nope.ipynb", "campaigns": ["nope"]}]
    assert len(manifest.problems(entries)) == 2
    with pytest.raises(ConfigError, match="exactly one reproduction block"):
        manifest.rewrite_readme("no block", [])
