"""``labkit doctor`` (issue 44): the table of what each backend needs from the host (docs/install.md)
with what this machine has, as this user; and the socket look it is made of."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from labkit import cli
from labkit.backends import needs

ROOT = Path(__file__).resolve().parents[2]


def test_doctor_prints_every_backend_with_its_needs_and_what_is_here(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    for need in needs.NEEDS:
        assert f"\n{need.backend:<10}" in out
        assert f"  needs   {need.host}" in out
    assert out.count("  here    ") == len(needs.NEEDS)
    assert "labkit 0.1.0" in out and f"uid {os.geteuid()}" in out


def test_the_docs_table_names_every_backend_doctor_checks():
    page = (ROOT / "docs" / "install.md").read_text()
    assert "labkit doctor" in page
    for need in needs.NEEDS:
        assert f"| `{need.backend}`" in page or f"| {need.backend} " in page


def test_a_socket_this_user_cannot_open_is_reported_with_its_owner(tmp_path):
    path = tmp_path / "unix.socket"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    try:
        ok, said = needs.socket_state([str(tmp_path / "missing"), str(path)], access=lambda p, m: False)
        assert not ok and said.startswith(f"{path} root:root") and "not writable by" in said
        ok, said = needs.socket_state([str(path)])
        assert ok
        ok, said = needs.socket_state([str(tmp_path / "missing")])
        assert not ok and said.startswith("no socket")
    finally:
        s.close()


def test_an_lxd_socket_of_root_root_names_the_group_root_cause(monkeypatch):
    monkeypatch.setattr(
        needs,
        "socket_state",
        lambda paths, access=os.access: (False, f"{paths[0]} root:root 0660 (not writable by alice)"),
    )
    monkeypatch.setattr(needs, "_module", lambda name: True)
    f = needs._daemon("lxd")
    assert not f.ok and "--group root" in f.here and "--group lxd" in f.here
