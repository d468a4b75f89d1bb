"""LICENSE, CITATION.cff and pyproject.toml agree (issue 46): the license is Apache-2.0 in all three,
and the citation's version is the package's, so a release cannot cite another version."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_citation_matches_pyproject_and_license():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    # the keys CFF 1.2.0 requires
    assert cff["cff-version"] == "1.2.0"
    assert cff["message"] and cff["title"] == "labkit"
    assert cff["authors"] == [{"name": "labkit contributors"}]
    assert cff["version"] == project["version"]
    assert cff["license"] == project["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
