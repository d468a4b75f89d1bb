"""Issue 47 (5): stores written by another labkit, or with tampered rows, give clear errors, never
tracebacks; ``labkit check`` says what is wrong with a store.

Every test here failed on the code before issue 47: a newer store was read (``ValueError: too many
values to unpack``), a row whose JSON was not JSON raised ``JSONDecodeError`` from status, show,
report and export, a tampered ``adaptive_pending`` entry a ``TypeError``, and there was no
``labkit check``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace

import pytest

from labkit import __version__
from labkit.cli import main
from labkit.design import Design, Run
from labkit.errors import StoreError
from labkit.store import SCHEMA_VERSION, Store
from tests.support.stores import BAD_RUN, CID, make_store

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "tests" / "vectors"


def sql(path: Path, *statements: str, args=()) -> None:
    with closing(sqlite3.connect(path)) as db, db:
        for s in statements:
            db.execute(s, args)


def labkit(*argv: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it (a separate process: a traceback would show on its stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "labkit", *argv],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )


def make_newer(path: Path, *, record_writer: bool = True) -> None:
    """What a newer labkit might write: one more column in runs, schema 99 (and its version)."""
    sql(path, "ALTER TABLE runs ADD COLUMN newer TEXT", "PRAGMA user_version = 99")
    if not record_writer:  # as the store: one made from a store of before (no store_info)
        sql(path, "DROP TABLE IF EXISTS store_info")
    else:
        sql(
            path,
            "CREATE TABLE IF NOT EXISTS store_info (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "INSERT OR REPLACE INTO store_info VALUES ('labkit_version', '9.9.0')",
        )


# -- versions --------------------------------------------------------------------------------------


@pytest.mark.parametrize("readonly", [True, False], ids=["read-only", "writer"])
def test_a_store_of_a_newer_labkit_is_refused_naming_both_versions(tmp_path, readonly):
    """Refused, read-only and for writing, with both labkits' versions and schemas; the writer
    changes nothing in the file (before: read, then ValueError: too many values to unpack)."""
    path = make_store(tmp_path)
    make_newer(path)
    before = path.read_bytes()
    with pytest.raises(StoreError) as err:
        Store(path, readonly=readonly)
    assert (
        f"written by labkit 9.9.0 (schema 99); this is labkit {__version__} (schema {SCHEMA_VERSION}): "
        "upgrade"
    ) in str(err.value)
    assert "\n" not in str(err.value)
    assert path.read_bytes() == before
    assert not Path(f"{path}-wal").exists()


def test_a_newer_store_without_a_recorded_version_is_refused_on_the_command_line(tmp_path):
    """The issue's store (no writer recorded, schema 99): report and status refuse in one line."""
    path = make_store(tmp_path)
    make_newer(path, record_writer=False)
    for argv in (["status", CID], ["report", CID, "-o", str(tmp_path / "r.html")], ["export", CID]):
        res = labkit(*argv, "--data-dir", str(tmp_path))
        assert res.returncode == 2, (argv, res.stderr)
        assert "Traceback" not in res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "written by a newer labkit (version not recorded) (schema 99)" in lines[0]


def test_a_new_store_records_its_schema_and_labkit_version(tmp_path):
    path = make_store(tmp_path)
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert (
            db.execute("SELECT value FROM store_info WHERE key = 'labkit_version'").fetchone()[0]
            == __version__
        )


@pytest.mark.parametrize("vector", sorted(p.name for p in VECTORS.glob("*.sqlite")))
def test_an_older_store_is_migrated_and_stamped(tmp_path, vector):
    """A store written before schemas were numbered (user_version 0, no iteration column) is read
    as before, then migrated and stamped with this schema when opened for writing."""
    path = tmp_path / vector
    shutil.copy(VECTORS / vector, path)
    with Store(path, readonly=True) as st:
        before = st.tidy()
    assert Store(path, readonly=True).schema_version() == 0
    with Store(path) as st:
        assert st.schema_version() == SCHEMA_VERSION and st.writer_version() == __version__
        assert "iteration" in st._columns("measurements")
        after = st.tidy()
    assert len(after) == len(before) and list(after.run_id) == list(before.run_id)


# -- malformed rows --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "column,value",
    [
        ("metadata", "{not json"),
        ("levels", "[1, 2]"),
        ("run_order", "first"),
        ("duration_s", "slow"),
    ],
    ids=["metadata-not-json", "levels-not-object", "order-not-number", "duration-not-number"],
)
def test_a_malformed_run_is_left_out_and_named_the_others_still_read(tmp_path, column, value):
    path = make_store(tmp_path)
    sql(path, f"UPDATE runs SET {column} = ? WHERE run_id = ?", args=(value, BAD_RUN))
    with Store(path, readonly=True) as st:
        runs, tidy = st.runs(), st.tidy()
        problems = st.problems
    assert len(runs) == 7 and BAD_RUN not in set(runs.run_id) and BAD_RUN not in set(tidy.run_id)
    assert len(tidy) == 7
    assert len(problems) == 1 and f"campaign {CID}: run {BAD_RUN}: column {column}:" in problems[0]


def test_a_malformed_measurement_leaves_its_run_out(tmp_path):
    path = make_store(tmp_path)
    sql(path, "UPDATE measurements SET value = 'fast' WHERE run_id = ?", args=(BAD_RUN,))
    with Store(path, readonly=True) as st:
        tidy = st.tidy()
        assert st.problems == [
            f"campaign {CID}: run {BAD_RUN}: column measurements.value: 'fast' is not a number"
        ]
    assert BAD_RUN not in set(tidy.run_id) and len(tidy) == 7 and tidy.value.map(type).eq(float).all()


def test_malformed_metadata_on_the_command_line_one_line_and_the_other_runs(tmp_path):
    """status, show, report and export each print one line naming the campaign, the run and the
    column, and go on with the 7 other runs (before: a JSONDecodeError traceback in each)."""
    path = make_store(tmp_path)
    sql(path, "UPDATE runs SET metadata = '{not json' WHERE run_id = ?", args=(BAD_RUN,))
    out = tmp_path / "out"
    cases = {
        "status": ["status", CID],
        "show": ["show", CID],
        "report": ["report", CID, "-o", str(tmp_path / "r.html"), "--bundle", str(tmp_path / "b.zip")],
        "export": ["export", CID, "--out", str(out)],
    }
    for name, argv in cases.items():
        res = labkit(*argv, "--data-dir", str(tmp_path))
        assert res.returncode == 0, (name, res.stderr)
        assert "Traceback" not in res.stderr + res.stdout, name
        named = [
            ln for ln in res.stderr.splitlines() if f"campaign {CID}: run {BAD_RUN}: column metadata" in ln
        ]
        assert len(named) == 1, (name, res.stderr)
    import pandas as pd

    exported = pd.read_csv(out / "results.csv")
    assert len(exported) == 7 and BAD_RUN not in set(exported.run_id)
    assert (tmp_path / "r.html").stat().st_size > 0 and (tmp_path / "b.zip").stat().st_size > 0


def test_a_malformed_meta_row_refuses_in_one_line(tmp_path):
    """The campaign's settings themselves damaged: nothing can be read safely; one line, no traceback."""
    path = make_store(tmp_path)
    sql(path, "UPDATE meta SET value = '{\"factors\": ' WHERE key = 'design'")
    res = labkit("show", CID, "--data-dir", str(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"campaign {CID}: meta key 'design': column value: not JSON" in lines[0]


# -- the pending adaptive round --------------------------------------------------------------------


def adaptive_store(tmp_path: Path, pending) -> tuple[Design, Store]:
    from labkit.run.adaptive import stored_values  # noqa: F401  (the module under test imports)

    design = Design.from_dict(
        {"factors": {"vcpus": [1, 2]}, "seed": 5, "replications": {"target_ci": 1e-9, "min": 2, "max": 4}}
    )
    st = Store(tmp_path / CID / "store.sqlite")
    st.set_meta(campaign_id=CID, design=design.to_dict(), adaptive_round=1, adaptive_pending=pending)
    for run in design.plan():
        st.record_run(
            run,
            status="ok",
            started="2026-01-01T00:00:00+00:00",
            duration_s=1.0,
            measurements=[SimpleNamespace(instance=0, metric="y", unit="s", value=1.0 + run.replicate)],
        )
    return design, st


@pytest.mark.parametrize(
    "entry,said",
    [
        (
            {"run_id": "c0000r003", "run_order": 4, "config": 0, "replicate": 3, "levels": {"vcpus": 1}},
            "unknown field(s) 'run_order'",
        ),
        (
            {"run_id": "c0000r003", "order": "4", "config": 0, "replicate": 3, "levels": {"vcpus": 1}},
            "order '4' is not a whole number",
        ),
        (
            {"run_id": "c0000r003", "order": 4, "config": 0, "replicate": 3, "levels": {"vcpus": 64}},
            "is not a run of this design",
        ),
        ("c0000r003", "where a run's fields are expected"),
    ],
    ids=["unknown-field", "order-text", "levels-not-the-design", "not-an-object"],
)
def test_a_tampered_pending_adaptive_run_is_refused_naming_it(tmp_path, entry, said):
    """Before: TypeError: Run.__init__() got an unexpected keyword argument 'run_order' (or the
    forged levels, vcpus=64, were run)."""
    from labkit.run.adaptive import run_adaptive

    design, st = adaptive_store(tmp_path, [entry])
    ran = []
    with st, pytest.raises(StoreError) as err:
        run_adaptive(design, st, ran.extend, response="y")
    assert f"campaign {CID}: meta adaptive_pending[0]: " in str(err.value) and said in str(err.value)
    assert ran == []


def test_a_pending_adaptive_round_as_labkit_wrote_it_resumes(tmp_path):
    from labkit.run.adaptive import run_adaptive

    good = Run("c0001r003", 4, 1, 3, {"vcpus": 2})
    design, st = adaptive_store(tmp_path, [dataclasses.asdict(good)])
    ran: list[Run] = []
    with st:
        run_adaptive(design, st, ran.extend, response="y", budget=1)
    assert ran == [good]


# -- labkit check ----------------------------------------------------------------------------------


def check(data: Path, cid: str = CID, capsys=None) -> tuple[int, str]:
    code = main(["check", cid, "--data-dir", str(data)])
    return code, capsys.readouterr().out if capsys is not None else ""


FAULTS = {
    # name: (SQL, arguments, what the report must say)
    "metadata-not-json": (
        "UPDATE runs SET metadata = '{x' WHERE run_id = ?",
        (BAD_RUN,),
        f"run {BAD_RUN}: column metadata: not JSON",
    ),
    "levels-not-object": (
        "UPDATE runs SET levels = '3' WHERE run_id = ?",
        (BAD_RUN,),
        f"run {BAD_RUN}: column levels: a JSON int",
    ),
    "replicate-text": (
        "UPDATE runs SET replicate = 'two' WHERE run_id = ?",
        (BAD_RUN,),
        f"run {BAD_RUN}: column replicate: 'two' is not a whole number",
    ),
    "status-unknown": (
        "UPDATE runs SET status = 'great' WHERE run_id = ?",
        (BAD_RUN,),
        f"run {BAD_RUN}: column status: 'great' is not one of",
    ),
    "levels-not-the-design": (
        "UPDATE runs SET levels = '{\"cpus\": 1}' WHERE run_id = ?",
        (BAD_RUN,),
        f"run {BAD_RUN}: column levels: no level of the design's factor(s) affinity, vcpus (has cpus)",
    ),
    "measurement-value-text": (
        "UPDATE measurements SET value = 'fast' WHERE run_id = ?",
        (BAD_RUN,),
        f"run {BAD_RUN}: column measurements.value: 'fast' is not a number",
    ),
    "orphan-measurement": (
        "INSERT INTO measurements (run_id, instance, metric, value, unit, iteration) "
        "VALUES (?, 0, 't_s', 1.0, 's', 0)",
        ("c0009r009",),
        "1 orphan measurement(s): of run(s) c0009r009",
    ),
    "meta-not-json": (
        "UPDATE meta SET value = '{' WHERE key = ?",
        ("workload",),
        "meta key 'workload': column value: not JSON",
    ),
    "design-not-a-design": (
        "UPDATE meta SET value = '{\"factors\": 7}' WHERE key = ?",
        ("design",),
        "meta key 'design': column value: not a design",
    ),
    "fingerprint-not-json": (
        "UPDATE fingerprints SET data = 'kernel 6.1' WHERE id = ?",
        ("fp1",),
        "fingerprint fp1: column data: not JSON",
    ),
    "pending-tampered": (
        "INSERT OR REPLACE INTO meta VALUES ('adaptive_pending', ?)",
        (json.dumps([{"run_id": "c0000r003", "run_order": 9}]),),
        "meta key 'adaptive_pending': entry 0: not a run (unknown field(s) 'run_order'",
    ),
    "extra-column": (
        "ALTER TABLE runs ADD COLUMN surprise TEXT",
        (),
        "table runs: column(s) surprise this labkit does not know",
    ),
    "newer-schema": ("PRAGMA user_version = 99", (), "(schema 99); this is labkit"),
}


def test_check_passes_a_good_store(tmp_path, capsys):
    make_store(tmp_path)
    code, out = check(tmp_path, capsys=capsys)
    assert code == 0, out
    assert out.startswith(f"campaign {CID}: store ") and ": ok (schema 1" in out and "8 runs" in out


@pytest.mark.parametrize("fault", list(FAULTS))
def test_check_finds_each_injected_fault(tmp_path, capsys, fault):
    path = make_store(tmp_path)
    statement, args, said = FAULTS[fault]
    sql(path, statement, args=args)
    code, out = check(tmp_path, capsys=capsys)
    assert code == 1, out
    assert said in out, out
    assert f"campaign {CID}: {said}" in out or said.startswith("(schema")


def test_check_finds_a_file_that_is_no_store(tmp_path, capsys):
    path = make_store(tmp_path)
    path.write_bytes(b"not an sqlite file at all" * 100)
    code, out = check(tmp_path, capsys=capsys)
    assert code == 1 and "not an SQLite store, or corrupt" in out


@pytest.mark.parametrize("vector", sorted(p.name for p in VECTORS.glob("*.sqlite")))
def test_check_passes_the_stores_of_before(tmp_path, capsys, vector):
    """A store written by an earlier labkit (no schema number, no iteration column) is not a fault."""
    (tmp_path / "old").mkdir()
    shutil.copy(VECTORS / vector, tmp_path / "old" / "store.sqlite")
    code, out = check(tmp_path, "old", capsys=capsys)
    assert code == 0, out


def test_a_store_still_being_created_is_a_store_error_when_read_not_an_sqlite_one(tmp_path):
    """A reader that opens a store between its file's creation and its tables' (a campaign starting:
    the reliability harness met ``sqlite3.OperationalError: no such table: runs``) gets a StoreError
    saying so; once the writer has made the store, the same read works."""
    path = tmp_path / CID / "store.sqlite"
    path.parent.mkdir()
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.commit()
    with pytest.raises(
        StoreError, match=r"not a complete labkit store: no runs, measurements table \(its writer"
    ):
        Store(path, readonly=True)
    path.unlink()
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA application_id = 1")  # an SQLite file with no table at all
        db.commit()
    with pytest.raises(StoreError, match="an empty database, or a file labkit did not write"):
        Store(path, readonly=True)
    path.unlink()
    Store(path).close()  # the writer creates it
    with Store(path, readonly=True) as st:
        assert st.completed() == set()
