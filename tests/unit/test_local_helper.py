"""The cheap paths of the local backend's isolation (issue 28: isolation must cost nothing
measurable): ``lkns``, the one static helper that holds an instance's namespaces and starts
its commands (real binary, real kernel), and a command's end seen on its pidfd."""

import os
import subprocess
import sys
import time

import pytest

from labkit.backends import child, sandbox
from labkit.core import cbuild
from labkit.errors import BackendUnavailable

root = pytest.mark.skipif(os.geteuid() != 0, reason="entering namespaces needs root")


def test_wait_sees_the_end_on_the_pidfd_without_sleeping(monkeypatch):
    started = child.start([sys.executable, "-c", "import time; time.sleep(0.2)"], cwd="/", env={})

    def no_polling(_):
        raise AssertionError("waited by polling with sleeps")

    monkeypatch.setattr(time, "sleep", no_polling)  # Popen.wait(timeout) polls with time.sleep
    raw = child.wait(started, 30)
    assert raw is not None and raw.exit_code == 0


def test_wait_gives_up_at_its_timeout():
    started = child.start(["sleep", "30"], cwd="/", env={})
    try:
        assert child.wait(started, 0.1) is None
    finally:
        started.proc.kill()
    assert child.wait(started, 30).exit_code == 128 + 9


def test_helper_that_others_could_change_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(cbuild, "CACHE", tmp_path / "bin")
    sandbox.helper.cache_clear()
    try:
        path = sandbox.helper()
        assert path.startswith(str(tmp_path)) and os.access(path, os.X_OK)
        os.chmod(path, 0o777)
        sandbox.helper.cache_clear()
        with pytest.raises(BackendUnavailable, match="only this user can change"):
            sandbox.helper()
    finally:
        sandbox.helper.cache_clear()


def test_helper_without_a_compiler_names_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(cbuild, "CACHE", tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, gcc or clang here
    monkeypatch.delenv("CC", raising=False)
    sandbox.helper.cache_clear()
    try:
        with pytest.raises(BackendUnavailable, match="apt-get install gcc.*isolation='none'"):
            sandbox.helper()
    finally:
        sandbox.helper.cache_clear()


def _enter(argv, caps="", procs=None, userns=None):
    env = {"PATH": sandbox.DEFAULT_PATH, **({"LABKIT_CGROUP_PROCS": procs} if procs else {})}
    userns = sandbox.userns_map() if userns is None else userns
    return subprocess.run(
        [sandbox.helper(), "enter", str(os.getpid()), "/", "1", caps, userns, "--", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


def test_enter_exits_125_naming_the_cgroup_file_it_cannot_join(tmp_path):
    res = _enter(["true"], procs=str(tmp_path / "gone" / "cgroup.procs"))
    assert res.returncode == 125 and "cgroup.procs" in res.stderr


@root
def test_enter_joins_then_leaves_no_trace_and_exits_as_its_command(tmp_path):
    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    res = _enter(["sh", "-c", "env; exit 3"], procs=str(procs))
    assert res.returncode == 3 and "LABKIT_CGROUP_PROCS" not in res.stdout
    assert procs.read_text().strip().isdigit()  # its pid, written before the exec
    assert _enter(["sh", "-c", "kill -TERM $$"]).returncode == -15  # killed by the same signal
    missing = _enter(["no-such-program-here"])
    assert missing.returncode == 127 and "no-such-program-here" in missing.stderr


@root
@pytest.mark.parametrize("mode", ["strict", "relaxed"])
def test_enter_keeps_only_the_capabilities_of_its_mode(mode):
    caps = ",".join(str(sandbox.CAP_NUMBERS[c]) for c in sandbox.capabilities(mode))
    status = dict(
        line.split(":\t")
        for line in _enter(["cat", "/proc/self/status"], caps).stdout.splitlines()
        if ":\t" in line
    )
    want = sum(1 << sandbox.CAP_NUMBERS[c] for c in sandbox.capabilities(mode))
    assert int(status["CapBnd"], 16) == want and int(status["CapEff"], 16) == want
    assert int(status["CapInh"], 16) == 0 and int(status["CapAmb"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1"


@root
def test_enter_runs_the_command_as_root_of_its_own_user_namespace_and_an_unprivileged_host_uid():
    """Issue 47, finding 1: a workload was uid 0 on the host, so the daemons' sockets, /etc/shadow
    and every root-owned file passed their owner checks. Now uid 0 inside is sandbox.USERNS_BASE on
    the host (uid_map), with no supplementary group; without a user namespace ("") it stays root."""
    out = _enter(
        [
            "sh",
            "-c",
            "cat /proc/self/uid_map /proc/self/gid_map; grep -E '^(Uid|Groups):' /proc/self/status; "
            "head -c1 /etc/shadow >/dev/null 2>&1 && echo shadow-read",
        ]
    ).stdout
    maps = [line.split() for line in out.splitlines()[:2]]
    assert maps == [["0", str(sandbox.USERNS_BASE), str(sandbox.USERNS_COUNT)]] * 2, out
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    assert (
        fields["Uid"].split() == ["0"] * 4 and fields["Groups"].split() == [] and "shadow-read" not in out
    ), out
    plain = _enter(
        ["sh", "-c", "cat /proc/self/uid_map; head -c1 /etc/shadow >/dev/null && echo shadow-read"], userns=""
    ).stdout
    assert plain.split()[:3] == ["0", "0", "4294967295"] and "shadow-read" in plain


def test_enter_refuses_a_malformed_user_namespace_map():
    res = _enter(["true"], userns="0:x")
    assert res.returncode == 2 and "BASE:COUNT" in res.stderr
