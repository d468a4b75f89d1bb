"""Host-key policy (labkit.backends.hostkeys) and how every SSH path derives from it: option
validation, the ``ssh`` argv, libvirt URI parameters, paramiko client set-up, testbed keys and the
line of an old key in a known_hosts file. No daemon: the real sshd is in
tests/integration/test_ssh_hostkeys.py."""

from __future__ import annotations

import logging
import os

import paramiko
import pytest
from paramiko.hostkeys import HostKeys

from labkit.backends import hostkeys
from labkit.backends.docker import DockerBackend
from labkit.backends.docker_ssh import SshSettings
from labkit.backends.ssh import SshBackend
from labkit.errors import ConfigError
from labkit.run.platforms import options_for
from labkit.run.testbed import Testbed

KEY_A = paramiko.ECDSAKey.generate()
KEY_B = paramiko.ECDSAKey.generate()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private HOME: ~/.ssh/known_hosts is tmp_path/.ssh/known_hosts (the real one is untouched)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir(mode=0o700)
    return tmp_path


def line(name: str, key) -> str:
    return f"{name} {key.get_name()} {key.get_base64()}\n"


@pytest.mark.parametrize("value", ["yes", "no", True, None, "STRICT", "accept_new"])
def test_a_bad_policy_is_refused_with_the_allowed_values(value):
    with pytest.raises(ConfigError, match="host_key_policy must be one of strict, accept-new, insecure"):
        hostkeys.check_policy(value, "here")


def test_the_default_is_strict_on_every_path(home):
    assert SshBackend(host="h").settings.host_key_policy == "strict"
    assert DockerBackend(base_url="ssh://h").ssh.host_key_policy == "strict"
    tb = Testbed.from_dict({"hosts": [{"name": "n1", "address": "10.0.0.5"}]})
    assert tb.hosts[0].host_key_policy == "strict"
    with pytest.raises(ConfigError, match="ssh backend: host_key_policy must be one of"):
        SshBackend(host="h", host_key_policy="off")
    with pytest.raises(ConfigError, match="known_hosts: .* is not a file"):
        SshBackend(host="h", known_hosts=str(home / "no" / "such" / "dir"))


def test_the_deprecated_docker_option_maps_to_a_policy(caplog):
    with caplog.at_level(logging.WARNING):
        assert DockerBackend(base_url="ssh://h", ssh_verify_host=False).ssh.host_key_policy == "accept-new"
        assert DockerBackend(base_url="ssh://h", ssh_verify_host=True).ssh.host_key_policy == "strict"
    assert "ssh_verify_host is deprecated" in caplog.text


def test_ssh_argv_options_follow_the_policy(home, tmp_path):
    kh = str(tmp_path / "kh")
    user = os.path.join(str(home), ".ssh", "known_hosts")

    def opts(policy, known=None):
        argv = SshSettings("root", "h", 22, None, known, policy).ssh_argv(["true"])
        return [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]

    assert "StrictHostKeyChecking=yes" in opts("strict") and f"UserKnownHostsFile={user}" in opts("strict")
    # accept-new adds to the first file: the extra one when given
    assert "StrictHostKeyChecking=accept-new" in opts("accept-new", kh)
    assert f"UserKnownHostsFile={kh} {user}" in opts("accept-new", kh)
    insecure = opts("insecure", kh)
    assert {
        "StrictHostKeyChecking=no",
        "UserKnownHostsFile=/dev/null",
        "GlobalKnownHostsFile=/dev/null",
    } <= set(insecure)


def test_libvirt_uri_parameters_run_ssh_with_the_policys_options(home, tmp_path):
    import subprocess

    strict = hostkeys.libvirt_query("strict", None, "/k")
    assert strict["no_tty"] == "1" and strict["keyfile"] == "/k" and "no_verify" not in strict
    wrapper = strict["command"]
    assert (
        wrapper.startswith(f"{home}/.cache/labkit/ssh/ssh-")
        and oct(os.stat(wrapper).st_mode & 0o777) == "0o700"
    )
    # the wrapper runs ssh with the policy's options before libvirt's own (OpenSSH: first value wins)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fake / "ssh").chmod(0o700)
    got = subprocess.run(
        [wrapper, "-p", "22", "h"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"},
    ).stdout.split("\n")[:-1]
    assert got == [*hostkeys.ssh_options("strict", None), "-p", "22", "h"]
    assert hostkeys.libvirt_query("strict", None, "/k") == strict  # the same file, written once
    new = hostkeys.libvirt_query("accept-new", "/x/kh", None)
    assert "keyfile" not in new and new["command"] != wrapper
    assert "StrictHostKeyChecking=accept-new" in open(new["command"]).read()
    assert (
        "StrictHostKeyChecking=no" in open(hostkeys.libvirt_query("insecure", None, None)["command"]).read()
    )
    with pytest.raises(ConfigError, match="must be one of"):
        hostkeys.libvirt_query("maybe", None, None)


def test_a_testbed_passes_its_policy_and_file_to_every_ssh_path(home, tmp_path):
    kh = tmp_path / "lab_known_hosts"
    tb = Testbed.from_dict(
        {
            "host_key_policy": "accept-new",
            "known_hosts": str(kh),
            "hosts": [
                {"name": "n1", "address": "10.0.0.5", "key": "/k"},
                {"name": "n2", "address": "10.0.0.6", "host_key_policy": "insecure"},
            ],
        }
    )
    n1, n2 = tb.hosts
    assert (n1.host_key_policy, n1.known_hosts) == ("accept-new", str(kh))
    assert (n2.host_key_policy, n2.known_hosts) == ("insecure", str(kh))  # per host wins, file inherited
    ssh = options_for(tb.platform("ssh"), n1)
    assert ssh["host_key_policy"] == "accept-new" and ssh["known_hosts"] == str(kh)
    docker = options_for(tb.platform("docker"), n2)
    assert docker["host_key_policy"] == "insecure" and docker["ssh_known_hosts"] == str(kh)
    libvirt_opts = options_for(tb.platform("libvirt"), n1)
    assert libvirt_opts == {
        "uri": "qemu+ssh://root@10.0.0.5:22/system?keyfile=/k",
        "host_key_policy": "accept-new",
        "known_hosts": str(kh),
    }
    from labkit.backends.libvirt import LibvirtBackend

    assert LibvirtBackend(**libvirt_opts).ssh.open_uri == (
        "qemu+ssh://root@10.0.0.5:22/system?keyfile=/k&no_tty=1&command="
        f"{hostkeys.ssh_wrapper(hostkeys.ssh_options('accept-new', str(kh)))}"
    )
    assert n1.describe()["host_key_policy"] == "accept-new"
    # the backends take what the testbed gives
    assert SshBackend(**ssh).settings == SshSettings(
        "root", "10.0.0.5", 22, "/k", str(kh), "accept-new", 10.0
    )
    for bad, match in (
        ({"host_key_policy": "trust"}, "host_key_policy must be one of"),
        ({"known_hosts": 5}, "known_hosts: the path"),
    ):
        with pytest.raises(ConfigError, match=match):
            Testbed.from_dict({**bad, "hosts": [{"name": "n1", "address": "10.0.0.5"}]})
        with pytest.raises(ConfigError, match=r"hosts\.n1.*" + match):
            Testbed.from_dict({"hosts": [{"name": "n1", "address": "10.0.0.5", **bad}]})


def test_the_line_of_an_old_key_is_found_plain_or_hashed(tmp_path):
    kh = tmp_path / "kh"
    hashed = HostKeys.hash_host("[10.0.0.9]:2200")
    kh.write_text(
        "# a comment\n" + line("other", KEY_A) + "\n" + line(hashed, KEY_A) + line("10.0.0.9", KEY_B)
    )
    assert hostkeys.find_entry(str(kh), "[10.0.0.9]:2200") == 4
    assert hostkeys.find_entry(str(kh), "10.0.0.9") == 5
    assert hostkeys.find_entry(str(kh), "10.0.0.10") is None
    assert hostkeys.find_entry(str(tmp_path / "missing"), "x") is None


def test_a_changed_key_message_names_host_file_line_and_the_removal_command(home, tmp_path):
    kh = tmp_path / "kh"
    kh.write_text(line("x", KEY_A) + line("[10.0.0.9]:2200", KEY_A))
    exc = paramiko.BadHostKeyException("[10.0.0.9]:2200", KEY_B, KEY_A)
    msg = hostkeys.why_not(exc, "10.0.0.9", 2200, str(kh))
    assert "10.0.0.9:2200 CHANGED" in msg and f"{kh} line 2" in msg and KEY_B.fingerprint in msg
    assert f"ssh-keygen -f {kh} -R '[10.0.0.9]:2200'" in msg
    # the user's file is checked first, as paramiko does
    (home / ".ssh" / "known_hosts").write_text(line("10.0.0.9", KEY_A))
    msg = hostkeys.why_not(paramiko.BadHostKeyException("10.0.0.9", KEY_B, KEY_A), "10.0.0.9", 22, str(kh))
    assert f"{home}/.ssh/known_hosts line 1" in msg and "-R '10.0.0.9'" in msg
    assert "host_key_policy is strict" in hostkeys.why_not(hostkeys.UnknownHostKey("x"), "h", 22, None)
    assert hostkeys.why_not(OSError("refused"), "h", 22, None) is None


def test_paramiko_clients_load_the_files_of_the_policy(home, tmp_path, caplog):
    (home / ".ssh" / "known_hosts").write_text(line("[h]:2200", KEY_A))
    kh = tmp_path / "kh"
    kh.write_text(line("g", KEY_B))
    strict = paramiko.SSHClient()
    refuse = SshSettings("root", "h", 2200, None, str(kh), "strict").configure(strict)
    assert strict.get_host_keys().lookup("g") is not None  # the extra file
    with pytest.raises(hostkeys.UnknownHostKey):
        refuse.missing_host_key(strict, "[new]:2200", KEY_A)
    # insecure loads no file at all (a changed key cannot be noticed) and says so
    insecure = paramiko.SSHClient()
    with caplog.at_level(logging.WARNING):
        SshSettings("root", "h", 2200, None, str(kh), "insecure").configure(insecure)
    assert len(insecure.get_host_keys()) == 0 and "insecure" in caplog.text


def test_accept_new_records_a_new_key_and_refuses_a_different_recorded_one(home, tmp_path):
    kh = tmp_path / "sub" / "kh"
    (tmp_path / "sub").mkdir()
    client = paramiko.SSHClient()
    record = SshSettings("root", "h", 2200, None, str(kh), "accept-new").configure(client)
    record.missing_host_key(client, "[h]:2200", KEY_A)
    assert kh.read_text() == line("[h]:2200", KEY_A) and oct(kh.stat().st_mode & 0o777) == "0o600"
    assert HostKeys(str(kh)).lookup("[h]:2200")[KEY_A.get_name()] == KEY_A
    record.missing_host_key(client, "[h]:2200", KEY_A)  # recorded meanwhile, same key: fine
    with pytest.raises(paramiko.BadHostKeyException):
        record.missing_host_key(client, "[h]:2200", KEY_B)
    assert kh.read_text() == line("[h]:2200", KEY_A)
    # labkit's own file (cloud servers): a recycled address forgets the old key
    assert hostkeys.forget(str(kh), "h", 2200) == 1 and hostkeys.find_entry(str(kh), "[h]:2200") is None
    assert hostkeys.forget(str(tmp_path / "none"), "h", 2200) == 0


def test_the_mpi_launch_agent_and_ssh_hosts_members_use_the_backends_policy(home, tmp_path):
    from labkit.backends.ssh_hosts import SshHostsBackend
    from labkit.backends.ssh_instance import SshInstance
    from labkit.core.instance import InstanceSpec

    kh = str(tmp_path / "kh")
    be = SshBackend(host="10.0.0.5", host_key_policy="accept-new", known_hosts=kh)
    argv = SshInstance(be, "labkit-x", InstanceSpec(), 0, [0], [0]).host_command(["hostname"])
    assert (
        "StrictHostKeyChecking=accept-new" in argv
        and f"UserKnownHostsFile={kh} {home}/.ssh/known_hosts" in argv
    )
    assert "StrictHostKeyChecking=yes" in SshInstance(
        SshBackend(host="h"), "labkit-y", InstanceSpec(), 0, [0], [0]
    ).host_command(["true"])
    hosts = SshHostsBackend(
        hosts=[{"host": "10.0.0.11"}, {"host": "10.0.0.12", "host_key_policy": "strict"}],
        host_key_policy="insecure",
        known_hosts=kh,
    )
    assert [m.settings.host_key_policy for m in hosts.members] == ["insecure", "strict"]
    assert {m.settings.known_hosts for m in hosts.members} == {kh}


def _refusals() -> dict[str, str]:
    """libvirt's errors for a changed and an unknown host key, as recorded (tests/vectors/openssh_refusals.txt),
    with OpenSSH's CR LF line ends."""
    from pathlib import Path

    text = (Path(__file__).parents[1] / "vectors" / "openssh_refusals.txt").read_text()
    parts = text.split("=== ")[1:]
    return {p.split("\n", 1)[0]: p.split("\n", 1)[1].rstrip("\n").replace("\n", "\r\n") for p in parts}


def test_openssh_refusals_are_said_in_labkits_words():
    got = _refusals()
    changed = hostkeys.ssh_refusal(got["changed"], "127.0.0.1", 2222, "/x/kh")
    assert changed == (
        "the host key of 127.0.0.1:2222 CHANGED: the server offers "
        "SHA256:DbSGoJatBQwh513vU7+ygJDB9+YQMBxPpLH6JgCq2KA but "
        "/tmp/labkit-hostkeys-iqxs_asp/known_hosts_changed line 2 holds a different key for "
        "[127.0.0.1]:2222 (a man-in-the-middle, or the host was reinstalled). If the new key is "
        "right, remove the old one with: ssh-keygen -f /tmp/labkit-hostkeys-iqxs_asp/known_hosts_changed "
        "-R '[127.0.0.1]:2222'"
    )
    unknown = hostkeys.ssh_refusal(got["unknown"], "127.0.0.1", 2222, "/x/kh")
    assert unknown == hostkeys.unknown_message("127.0.0.1", 2222, "/x/kh")
    assert hostkeys.ssh_refusal("Cannot recv data: Connection refused", "h", 22, None) is None


def test_the_libvirt_backend_applies_its_policy_to_every_ssh_uri(home, tmp_path, caplog):
    import urllib.parse

    from labkit.backends.libvirt import LibvirtBackend
    from labkit.backends.libvirt.sshuri import parse

    def query(uri):
        return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(uri).query))

    # a local URI: no SSH, no policy, opened as given
    local = LibvirtBackend(uri="qemu:///system")
    assert (local.ssh.open_uri, local.ssh.policy) == (
        "qemu:///system",
        None,
    ) and "host_key_policy" not in local.options
    with pytest.raises(ConfigError, match="apply to an SSH URI"):
        LibvirtBackend(uri="qemu+tls://h/system", host_key_policy="strict")
    # a user's own qemu+ssh URI: strict by default, ssh run with the policy's options, the user's parameters kept
    be = LibvirtBackend(uri="qemu+ssh://lab@h:2200/system?keyfile=/my%20k&socket=/run/x.sock")
    q = query(be.ssh.open_uri)
    assert be.ssh.open_uri.startswith("qemu+ssh://lab@h:2200/system?keyfile=/my%20k&socket=/run/x.sock&")
    assert (q["keyfile"], q["socket"], q["no_tty"]) == ("/my k", "/run/x.sock", "1")
    assert q["command"] == hostkeys.ssh_wrapper(hostkeys.ssh_options("strict", None))
    assert (be.ssh.host, be.ssh.port, be.ssh.policy, be.options["host_key_policy"]) == (
        "h",
        2200,
        "strict",
        "strict",
    )
    kh = tmp_path / "kh"
    new = LibvirtBackend(uri="xen+ssh://h/", host_key_policy="accept-new", known_hosts=str(kh))
    assert query(new.ssh.open_uri)["command"] == hostkeys.ssh_wrapper(
        hostkeys.ssh_options("accept-new", str(kh))
    )
    assert new.uri == "xen+ssh://h/"  # what the fingerprint and the metadata show
    # libvirt's own SSH clients: their known_hosts file and check
    assert query(parse("qemu+libssh2://h/system", None, str(kh)).open_uri) == {
        "known_hosts_verify": "normal",
        "known_hosts": str(kh),
        "no_tty": "1",
    }
    assert (
        query(parse("qemu+libssh://h/system", "accept-new", None).open_uri)["known_hosts"]
        == f"{home}/.ssh/known_hosts"
    )
    with caplog.at_level(logging.WARNING):
        assert query(parse("qemu+libssh://h/system", "insecure", None).open_uri) == {
            "known_hosts_verify": "ignore",
            "no_tty": "1",
        }
    assert "host_key_policy insecure" in caplog.text
    # a parameter that would bypass the policy, a bad policy, a URI without a host
    for param, instead in (
        ("command=/usr/bin/ssh", "host_key_policy"),
        ("no_verify=1", "insecure"),
        ("known_hosts=/k", "known_hosts option"),
        ("known_hosts_verify=ignore", "host_key_policy"),
    ):
        with pytest.raises(ConfigError, match=f"{param.split('=')[0]}.*bypass.*{instead}"):
            LibvirtBackend(uri=f"qemu+ssh://h/system?{param}")
    with pytest.raises(ConfigError, match="host_key_policy must be one of"):
        LibvirtBackend(uri="qemu+ssh://h/system", host_key_policy="no")
    with pytest.raises(ConfigError, match="names its host"):
        LibvirtBackend(uri="qemu+ssh:///system")
