"""Issue 44: what labkit keeps while it runs is the user's own, and libvirt ``qemu:///session`` works
for a user who is not root.

Before, a non-root user's libvirt run and ``labkit clean`` read root's ``/run/labkit/virtiofs``
(0700) and ended on a PermissionError traceback; the session's pool defaulted to
``/var/lib/libvirt/images/labkit`` (which the user may not create: "Storage pool not found" hid
it), and a guest agent socket deep in the user's home failed the start ("UNIX socket path ...
too long"). Here: :func:`labkit.core.paths.runtime_dir` as root and as other users, the libvirt
mounts' listing of a directory the user may not read (a ConfigError naming it), the session's pool
in the user's data dir, the agent socket's place and length, and what a session refuses by name.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

libvirt = pytest.importorskip("libvirt")

from labkit.backends import get_backend  # noqa: E402
from labkit.backends.libvirt import backend as lv  # noqa: E402
from labkit.backends.libvirt.storage import Pool, session_pool_path  # noqa: E402
from labkit.backends.libvirt.xml import domain_xml  # noqa: E402
from labkit.core import paths  # noqa: E402
from labkit.core.instance import InstanceSpec  # noqa: E402
from labkit.errors import ConfigError  # noqa: E402
from tests.support.other_users import as_user  # noqa: E402

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="runs code as other users: needs root")

#: as another user (HOME and XDG_RUNTIME_DIR its home, see tests/support/other_users.py):
#: argv[1] is a 0700 directory of root's holding an entry ``labkit-x``
AS_USER = """
import json, os, sys
from pathlib import Path
from labkit.core import paths
from labkit.backends.libvirt import mounts
from labkit.errors import ConfigError
out = {}
def attempt(key, f):
    try:
        out[key] = ["ok", str(f())]
    except ConfigError as exc:
        out[key] = ["ConfigError", str(exc)]
    except Exception as exc:
        out[key] = [type(exc).__name__, str(exc)]
attempt("runtime", lambda: paths.runtime_dir("libvirt"))
attempt("leftovers", lambda: mounts.leftovers("labkit-"))
attempt("release", lambda: mounts.release("labkit-x"))
attempt("foreign_leftovers", lambda: mounts.leftovers("labkit-", Path(sys.argv[1])))
attempt("foreign_release", lambda: mounts.release("labkit-x", Path(sys.argv[1])))
os.environ["XDG_RUNTIME_DIR"] = sys.argv[1]
attempt("foreign_xdg", lambda: paths.runtime_dir("libvirt"))
del os.environ["XDG_RUNTIME_DIR"]
attempt("no_xdg", paths.runtime_base)
print(json.dumps(out))
"""


def test_root_keeps_its_runtime_dir_in_run_labkit():
    if os.geteuid() != 0:
        pytest.skip("root's runtime dir: needs root")
    assert paths.runtime_base() == paths.SYSTEM_RUNTIME_DIR == Path("/run/labkit")
    assert lv.libvirt_mounts.ro_root() == lv.libvirt_mounts.RO_ROOT == Path("/run/labkit/virtiofs")


@needs_root
def test_a_user_keeps_its_own_and_is_told_by_name_what_it_cannot_read():
    base = Path(tempfile.mkdtemp(prefix="labkit-test-rundir-"))
    try:
        os.chmod(base, 0o755)
        foreign = base / "root-private"
        (foreign / "labkit-x").mkdir(parents=True)
        os.chmod(foreign, 0o700)
        home = base / "home"
        out, err = as_user(4251, home, AS_USER, str(foreign)).communicate(timeout=60)
        got = json.loads(out)
        assert got["runtime"] == ["ok", str(home / "labkit" / "libvirt")], err
        for d in (home / "labkit", home / "labkit" / "libvirt"):
            st = os.stat(d)
            assert (st.st_uid, st.st_mode & 0o777) == (4251, 0o700)
        # the user's own bind-mount directory: nothing there, no traceback on root's
        assert got["leftovers"] == ["ok", "[]"] and got["release"] == ["ok", "None"]
        for key in ("foreign_leftovers", "foreign_release"):
            kind, text = got[key]
            assert kind == "ConfigError" and str(foreign) in text and "XDG_RUNTIME_DIR" in text, got[key]
        kind, text = got["foreign_xdg"]
        assert kind == "ConfigError" and str(foreign / "labkit") in text and "XDG_RUNTIME_DIR" in text, text
        # no XDG_RUNTIME_DIR, no /run/user/4251: the user's cache
        assert got["no_xdg"] == ["ok", str(home / ".cache" / "labkit")]
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def test_a_runtime_dir_others_may_write_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "runtime_base", lambda: tmp_path / "rt")
    (tmp_path / "rt").mkdir(mode=0o777)
    os.chmod(tmp_path / "rt", 0o777)
    with pytest.raises(ConfigError, match=r"rt is writable by group or others \(mode 0777\)"):
        paths.runtime_dir("libvirt")
    os.chmod(tmp_path / "rt", 0o700)
    assert paths.runtime_dir("libvirt") == tmp_path / "rt" / "libvirt"
    assert (tmp_path / "rt" / "libvirt").stat().st_mode & 0o777 == 0o700
    assert (
        paths.runtime_dir("x", create=False) == tmp_path / "rt" / "x" and not (tmp_path / "rt" / "x").exists()
    )


def test_session_uris():
    assert lv.is_session("qemu:///session") and lv.is_session("qemu+unix:///session")
    assert not lv.is_session("qemu:///system") and not lv.is_session("qemu+ssh://host/session")
    assert not lv.is_session("xen:///session")


def test_the_session_pool_is_in_the_users_data_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert session_pool_path() == str(tmp_path / ".local/share/labkit/libvirt-pool")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert session_pool_path() == str(tmp_path / "data/labkit/libvirt-pool")
    assert get_backend("libvirt", uri="qemu:///session").pool.path == session_pool_path()
    assert get_backend("libvirt", uri="qemu:///system").pool.path == lv.POOL_PATH
    assert get_backend("libvirt", uri="qemu:///session", pool_path="~/p").pool.path == str(tmp_path / "p")


class _NoPool:
    """A connection on which no pool exists and none can be made (libvirt's own words)."""

    def storagePoolLookupByName(self, name):
        raise libvirt.libvirtError(f"Storage pool not found: no storage pool with matching name '{name}'")

    def storagePoolCreateXML(self, xml, flags):
        raise libvirt.libvirtError(
            "failed to create directory '/var/lib/libvirt/images/labkit': Permission denied"
        )


def test_a_pool_that_cannot_be_made_is_said_with_its_path_and_the_option():
    pool = Pool(_NoPool, "labkit", "/var/lib/libvirt/images/labkit")
    with pytest.raises(ConfigError) as err:
        pool.pool()
    text = str(err.value)
    assert (
        "/var/lib/libvirt/images/labkit: failed to create directory" in text and "Permission denied" in text
    )
    assert "pool_path" in text and "Storage pool not found" not in text


def test_what_a_session_cannot_do_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match="mounts needs qemu:///system.*session mode"):
        get_backend(
            "libvirt",
            uri="qemu:///session",
            mounts=[{"source": str(tmp_path), "target": "/mnt/x", "readonly": False}],
        )
    be = get_backend("libvirt", uri="qemu:///session")
    from labkit.backends.private_network import Network

    with pytest.raises(ConfigError, match="private needs qemu:///system"):
        be._create_network(Network.__new__(Network))


def test_the_agent_socket_is_given_on_a_session_and_its_length_checked(monkeypatch, tmp_path):
    spec = InstanceSpec(vcpus=1, memory_mb=256)
    args = dict(
        name="labkit-x-abcdefghijklm",
        spec=spec,
        cpus=None,
        domain_type="qemu",
        disk="/d.qcow2",
        kernel="/k",
        initrd="/i",
        cmdline="root=/dev/vda",
        console_log="/c.log",
    )
    assert '<source mode="bind" path="/s.agent" />' in domain_xml(**args, agent_socket="/s.agent")
    assert 'mode="bind"' not in domain_xml(**args)
    monkeypatch.setattr(lv, "runtime_dir", lambda *parts: tmp_path.joinpath(*parts))
    assert lv.agent_socket("labkit-camp--abcdefghijklm") == f"{tmp_path}/libvirt/abcdefghijklm.agent"
    deep = tmp_path / ("d" * 100)
    monkeypatch.setattr(lv, "runtime_dir", lambda *parts: deep.joinpath(*parts))
    with pytest.raises(ConfigError, match=f"longer than the {lv.MAX_SOCKET_PATH} bytes.*XDG_RUNTIME_DIR"):
        lv.agent_socket("labkit-camp--abcdefghijklm")


def test_connect_hints_of_system_and_session():
    """qemu:///system refused for want of the system bus names polkit and D-Bus (and that the libvirt
    group is granted through polkit); a session that does not start says it is the user's own daemon."""
    hint = lv.connect_hint(
        "internal error: Unable to get system bus connection: Could not connect: No such file or directory",
        "qemu:///system",
        True,
    )
    assert "polkit" in hint and "D-Bus system bus" in hint and "membership alone does not" in hint
    hint = lv.connect_hint(
        "Failed to connect socket to '/run/user/1000/libvirt/libvirt-sock': No such file",
        "qemu:///session",
        True,
    )
    assert "this user's own libvirtd" in hint and "start the daemons" not in hint
