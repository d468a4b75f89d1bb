"""Regression tests of issue 13 (store side): private files and no secrets (5), storage errors
(11): read-only or full data directory, a store emptied or deleted beside its results.csv, a
zeroed index page, a read-only open that must ride out a WAL recovery, ``labkit export <typo>``."""

import os
import sqlite3
import subprocess
import uuid

import pytest

from labkit import cli
from labkit.design import Design
from labkit.errors import StoreError
from labkit.store import Store
from labkit.workloads import Measurement

DESIGN = Design.from_dict(
    {"factors": {"vcpus": [1, 2], "affinity": ["floating", "pinned"]}, "replications": 3, "seed": 7}
)


def fill(st, runs, metadata=None):
    for r in runs:
        st.record_run(
            r,
            status="ok",
            started="2026-01-01T00:00:00+00:00",
            duration_s=1.0,
            measurements=[Measurement("wall_time_s", 1.5, "s")],
            metadata=metadata or {},
        )


def mode(path):
    return oct(path.stat().st_mode & 0o777)


# -- 5: private files, no secrets ------------------------------------------------------------------
def test_store_files_are_private_by_default(tmp_path):
    old = os.umask(0o022)
    try:
        st = Store.for_campaign(tmp_path, "c")
        fill(st, DESIGN.plan()[:2])
        assert mode(tmp_path / "c") == "0o700"
        assert mode(tmp_path / "c" / "store.sqlite") == "0o600"
        assert mode(tmp_path / "c" / "store.sqlite-wal") == "0o600"
        st.export()
        st.close()
        for name in ("results.csv", "results.parquet", "runs.csv", "fingerprints.json"):
            assert mode(tmp_path / "c" / name) == "0o600", name
        with Store.for_campaign(tmp_path, "g", group_readable=True) as g:
            g.export()
        assert mode(tmp_path / "g") == "0o750" and mode(tmp_path / "g" / "store.sqlite") == "0o640"
        assert mode(tmp_path / "g" / "results.csv") == "0o640"
    finally:
        os.umask(old)


def test_an_existing_world_readable_store_is_made_private(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        fill(st, DESIGN.plan()[:1])
    os.chmod(tmp_path / "s.sqlite", 0o644)
    Store(tmp_path / "s.sqlite").close()
    assert mode(tmp_path / "s.sqlite") == "0o600"


def test_secrets_never_reach_the_store(tmp_path):
    secret = "pw-" + uuid.uuid4().hex
    with Store(tmp_path / "s.sqlite") as st:
        st.set_meta(
            backend_options={
                "host": "h",
                "password": secret,
                "connect_kwargs": {"passphrase": secret, "pkey": secret},
            }
        )
        fill(st, DESIGN.plan()[:1], metadata={"instances": [{"token": secret, "name": "i"}]})
        st.add_fingerprint("f", {"backend": {"api_key": secret}})
        assert st.meta()["backend_options"] == {
            "host": "h",
            "password": "<redacted>",
            "connect_kwargs": {"passphrase": "<redacted>", "pkey": "<redacted>"},
        }
        st.export()
    for f in tmp_path.iterdir():
        assert secret.encode() not in f.read_bytes(), f.name


# -- 11: storage errors ----------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_lost_store_beside_results_is_not_silently_restarted(tmp_path, damage):
    with Store.for_campaign(tmp_path, "c") as st:
        fill(st, DESIGN.plan()[:3])
        st.export()
    before = (tmp_path / "c" / "results.csv").read_bytes()
    store = tmp_path / "c" / "store.sqlite"
    if damage == "truncate":
        store.write_bytes(b"")
    else:
        store.unlink()
    with pytest.raises(StoreError, match=r"(empty|missing) but results.csv.*remain"):
        Store.for_campaign(tmp_path, "c")
    with pytest.raises(StoreError):
        Store.for_campaign(tmp_path, "c", readonly=True)
    assert (tmp_path / "c" / "results.csv").read_bytes() == before  # untouched
    with Store.for_campaign(tmp_path, "c", allow_new=True) as st:  # explicit: start over
        assert st.completed() == set()


def _zero_page(path, table_or_index):
    con = sqlite3.connect(path)
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table_or_index,)).fetchone()[0]
    con.close()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\0" * page_size)


def test_zeroed_index_page_is_detected_on_a_writing_open_and_by_check(tmp_path):
    """Integrity is checked where the store is written and on demand (``labkit check``); a
    read-only open stays O(1) (issue 45: quick_check took 9-13 s at 100,000 runs)."""
    from labkit.store.check import check_store

    path = tmp_path / "s.sqlite"
    with Store(path) as st:
        fill(st, DESIGN.plan())
    _zero_page(path, "sqlite_autoindex_runs_1")
    with pytest.raises(StoreError, match="corrupt"):
        Store(path)
    Store(path, readonly=True).close()
    assert not check_store(path).ok


def test_readonly_open_rides_out_a_wal_recovery(tmp_path, monkeypatch):
    with Store(tmp_path / "s.sqlite") as st:
        fill(st, DESIGN.plan()[:2])
    real = sqlite3.connect
    failures = []

    def connect(*a, **kw):
        if len(failures) < 2:  # what a reader sees right after a writer was SIGKILLed
            failures.append(1)
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return real(*a, **kw)

    monkeypatch.setattr(sqlite3, "connect", connect)
    with Store(tmp_path / "s.sqlite", readonly=True) as st:
        assert len(st.completed()) == 2


def test_storage_errors_become_store_errors_saying_why(tmp_path, monkeypatch):
    st = Store(tmp_path / "s.sqlite")

    class Full:
        def __init__(self, db):
            self.db = db

        def execute(self, sql, *a):
            if sql.startswith("INSERT"):
                raise sqlite3.OperationalError("database or disk is full")
            return self.db.execute(sql, *a)

        executemany = execute

    st._db = Full(st._db)
    with pytest.raises(StoreError, match="disk is full"):
        fill(st, DESIGN.plan()[:1])


def _mount_tmpfs(path, options):
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")


@pytest.mark.root
def test_full_and_readonly_data_directories_give_clear_errors(tmp_path):
    full = tmp_path / "full"
    _mount_tmpfs(full, "size=96k")
    try:
        with pytest.raises(StoreError, match="disk is full"):
            with Store.for_campaign(full, "c") as st:
                big = {"blob": "x" * 20000}
                fill(st, DESIGN.plan(), metadata=big)
    finally:
        subprocess.run(["umount", "-l", str(full)])
    ro = tmp_path / "ro"
    _mount_tmpfs(ro, "size=1m,ro")
    try:
        with pytest.raises(StoreError, match="read-only"):
            Store.for_campaign(ro, "c")
    finally:
        subprocess.run(["umount", "-l", str(ro)])


def test_export_of_an_unknown_campaign_creates_nothing(tmp_path, capsys):
    assert cli.main(["export", "typo", "--data-dir", str(tmp_path / "data")]) == 2
    assert "no campaign 'typo'" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()
