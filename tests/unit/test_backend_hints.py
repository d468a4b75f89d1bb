"""Issue 44: a non-root user's backend errors name the real cause and the fix. Before, LXD said
"start it with `lxd --group root`" while LXD ran (its socket root:root 0660: no group helps), and
libvirt said "start the daemons" when polkit had no D-Bus system bus to ask."""

from __future__ import annotations

import os

import pytest

from labkit.backends.libvirt import connect_hint
from labkit.backends.lxd import START_HINT, socket_hint
from tests.support.other_users import as_user


def test_libvirt_names_polkit_and_the_system_bus():
    hint = connect_hint(
        "authentication unavailable: no polkit agent available to authenticate action "
        "'org.libvirt.unix.manage'",
        "qemu:///system",
        True,
    )
    assert "polkit" in hint and "D-Bus system bus" in hint and "start the daemons" not in hint
    hint = connect_hint(
        "Unable to get system bus connection: Could not connect: No such file or directory",
        "qemu:///system",
        True,
    )
    assert "D-Bus" in hint and "usermod -aG libvirt" in hint
    assert "start the daemons" in connect_hint(
        "Failed to connect socket to '/run/libvirt/libvirt-sock': No such file or directory",
        "qemu:///system",
        True,
    )
    assert connect_hint("anything", "qemu+ssh://h/system", False) == "check the URI and ssh access"


@pytest.mark.skipif(
    os.geteuid() != 0, reason="a socket made root:root 0660 and read as another user needs root"
)
def test_lxd_names_a_socket_of_root_as_a_matter_of_groups():
    """As a non-root user (uid 4248, set-up's setpriv), a root:root 0660 socket file: the hint says
    `--group root` and that the lxd group cannot help; no socket at all: the start hint."""
    import shutil
    import socket
    import tempfile
    from pathlib import Path

    base = Path(tempfile.mkdtemp(prefix="labkit-test-lxdsock-"))  # in /tmp: the other user can reach it
    try:
        os.chmod(base, 0o755)
        path = base / "unix.socket"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        os.chmod(path, 0o660)
        code = "import sys; from labkit.backends.lxd import socket_hint; print(socket_hint(sys.argv[1]))"
        out, err = as_user(4248, base / "home", code, str(path)).communicate(timeout=60)
        s.close()
        assert "--group root" in out and "lxd group cannot help" in out, err
        assert socket_hint(str(base / "none")) == START_HINT
    finally:
        shutil.rmtree(base, ignore_errors=True)
