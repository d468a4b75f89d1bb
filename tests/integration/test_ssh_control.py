"""The ssh backend's control shell (:mod:`labkit.backends.ssh_control`) against a real sshd (marker
``ssh``): control scripts share one remote ``/bin/sh`` instead of a new SSH session (and the remote
login shell's start-up) each, and keep the meaning they had on sessions of their own.

The host is found through LABKIT_SSH_HOST/_PORT/_USER/_KEY (``bash scripts/setup-ssh.sh``).
"""

from __future__ import annotations

import threading

import paramiko
import pytest

from labkit.backends import get_backend, teardown
from labkit.core.instance import InstanceSpec
from labkit.errors import BackendError

pytestmark = pytest.mark.ssh
PREFIX = "labkit-test-sshctl"


@pytest.fixture
def backend():
    be = get_backend("ssh")
    try:
        yield be
    finally:
        be.close()


def shell_pid(be) -> str:
    """The pid of the shell that ran this script's ``/bin/sh`` (the control shell, when it ran there)."""
    return be.run_script("echo $PPID", "asking for the parent").stdout.strip()


def test_a_cycle_opens_one_session_besides_the_control_shell(monkeypatch):
    """Connecting (probe and listing), provisioning, an exec and the teardown open two SSH sessions:
    the control shell's and the command's (each session starts the remote user's login shell)."""
    opened = []
    real = paramiko.Transport.open_session
    monkeypatch.setattr(
        paramiko.Transport, "open_session", lambda self, *a, **k: opened.append(1) or real(self, *a, **k)
    )
    be = get_backend("ssh")
    try:
        be.list_labkit(PREFIX)
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=64), prefix=PREFIX)
        try:
            assert insts[0].exec(["echo", "in"]).stdout == "in\n"
        finally:
            teardown(insts)
        assert be.list_labkit(PREFIX) == []
        assert len(opened) == 2
    finally:
        be.close()


def test_scripts_keep_their_output_status_and_stdin(backend):
    first = shell_pid(backend)
    res = backend.run_script("printf 'a\\nb'; printf 'err' >&2", "framing")
    assert (res.stdout, res.stderr) == ("a\nb", "err")
    # what looks like the protocol's frame end is output like any other
    res = backend.run_script(
        "printf '\\nlabkit-ctl-0123456789abcdef 0\\n'; printf '\\nx\\n' >&2", "lookalike"
    )
    assert (res.stdout, res.stderr) == ("\nlabkit-ctl-0123456789abcdef 0\n", "\nx\n")
    # stdin is empty (the shell's own input, the protocol, is out of the script's reach)
    assert backend.run_script("cat; echo read-all", "reading stdin").stdout == "read-all\n"
    with pytest.raises(BackendError, match=r"failed \(exit 3\): nope"):
        backend.run_script("echo nope >&2; exit 3", "failing")
    assert shell_pid(backend) == first  # one shell ran them all


def test_a_script_past_its_timeout_costs_the_shell_not_the_next_script(backend):
    first = shell_pid(backend)
    with pytest.raises(BackendError, match="ran past"):
        backend.run_script("sleep 30", "sleeping", timeout=0.5)
    assert backend.run_script("echo ok", "after").stdout == "ok\n"
    assert shell_pid(backend) != first  # a new control shell


def test_a_shell_that_dies_is_an_error_then_replaced(backend):
    first = shell_pid(backend)
    with pytest.raises(BackendError, match="control shell ended"):
        backend.run_script("kill -KILL $PPID; sleep 1", "killing the control shell")
    assert shell_pid(backend) not in ("", first)


def test_a_busy_shell_does_not_hold_up_another_threads_script(backend):
    """The second script can end only by running while the first one waits (a FIFO joins them)."""
    tmp = backend.run_script('d=$(mktemp -d) && mkfifo "$d/f" && echo "$d"', "making a fifo").stdout.strip()
    try:
        got: list[object] = []
        first = threading.Thread(
            target=lambda: got.append(
                backend.run_script(f"cat '{tmp}/f'; echo $PPID", "waiting on the fifo", timeout=120).stdout
            )
        )
        first.start()
        try:
            # the first script holds the control shell once its cat reads the fifo's writer's end
            second = backend.run_script(f"echo go > '{tmp}/f'; echo $PPID", "writing the fifo", timeout=120)
        finally:
            first.join(150)
        assert got and str(got[0]).startswith("go\n")
        assert second.stdout.strip() != str(got[0]).split()[-1]  # not the same shell
    finally:
        backend.run_script(f"rm -rf '{tmp}'", "removing the fifo")
