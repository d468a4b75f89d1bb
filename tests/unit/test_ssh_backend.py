"""The ssh backend's pure parts, without an sshd: the probe and the exec command line are run
here with ``sh``, exactly the text the backend sends to a remote host."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.backends import cgroups
from labkit.errors import BackendError, BackendUnavailable, ConfigError

ssh = pytest.importorskip("labkit.backends.ssh")
ssh_instance = pytest.importorskip("labkit.backends.ssh_instance")


def sh(script: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60, **kw)


class _Backend:
    """Just what SshInstance.command_line reads from its backend."""

    def __init__(self, workroot, driver=None):
        self.workroot, self.driver, self.target = str(workroot), driver, "test"


def instance(tmp_path, driver=None, cpus=None) -> ssh_instance.SshInstance:
    be = _Backend(tmp_path, driver)
    (tmp_path / "labkit-test-x").mkdir(exist_ok=True)
    inst = ssh_instance.SshInstance.__new__(ssh_instance.SshInstance)
    inst.backend, inst.name, inst.host_cpu_ids = be, "labkit-test-x", cpus
    inst.confined, inst.netns, inst.hosts_file = driver is not None, None, None
    return inst


def test_command_line_on_a_private_network_enters_the_namespace_after_the_cgroup(tmp_path):
    """On a run network the command enters its network namespace (nsenter) and a private mount
    namespace with its hosts file on /etc/hosts (unshare), after the session and the cgroup."""
    roots = {c: str(tmp_path / c) for c in ("cpuset", "cpu", "memory")}
    inst = instance(tmp_path, cgroups.CgroupV1(roots))
    inst.netns, inst.hosts_file = inst.name, f"{inst.workdir}/hosts"
    line = inst.command_line(["iperf3", "-s"], str(tmp_path / "p"), None)
    script = shlex.split(line)[-1]  # exec /bin/sh -c '<lines>'
    words = shlex.split(next(w for w in script.splitlines() if w.startswith("setsid")))[:-2]  # </dev/null &
    start = words.index("nsenter")
    assert words[0] == "setsid" and words[3].endswith(cgroups.JOIN)
    assert words[start : start + 2] == ["nsenter", "--net=/run/netns/labkit-test-x"]
    assert words[-3:] == [f"{inst.workdir}/hosts", "iperf3", "-s"] and "unshare" in words[start:]
    assert "nsenter" not in " ".join(shlex.split(instance(tmp_path).command_line(["true"], "p", None)))


# -- the exec command line ------------------------------------------------------------------------


def test_command_line_round_trips_argv_env_and_cwd(tmp_path):
    argv = [
        sys.executable,
        "-c",
        "import os, sys, json; print(json.dumps([sys.argv[1:], os.getcwd(), "
        "os.environ['X'], os.getpgid(0) == os.getpid()]))",
        "a b",
        "it's",
        '"$HOME"',
        "`id`",
        "*",
        "",
        "FOO=bar",
    ]
    inst = instance(tmp_path)
    pidfile = str(tmp_path / "labkit-test-x" / ".exec.pid")
    out = sh(inst.command_line(argv, pidfile, {"X": "two words $and 'quotes'"}))
    assert out.returncode == 0, out.stderr
    args, cwd, x, leader = json.loads(out.stdout)
    assert args == ["a b", "it's", '"$HOME"', "`id`", "*", "", "FOO=bar"]
    assert (cwd, x) == (str(tmp_path / "labkit-test-x"), "two words $and 'quotes'")
    assert leader  # its own process group: a kill of the group gets the tree
    assert not os.path.exists(pidfile)  # removed once the command ended


def test_command_line_exit_codes_like_a_local_shell(tmp_path):
    inst = instance(tmp_path)

    def run(argv, **kw):
        return sh(inst.command_line(argv, str(tmp_path / "p"), None), **kw)

    assert run(["sh", "-c", "exit 7"]).returncode == 7
    assert run(["sh", "-c", "kill -9 $$"]).returncode == 137  # killed: 128 + signal
    assert run(["labkit-no-such-command"]).returncode == 127
    assert run(["cat"], input="stdin of the controller").stdout == ""  # stdin is /dev/null
    gone = instance(tmp_path)
    gone.name = "labkit-test-gone"
    assert sh(gone.command_line(["true"], str(tmp_path / "p"), None)).returncode == 1  # no work dir


def test_command_line_joins_every_procs_file_and_pins_unconfined(tmp_path):
    roots = {c: str(tmp_path / c) for c in ("cpuset", "cpu", "memory")}
    drv = cgroups.CgroupV1(roots)
    for f in drv.procs_files("labkit-test-x"):
        Path(f).parent.mkdir(parents=True)
    inst = instance(tmp_path, drv)
    out = sh(inst.command_line(["sh", "-c", "echo $$"], str(tmp_path / "p"), None))
    pid = out.stdout.strip()
    assert [Path(f).read_text().strip() for f in drv.procs_files("labkit-test-x")] == [pid] * 3
    inst = instance(tmp_path, None, cpus=[0])
    out = sh(inst.command_line(["grep", "Cpus_allowed_list", "/proc/self/status"], str(tmp_path / "p"), None))
    assert out.stdout.split()[-1] == "0"


def test_a_kill_of_the_session_kills_the_whole_tree(tmp_path):
    inst = instance(tmp_path)
    pidfile = tmp_path / "labkit-test-x" / ".exec.pid"
    proc = subprocess.Popen(
        ["sh", "-c", inst.command_line(["sh", "-c", "sleep 60 & sleep 61"], str(pidfile), None)]
    )
    try:
        deadline = time.monotonic() + 10
        while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.02)
        pgid = int(pidfile.read_text())
        os.killpg(pgid, 9)
        assert proc.wait(timeout=10) == 137
        deadline = time.monotonic() + 10
        while True:  # zombies waiting for init to reap them do not count
            out = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True)
            alive = [st for st in out.stdout.split() if not st.startswith("Z")]
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert alive == []
    finally:
        proc.kill()


# -- facts and detection --------------------------------------------------------------------------


def test_probe_run_here_agrees_with_the_local_detection():
    res = sh(ssh.PROBE)
    assert res.returncode == 0, res.stderr
    facts = ssh.HostFacts(res.stdout)
    assert facts.get("uid") == str(os.geteuid()) and facts.get("kernel") == os.uname().release
    assert facts.cpus_allowed() == sorted(os.sched_getaffinity(0))
    mounts = cgroups.read_local("/proc/self/mounts")
    try:
        here = cgroups.detect(mounts, lambda p: cgroups.read_local(f"{p}/cgroup.controllers"))
    except BackendUnavailable:
        return
    there = cgroups.detect("\n".join(facts.mounts), facts.controllers.get)
    assert there.version == here.version and cgroups.writable_roots(there) == cgroups.writable_roots(here)
    assert facts.files[there.cpus_file()].strip() == cgroups.read_local(here.cpus_file()).strip()


def test_probe_text_without_its_facts_is_an_error():
    with pytest.raises(BackendError, match="no uid/home"):
        ssh.HostFacts("kernel 6.1\n")
    facts = ssh.HostFacts(
        "uid 1000\nhome /home/u\ncpus_allowed 0,2\ntool setsid\n"
        "mount cgroup2 /u cgroup2 rw 0 0\ncontrollers /u cpu io\n"
    )
    assert facts.cpus_allowed() == [0, 2] and facts.tools == {"setsid"}
    with pytest.raises(BackendUnavailable, match="enforce_limits=False"):
        cgroups.detect("\n".join(facts.mounts), facts.controllers.get)


def test_probe_lists_the_instances_in_the_work_root_and_cgroup_roots_here(tmp_path):
    """The listing the connection probe carries (and list_labkit's own script) run here with sh:
    a ``labkit-*`` directory is listed with its place (``@work`` for the work root); files, other
    names and other prefixes are not."""
    wr = tmp_path / ".cache/labkit/instances"
    for d in ("labkit-a-1", "labkit-b-1", "other"):
        (wr / d).mkdir(parents=True)
    (wr / "labkit-file").write_text("")
    res = sh(
        ssh.PROBE + ssh.WORK_ROOT + ssh.listing_script("labkit-") + "true\n",
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert res.returncode == 0, res.stderr
    facts = ssh.HostFacts(res.stdout)
    assert sorted(n for p, n in facts.listed if p == "@work") == ["labkit-a-1", "labkit-b-1"]
    root = tmp_path / "cg"
    (root / "labkit-a-2").mkdir(parents=True)
    (root / "labkit-b-2").mkdir()
    res = sh(f"wr={wr}\n" + ssh.listing_script("labkit-a-", [str(root), str(tmp_path / "none")]) + "true\n")
    assert res.returncode == 0, res.stderr
    assert sorted(ssh.HostFacts(res.stdout, probe=False).listed) == sorted(
        [("@work", "labkit-a-1"), (str(root), "labkit-a-2")]
    )
    with pytest.raises(ConfigError, match="prefix"):
        ssh.listing_script("labkit-$(reboot)")


# -- backend options and connection errors (no sshd needed) -----------------------------------------


def test_target_from_arguments_environment_and_defaults():
    env = {
        "LABKIT_SSH_HOST": "10.1.2.3",
        "LABKIT_SSH_PORT": "2222",
        "LABKIT_SSH_USER": "bench",
        "LABKIT_SSH_KEY": "~/k",
    }
    assert ssh.resolve_target(environ={}) == {
        "host": "localhost",
        "user": "root",
        "port": 22,
        "key_filename": None,
    }
    t = ssh.resolve_target(environ=env)
    assert (t["host"], t["user"], t["port"]) == ("10.1.2.3", "bench", 2222)
    assert t["key_filename"] == os.path.expanduser("~/k")
    t = ssh.resolve_target("h", "u", 23, "/k", environ=env)
    assert t == {"host": "h", "user": "u", "port": 23, "key_filename": "/k"}
    with pytest.raises(ConfigError, match="LABKIT_SSH_PORT"):
        ssh.resolve_target(environ={"LABKIT_SSH_PORT": "ssh"})
    with pytest.raises(ConfigError, match="port"):
        ssh.resolve_target(port=70000, environ={})
    with pytest.raises(ConfigError, match="connect_kwargs hostname"):
        ssh.SshBackend(connect_kwargs={"hostname": "x"})
    with pytest.raises(ConfigError, match="unknown option.*password.*allowed: host"):
        ssh.SshBackend(password="not here")  # secrets go in connect_kwargs, typos are refused
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
            ssh.SshBackend(
                host="127.0.0.1",
                port=srv.getsockname()[1],
                connect_timeout=1,
                connect_kwargs={"look_for_keys": False, "allow_agent": False},
            ).check()
        assert time.monotonic() - t0 < 10
    finally:
        srv.close()
