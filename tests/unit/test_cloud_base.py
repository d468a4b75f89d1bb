"""The provider contract's shared work (labkit.backends.clouds.base) and the OpenStack adapter's helpers."""

from __future__ import annotations

import socket
import time

import pytest

from labkit.backends.clouds import base, get_provider
from labkit.backends.clouds.base import (
    ACTIVE,
    BUILDING,
    ERROR,
    GONE,
    TAG,
    CloudProvider,
    ServerRef,
    ServerState,
)
from labkit.errors import BackendError, BackendUnavailable, ConfigError


class Ledger(CloudProvider):
    """A provider whose 'cloud' is a dict, to drive the shared logic through its hooks."""

    name = "ledger"

    def __init__(self, states, **options):
        super().__init__(poll_interval=0, **options)
        self.states = list(states)  # what _state answers, in turn (the last one repeats)
        self.servers: dict[str, ServerRef] = {}
        self.deleted: list[str] = []

    def check(self):
        pass

    def _create(self, name, flavor, image, tags):
        sid = f"id-{len(self.servers)}"
        self.servers[sid] = ServerRef(name, sid, dict(tags))
        return sid

    def _state(self, sid):
        if sid not in self.servers:
            return ServerState(GONE)
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def _delete(self, sid):
        if self.servers.pop(sid, None) is not None:
            self.deleted.append(sid)

    def _gone(self, sid):
        return sid not in self.servers

    def _list(self, prefix):
        return list(self.servers.values())


@pytest.fixture
def no_ssh(monkeypatch):
    dialled = []
    monkeypatch.setattr(base, "wait_ssh", lambda *a, **k: dialled.append(a[:3]))
    return dialled


def test_provision_names_tags_and_times_each_server(no_ssh):
    cloud = Ledger([ServerState(BUILDING), ServerState(ACTIVE, "192.0.2.7")], prices={"small": 0.5})
    servers = cloud.provision("small", "img", "labkit-c1--", count=2)
    assert [s.name[:11] for s in servers] == ["labkit-c1--"] * 2 and len({s.name for s in servers}) == 2
    assert all(len(s.name) == len("labkit-c1--") + 8 for s in servers)
    assert {r.tags[TAG] for r in cloud.servers.values()} == {"labkit-c1--"}
    assert all(s.provisioning_s >= 0 and s.price_per_hour == 0.5 for s in servers)
    assert no_ssh == [("192.0.2.7", 22, "root")] * 2
    host = servers[0].host()
    assert host["platforms"] == ["ssh"] and host["address"] == "192.0.2.7" and host["price_per_hour"] == 0.5
    # the key recorded on first contact (accept-new, labkit's own file) is checked strictly afterwards
    assert servers[0].ssh_options() == {
        "host": "192.0.2.7",
        "port": 22,
        "user": "root",
        "key_filename": None,
        "host_key_policy": "strict",
        "known_hosts": cloud.known_hosts,
    }


def test_error_state_deletes_every_server_of_the_call(no_ssh):
    cloud = Ledger([ServerState(ERROR, fault="No valid host was found")])
    with pytest.raises(BackendError, match="No valid host was found"):
        cloud.provision("small", "img", "labkit-c1--", count=2)
    assert cloud.servers == {} and sorted(cloud.deleted) == ["id-0", "id-1"]


def test_boot_deadline(no_ssh):
    cloud = Ledger([ServerState(BUILDING)], boot_timeout=1)
    t0 = time.monotonic()
    with pytest.raises(
        BackendError, match="waiting for .* to be active with an address; boot_timeout=1s, last status"
    ):
        cloud.provision("small", "img", "labkit-c1--")
    assert time.monotonic() - t0 >= 1 and cloud.servers == {}


def test_cleanup_matches_the_exact_campaign_prefix(no_ssh):
    cloud = Ledger([ServerState(ACTIVE, "192.0.2.7")])
    mine = cloud.provision("small", "img", "labkit-x--")[0]
    other = cloud.provision("small", "img", "labkit-x-2--")[0]
    cloud.servers["id-9"] = ServerRef("labkit-x--deadbeef", "id-9", {"labkit-prefix": "labkit-y--"})
    assert [s.name for s in cloud.list_labkit("labkit-x--")] == [mine.name]
    assert cloud.cleanup("labkit-x--") == [mine.name]
    assert sorted(r.name for r in cloud.servers.values()) == sorted([other.name, "labkit-x--deadbeef"])
    with pytest.raises(ConfigError):
        cloud.cleanup("web-")


@pytest.mark.parametrize(
    "options",
    [
        {"colour": "red"},
        {"prices": {"small": -1}},
        {"ssh_port": 0},
        {"boot_timeout": float("nan")},
        {"ssh_user": ""},
    ],
)
def test_bad_options(options):
    with pytest.raises(ConfigError):
        Ledger([ServerState(BUILDING)], **options)


def test_bad_count_and_names():
    cloud = Ledger([ServerState(BUILDING)])
    for args in (
        ("small", "img", "labkit-c1--", 0),
        ("", "img", "labkit-c1--", 1),
        ("small", "img", "Labkit-", 1),
    ):
        with pytest.raises(ConfigError):
            cloud.provision(*args)


def test_wait_ssh_gives_up_at_the_deadline_with_the_last_error():
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(
        BackendError,
        match=f"waiting for server: SSH on 127.0.0.1:{port} as root; last error: .*(refused|Unable to connect)",
    ):
        base.wait_ssh("127.0.0.1", port, "root", None, t0 + 1.5, interval=0.2, connect_timeout=1)
    assert 1.5 <= time.monotonic() - t0 < 30


def test_missing_sdk_names_the_extra(monkeypatch):
    real = base.importlib.import_module

    def refuse(name, *a):
        if name.startswith("openstack"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a)

    monkeypatch.setattr(base.importlib, "import_module", refuse)
    with pytest.raises(BackendUnavailable, match=r"pip install 'labkit\[openstack\]'"):
        get_provider("openstack", cloud="x").check()


def test_unknown_provider():
    with pytest.raises(ConfigError, match="openstack, cloudstack, azure"):
        get_provider("aws")


def test_first_address_prefers_the_named_network_and_ipv4():
    from labkit.backends.clouds.openstack import first_address

    addrs = {
        "a": [{"addr": "fd00::5", "version": 6}, {"addr": "10.0.0.5", "version": 4}],
        "provider": [{"addr": "10.238.0.12", "version": 4}],
    }
    assert first_address(addrs, "provider") == "10.238.0.12"
    assert first_address(addrs) == "10.0.0.5"
    assert first_address({}) is None and first_address({"v6": [{"addr": "fd00::1", "version": 6}]}) is None


def test_public_key_from_a_private_key_without_pub_file(tmp_path):
    paramiko = pytest.importorskip("paramiko")
    from labkit.backends.clouds.openstack import public_key

    path = tmp_path / "k"
    rsa = paramiko.RSAKey.generate(1024)
    rsa.write_private_key_file(str(path))
    assert public_key(str(path)) == f"ssh-rsa {rsa.get_base64()}"
    (tmp_path / "k.pub").write_text("ssh-ed25519 AAAAfromfile comment\n")
    assert public_key(str(path)) == "ssh-ed25519 AAAAfromfile"
    (tmp_path / "bad").write_text("not a key")
    with pytest.raises(ConfigError, match="not a readable private key"):
        public_key(str(tmp_path / "bad"))


def test_openstack_resends_reads_and_deletes_after_a_dropped_connection_never_creates(monkeypatch):
    pytest.importorskip("openstack")
    from keystoneauth1 import exceptions as ka

    monkeypatch.setattr("labkit.core.waiting.time.sleep", lambda s: None)
    p = get_provider("openstack", cloud="x")
    calls = []

    def flaky(fails):
        def fn():
            calls.append(1)
            if len(calls) <= fails:
                raise ka.ConnectFailure("Connection reset by peer")
            return "answer"

        return fn

    assert p._call("get server s1", flaky(2)) == "answer" and len(calls) == 3
    calls.clear()
    with pytest.raises(BackendUnavailable, match="delete server s1: ConnectFailure"):
        p._call("delete server s1", flaky(3))  # three attempts in all, then the error
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(BackendUnavailable, match="create server"):
        p._call("create server labkit-c1--0a1b2c3d", flaky(1))
    assert len(calls) == 1  # a create is never sent twice


def test_new_servers_are_trusted_on_first_use_in_labkits_own_file_then_checked_strictly(
    monkeypatch, tmp_path
):
    """Issue 28: accept-new into labkit's own known_hosts file (a stale entry of a recycled address
    dropped first, since the server is new); the server is handed on with strict against that file.
    A known_hosts file the user gives is never edited."""
    import paramiko

    from labkit.backends import hostkeys

    monkeypatch.setenv("HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(base, "wait_ssh", lambda *a, **k: calls.append(k))
    own = tmp_path / ".cache" / "labkit" / "cloud_known_hosts"
    own.parent.mkdir(parents=True)
    old = paramiko.ECDSAKey.generate()
    own.write_text(
        f"192.0.2.7 {old.get_name()} {old.get_base64()}\nother {old.get_name()} {old.get_base64()}\n"
    )
    [server] = Ledger([ServerState(ACTIVE, "192.0.2.7")]).provision("small", "img", "labkit-c1--")
    assert calls[-1]["host_key_policy"] == "accept-new" and calls[-1]["known_hosts"] == str(own)
    assert hostkeys.find_entry(str(own), "192.0.2.7") is None and hostkeys.find_entry(str(own), "other") == 1
    assert (server.host_key_policy, server.known_hosts) == ("strict", str(own))
    assert (
        server.host()["host_key_policy"] == "strict"
        and server.ssh_backend().settings.host_key_policy == "strict"
    )
    mine = tmp_path / "mine"
    mine.write_text(f"192.0.2.7 {old.get_name()} {old.get_base64()}\n")
    Ledger([ServerState(ACTIVE, "192.0.2.7")], known_hosts=str(mine)).provision("small", "img", "labkit-c2--")
    assert hostkeys.find_entry(str(mine), "192.0.2.7") == 1  # the user's file: a changed key is refused
    with pytest.raises(ConfigError, match="host_key_policy must be one of strict, accept-new, insecure"):
        Ledger([], host_key_policy="tofu")


def test_wait_ssh_refuses_a_changed_key_at_once(tmp_path, monkeypatch):
    """A refused host key is not retried until the deadline: BackendUnavailable with the old key's line
    (paramiko's refusal stands in for the sshd here; tests/integration/test_ssh_hostkeys.py meets the real one)."""
    import paramiko

    monkeypatch.setenv("HOME", str(tmp_path))
    kh = tmp_path / "kh"
    key = paramiko.ECDSAKey.generate()
    kh.write_text(f"[127.0.0.1]:2200 {key.get_name()} {key.get_base64()}\n")
    bad = paramiko.BadHostKeyException("[127.0.0.1]:2200", paramiko.ECDSAKey.generate(), key)

    def connect(self, *a, **k):
        raise bad

    monkeypatch.setattr(paramiko.SSHClient, "connect", connect)
    with pytest.raises(BackendUnavailable, match=rf"127\.0\.0\.1:2200 CHANGED.*{kh} line 1"):
        base.wait_ssh("127.0.0.1", 2200, "root", None, time.monotonic() + 3600, known_hosts=str(kh))
