"""Issue 47 (7): labkit's files on a shared machine.

Each test failed on the code before issue 47: ``labkit export --out DIR`` (and a report into
``DIR/r.html``) wrote into the target of a directory link another user planted in a sticky
directory; the bundle's ``store.sqlite`` and ``results.parquet`` were 0644 members; under
``umask 000`` the first campaign made its data dir 0777 and the next one was refused; a data dir
whose path holds ``?`` or ``#`` was read as an SQLite URI (a stray empty file, then a traceback).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from labkit.cli import main
from labkit.design import Design
from labkit.errors import ConfigError
from labkit.run.campaign import Campaign
from labkit.store import Store
from tests.support.stores import CID, bundle_member_modes, make_store


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_export_and_report_refuse_a_directory_link_planted_by_another_user(capsys):
    """Another user (uid 4244) plants ``shared/out`` -> a private directory of root's, in a sticky
    1777 directory like /tmp. ``labkit export --out shared/out`` and ``labkit report -o
    shared/out/r.html`` are refused naming the link, and nothing is written into its target
    (before: five files written there, and the report)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as another user")
    from tests.support.other_users import planted_dir_link

    base = Path(tempfile.mkdtemp(prefix="labkit-test-files-"))  # /tmp: the other user can reach it
    try:
        data = base / "data"
        make_store(data)
        target, link, said = planted_dir_link(base, 4244)
        assert "planted" in said, said
        shared = link.parent
        assert stat.S_ISLNK(os.lstat(link).st_mode) and os.lstat(link).st_uid == 4244
        try:
            os.stat(link)
        except PermissionError:
            pytest.skip("fs.protected_symlinks=1: the kernel already stops root following the link")
        assert main(["export", CID, "--data-dir", str(data), "--out", str(link)]) == 2
        assert f"{link} is a symbolic link" in capsys.readouterr().err
        assert main(["report", CID, "--data-dir", str(data), "-o", str(link / "r.html")]) == 2
        assert f"{link} is a symbolic link" in capsys.readouterr().err
        with Store(data / CID / "store.sqlite", readonly=True) as st, pytest.raises(ConfigError):
            st.export(link)
        assert list(target.iterdir()) == []
        assert sorted(p.name for p in shared.iterdir()) == ["out"]
    finally:
        shutil.rmtree(base)


def test_every_bundle_member_is_0600(tmp_path):
    """Members made from files (the Parquet file, the store's copy: 0644 on disk under umask 022)
    and from text alike are 0600 regular files, in the zip and once unzipped."""
    modes = bundle_member_modes(tmp_path / "data", tmp_path / "b.zip")
    bundle = tmp_path / "b.zip"
    assert {"store.sqlite", "results.parquet", "results.csv"} <= set(modes)
    assert {n: oct(m) for n, m in modes.items() if m != stat.S_IFREG | 0o600} == {}
    if shutil.which("unzip"):
        subprocess.run(["unzip", "-q", str(bundle), "-d", str(tmp_path / "u")], check=True)
        assert {p.name: oct(mode(p)) for p in (tmp_path / "u").iterdir() if mode(p) != 0o600} == {}


def test_under_umask_000_campaigns_keep_private_dirs_and_run_again(tmp_path):
    """Two campaigns (and a resume) in a new data dir under umask 000 all run; the data dir and
    campaign dirs are 0700, the store 0600 (before: the data dir was 0777 and the second campaign
    was refused as another user could change it)."""
    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1})
    data = tmp_path / "data"

    def run(cid):
        st = Campaign(
            d,
            workload="command",
            workload_params={"argv": ["sh", "-c", "echo 1"]},
            campaign_id=cid,
            data_dir=data,
            progress=False,
        ).run()
        with st:
            return len(st.runs())

    old = os.umask(0)
    try:
        counts = [run("t-umask-a"), run("t-umask-b"), run("t-umask-a")]
    finally:
        os.umask(old)
    assert counts == [2, 2, 2]
    assert mode(data) == 0o700
    for cid in ("t-umask-a", "t-umask-b"):
        assert mode(data / cid) == 0o700 and mode(data / cid / "store.sqlite") == 0o600
        assert mode(data / cid / "results.csv") == 0o600


def test_a_data_dir_with_question_mark_and_hash_is_a_path(tmp_path, capsys):
    """A data dir named ``we?ird#data%20dir``: a campaign runs in it, status, export, report and
    bundle read it, and nothing else appears beside it (before: SQLite read the path as a URI and
    made an empty file ``we``, then a traceback: no such table)."""
    data = tmp_path / "we?ird#data%20dir"
    make_store(data)
    st = Campaign(
        Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1}),
        workload="command",
        workload_params={"argv": ["sh", "-c", "echo 1"]},
        campaign_id="t-uri",
        data_dir=data,
        progress=False,
    ).run()
    with st:
        assert len(st.runs()) == 2
    assert main(["status", CID, "--data-dir", str(data)]) == 0
    assert main(["export", CID, "--data-dir", str(data)]) == 0
    assert main(["report", CID, "--data-dir", str(data), "--bundle", str(tmp_path / "b.zip")]) == 0
    with Store(data / CID / "store.sqlite", readonly=True) as ro:
        assert len(ro.tidy()) == 8
    capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.zip", "we?ird#data%20dir"]
    assert sorted(p.name for p in data.iterdir()) == [CID, "t-uri"]
