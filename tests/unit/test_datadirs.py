"""The record of data dirs campaigns used on this host (labkit.core.datadirs, issue 28 second pass):
what local instances hide after a campaign stops, bounded, private, never written through a link,
and, read as root, a user's record counts only for the directories that user owns."""

import os
import types

import pytest

from labkit.backends import sandbox
from labkit.core import datadirs, registry


@pytest.fixture(autouse=True)
def run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


def test_a_registered_data_dir_is_remembered_after_the_campaign_stops(tmp_path, run_dir):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    with registry.register("dd-1", a):
        pass
    with registry.register("dd-2", b):
        pass
    with registry.register("dd-3", a):  # used again: moved to the end, not repeated
        pass
    assert registry.entries() == [] and datadirs.known() == [str(b), str(a)]
    record = run_dir / datadirs.NAME
    assert record.stat().st_mode & 0o777 == 0o600 and record.read_text() == f"{b}\n{a}\n"
    b.rmdir()
    assert datadirs.known() == [str(a)]  # gone dirs are not hidden (nor an error)


def test_the_record_is_bounded_and_never_written_through_a_link(tmp_path, run_dir, monkeypatch):
    monkeypatch.setattr(datadirs, "MAX_ENTRIES", 3)
    dirs = [tmp_path / f"d{i}" for i in range(5)]
    for d in dirs:
        d.mkdir()
        datadirs.remember(d)
    assert datadirs.known() == [str(d) for d in dirs[2:]]
    record = run_dir / datadirs.NAME
    record.unlink()
    target = tmp_path / "elsewhere"
    target.write_text("untouched\n")
    record.symlink_to(target)
    datadirs.remember(dirs[0])  # logged, not raised, and the link's target is left alone
    assert target.read_text() == "untouched\n" and datadirs.known() == []


def test_gone_dirs_are_pruned_whenever_the_record_is_written(tmp_path, run_dir, monkeypatch):
    """Issue 47: stale lines (a test suite's temporary data dirs, gone once pytest prunes them)
    stayed in the record until it reached its 1,000 lines; every one was read, checked and, while
    it existed, hidden in each instance. Now a write drops every gone directory (and past the
    bound the oldest existing ones)."""
    monkeypatch.setattr(datadirs, "MAX_ENTRIES", 4)
    dirs = [tmp_path / f"d{i}" for i in range(7)]
    for d in dirs[:4]:
        d.mkdir()
        datadirs.remember(d)
    dirs[1].rmdir()
    dirs[2].rmdir()
    dirs[4].mkdir()
    datadirs.remember(dirs[4])  # d1 and d2 are gone: both dropped, though under the bound
    assert (run_dir / datadirs.NAME).read_text().split() == [str(dirs[i]) for i in (0, 3, 4)]
    datadirs.remember(dirs[3])  # used again: moved to the end
    assert (run_dir / datadirs.NAME).read_text().split() == [str(dirs[i]) for i in (0, 4, 3)]
    for d in dirs[5:]:
        d.mkdir()
        datadirs.remember(d)  # past the bound: the oldest existing one (d0) goes
    assert datadirs.known() == [str(dirs[i]) for i in (4, 3, 5, 6)]


@pytest.mark.parametrize(
    "paths, limit, kept",
    [
        (["/a", "/b"], 3, ["/a", "/b"]),
        ([], 0, []),
        (["/a"], 0, []),
        (["/nonexistent-1", "/", "/nonexistent-2", "/tmp"], 2, ["/", "/tmp"]),
        (["/", "/nonexistent-1", "/tmp"], 2, ["/", "/tmp"]),
        (["/", "/tmp", "/nonexistent-1"], 1, ["/tmp"]),
    ],
)
def test_bounded_keeps_the_newest_existing(paths, limit, kept):
    assert datadirs.bounded(paths, limit) == kept


def test_root_takes_from_a_users_record_only_the_dirs_that_user_owns(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root to make files of another user")
    monkeypatch.delenv("LABKIT_RUN_DIR")
    home = tmp_path / "alice"
    mine, roots = tmp_path / "alice-data", tmp_path / "not-alices"
    for d in (mine, roots):
        d.mkdir()
    os.chown(mine, 4242, 4242)
    record = datadirs.record_file(4242, str(home))
    record.parent.mkdir(parents=True)
    record.write_text(f"{mine}\n{roots}\n/usr\n")
    os.chown(record, 4242, 4242)
    user = types.SimpleNamespace(pw_uid=4242, pw_dir=str(home))
    monkeypatch.setattr(datadirs.pwd, "getpwall", lambda: [user])
    known = datadirs.known()
    assert str(mine) in known and str(roots) not in known and "/usr" not in known
    os.chown(record, 0, 0)  # a record the user does not own is not theirs
    assert str(mine) not in datadirs.known()


def test_home_secrets_are_the_existing_ones_and_files_can_be_hidden(tmp_path):
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".netrc").write_text("machine x password y\n")
    (tmp_path / "notes.txt").write_text("")
    found = sandbox.home_secrets([str(tmp_path)])
    assert found == [str(tmp_path / ".ssh"), str(tmp_path / ".netrc")]
    assert sandbox.hidden_dirs(found) == sorted(found)
    assert "/" not in sandbox.invoking_homes() and all(os.path.isabs(h) for h in sandbox.invoking_homes())


def test_a_local_backend_makes_its_hidden_list_again_only_when_a_record_changed(tmp_path, monkeypatch):
    """Provisioning read every record and resolved every path each time (15 ms a local instance
    with 160 known data dirs): the list is kept until a data-dir record or a registry directory
    changes, and a directory removed since is left out (the holder cannot cover a missing one)."""
    from labkit.backends import get_backend

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    datadirs.remember(a)
    be = get_backend("local")
    made = []
    real = sandbox.hidden_dirs
    monkeypatch.setattr(sandbox, "hidden_dirs", lambda *args: made.append(1) or real(*args))
    first = be.hidden_dirs()
    assert str(a) in first and str(b) not in first and be.hidden_dirs() == first and len(made) == 1
    datadirs.remember(b)  # another campaign's data dir, recorded after this backend was made
    assert str(b) in be.hidden_dirs() and len(made) == 2
    with registry.register("dd-hide", None):  # a registry entry made or removed counts too
        be.hidden_dirs()
    be.hidden_dirs()  # the entry removed: made again
    assert len(made) == 4
    count = len(made)
    a.rmdir()
    assert str(a) not in be.hidden_dirs() and str(b) in be.hidden_dirs() and len(made) == count
