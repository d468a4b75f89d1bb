"""The container backends' exec wrapper (labkit.backends.containers) run for real on the host:
a command becomes its own session, whose whole tree kill_argv SIGKILLs; and the parsers of
the OOM counters (cgroup v1 memory.oom_control, v2 memory.events)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from labkit.backends.containers import (
    Running,
    kill_argv,
    new_pidfile,
    oom_kill_count,
    session_argv,
)
from tests.support.processes import alive


def test_exit_status_output_and_missing_command_pass_through():
    pidfile = new_pidfile()
    run = subprocess.run(
        session_argv(["sh", "-c", "echo out; echo err >&2; exit 3"], pidfile),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (run.returncode, run.stdout, run.stderr) == (3, "out\n", "err\n")
    assert not os.path.exists(pidfile)  # removed once the command ended
    missing = subprocess.run(
        session_argv(["labkit-no-such-command"], new_pidfile()),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert missing.returncode == 127


def test_kill_reaches_the_whole_tree_even_a_child_in_another_group():
    pidfile = new_pidfile()
    # a background sleep, and `timeout`, which moves itself (and its sleep) to a group of its own
    script = "sleep 60 & echo $!; timeout 120 sleep 62 & echo $!; sleep 63; echo never"
    proc = subprocess.Popen(session_argv(["sh", "-c", script], pidfile), stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(proc.stdout.readline()) for _ in range(2)]
        deadline = time.monotonic() + 10
        while not (os.path.exists(pidfile) and Path(pidfile).read_text().strip()):
            assert time.monotonic() < deadline, "the wrapper never recorded its session"
            time.sleep(0.02)  # the wrapper writes it just after starting the command
        sid = int(Path(pidfile).read_text())
        assert os.getsid(pids[0]) == sid and os.getsid(pids[1]) == sid
        deadline = time.monotonic() + 10
        while os.getpgid(pids[1]) == sid and time.monotonic() < deadline:
            time.sleep(0.02)  # until timeout has made its own group
        assert os.getpgid(pids[1]) != sid  # really in another group of the session
        subprocess.run(kill_argv(pidfile), check=True, timeout=30)
        assert proc.wait(timeout=10) == 137  # SIGKILL, reported as a shell would
        deadline = time.monotonic() + 5
        while any(map(alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(map(alive, pids)), pids
        left = subprocess.run(
            ["ps", "-o", "stat=", "-s", str(sid)], capture_output=True, text=True, check=False
        )
        assert all(st.startswith("Z") for st in left.stdout.split()), left.stdout
    finally:
        proc.kill()
        proc.wait()
    # once the command is gone, killing again is a quick no-op
    assert subprocess.run(kill_argv(pidfile), timeout=30, check=False).returncode == 0


def test_running_waits_with_a_timeout_and_hands_back_errors():
    slow = Running(lambda: time.sleep(0.5) or "done", new_pidfile())
    assert slow.wait(0.01) is None and not slow.done
    assert slow.wait(10) == "done" and slow.done

    def boom():
        raise OSError("daemon went away")

    with pytest.raises(OSError, match="went away"):
        Running(boom, new_pidfile()).wait(10)


def test_oom_counters_of_both_cgroup_versions():
    # kernel Documentation/admin-guide/cgroup-v1/memory.rst (memory.oom_control) and
    # cgroup-v2.rst (memory.events): one "key value" pair per line
    v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"
    v2 = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 3\noom_group_kill 0\n"
    assert oom_kill_count(v1) == 2 and oom_kill_count(v2) == 3
    assert oom_kill_count("oom_kill_disable 0\nunder_oom 0\n") is None  # kernel < 4.13
    assert oom_kill_count("") is None


def test_lxd_finds_the_containers_memory_cgroup():
    from labkit.backends.lxd import memory_cgroup_file

    v1 = "9:name=systemd:/lxc.payload.labkit-x--1\n4:memory:/lxc.payload.labkit-x--1\n2:cpu,cpuacct:/x\n"
    assert (
        memory_cgroup_file(v1, "labkit-x--1")
        == "/sys/fs/cgroup/memory/lxc.payload.labkit-x--1/memory.oom_control"
    )
    v2 = "0::/lxc.payload.labkit-x--1/init.scope\n"
    assert memory_cgroup_file(v2, "labkit-x--1") == "/sys/fs/cgroup/lxc.payload.labkit-x--1/memory.events"
    assert memory_cgroup_file("1:cpu:/\n", "labkit-x--1") is None


def test_lxd_finds_the_containers_processes_in_its_payload_group(tmp_path, monkeypatch):
    from labkit.backends.lxd import host as lxd_host

    monkeypatch.setattr(lxd_host, "CGROUP_ROOT", str(tmp_path))
    assert lxd_host.payload_pids("labkit-x--1") is None  # no such group on this host: ask LXD
    v2 = tmp_path / "lxc.payload.labkit-x--1"
    (v2 / "init.scope").mkdir(parents=True)
    (v2 / "cgroup.procs").write_text("")
    (v2 / "init.scope" / "cgroup.procs").write_text("41\n")  # v2: the init in a child group
    assert lxd_host.payload_pids("labkit-x--1") == [41]
    v1 = tmp_path / "memory" / "lxc.payload.labkit-x--1"
    v1.mkdir(parents=True)
    (v1 / "cgroup.procs").write_text("7\n9\n")
    assert sorted(lxd_host.payload_pids("labkit-x--1")) == [7, 9]


def test_lxd_refuses_underscores_before_touching_the_daemon(tmp_path):
    # LXD names are host names; mapping '_' to '-' would let campaign a-b clean campaign a_b
    from labkit.backends.lxd import LxdBackend
    from labkit.errors import ConfigError

    be = LxdBackend(socket=str(tmp_path / "no.sock"))
    with pytest.raises(ConfigError, match="cannot contain '_'"):
        be.cleanup("labkit-a_b--")
    with pytest.raises(ConfigError, match="cannot contain '_'"):
        be._create(None, "labkit-a_b--0123abcd", 0, None)


def test_container_backends_list_their_options_when_given_an_unknown_one():
    from labkit.backends.docker import DockerBackend
    from labkit.backends.lxd import LxdBackend
    from labkit.errors import ConfigError

    with pytest.raises(ConfigError, match="enforce_limit.*allowed: image, base_url, api_timeout"):
        DockerBackend(enforce_limit=False)
    with pytest.raises(ConfigError, match="storage.*allowed: image, socket, pool, privileged"):
        LxdBackend(storage="x")


def test_lxd_init_survives_lxcs_blank_split(tmp_path):
    """LXC splits lxc.init.cmd on blanks without quotes: the script must still run whole."""
    import subprocess

    from labkit.backends.lxd import INIT_CMD, INIT_READY

    argv = INIT_CMD.split()
    assert argv[:2] == ["/bin/sh", "-c"] and len(argv) == 3
    for tool in ("ip", "sleep"):  # stand-ins on PATH that record how they were called
        stub = tmp_path / tool
        stub.write_text(f'#!/bin/sh\necho {tool} "$@" >> {tmp_path}/calls\n')
        stub.chmod(0o755)
    subprocess.run(argv, env={"PATH": str(tmp_path)}, check=True, timeout=10)
    assert (tmp_path / "calls").read_text().splitlines() == ["ip link set lo up", "sleep infinity"]
    assert INIT_READY.split(b"\0")[:2] == [b"sleep", b"infinity"]


class _ClosingSocket:
    """A unix socket that accepts connections and closes them at once: connecting a ws4py
    client to it fails inside ws4py's ``connect``, as pylxd's exec does when LXD hangs up."""

    def __init__(self, path: str):
        import socket
        import threading

        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(path)
        self.sock.listen(8)
        self.url = f"ws+unix://{path}"
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()


class _Model:
    """pylxd's Instance as far as ``lxd.execute`` uses it; its first ``fail`` execute calls fail
    the way the real one does (``connect_to`` a socket that hangs up, or ``error`` raised)."""

    name = "labkit-x--1"

    def __init__(self, fail: int, connect_to: str | None = None, error: Exception | None = None):
        self.fail, self.connect_to, self.error, self.calls = fail, connect_to, error, 0

    def execute(self, argv, environment=None):
        from types import SimpleNamespace

        from ws4py.client import WebSocketBaseClient

        self.calls += 1
        if self.calls <= self.fail:
            if self.connect_to:
                WebSocketBaseClient(self.connect_to).connect()
            raise self.error
        return SimpleNamespace(exit_code=0, stdout=" ".join(argv), stderr="")


def test_lxd_exec_is_tried_again_only_when_its_websockets_did_not_connect(tmp_path, monkeypatch):
    from labkit.backends import lxd
    from labkit.errors import BackendError

    monkeypatch.setattr("labkit.core.waiting.time.sleep", lambda s: None)
    url = _ClosingSocket(str(tmp_path / "lxd.sock")).url
    model = _Model(fail=2, connect_to=url)  # LXD hung up on the first two attempts
    assert lxd.execute(model, ["echo", "hi"], {}).stdout == "echo hi"
    assert model.calls == 3
    model = _Model(fail=lxd.EXEC_ATTEMPTS, connect_to=url)
    with pytest.raises(BackendError, match="LXD exec of \\['echo'\\] in labkit-x--1 failed"):
        lxd.execute(model, ["echo", "hi"], {})
    assert model.calls == lxd.EXEC_ATTEMPTS
    # the same error once the command may have started (not in connect): never run twice
    model = _Model(fail=1, error=BrokenPipeError(32, "Broken pipe"))
    with pytest.raises(BackendError, match="BrokenPipeError"):
        lxd.execute(model, ["echo", "hi"], {})
    assert model.calls == 1
    model = _Model(fail=1, error=ValueError("not a socket error"))
    with pytest.raises(ValueError):
        lxd.execute(model, ["echo", "hi"], {})
    assert model.calls == 1
