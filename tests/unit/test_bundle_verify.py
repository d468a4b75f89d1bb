"""labkit report --bundle and labkit verify: a Frictionless Data Package and RO-Crate that their own
libraries accept, and every table and claim re-computed from the bundled store."""

from __future__ import annotations

import json
import sqlite3
import zipfile
from pathlib import Path

import pytest
import yaml

from labkit.cli import main
from labkit.report import write_bundle
from labkit.report.bundle import sha256_bytes
from labkit.report.verify import verify_bundle
from labkit.store.imports import import_manifest

# a 2^2 design, 3 replications: effects, variation and claims to re-compute
ROWS = [("1", "a", 10.0), ("2", "a", 20.0), ("1", "b", 12.0), ("2", "b", 23.0)]


@pytest.fixture
def bundle(tmp_path) -> Path:
    lines = ["x,y,ms"]
    for rep in range(3):
        for x, y, v in ROWS:
            lines.append(f"{x},{y},{v + 0.4 * rep - 0.1 * (rep == 2)}")
    (tmp_path / "r.csv").write_text("\n".join(lines) + "\n")
    doc = {
        "campaign": "small",
        "workload": "csv",
        "factors": {"x": ["1", "2"], "y": ["a", "b"]},
        "columns": {"factors": {"x": "x", "y": "y"}, "metrics": {"wall_ms": {"column": "ms", "unit": "ms"}}},
        "files": [{"path": "r.csv"}],
    }
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(doc))
    import_manifest(tmp_path / "m.yaml", tmp_path / "data")
    return write_bundle(tmp_path / "data", "small", tmp_path / "b.zip")


def rezip(src: Path, dst: Path, changes: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for info in z.infolist():
            out.writestr(info.filename, changes.get(info.filename, z.read(info)))
    return dst


def test_bundle_is_a_valid_data_package_and_ro_crate(bundle, tmp_path):
    frictionless = pytest.importorskip("frictionless")
    rocrate = pytest.importorskip("rocrate.rocrate")
    out = tmp_path / "unpacked"
    with zipfile.ZipFile(bundle) as z:
        z.extractall(out)
        names = set(z.namelist())
    assert {"summary.csv", "effects.csv", "claims.json", "settings.json"} <= names
    report = frictionless.validate(str(out / "datapackage.json"))
    assert report.valid, report.flatten(["title", "message"])[:5]
    pkg = json.loads((out / "datapackage.json").read_text())
    results = next(r for r in pkg["resources"] if r["path"] == "results.csv")
    fields = {f["name"]: f for f in results["schema"]["fields"]}
    assert fields["value"]["type"] == "number" and fields["value"]["description"]
    assert fields["x"]["description"] == "level of factor x" and fields["duration_s"]["unit"] == "s"
    crate = rocrate.ROCrate(str(out))
    files = {e.id: e for e in crate.get_entities() if "File" in e.type}
    assert set(files) == names - {"ro-crate-metadata.json"}
    for name, entity in files.items():
        assert entity["sha256"] == sha256_bytes((out / name).read_bytes()), name
    assert crate.root_dataset["license"].id == "https://spdx.org/licenses/CC-BY-4.0"
    labkit = crate.get("#labkit")
    assert labkit["version"] and "code state" in labkit["description"]
    claims = json.loads((out / "claims.json").read_text())
    assert claims["response"] == "wall_ms" and claims["findings"]


def test_verify_passes_then_names_a_changed_result_and_a_changed_store(bundle, tmp_path, capsys):
    assert main(["verify", str(bundle)]) == 0
    out = capsys.readouterr().out.strip()
    assert out.count("\n") == 0 and "OK" in out

    with zipfile.ZipFile(bundle) as z:
        results = z.read("results.csv").decode()
        store = z.read("store.sqlite")
    # one value of results.csv changed (the first run's measurement: 10.0 -> 10.5)
    lines = results.splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index("value")] = str(float(row[header.index("value")]) + 0.5)
    changed = "\n".join([lines[0], ",".join(row), *lines[2:]]) + "\n"
    bad = rezip(bundle, tmp_path / "bad_results.zip", {"results.csv": changed.encode()})
    assert main(["verify", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "results.csv: SHA-256 differs" in err
    assert "results.csv: row 2 (run_id " in err and "column value" in err

    # one value in the store changed: its digest, and what is re-computed from it, differ
    db = tmp_path / "store.sqlite"
    db.write_bytes(store)
    with sqlite3.connect(db) as c:
        c.execute(
            "UPDATE measurements SET value = value * 3 WHERE run_id = (SELECT min(run_id) FROM measurements)"
        )
    bad = rezip(bundle, tmp_path / "bad_store.zip", {"store.sqlite": db.read_bytes()})
    v = verify_bundle(bad)
    assert not v.ok
    text = "\n".join(v.problems)
    assert "store.sqlite: SHA-256 differs" in text
    assert "results.csv: row" in text and "summary.csv" in text and "effects.csv" in text
