"""The guest-exec-status polling loop of labkit.backends.libvirt.agent, on a scripted agent
(the real agent is exercised by tests/integration/test_contract.py on libvirt)."""

from __future__ import annotations

import base64
import json

import pytest

pytest.importorskip("libvirt")
from labkit.backends.libvirt import agent  # noqa: E402
from labkit.errors import BackendError  # noqa: E402
from tests.support.libvirt_errors import libvirt_error  # noqa: E402
from tests.support.processes import alive  # noqa: E402


class Dom:
    def name(self):
        return "labkit-unit--0"


def scripted(monkeypatch, statuses):
    """Answer guest-exec-status with ``statuses`` in turn (the last one repeats); count calls."""
    calls = []

    def reply(dom, msg, timeout, flags):
        calls.append(json.loads(msg))
        st = statuses[min(len(calls) - 1, len(statuses) - 1)]
        return json.dumps({"return": st})

    monkeypatch.setattr(agent.libvirt_qemu, "qemuAgentCommand", reply)
    return calls


def test_polls_until_exit_and_decodes_the_output(monkeypatch):
    out = base64.b64encode(b"hello\n").decode()
    calls = scripted(
        monkeypatch, [{"exited": False}] * 5 + [{"exited": True, "exitcode": 3, "out-data": out}]
    )
    res = agent.wait(Dom(), 42, timeout=30)
    assert (res.exit_code, res.stdout, res.stderr) == (3, "hello\n", "")
    assert len(calls) == 6 and all(
        c == {"execute": "guest-exec-status", "arguments": {"pid": 42}} for c in calls
    )


def test_signal_and_truncation(monkeypatch):
    scripted(monkeypatch, [{"exited": True, "signal": 9, "out-truncated": True}])
    res = agent.wait(Dom(), 1, timeout=None)
    assert res.exit_code == 137 and res.stdout == agent.TRUNCATED


def test_returns_none_at_the_deadline(monkeypatch):
    scripted(monkeypatch, [{"exited": False}])
    assert agent.wait(Dom(), 1, timeout=0.05) is None


def test_a_guest_that_stopped_raises_instead_of_waiting_forever(monkeypatch):
    scripted(monkeypatch, [{"exited": False}])
    monkeypatch.setattr(agent, "ALIVE_EVERY_S", 0.02)
    asked = []

    def alive():
        asked.append(1)
        return len(asked) < 2

    with pytest.raises(BackendError, match="stopped while running guest pid 7"):
        agent.wait(Dom(), 7, timeout=None, alive=alive)
    assert len(asked) == 2


def test_agent_errors_are_backend_errors(monkeypatch):
    monkeypatch.setattr(
        agent.libvirt_qemu,
        "qemuAgentCommand",
        lambda *a: json.dumps({"error": {"class": "GenericError", "desc": "no such pid"}}),
    )
    with pytest.raises(agent.AgentError, match="no such pid"):
        agent.wait(Dom(), 9, timeout=1)


def test_output_too_large_for_libvirt_says_so(monkeypatch):
    def refuse(*a):
        raise libvirt_error("Unable to encode message payload")

    monkeypatch.setattr(agent.libvirt_qemu, "qemuAgentCommand", refuse)
    with pytest.raises(agent.AgentError, match="output, base64-encoded, exceeds what libvirt carries.*3 MiB"):
        agent.wait(Dom(), 9, timeout=1)


class Conn:
    def lookupByName(self, name):
        return LiveDom()


class LiveDom(Dom):
    def isActive(self):
        return 1


def test_relay_starts_the_command_and_hands_back_its_output_and_status(monkeypatch, capsys):
    from labkit.backends.libvirt import relay as libvirt_relay

    out, err = (base64.b64encode(s).decode() for s in (b"orted out\n", b"orted err\n"))
    calls = []

    def reply(dom, msg, timeout, flags):
        calls.append(json.loads(msg))
        if calls[-1]["execute"] == "guest-exec":
            return json.dumps({"return": {"pid": 5}})
        done = len(calls) > 3
        return json.dumps(
            {
                "return": {"exited": True, "exitcode": 7, "out-data": out, "err-data": err}
                if done
                else {"exited": False}
            }
        )

    monkeypatch.setattr(agent.libvirt_qemu, "qemuAgentCommand", reply)
    monkeypatch.setattr(agent.libvirt, "open", lambda uri: Conn())
    assert libvirt_relay.main(["qemu:///system", "labkit-unit--0", "sh", "-c", "echo a b"]) == 7
    assert calls[0]["arguments"]["path"] == "sh"
    assert calls[0]["arguments"]["arg"] == ["-c", "echo a b"]  # the words, not re-split
    assert capsys.readouterr() == ("orted out\n", "orted err\n")


def test_relay_usage_and_unreachable_guest(monkeypatch, capsys):
    from labkit.backends.libvirt import relay as libvirt_relay

    assert libvirt_relay.main(["qemu:///system", "dom"]) == 2
    assert "usage" in capsys.readouterr().err

    def refuse(uri):
        raise libvirt_error("cannot connect")

    monkeypatch.setattr(agent.libvirt, "open", refuse)
    assert libvirt_relay.main(["qemu:///system", "dom", "true"]) == 255
    assert "dom at qemu:///system" in capsys.readouterr().err


def silent_then(monkeypatch, silent: int, final: dict, code=None):
    """An agent that does not answer ``silent`` times (libvirt's error ``code``, default: agent
    unresponsive), then answers ``final``."""
    import libvirt

    calls = []

    def reply(dom, msg, timeout, flags):
        calls.append(msg)
        if len(calls) <= silent:
            exc = libvirt_error("Guest agent is not responding: Guest agent not available for now")
            exc.err = (code or libvirt.VIR_ERR_AGENT_UNRESPONSIVE, 0, "", 0, "", None, None, 0, 0)
            raise exc
        return json.dumps({"return": final})

    monkeypatch.setattr(agent.libvirt_qemu, "qemuAgentCommand", reply)
    monkeypatch.setattr(agent, "SILENT_POLL_S", 0.01)
    return calls


def test_an_agent_that_stops_answering_for_a_while_is_asked_again(monkeypatch):
    calls = silent_then(monkeypatch, 3, {"exited": True, "exitcode": 0})
    assert agent.wait(Dom(), 7, timeout=30).exit_code == 0
    assert len(calls) == 4


def test_a_silent_agent_past_the_deadline_is_a_timeout_and_past_the_patience_an_error(monkeypatch):
    silent_then(monkeypatch, 10**6, {"exited": True, "exitcode": 0})
    assert agent.wait(Dom(), 7, timeout=0.05) is None
    monkeypatch.setattr(agent, "SILENCE_S", 0.05)
    with pytest.raises(agent.AgentError, match="not responding") as info:
        agent.wait(Dom(), 7, timeout=None)
    assert info.value.unresponsive


def test_other_agent_errors_are_raised_at_once(monkeypatch):
    import libvirt

    calls = silent_then(
        monkeypatch, 1, {"exited": True, "exitcode": 0}, code=libvirt.VIR_ERR_OPERATION_FAILED
    )
    with pytest.raises(agent.AgentError) as info:
        agent.wait(Dom(), 7, timeout=30)
    assert not info.value.unresponsive and len(calls) == 1


# -- the kill of a command and everything it started (KILL_TREE), run for real on this host ----------


def _descendants_started(proc, count: int, tag: str) -> list[int]:
    """The pids of the ``count`` ``sleep`` processes carrying ``tag`` (they may have left ``proc``'s
    tree: a daemon's double fork reparents them)."""
    import os
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{p}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if f"{agent.TAG_VAR}={tag}".encode() in env and comm == "sleep":
                found.append(int(p))
        if len(found) == count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"the tagged sleeps did not start: {found}")


def test_kill_tree_ends_the_command_its_children_and_what_left_its_process_group():
    """The guest's kill script on this host's sh: the command, a child in its group, one in a
    session of its own (setsid) and a daemon that double-forked away from the tree all die; a
    process with another tag lives on."""
    import os
    import secrets
    import subprocess

    tag, other = secrets.token_hex(8), secrets.token_hex(8)
    env = {**os.environ, agent.TAG_VAR: tag}
    script = "sleep 611 & setsid sleep 612 & (sh -c 'sleep 613 &' &) ; sleep 614"
    proc = subprocess.Popen(["sh", "-c", script], env=env, start_new_session=True)
    bystander = subprocess.Popen(["sleep", "615"], env={**os.environ, agent.TAG_VAR: other})
    try:
        pids = _descendants_started(proc, 4, tag)
        res = subprocess.run(
            ["/bin/sh", "-c", agent.KILL_TREE, "sh", tag, str(proc.pid)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        assert proc.wait(timeout=30) == -9
        assert [p for p in pids if alive(p)] == []
        assert alive(bystander.pid)
        # a second kill finds nothing and says nothing
        again = subprocess.run(
            ["/bin/sh", "-c", agent.KILL_TREE, "sh", tag, str(proc.pid)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (again.returncode, again.stderr) == (0, "")
    finally:
        for p in (proc, bystander):
            p.kill()
            p.wait()


def test_start_tags_the_command_and_runs_it_without_a_wrapper(monkeypatch):
    sent = []

    def reply(dom, msg, timeout, flags):
        sent.append(json.loads(msg))
        return json.dumps({"return": {"pid": 77}})

    monkeypatch.setattr(agent.libvirt_qemu, "qemuAgentCommand", reply)
    a, b = agent.start(Dom(), ["true", "x"], {"A": "1"}), agent.start(Dom(), ["true"])
    args = sent[0]["arguments"]
    assert (args["path"], args["arg"]) == ("true", ["x"])  # no setsid, no shell before it
    assert f"{agent.TAG_VAR}={a.tag}" in args["env"] and "A=1" in args["env"]
    assert a.pid == b.pid == 77 and a.tag != b.tag and len(a.tag) == 16


def test_a_command_the_agent_cannot_start_runs_under_sh_to_fail_as_in_a_shell(monkeypatch):
    sent = []

    def reply(dom, msg, timeout, flags):
        sent.append(json.loads(msg))
        if sent[-1]["arguments"]["path"] == "labkit-no-such-command":
            raise libvirt_error("Failed to execute child process (No such file or directory)")
        return json.dumps({"return": {"pid": 9}})

    monkeypatch.setattr(agent.libvirt_qemu, "qemuAgentCommand", reply)
    cmd = agent.start(Dom(), ["labkit-no-such-command", "a b"])
    assert cmd.pid == 9 and len(sent) == 2
    assert [sent[1]["arguments"]["path"], *sent[1]["arguments"]["arg"]] == [
        *agent.AS_SHELL,
        "labkit-no-such-command",
        "a b",
    ]
    assert sent[1]["arguments"]["env"] == sent[0]["arguments"]["env"]  # the same tag


def test_an_unresponsive_agent_is_not_retried(monkeypatch):
    calls = []

    def reply(dom, msg, timeout, flags):
        calls.append(msg)
        exc = libvirt_error("agent not responding")
        exc.err = (agent.libvirt.VIR_ERR_AGENT_UNRESPONSIVE, 0, "", 0, "", None, None, 0, 0)
        raise exc

    monkeypatch.setattr(agent.libvirt_qemu, "qemuAgentCommand", reply)
    with pytest.raises(agent.AgentError) as err:
        agent.start(Dom(), ["true"])
    assert err.value.unresponsive and len(calls) == 1
