"""Issue 28, finding 6: a ``local`` instance's workload is confined, proven from inside it
(real kernel, root: marker ``root``). Each attack is a trial of tests/support/isolation_trials.py;
with the backend as it was (full root in the host's PID and mount namespaces, the
controller's environment, no pids limit) every test here failed.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from labkit.backends import get_backend, teardown
from labkit.core import paths
from labkit.core.instance import InstanceSpec
from tests.support import isolation_trials as trials

pytestmark = pytest.mark.root
PREFIX = f"labkit-test-iso-{secrets.token_hex(3)}"


@pytest.fixture
def outside_tmp():
    """A directory outside /tmp and /var/tmp (instances have their own: nothing planted under
    the host's /tmp is seen inside anyway, so a hiding test plants here), removed afterwards."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="labkit-test-iso-", dir="/var/lib"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def make():
    made, backends = [], []

    def _make(count=1, **options):
        be = get_backend("local", **options)
        backends.append(be)
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=512, count=count), prefix=PREFIX)
        made.extend(insts)
        return insts

    yield _make
    assert teardown(made) == []
    for be in backends:
        assert be.cleanup(PREFIX + "-") == []


def test_no_capabilities_and_no_new_privileges(make):
    [inst] = make()
    status = trials.status_fields(inst)
    assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
    assert int(status["CapPrm"], 16) == 0 and int(status["CapAmb"], 16) == 0
    assert status["NoNewPrivs"] == "1"
    iso = inst.metadata["isolation"]
    assert iso["mode"] == "strict" and iso["capabilities"] == [] and iso["no_new_privs"] is True
    assert set(iso["namespaces"]) == {"pid", "mount", "ipc", "user", "net"}
    assert inst.backend.fingerprint()["isolation"]["mode"] == "strict"


def test_the_host_network_namespace_cannot_be_entered(make):
    [inst] = make()
    res = inst.exec(["nsenter", "--net=/proc/1/ns/net", "true"], check=False, timeout=30)
    assert res.exit_code != 0
    res = inst.exec(["nsenter", f"--net=/proc/{os.getpid()}/ns/net", "true"], check=False, timeout=30)
    assert res.exit_code != 0
    assert trials.host_netns_reached(inst) == 0


def test_proc_shows_only_the_instance_processes(make):
    [inst] = make()
    inside = trials.pids_seen(inst)
    assert os.getpid() not in inside
    assert len(inside) < 10, inside  # the holder, its sleep, the command (and ls, grep)
    assert 1 in inside


def test_other_campaigns_data_and_the_registry_are_hidden(make, outside_tmp, monkeypatch):
    from labkit.backends import sandbox
    from labkit.core import registry

    tmp_path = outside_tmp
    foreign = trials.plant(tmp_path / "foreign-data" / "campaign-x")  # a registered campaign's
    extra = trials.plant(tmp_path / "extra-data" / "campaign-y")  # the hide option's
    run = Path("/run/labkit")
    run.mkdir(mode=0o755, exist_ok=True)
    in_run = trials.plant(run, f"labkit-test-{secrets.token_hex(4)}.json")
    monkeypatch.setenv(registry.ENV, str(tmp_path / "registry"))
    try:
        with registry.register(
            f"test-iso-{secrets.token_hex(3)}", str(tmp_path / "foreign-data"), backend="local"
        ):
            a, b = make(count=2, hide=[str(tmp_path / "extra-data")])
        mine = trials.plant(Path(a.workdir), "own.txt")
        os.chown(mine, sandbox.USERNS_BASE, sandbox.USERNS_BASE)  # the instance's own file
        other = trials.plant(Path(b.workdir), "other.txt")
        default = [p for p in paths.data_dir().rglob("*") if p.is_file()][:1]
        wanted = [foreign, extra, in_run, other, *default]
        assert trials.visible(a, [*wanted, mine]) == [str(mine)]
        hidden = a.hidden
        assert a.metadata["isolation"]["hidden"] == len(hidden)  # the store keeps no one's paths
        assert "/run" in hidden and str(tmp_path / "foreign-data") in hidden  # /run holds /run/labkit
    finally:
        in_run.unlink()


def test_a_finished_campaigns_data_dir_and_the_home_secrets_are_hidden(make, outside_tmp, monkeypatch):
    """The audit's second pass: a campaign that had finished (its registry entry gone) in another
    data dir, and root's ~/.ssh, were readable from inside an instance. Every data dir a campaign
    registered with is recorded for good, and the invoking user's home is covered (issue 47: whole,
    not only its secrets: a plain file is no longer seen either)."""
    from labkit.core import registry

    tmp_path = outside_tmp
    finished = trials.plant(tmp_path / "finished-data" / "campaign-z")
    monkeypatch.setenv(registry.ENV, str(tmp_path / "registry"))
    with registry.register(
        f"test-iso-{secrets.token_hex(3)}", str(tmp_path / "finished-data"), backend="local"
    ):
        pass  # the campaign ran and stopped: the registry no longer names its data dir
    assert registry.entries() == []
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    planted = [
        trials.plant(home / ".ssh", "id_ed25519"),
        trials.plant(home / ".config" / "openstack", "clouds.yaml"),
        trials.plant(home / ".aws", "credentials"),
        trials.plant(home / ".azure", "accessTokens.json"),
        trials.plant(home / ".cache" / "labkit", "cloud_known_hosts"),
        trials.plant(home, ".netrc"),
    ]
    plain = trials.plant(home, "notes.txt")  # not a secret: hidden too
    # root's own (the password database's home, whatever $HOME says): its test key, never planted
    real = [
        p for p in (Path("/root/.ssh/labkit_test_ed25519"), Path("/root/.ssh/known_hosts")) if p.is_file()
    ]
    [inst] = make()
    assert trials.visible(inst, [finished, *planted, *real, plain]) == []
    hidden = inst.hidden
    assert str(tmp_path / "finished-data") in hidden and str(home) in hidden and "/root" in hidden
    before = (home / ".netrc").read_text()
    inst.exec(["sh", "-c", f"echo x > {home / '.netrc'}; rm -f {home / '.netrc'}"], check=False, timeout=30)
    assert (home / ".netrc").read_text() == before  # nor changed (a write goes to /dev/null)


def test_the_controller_environment_is_not_passed(make):
    [inst] = make()
    assert trials.controller_env_seen(inst) == 0
    res = inst.exec(["env"], env={"WORKLOAD_VAR": "given"}, timeout=30)
    names = {line.split("=", 1)[0] for line in res.stdout.splitlines()}
    assert "WORKLOAD_VAR" in names
    assert names <= {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PWD", "WORKLOAD_VAR"}, names
    assert "HOME=" + inst.workdir in res.stdout


def test_a_fork_bomb_stops_at_pids_max(make):
    [inst] = make(pids_max=64)
    assert inst.metadata["isolation"]["pids_max"] == 64
    forks = trials.forks_allowed(inst, limit=300)
    assert 0 < forks < 64


def test_a_child_that_tries_to_leave_its_cgroup_dies_at_the_timeout(make):
    [inst] = make()
    driver = inst.backend.driver
    roots = [f"{d.rsplit('/', 1)[0]}/cgroup.procs" for d in driver.dirs(inst.name)]
    assert trials.survivors_after_timeout(inst, roots) == []
    # and the instance still runs commands afterwards
    assert inst.exec(["true"], timeout=30).ok


def test_private_ports_below_1024_bind_without_capabilities(make):
    [inst] = make()
    res = inst.exec(
        ["python3", "-c", "import socket; s = socket.socket(); s.bind(('127.0.0.1', 80)); print('ok')"],
        check=False,
        timeout=30,
    )
    assert res.stdout.strip() == "ok", res.stderr


def test_relaxed_keeps_only_the_listed_capabilities(make):
    [inst] = make(isolation="relaxed")
    status = trials.status_fields(inst)
    assert int(status["CapEff"], 16) != 0 and status["NoNewPrivs"] == "1"
    assert not int(status["CapBnd"], 16) & (1 << 21)  # CAP_SYS_ADMIN
    assert inst.exec(["nsenter", "--net=/proc/1/ns/net", "true"], check=False, timeout=30).exit_code != 0
    assert inst.metadata["isolation"]["capabilities"] == list(inst.backend.isolation_record()["capabilities"])


def test_network_host_is_recorded_as_reduced(make):
    [inst] = make(network="host")
    iso = inst.metadata["isolation"]
    assert iso["namespaces"] == ["pid", "mount", "ipc", "user"] and inst.metadata["network"] == "host"
    assert int(trials.status_fields(inst)["CapEff"], 16) == 0


def test_the_host_file_system_is_read_only_but_for_the_work_dir_and_tmp(make):
    [inst] = make()
    probe = f"labkit-test-probe-{secrets.token_hex(4)}"
    script = (
        'for d in /etc /root /usr/local /sys/fs/cgroup/cpuset /proc/sys/vm "$PWD" /tmp /var/tmp; do '
        f'if (echo x > "$d/{probe}") 2>/dev/null; then echo "$d"; rm -f "$d/{probe}"; fi; done'
    )
    res = inst.exec(["sh", "-c", script], timeout=30)
    assert res.stdout.split() == [inst.workdir, "/tmp", "/var/tmp"]


@pytest.mark.parametrize("isolation", ["strict", "none"])
def test_a_command_and_what_it_starts_are_in_every_cgroup_of_the_instance(make, isolation):
    """lkns (strict) and the shell wrapper (none) join each hierarchy before they exec; on v1 by
    writing "0" to ``tasks`` (their one thread, so the whole process): the command, its threads
    and its children are members of every hierarchy of the instance, listed in cgroup.procs."""
    [inst] = make(isolation=isolation)
    dirs = inst.backend.driver.dirs(inst.name)
    res = inst.exec(
        [
            "sh",
            "-c",
            "sleep 30 >/dev/null 2>&1 & a=$!; sleep 30 >/dev/null 2>&1 & b=$!; "
            "echo $$; cat /proc/self/cgroup; "
            'for d in "$@"; do wc -l < "$d/cgroup.procs"; done; kill $a $b',
            "sh",
            *dirs,
        ],
        timeout=60,
    )
    lines = res.stdout.split("\n")
    member = [ln for ln in lines if ln.count(":") >= 2 and ln.endswith("/" + inst.name)]
    assert len(member) >= len(dirs), res.stdout  # one line per hierarchy (v1) or the one (v2)
    counts = [int(x) for x in lines[1:] if x.strip().isdigit()]
    assert len(counts) == len(dirs) and all(n >= 3 for n in counts), res.stdout  # sh and its two sleeps


def test_each_instance_has_its_own_tmpdir():
    """Instances have PID namespaces of their own, so their processes share pids; two Open MPI
    jobs at once (the shared scenario of seed 000) collided in /tmp/ompi.<host>.<uid>/pid.<pid>
    ("PMIX ERROR ... gds_ds21_lock_pthread.c", 2 of 15 runs). Each instance's TMPDIR is its own."""
    be = get_backend("local")
    insts = be.provision(InstanceSpec(vcpus=1, memory_mb=256, count=2), prefix=PREFIX)
    try:
        seen = [
            i.exec(
                ["sh", "-c", 'echo "$TMPDIR"; mktemp -p "$TMPDIR" >/dev/null && echo writable'], timeout=30
            ).stdout.split()
            for i in insts
        ]
        assert [s[1] for s in seen] == ["writable", "writable"]
        assert [s[0] for s in seen] == [f"{i.workdir}/.tmp" for i in insts] and seen[0][0] != seen[1][0]
    finally:
        assert teardown(insts) == []


def test_hidden_directories_are_empty_and_read_only_even_under_tmp(make, tmp_path):
    """Every hidden directory shows one empty read-only file system (the hidden ones share it), also
    those under /tmp, which stays writable; the work root that holds the instance's work dir is
    hidden but for that work dir."""
    hide = [tmp_path / f"hidden-{i}" for i in range(3)]
    for i, d in enumerate(hide):
        trials.plant(d, f"secret-{i}")
    [inst] = make(hide=[str(d) for d in hide])
    assert all(str(d) in inst.hidden for d in hide)
    root = str(Path(inst.workdir).parent)
    script = (
        'for d in "$@"; do ls -A "$d"; '
        'if (echo x > "$d/probe") 2>/dev/null || mkdir "$d/sub" 2>/dev/null; then echo "wrote $d"; fi; done; '
        "echo x > /tmp/labkit-probe-ok && rm /tmp/labkit-probe-ok && echo tmp-writable"
    )
    res = inst.exec(["sh", "-c", script, "sh", *map(str, hide), root], check=False, timeout=30)
    assert res.stdout.split() == [Path(inst.workdir).name, "tmp-writable"], (res.stdout, res.stderr)
    assert all(sorted(p.name for p in d.iterdir()) == [f"secret-{i}"] for i, d in enumerate(hide))


def test_mounts_are_read_only_unless_asked_even_under_tmp(make, tmp_path):
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir(mode=0o777)
    out.chmod(0o777)  # writable by the instance's uid (sandbox.USERNS_BASE on the host)
    (suite / "bin").write_text("x")
    [inst] = make(mounts=f"{suite},{out}:rw")
    res = inst.exec(["sh", "-c", f"cat {suite}/bin; echo y > {suite}/new"], check=False, timeout=30)
    assert res.stdout.strip() == "x" and "read-only" in res.stderr.lower(), res.stderr
    inst.exec(["sh", "-c", f"echo z > {out}/result"], timeout=30)
    assert (out / "result").read_text() == "z\n"


def test_cleanup_kills_the_namespace_holder_a_killed_controller_left(make):
    from labkit.backends import sandbox

    [inst] = make()
    assert sandbox.holders(inst.name)
    inst.exec(["sh", "-c", "sleep 600 >/dev/null 2>&1 &"], timeout=30)  # a daemon in the instance
    assert inst.backend.cleanup(inst.name) == [inst.name]  # as `labkit clean` would
    assert sandbox.holders(inst.name) == []
    assert trials.processes_with(inst.name) == []


# -- issue 47, finding 1: a workload can no longer act as host root --------------------------------
def test_no_daemon_socket_answers_from_inside(make):
    """From inside a run (2/2 runs before) docker.sock answered GET /version, LXD's unix.socket
    GET /1.0, libvirt listed the host's domains, MariaDB logged in root@localhost and munge
    issued a credential for uid 0: the workload was uid 0 and /run was the host's. The same probe
    on the host (the control: the probe does find and reach the daemons CI starts) reaches
    docker.sock; from inside, no socket of the host accepts a connection at all."""
    on_host = trials.sockets_reached(None)
    assert any(p.endswith("docker.sock") for p in on_host), on_host  # dockerd runs (CI starts it)
    [inst] = make()
    assert trials.sockets_reached(inst) == []


def test_shadow_block_devices_and_root_files_are_unreadable_from_inside(make, outside_tmp):
    """/etc/shadow, the host's block devices (/dev/loop0 held the LXD pool) and a root-owned
    0600 file outside every hidden directory: read as uid 0 before (owner checks passed)."""
    secret = trials.plant(outside_tmp / "root-only", "secret")  # 0600, root's, in a 0700 dir
    blocks = [str(p) for p in Path("/dev").iterdir() if p.is_block_device()][:8]
    assert blocks  # this machine has a disk
    [inst] = make()
    assert trials.readable(inst, ["/etc/shadow", "/etc/gshadow", str(secret), *blocks]) == []
    res = inst.exec(
        [
            "sh",
            "-c",
            'ls /dev; for f in /dev/* /dev/pts/*; do [ -L "$f" ] && continue; [ -b "$f" ] && echo "block $f"; '
            '[ -c "$f" ] && echo "char $f"; done; true',
        ],
        timeout=30,
    )
    listing = [ln for ln in res.stdout.splitlines() if " " not in ln]
    assert set(listing) == {
        "fd",
        "full",
        "null",
        "ptmx",
        "pts",
        "random",
        "shm",
        "stderr",
        "stdin",
        "stdout",
        "tty",
        "urandom",
        "zero",
    }, res.stdout
    devices = sorted(ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith(("block ", "char ")))
    assert devices == sorted(
        ["/dev/full", "/dev/null", "/dev/pts/ptmx", "/dev/random", "/dev/tty", "/dev/urandom", "/dev/zero"]
    ), res.stdout


def test_tmp_is_private_both_ways(make):
    """Root's Voila kernel connection files in the host's /tmp were readable, and what a workload
    left in /tmp outlived the campaign. Now /tmp and /var/tmp are the instance's own: a host file
    there is not seen, a file written inside never reaches the host and goes with the instance."""
    name = f"labkit-test-private-{secrets.token_hex(4)}"
    host_file = Path("/tmp") / f"{name}-host"
    host_file.write_text("host secret\n")
    try:
        [inst] = make()
        assert trials.readable(inst, [host_file]) == []
        inst.exec(["sh", "-c", f"echo x > /tmp/{name} && echo y > /var/tmp/{name}"], timeout=30)
        assert inst.exec(["cat", f"/tmp/{name}", f"/var/tmp/{name}"], timeout=30).stdout == "x\ny\n"
        assert not (Path("/tmp") / name).exists() and not (Path("/var/tmp") / name).exists()
    finally:
        host_file.unlink()


def test_home_content_is_seen_only_by_allow_list(make, outside_tmp, monkeypatch):
    """Home files not on the secrets list (.pypirc, .vault-token, Jupyter's cookie secret) were
    readable. Every home is now covered whole (root's, /home, the invoking users')."""
    home = outside_tmp / "home"
    planted = [
        trials.plant(home, ".pypirc"),
        trials.plant(home, ".vault-token"),
        trials.plant(home / ".local" / "share" / "jupyter" / "runtime", "jupyter_cookie_secret"),
        trials.plant(home / "notes", "todo.txt"),
    ]
    monkeypatch.setenv("HOME", str(home))
    [inst] = make()
    assert str(home) in inst.hidden
    assert trials.visible(inst, planted) == []
    assert inst.exec(["ls", "-A", "/root", str(home)], timeout=30).stdout.split() == ["/root:", f"{home}:"]


def test_the_workload_is_an_unprivileged_uid_on_the_host_and_it_is_recorded(make):
    from labkit.backends import sandbox

    [inst] = make()
    assert inst.exec(["id", "-u"], timeout=30).stdout.strip() == "0"  # root inside
    assert trials.host_uids_of_instance(inst) == {sandbox.USERNS_BASE}  # not on the host
    for record in (inst.metadata["isolation"], inst.backend.fingerprint()["isolation"]):
        assert "user" in record["namespaces"] and str(sandbox.USERNS_BASE) in record["user"]
        assert "/tmp" in record["private"]


def test_a_read_write_mount_the_instance_cannot_write_is_refused_with_the_fix(tmp_path):
    """The instance's root is an unprivileged host uid (as in LXD's unprivileged containers): a
    read-write mount it could not write is refused when the backend is made, naming the fix."""
    from labkit.backends import sandbox
    from labkit.errors import ConfigError

    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    with pytest.raises(ConfigError, match=f"setfacl -m u:{sandbox.USERNS_BASE}:rwx"):
        get_backend("local", mounts=f"{out}:rw")
    get_backend("local", mounts=f"{out}:rw", isolation="none")  # as full root: no such rule


def test_a_hidden_path_that_became_a_link_covers_nothing(make, outside_tmp, monkeypatch):
    """A user's recorded data dir, checked and resolved by labkit, swapped for a link to a system
    directory before the holder mounts: the holder mounts on what it opens through no link, so
    the link's target stays seen (before, the mount followed the link and covered the target)."""
    from labkit.backends.local import LocalBackend

    target = outside_tmp / "system-like"
    marker = trials.plant(target, "marker")
    marker.chmod(0o644)
    target.chmod(0o755)
    link = outside_tmp / "swapped"
    link.symlink_to(target)
    monkeypatch.setattr(LocalBackend, "hidden_dirs", lambda self: [str(link)])
    [inst] = make()
    assert trials.visible(inst, [marker]) == [str(marker)]
