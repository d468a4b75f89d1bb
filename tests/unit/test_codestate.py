"""Provenance you can rebuild (issue 42, item 1): a dirty checkout's diff is captured, kept in the
store's meta, named by the fingerprint, said by ``labkit show``, printed by ``labkit show --diff``,
checked by ``labkit check`` and bundled; a bare ``+dirty`` without its diff is a warning."""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from labkit.cli import main
from labkit.core import fingerprint
from labkit.core.fingerprint import capture_diff
from labkit.errors import ConfigError
from labkit.store import Store
from labkit.store.check import check_store
from labkit.store.codestate import code_state, record_code_diff, stored_diff

GIT_ID = ["-c", "user.email=t@example.invalid", "-c", "user.name=t"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *GIT_ID, *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git checkout with one commit: a.txt and b.bin."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    (r / "a.txt").write_text("one\ntwo\nthree\n")
    (r / "b.bin").write_bytes(b"\xff\xfe latin-1 \xe9\n")
    git(r, "add", "a.txt", "b.bin")
    git(r, "commit", "-q", "-m", "first")
    return r


def whole_diff(repo: Path) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff", "--no-textconv"],
        check=True,
        capture_output=True,
    ).stdout


def test_a_dirty_checkouts_diff_is_captured_and_rebuilds_its_code(repo, tmp_path):
    (repo / "a.txt").write_text("one\nTWO\nthree\n")
    (repo / "b.bin").write_bytes(b"\xff\xfe changed \xe8\n")  # not UTF-8: kept byte for byte
    (repo / "new.txt").write_text("staged\n")
    git(repo, "add", "new.txt")  # staged: part of the code state
    (repo / "untracked.txt").write_text("not code labkit runs\n")
    d = capture_diff(repo)
    assert d is not None and not d.truncated
    assert d.commit == git(repo, "rev-parse", "--short=12", "HEAD").strip()
    whole = whole_diff(repo)
    assert d.data() == whole and d.size == len(whole) and d.lines == whole.count(b"\n")
    assert d.sha256 == hashlib.sha256(whole).hexdigest()
    assert "new.txt" in d.text and "untracked.txt" not in d.text
    # the record survives JSON (the store's meta) and `git apply` on the commit rebuilds the tree
    back = json.loads(json.dumps(d.record()))
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    (tmp_path / "p.patch").write_bytes(back["diff"].encode("utf-8", "surrogateescape"))
    git(clone, "apply", str(tmp_path / "p.patch"))
    for name in ("a.txt", "b.bin", "new.txt"):
        assert (clone / name).read_bytes() == (repo / name).read_bytes()


def test_a_diff_above_the_cap_is_cut_at_a_line_end_and_said_truncated(repo):
    (repo / "a.txt").write_text("".join(f"line {i}\n" for i in range(2000)))
    whole = whole_diff(repo)
    d = capture_diff(repo, cap=1000)
    assert d is not None and d.truncated
    kept = d.data()
    assert len(kept) <= 1000 and kept.endswith(b"\n") and whole.startswith(kept)
    assert d.size == len(whole) and d.sha256 == hashlib.sha256(whole).hexdigest()
    assert d.record()["kept_bytes"] == len(kept)
    with pytest.raises(ConfigError, match="cap"):
        capture_diff(repo, cap=0)


def test_a_clean_tree_an_untracked_file_and_no_checkout_capture_nothing(repo, tmp_path):
    assert capture_diff(repo) is None
    (repo / "untracked.txt").write_text("x\n")
    assert capture_diff(repo) is None
    plain = tmp_path / "plain"
    plain.mkdir()
    assert capture_diff(plain) is None
    assert capture_diff(tmp_path / "missing") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")  # a repository without a commit
    assert capture_diff(empty) is None


def host(commit: str, sha: str | None = None) -> dict:
    h = {"hostname": "h", "labkit_commit": commit}
    return {"host": h | ({"labkit_diff_sha256": sha} if sha else {}), "backend": {"backend": "local"}}


def new_store(data: Path, cid: str) -> Store:
    st = Store.for_campaign(data, cid)
    st.set_meta(
        campaign_id=cid,
        design={"name": "d", "factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 1},
        backend="local",
        workload={"name": "nqueens", "params": {"board": 8}},
    )
    return st


def test_the_store_keeps_the_diff_out_of_meta_and_says_each_code_state(repo, tmp_path):
    (repo / "a.txt").write_text("one\n2\nthree\n")
    d = capture_diff(repo)
    assert d is not None
    kinds = {}
    cases = {
        "clean": [host("0123456789ab")],
        "dirty with diff": [host(f"{d.commit}+dirty", d.sha256)],
        "dirty, not recorded": [host("0123456789ab+dirty")],
        "installed": [host("0123456789ab (installed)")],
        "unknown": [],
    }
    for kind, fps in cases.items():
        cid = kind.replace(" ", "").replace(",", "")
        with new_store(tmp_path / "data", cid) as st:
            for i, fp in enumerate(fps):
                st.add_fingerprint(f"f{i}", fp)
            if kind == "dirty with diff":
                assert record_code_diff(st, d) is d
                record_code_diff(st, d)  # again: kept once
                assert set(st.code_diffs()) == {d.sha256}
                assert not any(k.startswith("code_diff") for k in st.meta())
            kinds[kind] = code_state(st)
    assert {k: s.kind for k, s in kinds.items()} == {k: k for k in cases}
    assert kinds["clean"].line() == "code: 0123456789ab (clean)"
    line = kinds["dirty with diff"].line("c1")
    assert (
        line.startswith(
            f"code: {d.commit} with uncommitted changes, diff stored (sha256 {d.sha256[:12]}, {d.lines} lines"
        )
        and "`labkit show --diff c1`" in line
    )
    assert kinds["dirty, not recorded"].line() == (
        "code: 0123456789ab+dirty, uncommitted changes NOT recorded "
        "(campaign from before labkit recorded diffs)"
    )
    # one start dirty with its diff, a later start dirty without: not recorded
    with new_store(tmp_path / "data", "mixed") as st:
        st.add_fingerprint("f0", host(f"{d.commit}+dirty", d.sha256))
        st.add_fingerprint("f1", host(f"{d.commit}+dirty", "f" * 64))
        record_code_diff(st, d)
        assert code_state(st).kind == "dirty, not recorded"


def test_show_prints_the_code_state_and_the_diff_and_check_warns(repo, tmp_path, capsysbinary):
    (repo / "a.txt").write_text("one\nzwei\nthree\n")
    d = capture_diff(repo)
    assert d is not None
    data = tmp_path / "data"
    with new_store(data, "dirty") as st:
        st.add_fingerprint("f0", host(f"{d.commit}+dirty", d.sha256))
        record_code_diff(st, d)
    with new_store(data, "old") as st:
        st.add_fingerprint("f0", host("0123456789ab+dirty"))
    assert main(["show", "dirty", "--data-dir", str(data)]) == 0
    out = capsysbinary.readouterr().out.decode()
    assert f"code: {d.commit} with uncommitted changes, diff stored (sha256 {d.sha256[:12]}" in out
    assert main(["show", "dirty", "--diff", "--data-dir", str(data)]) == 0
    assert capsysbinary.readouterr().out == whole_diff(repo)
    assert main(["show", "old", "--diff", "--data-dir", str(data)]) == 2
    assert "no uncommitted diff stored" in capsysbinary.readouterr().err.decode()
    # labkit check: the bare +dirty is a warning (the store is sound), the recorded one is not
    old = check_store(data / "old" / "store.sqlite")
    assert old.ok and len(old.warnings) == 1 and "NOT recorded" in old.warnings[0]
    assert "warning:" in old.text()
    good = check_store(data / "dirty" / "store.sqlite")
    assert good.ok and good.warnings == []
    # a kept diff altered after the fact is a problem
    import sqlite3

    db = sqlite3.connect(data / "dirty" / "store.sqlite")
    rec = {**d.record(), "diff": d.text.replace("zwei", "drei")}
    db.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps(rec), f"code_diff:{d.sha256}"))
    db.commit()
    db.close()
    bad = check_store(data / "dirty" / "store.sqlite")
    assert not bad.ok and any("altered" in p for p in bad.problems)


def test_stored_diff_heads_several_diffs_and_says_a_truncated_one(repo, tmp_path):
    (repo / "a.txt").write_text("".join(f"line {i}\n" for i in range(500)))
    cut = capture_diff(repo, cap=300)
    (repo / "a.txt").write_text("one\n")
    whole = capture_diff(repo)
    assert cut is not None and whole is not None
    with new_store(tmp_path / "data", "two") as st:
        record_code_diff(st, cut)
        record_code_diff(st, whole)
        data, notes = stored_diff(st, "two")
    assert data.count(b"# code_diff sha256 ") == 2 and cut.data() in data and whole.data() in data
    assert any("truncated" in n for n in notes) and any("2 diffs" in n for n in notes)


def test_the_bundle_holds_the_diff(repo, tmp_path):
    from labkit.report import write_bundle
    from labkit.report.verify import verify_bundle
    from labkit.store.imports import import_manifest

    (tmp_path / "r.csv").write_text("x,ms\n1,10\n2,20\n1,11\n2,21\n")
    doc = {
        "campaign": "small",
        "workload": "csv",
        "factors": {"x": ["1", "2"]},
        "columns": {"factors": {"x": "x"}, "metrics": {"wall_ms": {"column": "ms", "unit": "ms"}}},
        "files": [{"path": "r.csv"}],
    }
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(doc))
    import_manifest(tmp_path / "m.yaml", tmp_path / "data")
    (repo / "a.txt").write_text("one\n")
    d = capture_diff(repo)
    assert d is not None
    with Store.for_campaign(tmp_path / "data", "small") as st:
        record_code_diff(st, d)
    zpath = write_bundle(tmp_path / "data", "small", tmp_path / "b.zip")
    with zipfile.ZipFile(zpath) as z:
        assert z.read(f"code_diff-{d.sha256[:16]}.patch") == d.data()
    assert verify_bundle(zpath).ok


def test_the_fingerprint_names_the_diff_of_a_dirty_checkout(repo, monkeypatch):
    (repo / "a.txt").write_text("changed\n")
    d = capture_diff(repo)
    monkeypatch.setattr(fingerprint, "labkit_commit", lambda: f"{d.commit}+dirty")
    monkeypatch.setattr(fingerprint, "code_diff", lambda: d)
    assert fingerprint.host_fingerprint()["labkit_diff_sha256"] == d.sha256
    monkeypatch.setattr(fingerprint, "labkit_commit", lambda: d.commit)
    assert "labkit_diff_sha256" not in fingerprint.host_fingerprint()
