"""Host keys checked on every SSH path against the real test sshd (marker ``ssh``; issue 28).

The sshd of scripts/setup-ssh.sh (127.0.0.1:2222, LABKIT_SSH_*) is reached with HOME pointing at a
temporary directory, so root's real ~/.ssh/known_hosts is neither read nor changed: each test
gives its own known_hosts file (tests/support/hostkey_trials.py). Before issue 28 the ssh backend
(fabric's AutoAddPolicy) connected with a different key on file; now:

* a changed key is refused under strict and accept-new on every path, the message naming
  host:port, the file and line of the old key and the ``ssh-keygen -R`` command;
* an unknown key is refused under strict; accept-new connects and records it, strict then works;
* insecure connects whatever the key, says so in a warning and in the backend's fingerprint.
"""

from __future__ import annotations

import logging
import re

import pytest

from labkit.backends import get_backend
from labkit.errors import BackendUnavailable
from tests.support import hostkey_trials as trials

pytestmark = pytest.mark.ssh
LIBVIRT = pytest.mark.libvirt
PATHS = [pytest.param(p, marks=LIBVIRT) if p in trials.LIBVIRT_PATHS else p for p in trials.PATHS]
#: what each path says about a refused key: labkit's message (every path since the libvirt backend
#: took host_key_policy), or the ssh binary's own (what mpirun shows of its ssh launch agent)
CHANGED = {"ssh binary": "HOST IDENTIFICATION HAS CHANGED|Host key verification failed"}
UNKNOWN = {"ssh binary": "Host key verification failed|No .* host key is known"}


@pytest.fixture
def home():
    with trials.private_home() as h:
        yield h


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_a_changed_key_is_refused(path, policy, home):
    kh = trials.changed_file(home)
    before = kh.read_text()
    ok, why = trials.attempt(path, policy, kh)
    assert not ok, f"{path} accepted a changed host key under {policy}"
    host = trials.target()["host"]
    port = trials.target()["port"]
    if path in CHANGED:
        assert re.search(CHANGED[path], why), why
    else:
        assert f"{host}:{port} CHANGED" in why and "@@@" not in why, why
        assert f"{kh} line 2" in why and f"ssh-keygen -f {kh} -R '[{host}]:{port}'" in why, why
    assert kh.read_text() == before  # nothing recorded over the old key


@pytest.mark.parametrize("path", PATHS)
def test_an_unknown_key_is_refused_under_strict_and_recorded_under_accept_new(path, home):
    kh = trials.unknown_file(home)
    ok, why = trials.attempt(path, "strict", kh)
    assert not ok, f"{path} accepted an unknown host key under strict"
    if path in UNKNOWN:
        assert re.search(UNKNOWN[path], why), why
    else:
        assert "is unknown" in why and "host_key_policy is strict" in why and "accept-new" in why, why
    assert trials.attempt(path, "accept-new", kh) == (True, "")
    recorded = trials.recorded_keys(kh)
    assert recorded and recorded <= trials.server_keys()  # the sshd's own key, nothing else
    assert trials.attempt(path, "strict", kh) == (True, "")  # known now
    assert trials.recorded_keys(kh) == recorded  # recorded once


def test_insecure_connects_with_a_changed_key_and_says_so(home, caplog):
    kh = trials.changed_file(home)
    t = trials.target()
    with caplog.at_level(logging.WARNING, logger="labkit"):
        be = get_backend("ssh", **t, host_key_policy="insecure", known_hosts=str(kh))
        try:
            assert be.fingerprint()["host_key_policy"] == "insecure"  # stored with every run
        finally:
            be.close()
    assert "host_key_policy insecure" in caplog.text
    for path in ("ssh binary", "docker ssh://", *trials.LIBVIRT_PATHS):  # also accepted
        if path in trials.LIBVIRT_PATHS and not _libvirt_up():
            continue
        assert trials.attempt(path, "insecure", kh) == (True, ""), path
    if _libvirt_up():  # recorded in the libvirt backend's fingerprint, so with every run
        be = trials.libvirt_backend("insecure", kh, domain_type="qemu")  # no KVM probe boot
        try:
            assert be.fingerprint()["host_key_policy"] == "insecure"
            assert (
                be.ssh.policy == "insecure"
                and "StrictHostKeyChecking=no"
                in open(be.ssh.open_uri.split("command=")[1].split("&")[0]).read()
            )
        finally:
            be.close()


def test_the_default_policy_is_strict_and_the_set_up_recorded_the_sshd():
    """Root's real known_hosts (scripts/setup-ssh.sh records the sshd there) makes strict work."""
    be = get_backend("ssh", **trials.target())
    try:
        assert be.fingerprint()["host_key_policy"] == "strict"
    finally:
        be.close()


def test_a_changed_key_in_the_users_own_file_is_refused_by_default(home):
    """The finding itself: no option given, ~/.ssh/known_hosts lists another key for the host."""
    (home / ".ssh" / "known_hosts").write_text(trials.changed_file(home).read_text())
    with pytest.raises(BackendUnavailable, match=rf"CHANGED.*{home}/\.ssh/known_hosts line 2.*ssh-keygen"):
        get_backend("ssh", **trials.target())


@LIBVIRT
@pytest.mark.parametrize("transport", ["libssh", "libssh2"])
def test_libvirts_own_ssh_clients_take_the_policy_too(transport, home):
    """qemu+libssh(2):// URIs: libvirt's own SSH clients get the policy's known_hosts and check."""
    t = trials.target()

    def attempt(policy, kh):
        from labkit.backends.libvirt import LibvirtBackend

        be = LibvirtBackend(
            uri=f"qemu+{transport}://{t['user']}@{t['host']}:{t['port']}/system?keyfile={t['key_filename']}",
            host_key_policy=policy,
            known_hosts=str(kh),
        )
        try:
            be.conn.getVersion()
        finally:
            be.close()

    for policy in ("strict", "accept-new"):
        with pytest.raises(
            BackendUnavailable, match=rf"{t['host']}:{t['port']} CHANGED.*{trials.changed_file(home)} line 2"
        ):
            attempt(policy, trials.changed_file(home))
    kh = trials.unknown_file(home)
    with pytest.raises(BackendUnavailable, match="is unknown .* host_key_policy is strict"):
        attempt("strict", kh)
    attempt("accept-new", kh)
    assert trials.recorded_keys(kh) and trials.recorded_keys(kh) <= trials.server_keys()
    attempt("strict", kh)


def _libvirt_up() -> bool:
    from labkit.backends.testing import available

    return available("libvirt")[0]
