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
PATHS = [pytest.param(p, marks=LIBVIRT) if p == "libvirt" else p for p in trials.PATHS]
#: what each path says about a refused key: labkit's message, or the ssh binary's own (libvirt runs ssh)
CHANGED = {"ssh binary": "HOST IDENTIFICATION HAS CHANGED|Host key verification failed",
           "libvirt": "Host key verification failed"}
UNKNOWN = {"ssh binary": "Host key verification failed|No .* host key is known",
           "libvirt": "Host key verification failed"}


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
        assert "BackendUnavailable" in why and f"{host}:{port} CHANGED" in why, why
        assert f"{kh} line 2" in why and f"ssh-keygen -f {kh} -R '[{host}]:{port}'" in why, why
    assert kh.read_text() == before   # nothing recorded over the old key


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
    assert recorded and recorded <= trials.server_keys()   # the sshd's own key, nothing else
    assert trials.attempt(path, "strict", kh) == (True, "")   # known now
    assert trials.recorded_keys(kh) == recorded               # recorded once


def test_insecure_connects_with_a_changed_key_and_says_so(home, caplog):
    kh = trials.changed_file(home)
    t = trials.target()
    with caplog.at_level(logging.WARNING, logger="labkit"):
        be = get_backend("ssh", **t, host_key_policy="insecure", known_hosts=str(kh))
        try:
            assert be.fingerprint()["host_key_policy"] == "insecure"   # stored with every run
        finally:
            be.close()
    assert "host_key_policy insecure" in caplog.text
    for path in trials.PATHS[1:4]:   # the ssh binary, docker, libvirt: also accepted
        if path == "libvirt" and not _libvirt_up():
            continue
        assert trials.attempt(path, "insecure", kh) == (True, ""), path


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


def _libvirt_up() -> bool:
    from labkit.backends.testing import available
    return available("libvirt")[0]
