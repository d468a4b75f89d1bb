"""Telemetry (labkit.run.telemetry): settings, interval arithmetic on fake readings with a fake
clock, where it refuses to sample, and the store's ``samples`` table."""

from __future__ import annotations

import os
import sqlite3
from collections import namedtuple
from types import SimpleNamespace

import pandas as pd
import pytest

from labkit.design import Design
from labkit.errors import ConfigError, StoreError
from labkit.run.campaign import Campaign
from labkit.run.telemetry import (
    CgroupWatch,
    Reading,
    check_interval,
    covariates,
    delta_rows,
    parse_psi,
    parse_throttled,
    remote_reason,
    summarize,
)
from labkit.store import Store

CPU = namedtuple("scputimes", "user nice system idle iowait irq softirq steal guest guest_nice")
DESIGN = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 3})


def cpu(user=0.0, idle=0.0, iowait=0.0, steal=0.0, guest=0.0):
    return CPU(user, 0.0, 0.0, idle, iowait, 0.0, 0.0, steal, guest, 0.0)


@pytest.mark.parametrize("value", [None, 0, 0.0, False, "off", "OFF", " off "])
def test_off_settings(value):
    assert check_interval(value) is None


@pytest.mark.parametrize("value,expected", [("on", 1.0), (True, 1.0), (1, 1.0), (0.2, 0.2), (5, 5.0)])
def test_interval_settings(value, expected):
    assert check_interval(value) == expected


# 60.5 and 1e9 (31 years, issue 47: accepted, and the campaign waited on its first interval):
# longer than MAX_INTERVAL
@pytest.mark.parametrize("value", [-1, 0.01, float("nan"), float("inf"), "fast", "1.0", [1], {}, 60.5, 1e9])
def test_bad_settings_are_config_errors_naming_the_option(value):
    with pytest.raises(ConfigError, match="telemetry.*interval in seconds"):
        check_interval(value)
    with pytest.raises(ConfigError, match="telemetry"):
        Campaign(DESIGN, backend="local", workload="nqueens", telemetry=value)


def test_campaign_default_is_on_at_one_second_and_off_removes_the_hook():
    from labkit.run.telemetry import Telemetry

    on = Campaign(DESIGN, backend="local", workload="nqueens")
    assert on.telemetry == 1.0 and [h.interval for h in on.hooks if isinstance(h, Telemetry)] == [1.0]
    off = Campaign(DESIGN, backend="local", workload="nqueens", telemetry="off")
    assert off.telemetry is None and not any(isinstance(h, Telemetry) for h in off.hooks)


def test_parse_psi_and_throttled():
    text = (
        "some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=789\n"
    )
    assert parse_psi(text) == {"some": 123456.0, "full": 789.0}
    assert parse_throttled("nr_periods 10\nnr_throttled 4\nthrottled_usec 900\n") == 4
    assert parse_throttled("usage_usec 5\n") is None


def test_delta_rows_host_cpu_steal_iowait_and_rates():
    a = Reading(
        10.0,
        cpus=[cpu(user=100, idle=100), cpu(user=50, idle=150)],
        psi={"cpu_some": 1e6},
        disk=(1000, 0),
        net=(0, 0),
        own_cpu_s=1.0,
    )
    # one second later: CPU 0 fully busy (half of it steal), CPU 1 half idle half iowait
    b = Reading(
        11.0,
        cpus=[cpu(user=100.5, idle=100, steal=0.5), cpu(user=50, idle=150.5, iowait=0.5)],
        psi={"cpu_some": 1.25e6},
        disk=(3000, 500),
        net=(100, 40),
        own_cpu_s=1.1,
        gauges={"load1": 1.5},
    )
    rows = dict(delta_rows(a, b))
    assert rows["cpu0_pct"] == pytest.approx(100.0) and rows["cpu1_pct"] == pytest.approx(0.0)
    assert rows["cpu_pct"] == pytest.approx(50.0)
    assert rows["steal_pct"] == pytest.approx(25.0) and rows["iowait_pct"] == pytest.approx(25.0)
    assert rows["host_cpu_used_pct"] == pytest.approx(100.0)  # one CPU's worth
    assert rows["psi_cpu_some_pct"] == pytest.approx(25.0)
    assert rows["disk_read_Bps"] == 2000 and rows["disk_write_Bps"] == 500
    assert rows["net_rx_Bps"] == 100 and rows["net_tx_Bps"] == 40
    assert rows["controller_cpu_pct"] == pytest.approx(10.0)
    assert rows["load1"] == 1.5
    assert "cpu_other_pct" not in rows  # no cgroups known: nothing to subtract


def test_guest_time_is_not_counted_twice():
    a = Reading(0.0, cpus=[cpu(user=10, idle=10, guest=5)])
    b = Reading(1.0, cpus=[cpu(user=11, idle=10, guest=6)])  # the guest second is inside user
    assert dict(delta_rows(a, b))["cpu_pct"] == pytest.approx(100.0)


def test_cpu_other_subtracts_campaign_cgroups_and_the_controller():
    a = Reading(0.0, cpus=[cpu(user=0, idle=0)] * 2, own_cpu_s=0.0, groups={"c-a": (5.0, 2)})
    # 2 s: host busy 3 CPU-s; instance a used 1 s, b (new, made meanwhile) 0.5 s; controller 0.2 s
    b = Reading(
        2.0, cpus=[cpu(user=1.5, idle=0.5)] * 2, own_cpu_s=0.2, groups={"c-a": (6.0, 5), "c-b": (0.5, 1)}
    )
    rows = dict(delta_rows(a, b))
    assert rows["campaign_cpu_pct"] == pytest.approx(75.0)
    assert rows["cpu_other_pct"] == pytest.approx(100 * (3.0 - 1.5 - 0.2) / 2)
    assert rows["throttled_periods"] == 4


def test_an_interval_in_which_a_campaign_cgroup_was_removed_tells_no_campaign_or_other_cpu():
    """Every run of the flagship on a quiet host was flagged suspect: the interval that held the
    previous run's end counted its instance's CPU (its cgroup removed before the next reading)
    as CPU of processes outside the campaign."""
    a = Reading(0.0, cpus=[cpu(user=0, idle=0)] * 2, own_cpu_s=0.0, groups={"c-old": (5.0, 0)})
    b = Reading(1.0, cpus=[cpu(user=1.0, idle=0)] * 2, own_cpu_s=0.0, groups={"c-new": (0.1, 0)})
    rows = dict(delta_rows(a, b))
    assert rows["host_cpu_used_pct"] == pytest.approx(200.0)
    assert "cpu_other_pct" not in rows and "campaign_cpu_pct" not in rows


def test_on_a_backend_whose_instances_tell_their_own_cpu_the_host_ends_cgroups_count_as_the_campaigns():
    """docker/lxd/libvirt: the instances' CPU comes from their stats (``members``), and a host end's
    commands (``ab`` on the host) from its cgroup; before, ``ab`` counted as outside the campaign."""
    kw = dict(own_cpu_s=0.0, groups_whole=False, members=frozenset({"i1"}))
    a = Reading(0.0, cpus=[cpu(user=0, idle=0)] * 2, groups={}, campaign_cpu_s=10.0, **kw)
    b = Reading(
        2.0, cpus=[cpu(user=1.5, idle=0.5)] * 2, groups={"p--host-1": (0.8, 0)}, campaign_cpu_s=11.0, **kw
    )
    rows = dict(delta_rows(a, b))
    assert rows["campaign_cpu_pct"] == pytest.approx(100 * (1.0 + 0.8) / 2)
    assert rows["cpu_other_pct"] == pytest.approx(100 * (3.0 - 1.8) / 2)
    assert "throttled_periods" not in rows  # the instances' own, not the host ends'
    # the host end removed during the interval took its last CPU with it: nothing told
    c = Reading(3.0, cpus=[cpu(user=2.0, idle=1.0)] * 2, groups={}, campaign_cpu_s=11.5, **kw)
    assert "cpu_other_pct" not in dict(delta_rows(b, c))
    # with no host end at all, the instances' counters alone, as before
    d = Reading(4.0, cpus=[cpu(user=2.5, idle=1.5)] * 2, groups={}, campaign_cpu_s=12.0, **kw)
    assert dict(delta_rows(c, d))["campaign_cpu_pct"] == pytest.approx(50.0)


def test_the_kernels_threads_are_not_processes_outside_the_campaign():
    """A campaign's removed network namespaces are cleaned up by kworkers (10-20 % of a CPU after
    each apache run): the kernel's threads are told apart (``kernel_cpu_pct``), not counted as
    other processes; a thread new in the interval, or a pid reused, counts from its start."""
    from labkit.run.readings import CLOCK_TICKS

    t = CLOCK_TICKS
    a = Reading(
        0.0,
        cpus=[cpu(user=0, idle=0)] * 2,
        own_cpu_s=0.0,
        groups={"c-a": (1.0, 0)},
        kernel={"2": 0, "40": 5 * t, "41": 3 * t},
    )
    b = Reading(
        2.0,
        cpus=[cpu(user=1.5, idle=0.5)] * 2,
        own_cpu_s=0.0,
        groups={"c-a": (2.5, 0)},
        kernel={"2": 0, "40": int(5.2 * t), "41": int(0.1 * t), "99": int(0.1 * t)},
    )  # 41 reused, 99 new
    rows = dict(delta_rows(a, b))
    assert rows["kernel_cpu_pct"] == pytest.approx(100 * 0.4 / 2)
    assert rows["cpu_other_pct"] == pytest.approx(100 * (3.0 - 1.5 - 0.4) / 2)


def test_the_backends_daemons_are_not_processes_outside_the_campaign():
    """LXD deleting the previous run's container (11-34 % of a CPU "before the run" in a local+lxd
    campaign) is the campaign's work: the backends' daemons are told apart (``daemon_cpu_pct``),
    not counted as other processes; a daemon started in the interval counts from its start."""
    from labkit.run.readings import CLOCK_TICKS

    t = CLOCK_TICKS
    kw = dict(own_cpu_s=0.0, groups_whole=False, members=frozenset({"i1"}), kernel={"2": 0}, groups={})
    a = Reading(0.0, cpus=[cpu(user=0, idle=0)] * 2, campaign_cpu_s=10.0, daemons={"100:5": 7 * t}, **kw)
    b = Reading(
        2.0,
        cpus=[cpu(user=1.5, idle=0.5)] * 2,
        campaign_cpu_s=11.0,
        daemons={"100:5": int(7.6 * t), "200:9": int(0.2 * t)},
        **kw,
    )
    rows = dict(delta_rows(a, b))
    assert rows["daemon_cpu_pct"] == pytest.approx(100 * 0.8 / 2)
    assert rows["cpu_other_pct"] == pytest.approx(100 * (3.0 - 1.0 - 0.8) / 2)
    # no daemon read (a campaign on local only): no row, and the other processes as before
    plain = dict(
        delta_rows(
            Reading(0.0, cpus=a.cpus, campaign_cpu_s=10.0, **kw),
            Reading(2.0, cpus=b.cpus, campaign_cpu_s=11.0, **kw),
        )
    )
    assert "daemon_cpu_pct" not in plain and plain["cpu_other_pct"] == pytest.approx(100 * 2.0 / 2)


#: a process that names itself argv[1] (``/proc/self/comm``, as prctl(PR_SET_NAME) does), burns
#: argv[2] s of CPU, says so, then burns 0.5 s each time a line comes on stdin and says so again
BURN = (
    "import sys, time\nopen('/proc/self/comm', 'w').write(sys.argv[1])\n"
    "def burn(s):\n    end = time.process_time() + s\n    while time.process_time() < end: pass\n"
    "burn(float(sys.argv[2]))\nprint(flush=True)\n"
    "while sys.stdin.readline():\n    burn(0.5)\n    print(flush=True)\n"
)


def _program_dir(tmp_path, name, target):
    """A directory holding ``name``, a link to the program ``target``: the daemon's program that a
    :class:`DaemonCpu` given it as its only directory looks for."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    (d / name).symlink_to(os.path.realpath(target))
    return str(d)


def test_daemons_are_found_by_their_program_and_owner_and_their_own_cpu_read(tmp_path):
    """A process of a daemon's name running the daemon's program (here: python, as the program of
    "lk-test-daemon" in the only directory looked in) as this user is read, its CPU as it runs;
    one with another name is not; nothing is read before a backend names a daemon. A daemon that
    ran before it was named counts from then (not with the CPU of its whole life: 390 % of a CPU
    in one interval, seen in a campaign whose first libvirt run came after its lxd runs); one
    started since the scan before counts from its start."""
    import subprocess
    import sys

    from labkit.run.readings import CLOCK_TICKS, DaemonCpu

    def start(name, before):
        return subprocess.Popen(
            [sys.executable, "-c", BURN, name, str(before)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def go(p):
        p.stdin.write("\n")
        p.stdin.flush()
        p.stdout.readline()

    procs = [start("lk-test-daemon", 0.4), start("lk-test-other", 0.0)]
    try:
        for p in procs:
            p.stdout.readline()  # renamed, and the daemon burnt 0.4 s of CPU before it is named
        now = [0.0]
        d = DaemonCpu(
            clock=lambda: now[0], dirs=[_program_dir(tmp_path, "lk-test-daemon", sys.executable)], pidfiles=()
        )
        assert d.read() is None
        d.add(["lk-test-daemon"])
        before = d.read()
        ((key, value),) = before.items()
        assert key.startswith(f"{procs[0].pid}:") and value == 0  # its past is not counted
        for p in procs:
            go(p)  # 0.5 s of CPU each
        after = d.read()
        assert (after[key] - value) / CLOCK_TICKS >= 0.4, after
        # a daemon started since the scan before counts from its start, once a scan finds it
        procs.append(start("lk-test-daemon", 0.4))
        procs[-1].stdout.readline()
        now[0] += DaemonCpu.RESCAN_S
        found = d.read()
        assert set(found) > {key} and max(v for k, v in found.items() if k != key) / CLOCK_TICKS >= 0.3, found
        # a daemon that ended is left out (the other name was never read: one key above)
        for p in (procs[0], procs[2]):
            p.stdin.close()
            p.wait()
        assert d.read() == {}
        now[0] += DaemonCpu.RESCAN_S  # the next reading scans /proc again: nothing is called so
        assert d.read() == {}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_process_named_as_a_daemon_running_another_program_is_not_one(tmp_path):
    """Issue 47: the name (``comm``) is the process's to choose. A process of this user that calls
    itself "lk-test-daemon" but runs python, where the daemon's program is ``sleep``, is not
    counted as the daemon (before: found by name, its CPU hidden from the guard)."""
    import subprocess
    import sys

    from labkit.run.readings import DaemonCpu

    p = subprocess.Popen(
        [sys.executable, "-c", BURN, "lk-test-daemon", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        p.stdout.readline()
        d = DaemonCpu(dirs=[_program_dir(tmp_path, "lk-test-daemon", "/bin/sleep")], pidfiles=())
        d.add(["lk-test-daemon"])
        assert d.read() == {}
    finally:
        p.kill()
        p.wait()


@pytest.mark.root
@pytest.mark.parametrize("name", ["dockerd", "containerd", "lxd", "libvirtd"])
def test_a_busy_loop_renamed_as_a_real_daemon_is_other_cpu(tmp_path, name):
    """Issue 47, finding 6: a busy loop that renames itself ``dockerd``, ``containerd``, ``lxd`` or
    ``libvirtd`` (prctl PR_SET_NAME) took "other CPU" from 104 % to 4.6 %. Run as a second,
    non-root user (uid 4246) and as root itself (a program that is
    not the daemon's), it is not read as a daemon, so its CPU stays in ``cpu_other_pct``; before,
    both were read (found by name). The real daemons are looked for as the sampler does (every
    backend's names, the default directories and pid files)."""
    import subprocess
    import sys

    from labkit.run.readings import DaemonCpu

    # as tests/support/other_users.as_user runs code as another uid (setpriv), but with the
    # system's python: this one (a pyenv build under /root, 0700) is not the other user's to run
    other = ["setpriv", "--reuid=4246", "--regid=4246", "--clear-groups", "/usr/bin/python3"]
    pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    loops = [
        subprocess.Popen([*other, "-c", BURN, name, "0"], env={"PATH": "/usr/bin:/bin"}, **pipes),
        subprocess.Popen([sys.executable, "-c", BURN, name, "0"], **pipes),
    ]
    try:
        for p in loops:
            assert p.stdout.readline() == "\n", p.stderr.read()
        d = DaemonCpu()
        d.add(["dockerd", "containerd", "containerd-shim", "docker-proxy", "lxd", "libvirtd"])
        pids = {str(p.pid) for p in loops}
        first = d.read()
        for p in loops:
            p.stdin.write("\n")
            p.stdin.flush()
            p.stdout.readline()  # 0.5 s of CPU each
        second = d.read()
        # not read as a daemon: its CPU stays in the host's busy time that cpu_other_pct keeps
        # (delta_rows subtracts only the daemons read: test_the_backends_daemons_are_not_...)
        assert not {k.split(":")[0] for k in (first or {}) | (second or {})} & pids, (first, second)
    finally:
        for p in loops:
            p.kill()
            p.wait()


@pytest.mark.root
def test_a_daemon_pid_file_names_its_program_and_only_a_root_owned_one_counts(tmp_path):
    """A daemon installed where no directory looked in holds its program is found through its
    root-owned pid file (``/run/docker.pid``): the program of the process it names is a daemon's.
    A pid file another user owns, or anyone may write, names nothing."""
    import subprocess
    import sys

    from labkit.run.readings import DaemonCpu

    p = subprocess.Popen(
        [sys.executable, "-c", BURN, "lk-test-daemon", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        p.stdout.readline()
        pidfile = tmp_path / "lk.pid"
        pidfile.write_text(f"{p.pid}\n")
        pidfile.chmod(0o644)
        d = DaemonCpu(dirs=(), pidfiles=[str(pidfile)])
        d.add(["lk-test-daemon"])
        assert [k.split(":")[0] for k in d.read()] == [str(p.pid)]
        pidfile.chmod(0o666)  # anyone may write it: it names nothing
        d = DaemonCpu(dirs=(), pidfiles=[str(pidfile)])
        d.add(["lk-test-daemon"])
        assert d.read() == {}
    finally:
        p.kill()
        p.wait()


def test_the_sampler_reads_the_daemons_of_the_backends_that_run_here():
    from labkit.run.sampler import HostSampler

    s = HostSampler(1.0)
    s.configure(SimpleNamespace(name="lxd", daemons=("lxd",)), "labkit-x--")
    s.configure(
        SimpleNamespace(name="docker", base_url="ssh://root@10.0.0.2", ssh=object(), daemons=("dockerd",)),
        "labkit-x--",
    )  # another machine's dockerd
    s.configure(SimpleNamespace(name="local"), "labkit-x--")
    assert s.daemons.names == {"lxd"}
    assert s.read_host is not None and s.read_host().daemons is not None


def test_kernel_threads_are_read_from_kthreadds_children():
    from labkit.run.readings import kernel_threads

    if not os.path.exists("/proc/2/task/2/children"):
        pytest.skip("this kernel does not list a task's children (CONFIG_PROC_CHILDREN)")
    seen = kernel_threads()
    assert "2" in seen and len(seen) > 1 and all(v >= 0 for v in seen.values())
    assert str(os.getpid()) not in seen
    # the stat files stay open, at most MAX_OPEN of them; the others are opened and closed each time
    from labkit.run.readings import KernelThreads

    capped = KernelThreads()
    capped.MAX_OPEN = 1
    fds = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        assert set(capped.read()) >= {"2"}
    assert len(os.listdir("/proc/self/fd")) <= fds + 1


def test_readings_without_time_passing_give_no_rows():
    assert delta_rows(Reading(1.0), Reading(1.0)) == []


def test_summarize():
    rows = [
        (1.0, "cpu_other_pct", 5.0),
        (2.0, "cpu_other_pct", 15.0),
        (1.0, "steal_pct", 0.0),
        (2.0, "steal_pct", 3.0),
        (1.0, "freq_min_mhz", 800.0),
        (2.0, "freq_min_mhz", 1200.0),
        (1.0, "freq_max_mhz", 3000.0),
        (1.0, "throttled_periods", 2.0),
        (2.0, "throttled_periods", 3.0),
    ]
    s = summarize(rows)
    assert s["cpu_other_max_pct"] == 15.0 and s["cpu_other_mean_pct"] == 10.0 and s["steal_max_pct"] == 3.0
    assert s["freq_min_mhz"] == 800.0 and s["freq_max_mhz"] == 3000.0 and s["throttled_periods"] == 5.0
    assert "iowait_mean_pct" not in s


@pytest.mark.parametrize(
    "backend,here",
    [
        (SimpleNamespace(name="local"), True),
        (SimpleNamespace(name="docker", base_url="unix:///var/run/docker.sock", ssh=None), True),
        (SimpleNamespace(name="docker", base_url="ssh://root@10.0.0.2", ssh=object()), False),
        (SimpleNamespace(name="docker", base_url="tcp://10.0.0.2:2375", ssh=None), False),
        (SimpleNamespace(name="lxd"), True),
        (SimpleNamespace(name="libvirt", local=True), True),
        (SimpleNamespace(name="libvirt", local=False), False),
        (SimpleNamespace(name="ssh"), False),
        (SimpleNamespace(name="openstack"), False),
    ],
)
def test_only_backends_on_this_machine_are_sampled(backend, here):
    assert (remote_reason(backend) is None) is here


def test_remote_backend_records_why_nothing_was_sampled():
    from labkit.core.instance import InstanceSpec
    from labkit.run.hooks import RunContext
    from labkit.run.telemetry import Telemetry

    ctx = RunContext(DESIGN.plan()[0], InstanceSpec(), {}, SimpleNamespace(name="ssh"), "lk-x-")
    with Telemetry(0.1).around_run(ctx) as started:
        assert started == []
    assert ctx.samples == []  # no instance yet, and the host here is not the one that runs them
    summary = ctx.metadata["telemetry"]
    assert summary["collected"] is True and summary["host"].startswith("not sampled: ")
    assert "not collected" in summary["host"] and summary["instance_stats"] == "none: no instance was sampled"


def test_cgroup_watch_reads_the_campaigns_cgroups_v2(tmp_path):
    from labkit.backends.cgroups import CgroupV2

    for name, usage, throttled in (("lk-c-1", 2_000_000, 3), ("lk-c-2", 500_000, 0), ("other", 9_000_000, 9)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "cpu.stat").write_text(
            f"usage_usec {usage}\nnr_periods 9\nnr_throttled {throttled}\n"
        )
    assert CgroupWatch(CgroupV2(str(tmp_path)), "lk-c-").read() == {
        "lk-c-1": (2.0, 3),
        "lk-c-2": (0.5, 0),
        "lk-c-host-retired": (0.0, 0),
    }


def test_cgroup_watch_reads_the_campaigns_cgroups_v1(tmp_path):
    from labkit.backends.cgroups import CgroupV1

    roots = {c: tmp_path / c for c in ("cpuset", "cpu", "cpuacct", "memory")}
    for r in roots.values():
        (r / "lk-c-1").mkdir(parents=True)
    (roots["cpuacct"] / "lk-c-1" / "cpuacct.usage").write_text("1500000000\n")
    (roots["cpu"] / "lk-c-1" / "cpu.stat").write_text("nr_periods 4\nnr_throttled 2\nthrottled_time 7\n")
    assert CgroupWatch(CgroupV1({k: str(v) for k, v in roots.items()}), "lk-c-").read() == {
        "lk-c-1": (1.5, 2),
        "lk-c-host-retired": (0.0, 0),
    }


# -- the store's samples table ---------------------------------------------------------------


def test_run_and_samples_stored_together_read_and_exported(tmp_path):
    runs = DESIGN.plan()
    with Store.for_campaign(tmp_path, "c1") as st:
        st.record_run(
            runs[0],
            status="failed",
            started="t",
            duration_s=1.0,
            error="boom",
            samples=[(0.2, "cpu_pct", 50.0), (0.4, "cpu_pct", 60.0)],
        )
        st.record_run(runs[1], status="ok", started="t", duration_s=1.0)
        st.record_samples(runs[1].run_id, [(0.2, "load1", 1.0)])
        got = st.samples()
        assert list(got.columns) == ["run_id", "t", "metric", "value", "instance"] and len(got) == 3
        assert list(st.samples(runs[0].run_id).value) == [50.0, 60.0]
        st.export(formats=("csv",))
        assert len(pd.read_csv(tmp_path / "c1" / "samples.csv")) == 3
        # a run forgotten to run again loses its samples (a new attempt brings its own)
        st.delete_runs([runs[0].run_id])
        assert st.samples(runs[0].run_id).empty and len(st.samples()) == 1


def test_a_run_that_cannot_be_stored_leaves_no_samples(tmp_path):
    run = DESIGN.plan()[0]
    with Store.for_campaign(tmp_path, "c1") as st:
        st.record_run(run, status="ok", started="t", duration_s=1.0)
        with pytest.raises(StoreError, match="stored once"):
            st.record_run(run, status="ok", started="t", duration_s=1.0, samples=[(0.1, "x", 1.0)])
        assert st.samples().empty


@pytest.mark.parametrize("row", [(0.1, "", 1.0), (0.1, None, 1.0), ("soon", "x", 1.0), (0.1, "x"), 7])
def test_bad_sample_rows_are_store_errors(tmp_path, row):
    with Store.for_campaign(tmp_path, "c1") as st, pytest.raises(StoreError, match="sample row 0"):
        st.record_samples("r1", [row])


def test_store_made_before_samples_reads_empty_and_gets_the_table_when_opened_for_writing(tmp_path):
    with Store.for_campaign(tmp_path, "old") as st:
        st.record_run(DESIGN.plan()[0], status="ok", started="t", duration_s=1.0)
    path = tmp_path / "old" / "store.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE samples")
    with Store(path, readonly=True) as ro:
        assert ro.samples().empty and list(ro.samples().columns) == [
            "run_id",
            "t",
            "metric",
            "value",
            "instance",
        ]
    with Store(path) as rw:
        rw.record_samples("r", [(0.0, "load1", 0.1)])
        assert len(rw.samples()) == 1


def test_covariates_are_the_numeric_summary_keys_one_row_per_run():
    runs = pd.DataFrame(
        {
            "run_id": ["a", "b", "c"],
            "metadata": [
                {
                    "telemetry": {
                        "collected": True,
                        "interval_s": 1.0,
                        "samples": 3,
                        "cpu_other_max_pct": 12.5,
                        "instance_cpu": "cgroups",
                    }
                },
                {"telemetry": {"collected": False, "reason": "remote"}},
                {},
            ],
        }
    )
    cov = covariates(runs)
    assert list(cov.run_id) == ["a", "b", "c"]
    assert set(cov.columns) == {"run_id", "interval_s", "samples", "cpu_other_max_pct"}
    assert cov.cpu_other_max_pct.iloc[0] == 12.5 and cov.cpu_other_max_pct.iloc[1:].isna().all()
    assert list(covariates(pd.DataFrame()).columns) == ["run_id"]
