"""The backends' ``mounts`` option: parsing and validation (no daemon needed)."""

from __future__ import annotations

import pytest

from labkit.core.mounts import Mount, parse_mounts, same_path_mounts
from labkit.errors import ConfigError


def test_strings_and_mappings(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    assert parse_mounts(None, "docker") == () and parse_mounts("", "docker") == ()
    assert parse_mounts(f"{a},{b}:/opt/b:rw", "docker") == (
        Mount(str(a), str(a), True),
        Mount(str(b), "/opt/b", False),
    )
    assert parse_mounts([f"{a}:rw"], "lxd") == (Mount(str(a), str(a), False),)
    assert parse_mounts([{"source": str(a), "target": "/opt/a/"}], "lxd") == (Mount(str(a), "/opt/a", True),)
    assert Mount(str(a), "/x").as_dict() == {"source": str(a), "target": "/x", "readonly": True}


@pytest.mark.parametrize(
    "value, msg",
    [
        ("relative/dir", r"docker option mounts: source 'relative/dir' must be an absolute path"),
        ("/nonexistent-labkit-dir", r"'/nonexistent-labkit-dir' is not a directory on this host"),
        ("{d}:/opt/x:maybe", r"mode 'maybe'.*allowed: ro, rw"),
        ("{d}:/", r"target '/' would hide"),
        ("{d}:/opt/x,{d}:/opt/x", r"target\(s\) /opt/x given twice"),
        ([{"source": "{d}", "mode": "ro"}], r"unknown key\(s\) mode; allowed: source, target, readonly"),
        ([{"source": "{d}", "readonly": "yes"}], r"readonly must be true or false"),
        ([3], r"each mount is a mapping"),
        (5, r"a list of mounts or a comma-separated string"),
    ],
)
def test_bad_mounts_say_what_is_wrong(tmp_path, value, msg):
    d = str(tmp_path)
    if isinstance(value, str):
        value = value.format(d=d)
    elif isinstance(value, list):
        value = [
            {k: v.format(d=d) if isinstance(v, str) else v for k, v in x.items()}
            if isinstance(x, dict)
            else x
            for x in value
        ]
    with pytest.raises(ConfigError, match=msg):
        parse_mounts(value, "docker")


def test_local_sees_a_directory_only_at_its_own_path(tmp_path):
    from labkit.backends.local import LocalBackend

    ok = parse_mounts(str(tmp_path), "local")
    assert same_path_mounts(ok) == ok
    with pytest.raises(ConfigError, match=r"only be seen at its own path.*not at /opt/x"):
        same_path_mounts(parse_mounts(f"{tmp_path}:/opt/x", "local"))
    with pytest.raises(ConfigError, match=r"not at /opt/x"):
        LocalBackend(enforce_limits=False, workroot=str(tmp_path / "w"), mounts=f"{tmp_path}:/opt/x")


def test_container_backends_accept_the_option(tmp_path):
    from labkit.backends.docker import DockerBackend
    from labkit.backends.lxd import LxdBackend

    assert "mounts" in DockerBackend.OPTIONS and "mounts" in LxdBackend.OPTIONS
    be = DockerBackend(mounts=str(tmp_path))
    assert be.mounts == (Mount(str(tmp_path), str(tmp_path), True),)
    with pytest.raises(ConfigError, match="lxd option mounts"):
        LxdBackend(mounts="relative")


def test_libvirt_accepts_mounts(tmp_path):
    libvirt_backend = pytest.importorskip("labkit.backends.libvirt")
    assert "mounts" in libvirt_backend.LibvirtBackend.OPTIONS
    assert libvirt_backend.LibvirtBackend(mounts=str(tmp_path)).mounts == (
        Mount(str(tmp_path), str(tmp_path), True),
    )
    assert libvirt_backend.LibvirtBackend(mounts=[]).mounts == ()
