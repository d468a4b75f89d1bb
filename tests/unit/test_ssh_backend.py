"""The ssh backend's pure parts, without an sshd: the remote shell scripts are run here with ``sh``.

The scripts of remote_cgroup are checked against the local drivers of cgroups.py
on directories laid out like cgroup hierarchies, so the two backends cannot drift.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import invoke
import pytest

from labkit.backends import cgroups, local, remote_cgroup as rc
from labkit.errors import BackendError, BackendUnavailable, ConfigError

ssh = pytest.importorskip("labkit.backends.ssh")


def sh(script: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60, **kw)


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_text() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


# -- the join wrapper and exec command line ----------------------------------------------------

def test_join_wrapper_is_the_local_one():
    assert rc.JOIN == local._JOIN


def test_exec_script_round_trips_argv_env_and_cwd(tmp_path):
    argv = ["python3", "-c", "import os, sys, json; print(json.dumps([sys.argv[1:], os.getcwd(), "
            "os.environ['X'], os.environ['LABKIT_INSTANCE'], os.environ['LABKIT_EXEC']]))",
            "a b", "it's", '"$HOME"', "`id`", "*", "", "FOO=bar"]
    argv[0] = sys.executable
    script = rc.exec_script(argv, name="labkit-test-x", token="0123abcd", workdir=str(tmp_path),
                            env={"X": "two words $and 'quotes'"})
    assert script.startswith("exec /bin/sh -c ")
    out = sh(script)
    assert out.returncode == 0, out.stderr
    import json
    args, cwd, x, inst, tok = json.loads(out.stdout)
    assert args == ["a b", "it's", '"$HOME"', "`id`", "*", "", "FOO=bar"]
    assert (cwd, x, inst, tok) == (str(tmp_path), "two words $and 'quotes'", "labkit-test-x", "0123abcd")


def test_exec_script_exit_codes_like_a_local_shell(tmp_path):
    run = lambda argv: sh(rc.exec_script(argv, name="labkit-test-x", token="t", workdir=str(tmp_path)))
    assert run(["sh", "-c", "exit 7"]).returncode == 7
    assert run(["sh", "-c", "kill -9 $$"]).returncode == 137          # killed: 128 + signal
    assert run(["labkit-no-such-command"]).returncode == 127
    assert run(["true"]).returncode == 0
    assert sh(rc.exec_script(["cat"], name="labkit-test-x", token="t", workdir=str(tmp_path)),
              input="stdin of the controller").stdout == ""          # stdin is /dev/null
    # a missing work dir is not fatal: the command runs in /
    out = sh(rc.exec_script(["pwd"], name="labkit-test-x", token="t", workdir=str(tmp_path / "gone")))
    assert out.stdout == "/\n"


def test_exec_script_joins_every_procs_file(tmp_path):
    files = [tmp_path / "cpuset" / "cgroup.procs", tmp_path / "memory" / "cgroup.procs"]
    for f in files:
        f.parent.mkdir()
        f.write_text("")
    script = rc.exec_script(["sh", "-c", "echo $$"], name="labkit-test-x", token="t",
                            workdir=str(tmp_path), procs_files=[str(f) for f in files])
    out = sh(script)
    assert out.returncode == 0, out.stderr
    pid = out.stdout.strip()
    assert [f.read_text().strip() for f in files] == [pid, pid]   # the command itself joined
    bad = rc.exec_script(["true"], name="labkit-test-x", token="t", workdir=str(tmp_path),
                         procs_files=[str(tmp_path / "nope" / "cgroup.procs")])
    res = sh(bad)
    assert res.returncode == rc.JOIN_FAILED and "cgroup.procs" in res.stderr


def test_exec_script_pins_with_taskset_when_unconfined(tmp_path):
    if not subprocess.run(["sh", "-c", "command -v taskset"], capture_output=True).returncode == 0:
        pytest.skip("taskset not installed")
    cpu = sorted(os.sched_getaffinity(0))[-1]
    script = rc.exec_script(["grep", "Cpus_allowed_list", "/proc/self/status"], name="labkit-test-x",
                            token="t", workdir=str(tmp_path), taskset_cpus=[cpu])
    assert "taskset -c" in script
    out = sh(script)
    assert out.stdout.split()[-1] == str(cpu), out


def test_exec_script_validates_input():
    with pytest.raises(ConfigError, match="not a valid environment variable"):
        rc.exec_script(["true"], name="labkit-x", token="t", workdir="/tmp", env={"A B": "1"})
    with pytest.raises(BackendError, match="empty command"):
        rc.exec_script([], name="labkit-x", token="t", workdir="/tmp")
    for bad in ("x", "labkit-a;rm -rf /", "labkit-../x", "labkit-a b"):
        with pytest.raises(BackendError):
            rc.check_name(bad)
    for bad in ("labkit", "test-", "labkit-$(id)"):
        with pytest.raises(BackendError, match="prefix"):
            rc.check_prefix(bad)
    with pytest.raises(BackendError, match="does not start"):
        rc.cleanup_script("labkit-a-", ["labkit-b-1"], None, "/tmp/x")


# -- processes found by their marker -------------------------------------------------------------

class _marked_daemon:
    """``with _marked_daemon(dir, VAR=value) as pid``: a shell in its own session (as after setsid)
    with a ``sleep`` child, both carrying ``VAR=value``: what a timeout must still find and kill."""

    def __init__(self, tmp_path, **env):
        self.pidfile, self.env = tmp_path / "pid", env

    def __enter__(self) -> int:
        self.proc = subprocess.Popen(["sh", "-c", f"sleep 300 & echo $! > {self.pidfile}; wait"],
                                     env={**os.environ, **self.env}, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(500):
            if self.pidfile.exists() and self.pidfile.read_text().strip():
                self.pid = int(self.pidfile.read_text())
                return self.pid
            time.sleep(0.01)
        raise AssertionError("marked process did not start")

    def __exit__(self, *exc):
        for pid in (self.pid, self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pid: int, seconds: float = 5) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


def test_kill_exec_script_kills_the_tree_by_its_marker(tmp_path):
    (tmp_path / "o").mkdir()
    with _marked_daemon(tmp_path, LABKIT_EXEC="feedc0de00000001") as mine, \
            _marked_daemon(tmp_path / "o", LABKIT_EXEC="feedc0de00000001x") as other:  # not ours
        assert sh(rc.kill_exec_script("feedc0de00000001", None, "labkit-test-x")).returncode == 0
        assert _wait_dead(mine)
        assert _alive(other)


def test_destroy_script_without_cgroup_kills_marked_processes_and_removes_workdir(tmp_path):
    workdir = tmp_path / "labkit-test-y"
    (workdir / "sub").mkdir(parents=True)
    with _marked_daemon(tmp_path, LABKIT_INSTANCE="labkit-test-y") as pid:
        res = sh(rc.destroy_script("labkit-test-y", None, str(workdir)))
        assert res.returncode == 0, res.stderr
        assert _wait_dead(pid) and not workdir.exists()


# -- the cgroup scripts against the local drivers --------------------------------------------------

def _v1_layout(root: Path) -> dict[str, Path]:
    roots = {c: root / c for c in ("cpuset", "cpu", "cpuacct", "memory")}
    for p in roots.values():
        p.mkdir(parents=True)
    (roots["cpuset"] / "cpuset.cpus").write_text("0-3\n")
    (roots["cpuset"] / "cpuset.mems").write_text("0\n")
    return roots


@pytest.mark.parametrize("cpus,quota", [([1, 2], None), ([0, 1, 2, 3], 2)])
def test_v1_create_script_writes_what_the_local_driver_writes(tmp_path, cpus, quota):
    a, b = _v1_layout(tmp_path / "local"), _v1_layout(tmp_path / "remote")
    cgroups.CgroupV1(a).create("labkit-x", cpus, quota, 256)
    res = sh(rc.RemoteCgroupV1({k: str(v) for k, v in b.items()}).create_script("labkit-x", cpus, quota, 256))
    assert res.returncode == 0, res.stderr
    assert tree(tmp_path / "remote") == tree(tmp_path / "local")
    assert (b["cpu"] / "labkit-x" / "cpu.cfs_quota_us").read_text() == str(quota * 100000 if quota else -1)
    assert (b["cpuset"] / "labkit-x" / "cpuset.mems").read_text() == "0"


def test_v1_create_script_with_memsw_and_swappiness(tmp_path):
    b = _v1_layout(tmp_path)
    # files the kernel would create in a new group: pretend they exist by creating the dir first
    drv = rc.RemoteCgroupV1({k: str(v) for k, v in b.items()})
    script = drv.create_script("labkit-x", [0], None, 64)
    script = script.replace("mkdir " + str(b["memory"] / "labkit-x") + " || exit 1\n",
                            "mkdir " + str(b["memory"] / "labkit-x") + " || exit 1\n"
                            f": > {b['memory']}/labkit-x/memory.memsw.limit_in_bytes\n"
                            f": > {b['memory']}/labkit-x/memory.swappiness\n")
    assert sh(script).returncode == 0
    mem = b["memory"] / "labkit-x"
    assert (mem / "memory.memsw.limit_in_bytes").read_text() == str(64 * 2**20)
    assert (mem / "memory.swappiness").read_text() == "0"


def _v2_layout(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    (root / "cpuset.cpus.effective").write_text("0-3\n")
    return root


@pytest.mark.parametrize("cpus,quota", [([1, 2], None), ([0, 1, 2, 3], 2)])
def test_v2_create_script_writes_what_the_local_driver_writes(tmp_path, cpus, quota):
    a, b = _v2_layout(tmp_path / "local"), _v2_layout(tmp_path / "remote")
    cgroups.CgroupV2(a).create("labkit-x", cpus, quota, 128)
    res = sh(rc.RemoteCgroupV2(str(b)).create_script("labkit-x", cpus, quota, 128))
    assert res.returncode == 0, res.stderr
    assert tree(b) == tree(a)
    assert (b / "labkit-x" / "cpu.max").read_text() == (f"{quota}00000 100000" if quota else "max 100000")


def test_v2_create_script_enables_only_missing_controllers(tmp_path):
    b = _v2_layout(tmp_path / "cg")
    (b / "cgroup.subtree_control").write_text("cpuset cpu memory\n")
    assert sh(rc.RemoteCgroupV2(str(b)).create_script("labkit-x", [0], None, 64)).returncode == 0
    assert (b / "cgroup.subtree_control").read_text() == "cpuset cpu memory\n"   # untouched


def test_create_script_refuses_an_existing_group(tmp_path):
    b = _v2_layout(tmp_path / "cg")
    (b / "labkit-x").mkdir()
    res = sh(rc.RemoteCgroupV2(str(b)).create_script("labkit-x", [0], None, 64))
    assert res.returncode != 0


def test_remove_glob_and_exists_scripts(tmp_path):
    b = _v1_layout(tmp_path)
    drv = rc.RemoteCgroupV1({k: str(v) for k, v in b.items()})
    for name in ("labkit-t-a", "labkit-t-b", "labkit-u-c"):
        for root in b.values():
            (root / name).mkdir()
    assert sh(drv.glob_script("labkit-t-")).stdout.split() == ["labkit-t-a", "labkit-t-b"]
    assert sh(drv.exists_script("labkit-t-a")).returncode == 0
    res = sh(drv.remove_script("labkit-t-a"))
    assert res.returncode == 0, res.stderr
    assert sh(drv.exists_script("labkit-t-a")).returncode != 0
    assert all(not (root / "labkit-t-a").exists() for root in b.values())
    # a group that cannot be removed (here: not empty) fails after the timeout, naming it
    (b["memory"] / "labkit-t-b" / "busy").write_text("")
    t0 = time.monotonic()
    res = sh(drv.remove_script("labkit-t-b", timeout=1))
    assert res.returncode == 1 and "could not remove cgroup labkit-t-b" in res.stderr
    assert time.monotonic() - t0 < 5
    # cleanup removes what the glob found, and the work dirs with the prefix
    work = tmp_path / "work"
    (work / "labkit-u-c").mkdir(parents=True)
    (work / "labkit-v-d").mkdir()
    res = sh(rc.cleanup_script("labkit-u-", ["labkit-u-c"], drv, str(work)))
    assert res.returncode == 0, res.stderr
    assert not (b["cpu"] / "labkit-u-c").exists() and sorted(os.listdir(work)) == ["labkit-v-d"]


# -- facts and detection ---------------------------------------------------------------------------

def test_probe_parsing_and_detection_v1():
    text = ("uid 0\nkernel 6.1.0\nhostname h\ncpu_model AMD EPYC 7B13\ncpus_allowed 0-1\n"
            "tool taskset\nmount /a cgroup rw,cpuset\nwritable /a\nfile /a/cpuset.cpus 0-3\n"
            "file /a/cpuset.mems 0\nmount /b cgroup rw,cpu,cpuacct\nwritable /b\n"
            "mount /c cgroup rw,memory\nwritable /c\nmount /u cgroup2 rw\nend\n")
    facts = rc.parse_probe(text)
    assert facts.uid == 0 and facts.get("cpu_model") == "AMD EPYC 7B13" and "taskset" in facts.tools
    drv = rc.detect(facts)
    assert isinstance(drv, rc.RemoteCgroupV1) and drv.roots == {"cpuset": "/a", "cpu": "/b",
                                                                 "cpuacct": "/b", "memory": "/c"}
    drv.check_writable(facts)
    assert drv.available_cpus(facts) == [0, 1, 2, 3]
    assert drv.dirs("labkit-x") == ["/a/labkit-x", "/b/labkit-x", "/c/labkit-x"]
    facts.writable.discard("/c")
    with pytest.raises(BackendUnavailable, match="memory hierarchy /c is not writable"):
        drv.check_writable(facts)


def test_probe_parsing_and_detection_v2_and_none():
    facts = rc.parse_probe("uid 1000\ncpus_allowed 0-7\nmount /sys/fs/cgroup cgroup2 rw\n"
                           "controllers /sys/fs/cgroup cpuset cpu io memory pids\n"
                           "file /sys/fs/cgroup/cpuset.cpus.effective 0-5\nend\n")
    drv = rc.detect(facts)
    assert isinstance(drv, rc.RemoteCgroupV2) and drv.root == "/sys/fs/cgroup"
    assert drv.available_cpus(facts) == list(range(6))
    with pytest.raises(BackendUnavailable, match="not writable"):
        drv.check_writable(facts)
    none = rc.parse_probe("uid 0\ncpus_allowed 0,2\nmount /u cgroup2 rw\ncontrollers /u cpu io\nend\n")
    with pytest.raises(BackendUnavailable, match="enforce_limits=False"):
        rc.detect(none)
    assert none.cpus_allowed() == [0, 2]
    with pytest.raises(BackendError, match="cut short"):
        rc.parse_probe("uid 0\nmount /u cgroup2 rw\n")


def test_probe_run_here_agrees_with_the_local_detection():
    res = sh(rc.PROBE)
    assert res.returncode == 0, res.stderr
    facts = rc.parse_probe(res.stdout)
    assert facts.uid == os.geteuid() and facts.get("kernel") == os.uname().release
    assert facts.cpus_allowed() == sorted(os.sched_getaffinity(0))
    try:
        here = cgroups.detect()
    except BackendUnavailable:
        with pytest.raises(BackendUnavailable):
            rc.detect(facts)
        return
    there = rc.detect(facts)
    assert there.version == here.version
    if here.version == 1:
        assert there.roots == {k: str(v) for k, v in here.roots.items()}
        assert there.available_cpus(facts) == here.available_cpus()
    else:
        assert there.root == str(here.root)


# -- backend options and connection errors (no sshd needed) -----------------------------------------

def test_target_from_arguments_environment_and_defaults():
    env = {"LABKIT_SSH_HOST": "10.1.2.3", "LABKIT_SSH_PORT": "2222", "LABKIT_SSH_USER": "bench",
           "LABKIT_SSH_KEY": "~/k"}
    assert ssh.resolve_target(environ={}) == {"host": "localhost", "user": "root", "port": 22,
                                              "key_filename": None}
    t = ssh.resolve_target(environ=env)
    assert (t["host"], t["user"], t["port"]) == ("10.1.2.3", "bench", 2222)
    assert t["key_filename"] == os.path.expanduser("~/k")
    t = ssh.resolve_target("h", "u", 23, "/k", environ=env)
    assert t == {"host": "h", "user": "u", "port": 23, "key_filename": "/k"}
    with pytest.raises(ConfigError, match="LABKIT_SSH_PORT"):
        ssh.resolve_target(environ={"LABKIT_SSH_PORT": "ssh"})
    with pytest.raises(ConfigError, match="port"):
        ssh.resolve_target(port=70000, environ={})
    with pytest.raises(ConfigError, match="connect kwargs"):
        ssh.SshBackend(hostname="x")
    with pytest.raises(ConfigError, match="connect_timeout"):
        ssh.SshBackend(connect_timeout=0)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_host_is_unavailable_quickly_and_says_what_was_tried(tmp_path):
    key = tmp_path / "id_test"
    key.write_text("not really a key")
    port = _closed_port()
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailable) as err:
        ssh.SshBackend(host="127.0.0.1", port=port, key_filename=str(key), connect_timeout=3).check()
    assert time.monotonic() - t0 < 3
    msg = str(err.value)
    assert f"127.0.0.1:{port}" in msg and str(key) in msg and "setup-ssh.sh" in msg


def test_missing_key_file_is_unavailable(tmp_path):
    with pytest.raises(BackendUnavailable, match="does not exist"):
        ssh.SshBackend(host="127.0.0.1", port=_closed_port(), key_filename=str(tmp_path / "none")).check()


def test_a_port_that_is_not_sshd_is_unavailable(tmp_path):
    """A listener that never speaks SSH: the banner wait is bounded by connect_timeout."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        t0 = time.monotonic()
        with pytest.raises(BackendUnavailable, match="127.0.0.1"):
            ssh.SshBackend(host="127.0.0.1", port=srv.getsockname()[1], connect_timeout=1,
                           look_for_keys=False, allow_agent=False).check()
        assert time.monotonic() - t0 < 10
    finally:
        srv.close()


class _RacyConnection:
    """fabric's Connection.run as it behaves when invoke's timer closed the channel but has not
    yet ended: the run returns exit -1 instead of raising CommandTimedOut."""

    def __init__(self, exited, sleep_s):
        self.exited, self.sleep_s = exited, sleep_s

    def run(self, command, **kwargs):
        time.sleep(self.sleep_s)
        return invoke.Result(stdout="partial", stderr="", exited=self.exited)


def test_a_channel_closed_past_the_deadline_is_a_timeout_not_a_lost_connection():
    be = ssh.SshBackend(host="127.0.0.1", port=_closed_port())
    be.conn = _RacyConnection(exited=-1, sleep_s=0.2)
    with pytest.raises(invoke.exceptions.CommandTimedOut) as err:
        be._run("sleep 5", timeout=0.2)
    assert err.value.result.stdout == "partial"
    be.conn = _RacyConnection(exited=-1, sleep_s=0)      # closed before the deadline: lost, not late
    assert be._run("true", timeout=30).exited == -1
    be.conn = _RacyConnection(exited=0, sleep_s=0.2)     # finished just past it: a real exit status
    assert be._run("true", timeout=0.1).exited == 0


# -- the control shell ------------------------------------------------------------------------------

def test_control_framing_survives_exit_syntax_errors_and_noise():
    cmds = [("aa", "echo hi; echo err >&2; exit 3"), ("bb", "if then"), ("cc", "printf x"),
            ("dd", "exit 0")]
    stdin = "echo noise from a login script\n" + "".join(rc.control_command(s, t) for t, s in cmds)
    out = subprocess.run(["sh"], input=stdin.encode(), capture_output=True, timeout=30).stdout
    assert rc.parse_control(out, "aa") == (3, "hi\nerr\n")
    code, text = rc.parse_control(out, "bb")
    assert code == 2 and "then" in text                 # the control shell itself went on
    assert rc.parse_control(out, "cc") == (0, "x")
    assert rc.parse_control(out, "dd") == (0, "")
    assert rc.parse_control(out[:-3], "dd") is None     # incomplete: keep reading
    with pytest.raises(BackendError):
        rc.control_command("true", "not hex")


class _LocalChannel:
    """Enough of a paramiko Channel, backed by a local process, to drive SshBackend._ctl."""

    def __init__(self):
        self.proc, self.closed, self._timeout = None, False, None

    def exec_command(self, command):
        self.proc = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def sendall(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def settimeout(self, t):
        self._timeout = t

    def recv(self, n):
        import select
        ready, _, _ = select.select([self.proc.stdout], [], [], self._timeout)
        if not ready:
            raise socket.timeout()
        return os.read(self.proc.stdout.fileno(), n)

    def recv_stderr_ready(self):
        return False

    def exit_status_ready(self):
        return self.proc.poll() is not None

    def close(self):
        self.closed = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()


class _LocalConnection:
    def __init__(self):
        self.sessions = []

    def create_session(self):
        self.sessions.append(_LocalChannel())
        return self.sessions[-1]

    def close(self):
        pass


def test_backend_control_shell_is_reused_and_replaced_when_it_dies():
    be = ssh.SshBackend(host="127.0.0.1", port=1)
    be.conn = _LocalConnection()
    try:
        r = be._ctl("echo one; exit 4")
        assert (r.exited, r.stdout) == (4, "one\n")
        assert be._ctl("echo two").stdout == "two\n" and len(be.conn.sessions) == 1   # one shell
        with pytest.raises(BackendError, match="ran past"):
            be._ctl("sleep 5", timeout=0.3)
        assert be._ctl("echo three").stdout == "three\n" and len(be.conn.sessions) == 2
        be._ctl_chan.proc.kill()                                # the shell dies between calls
        be._ctl_chan.proc.wait()
        assert be._ctl("echo four").stdout == "four\n" and len(be.conn.sessions) == 3
        with pytest.raises(BackendError, match="failed"):
            be._check(be._ctl("echo nope >&2; exit 2"), "a step")
    finally:
        be.close()
