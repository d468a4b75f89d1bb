"""The campaign's one host sampler (labkit.run.telemetry.HostSampler): each run's window cut from
its readings (fake clock, fake readings: the sampler's thread is not started, the test calls
``sample()`` as the thread would), the thread's life around a campaign, and the quiet-host guard
reading the sampler instead of taking a sample of its own."""

from __future__ import annotations

import threading
from collections import namedtuple
from types import SimpleNamespace

import pytest

from labkit.core import registry
from labkit.core.instance import InstanceSpec
from labkit.design import Design
from labkit.run import guard
from labkit.run.guard import QuietHost, pre_run_load
from labkit.run.hooks import RunContext, RunHook
from labkit.run.telemetry import HostSampler, Reading, Telemetry, summarize
from tests.unit.test_levels import CountingBackend, Iterating

CPU = namedtuple("scputimes", "user nice system idle iowait irq softirq steal guest guest_nice")
RUN = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 3}).plan()[0]


@pytest.fixture(autouse=True)
def own_registry(tmp_path, monkeypatch):
    monkeypatch.setenv(registry.ENV, str(tmp_path / "registry"))


class Clock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


def gauge_sampler(clock, reads=None):
    """A sampler whose reading at time t carries the gauge ``load1 = t`` (so a row names the
    reading that ends its interval); no thread."""

    def read():
        if reads is not None:
            reads.append(clock.now)
        return Reading(clock.now, gauges={"load1": clock.now})

    return HostSampler(1.0, read, clock=clock, thread_clock=lambda: 0.0, autostart=False)


def read_twice(s, clock):
    """The sampler's readings at t = 0 and t = 1 (the clock then at 1)."""
    clock.now = 0.0
    s.sample()
    clock.now = 1.0
    s.sample()


def ctx_with(instances=(), backend=None):
    return RunContext(
        RUN, InstanceSpec(), {}, backend or SimpleNamespace(name="local"), "lk-t-", instances=list(instances)
    )


def test_a_window_gets_exactly_the_intervals_that_overlap_its_run():
    clock = Clock(10.0)
    s = gauge_sampler(clock)
    with s.campaign():
        s.sample()  # t = 10
        clock.now = 11.0
        s.sample()  # t = 11
        clock.now = 11.5
        w = s.open(None, host=True)  # the run starts inside (11, 12]
        for now in (12.0, 13.0):
            clock.now = now
            s.sample()
        clock.now = 13.2
        s.close(w)  # ends inside (13, 14]: cut by a reading at 13.2
        clock.now = 14.0
        s.sample()  # after the run: not its
    assert w.rows == [(0.5, "load1", 12.0), (1.5, "load1", 13.0), (1.7, "load1", 13.2)]
    assert w.readings == 4 and w.wall_s == pytest.approx(1.7)


def test_a_run_shorter_than_one_interval_still_gets_a_summary():
    clock = Clock(0.0)
    s = gauge_sampler(clock)
    with s.campaign():
        read_twice(s, clock)
        clock.now = 1.2
        w = s.open(None, host=True)
        clock.now = 1.6  # no reading of the thread while it ran
        s.close(w)
    assert w.rows == [(0.4, "load1", 1.6)]
    assert summarize(w.rows) == {"load1_max": 1.6}


def test_windows_of_runs_in_flight_share_the_readings():
    clock = Clock(0.0)
    reads: list[float] = []
    s = gauge_sampler(clock, reads)
    with s.campaign():
        s.sample()
        a = s.open(None, host=True)
        clock.now = 0.5
        b = s.open(None, host=True)
        clock.now = 1.0
        s.sample()
        clock.now = 1.5
        s.close(a)
        clock.now = 2.0
        s.sample()
        s.close(b)
    assert [r[2] for r in a.rows] == [1.0, 1.5]
    assert [r[2] for r in b.rows] == [1.0, 2.0]  # its end reading at 2.0 adds no interval (no time passed)
    # one reading per tick for both runs, plus one at each run's end; none at their starts
    assert reads == [0.0, 1.0, 1.5, 2.0, 2.0]


def test_instance_stats_are_read_by_the_sampler_only_never_at_a_runs_start_or_end():
    calls: list[float] = []
    clock = Clock(0.0)

    def stats():
        calls.append(clock.now)
        return {"cpu_s": clock.now / 2}

    inst = SimpleNamespace(name="i1", stats=stats)
    s = gauge_sampler(clock)
    with s.campaign():
        s.sample()
        w = s.open(ctx_with([inst], backend=SimpleNamespace(name="ssh")), host=False)
        assert calls == []
        for now in (1.0, 2.0):
            clock.now = now
            s.sample()
        clock.now = 2.5
        s.close(w)
    assert calls == [1.0, 2.0]
    assert [(t, m, v, i) for t, m, v, i in w.rows] == [(2.0, "instance_cpu_pct", 50.0, "i1")]


def test_outside_a_campaign_no_thread_runs_and_a_window_reads_at_both_ends():
    clock = Clock(5.0)
    reads: list[float] = []
    s = gauge_sampler(clock, reads)
    s.autostart = True  # even so: no campaign entered, no thread
    w = s.open(None, host=True)
    clock.now = 5.25
    s.close(w)
    assert reads == [5.0, 5.25] and w.rows == [(0.25, "load1", 5.25)] and not s.running


def alive(name="labkit-telemetry"):
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_the_thread_runs_once_per_campaign_and_stops_on_an_interrupt_or_error(exc):
    s = HostSampler(0.05, lambda: Reading(0.0))
    before = set(alive())
    with pytest.raises(exc):
        with s.campaign():
            s.open(None, host=True)
            first = set(alive()) - before
            s.open(None, host=True)
            assert len(first) == 1 and set(alive()) - before == first and s.running
            raise exc()
    assert not s.running and not any(t.is_alive() for t in first)  # stopped and joined


class Interrupt(RunHook):
    """Ctrl-C (SIGINT to this process) in the campaign's third run."""

    def __init__(self):
        self.runs = 0

    def around_run(self, ctx):
        import contextlib
        import os
        import signal

        self.runs += 1
        if self.runs == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return contextlib.nullcontext([])


def test_an_interrupted_campaign_leaves_no_sampler_thread(tmp_path):
    from labkit.run.campaign import Campaign

    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": 3, "seed": 4})
    before = set(alive())
    c = Campaign(
        d,
        backend=CountingBackend(),
        workload=Iterating(),
        campaign_id="t-samp",
        data_dir=tmp_path,
        progress=False,
        telemetry=0.05,
        hooks=[Interrupt()],
    )
    with pytest.raises(KeyboardInterrupt):
        c.run()
    assert c.host_sampler.readings > 0  # it did run
    assert set(alive()) <= before and not c.host_sampler.running


def test_a_campaign_runs_one_sampler_thread_for_all_its_runs(tmp_path, monkeypatch):
    from labkit.run.campaign import Campaign

    started = []
    real = threading.Thread.start

    def start(self):
        if self.name == "labkit-telemetry":
            started.append(self)
        real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": 3, "seed": 4})
    c = Campaign(
        d,
        backend=CountingBackend(),
        workload=Iterating(),
        campaign_id="t-one",
        data_dir=tmp_path,
        progress=False,
        telemetry=0.05,
    )
    st = c.run()
    assert len(st.runs()) == 6 and len(started) == 1 and not started[0].is_alive()
    assert all(md["telemetry"]["collected"] for md in st.runs().metadata)


# -- the guard reads the sampler -----------------------------------------------------------------


def cpu(busy, idle):
    return CPU(busy, 0.0, 0.0, idle, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def busy_sampler(clock):
    """Readings of a 2-CPU host where, between t = 0 and 1, 0.6 CPU-s were busy, 0.1 of them this
    process's: 50 % of one CPU used outside the campaign (no instance running)."""
    table = {0.0: ([cpu(1.0, 1.0)] * 2, 1.0), 1.0: ([cpu(1.3, 1.7)] * 2, 1.1)}

    def read():
        cpus, own = table[clock.now]
        return Reading(clock.now, cpus=cpus, own_cpu_s=own)

    return HostSampler(1.0, read, clock=clock, thread_clock=lambda: 0.0, autostart=False)


def test_the_guard_reads_the_samplers_last_interval_and_takes_no_sample(monkeypatch):
    def no_sample(ctx, seconds):
        raise AssertionError(f"the guard took a sample of {seconds} s of its own")

    monkeypatch.setattr(guard, "take_sample", no_sample)
    clock = Clock(0.0)
    s = busy_sampler(clock)
    with s.campaign():
        read_twice(s, clock)
        clock.now = 1.4
        got = pre_run_load(ctx_with(), 0.25, sampler=s)
    assert got == {"measured": True, "seconds": 1.0, "other_cpu_pct": 50.0, "source": "sampler", "age_s": 0.4}


def test_the_guard_hook_records_the_samplers_reading(monkeypatch):
    taken = []
    monkeypatch.setattr(guard, "take_sample", lambda ctx, seconds: taken.append(seconds))
    monkeypatch.setattr(guard, "other_campaigns", lambda cid: {})
    clock = Clock(0.0)
    s = busy_sampler(clock)
    q = QuietHost("t-me", sampler=s, thresholds={"other_cpu_pct": 10})
    ctx = ctx_with()
    with q.around_campaign(None):
        read_twice(s, clock)
        with q.around_run(ctx):
            pass
    assert ctx.metadata["quiet_check"]["source"] == "sampler" and taken == []
    assert "before the run, processes outside the campaign used 50.0 %" in ctx.metadata["suspect"]


def test_a_stale_or_missing_reading_falls_back_to_a_short_sample(monkeypatch):
    taken = []
    real = guard.take_sample

    def take(ctx, seconds):
        taken.append(seconds)
        return real(ctx, seconds)

    monkeypatch.setattr(guard, "take_sample", take)
    clock = Clock(0.0)
    s = busy_sampler(clock)
    with s.campaign():
        got = pre_run_load(ctx_with(), 0.25, sampler=s)  # no reading yet: the first run
        assert got["source"] == "sample" and got["measured"] is True and taken == [0.25]
        read_twice(s, clock)
        assert pre_run_load(ctx_with(), 0.25, sampler=s)["source"] == "sampler" and taken == [0.25]
        clock.now = 100.0  # the sampler's last reading is old
        assert pre_run_load(ctx_with(), 0.25, sampler=s)["source"] == "sample" and taken == [0.25, 0.25]


def test_telemetry_and_guard_of_a_campaign_share_one_sampler(tmp_path):
    from labkit.run.campaign import Campaign

    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 4})
    c = Campaign(
        d,
        backend=CountingBackend(),
        workload=Iterating(),
        campaign_id="t-share",
        data_dir=tmp_path,
        progress=False,
        telemetry=0.5,
    )
    tele = [h for h in c.hooks if isinstance(h, Telemetry)]
    assert len(tele) == 1 and tele[0].sampler is c.guard.sampler is c.host_sampler
    assert c.host_sampler.interval == 0.5
    off = Campaign(
        d,
        backend=CountingBackend(),
        workload=Iterating(),
        campaign_id="t-off",
        data_dir=tmp_path,
        progress=False,
        telemetry="off",
    )
    assert not any(isinstance(h, Telemetry) for h in off.hooks) and off.guard.sampler.interval == 1.0


def test_readings_that_cannot_tell_the_campaign_apart_are_said_so_without_a_sample(monkeypatch):
    monkeypatch.setattr(guard, "take_sample", lambda ctx, seconds: pytest.fail("a sample was taken"))
    clock = Clock(0.0)
    s = busy_sampler(clock)
    with s.campaign():
        s.sample()
        w = s.open(ctx_with([SimpleNamespace(name="i1", stats=lambda: {"memory_bytes": 1.0})]), host=True)
        clock.now = 1.0
        s.sample()  # the run's instance gave no CPU counter: the campaign's CPU is unknown
        got = pre_run_load(ctx_with(), 0.25, sampler=s)
        s.close(w)
    assert got["measured"] is False and got["source"] == "sampler" and "told apart" in got["reason"]


def test_a_run_in_flight_without_a_window_leaves_the_campaigns_cpu_unknown():
    """Telemetry off on a backend without the campaign's cgroups (docker, lxd, libvirt): the
    sampler does not read the instances, so an interval a run overlaps (or starts or ends in) must
    not count their CPU as the other processes'."""
    clock = Clock(0.0)

    def read():
        return Reading(clock.now, cpus=[cpu(0.3 * clock.now, 0.7 * clock.now)] * 2, own_cpu_s=0.1 * clock.now)

    s = HostSampler(1.0, read, clock=clock, thread_clock=lambda: 0.0, autostart=False)
    with s.campaign():
        s.sample()
        with s.in_flight(ctx_with()):
            clock.now = 1.0
            s.sample()
        assert s.last.members is None and pre_run_load(ctx_with(), 0.25, sampler=s)["measured"] is False
        clock.now = 2.0
        s.sample()  # the run ended in this interval
        assert s.last.members is None
        clock.now = 3.0
        s.sample()  # a whole interval without it: told apart again
        assert s.last.members == frozenset()
        clock.now = 4.0
        s.sample()
        assert pre_run_load(ctx_with(), 0.25, sampler=s)["other_cpu_pct"] == pytest.approx(50.0)


def test_a_later_run_of_a_boot_starts_from_the_last_stats_of_its_instances():
    clock = Clock(0.0)
    inst = SimpleNamespace(name="i1", stats=lambda: {"cpu_s": clock.now})  # one CPU busy all along
    first, second = ctx_with([inst]), ctx_with([inst])
    s = gauge_sampler(clock)
    with s.campaign():
        s.sample()
        w1 = s.open(first, host=True)
        clock.now = 1.0
        s.sample()
        clock.now = 1.5
        s.close(w1)
        w2 = s.open(second, host=True)  # the same instance, no reading of it at the start
        clock.now = 2.0
        s.sample()
        clock.now = 2.2
        s.close(w2)
    assert [(t, m, v, i) for t, m, v, *rest in w2.rows for i in rest] == [
        (0.5, "instance_cpu_pct", 100.0, "i1")
    ]


def boot_runs(second_instance):
    """Two runs back to back, each inside the guard's ``in_flight`` as a campaign runs them: the
    first on instance i1, the second on ``second_instance``; the host has 2 CPUs, 1.2 CPU-s busy
    per second: the instance's 1.0 (while it exists), this process's 0.05 and 0.15 of others.
    Returns the second run's window."""
    clock = Clock(0.0)

    def read():
        t = clock.now
        return Reading(t, cpus=[cpu(0.6 * t, 0.4 * t)] * 2, own_cpu_s=0.05 * t)

    i1 = SimpleNamespace(name="i1", stats=lambda: {"cpu_s": clock.now})
    s = HostSampler(1.0, read, clock=clock, thread_clock=lambda: 0.0, autostart=False)
    first, second = ctx_with([i1]), ctx_with([second_instance(clock) or i1])
    windows = []
    with s.campaign():
        s.sample()
        for ctx, (mid, end) in ((first, (1.0, 1.5)), (second, (2.0, 2.2))):
            with s.in_flight(ctx):
                w = s.open(ctx, host=True)
                clock.now = mid
                s.sample()
                clock.now = end
                windows.append(s.close(w))
    return windows[1]


def test_a_later_run_of_a_boot_tells_the_campaigns_cpu_apart_from_the_others():
    """runs_per_instance > 1 on libvirt, docker or lxd: the run before ended on the instances
    this run goes on with, so the interval in which one ended and the other began still counts
    them (a bench_reuse campaign had no campaign CPU and no ``cpu_other_pct`` for any run of a
    boot but its first, so the guard could flag none of them)."""
    rows = {m: v for t, m, v, *_ in boot_runs(lambda clock: None).rows if t == 0.5}
    assert rows["campaign_cpu_pct"] == pytest.approx(100.0)
    assert rows["cpu_other_pct"] == pytest.approx(15.0)


def test_an_ended_runs_instance_that_no_window_reads_leaves_the_campaigns_cpu_unknown():
    """A fresh instance per run: the ended run's instance is gone (its CPU since the last
    reading unread), so that interval cannot tell the campaign's CPU apart."""

    def fresh(clock):
        return SimpleNamespace(name="i2", stats=lambda: {"cpu_s": clock.now - 1.5})

    metrics = {m for t, m, *_ in boot_runs(fresh).rows}
    assert "campaign_cpu_pct" not in metrics and "cpu_other_pct" not in metrics


def test_new_instances_wake_the_thread_for_their_first_stats():
    import time

    calls = []
    s = HostSampler(60.0, lambda: Reading(0.0), thread_clock=lambda: 0.0)
    with s.campaign():
        w = s.open(
            ctx_with([SimpleNamespace(name="i1", stats=lambda: calls.append(1) or {"cpu_s": 1.0})]), host=True
        )
        deadline = time.monotonic() + 30
        while s.readings < 2 and time.monotonic() < deadline:  # its first two readings (FIRST_S apart)
            time.sleep(0.01)
        assert s.readings == 2
        before = len(calls)
        Telemetry(60.0, sampler=s).instances_ready(w.watch.ctx)
        while len(calls) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) > before and s.readings == 3  # read at once, not 60 s later
        s.close(w)


def test_a_window_on_a_machine_whose_cgroups_tell_the_campaigns_cpu_starts_with_a_reading_of_its_own():
    """The thread's last reading may hold the previous run's instance, removed since: a window
    of the local backend (cgroups) starts with a reading taken when it opens."""
    clock = Clock()
    reads: list = []
    s = gauge_sampler(clock, reads)
    s._groups_for = SimpleNamespace(
        holds_instances=True
    )  # as configure() sets it for a backend with a cgroup driver
    read_twice(s, clock)
    clock.now = 1.4
    with s.campaign():
        w = s.open(ctx_with(), host=True)
        assert reads[-1] == 1.4 and w.last.t == 1.4
        clock.now = 2.0
        s.sample()
        s.close(w)
    assert [t for t, m, *_ in w.rows if m == "load1"][0] == pytest.approx(0.6)  # from 1.4, not from 1.0


def test_a_run_on_a_backend_without_cgroups_of_ours_counts_its_instances_in_a_campaign_that_ran_local():
    """platform = [local, lxd]: the sampler watches the local instances' cgroups, and an lxd run's
    container (its CPU from LXD's state) counted as processes outside the campaign: up to 150 % of
    a CPU, every lxd run flagged. A window of a backend whose instances are not those cgroups counts
    its instances' own CPU beside the cgroups of the campaign's host ends (ab on the host)."""
    clock = Clock(0.0)

    def read():  # 2 CPUs, 1 CPU-s busy per second; a host end's cgroup 0.1 s/s; this process 0.05 s/s
        t = clock.now
        return Reading(
            t,
            cpus=[cpu(0.5 * t, 0.5 * t)] * 2,
            own_cpu_s=0.05 * t,
            groups={"lk-t-host-1": (0.1 * t, 0)},
            groups_whole=True,
        )

    s = HostSampler(1.0, read, clock=clock, thread_clock=lambda: 0.0, autostart=False)
    container = SimpleNamespace(name="lk-t-c1", stats=lambda: {"cpu_s": 0.8 * clock.now})
    with s.campaign():
        w = s.open(ctx_with([container], backend=SimpleNamespace(name="lxd")), host=True)
        for now in (1.0, 2.0, 3.0):
            clock.now = now
            s.sample()
        s.close(w)
        # the next run's look before it: the last interval still holds the container's CPU (being
        # stopped), which it cannot tell apart; the one before it can (before: 85 %, the container's)
        clock.now = 4.0
        s.sample()
        assert pre_run_load(ctx_with(), 0.25, sampler=s)["other_cpu_pct"] == pytest.approx(5.0)
    other = [v for _, m, v, *_ in w.rows if m == "cpu_other_pct"]
    campaign = [v for _, m, v, *_ in w.rows if m == "campaign_cpu_pct"]
    assert other and all(v == pytest.approx(5.0) for v in other)
    assert all(v == pytest.approx(90.0) for v in campaign)


# -- the first interval is campaign start-up, not the first run's time ---------------------------


def test_ready_waits_for_the_threads_first_interval_and_only_when_it_runs():
    reads = []
    s = HostSampler(1.0, lambda: reads.append(1) or Reading(float(len(reads))), thread_clock=lambda: 0.0)
    q = QuietHost("t-ready", sampler=s)
    assert q.ready() is False and reads == []  # no campaign: no thread, nothing to wait for
    with q.around_campaign(None):
        s.ensure_started()
        assert s.running and q.ready() is True and len(reads) >= 2  # the thread's first interval
    assert QuietHost("t-ready0", sampler=HostSampler(1.0), pre_run_s=0).ready() is False


def ticking_sampler(clock, busy_at):
    """A 2-CPU host whose CPUs were busy ``busy_at[t]`` CPU-s in all at reading time t (nobody's:
    no instance, no controller CPU); no thread."""

    def read():
        b = busy_at[clock.now] / 2
        return Reading(clock.now, cpus=[cpu(b, clock.now - b)] * 2)

    return HostSampler(1.0, read, clock=clock, thread_clock=lambda: 0.0, autostart=False)


def test_the_look_before_a_run_joins_short_intervals_to_span_a_second():
    """The sampler's first interval is 0.25 s: 3 clock ticks (0.03 CPU-s) nobody used read as
    12 % of a CPU, over the 10 % threshold. Joined with the short intervals after it (readings
    the thread was woken for), the look spans a second; an interval of a second or more is a look
    of its own (a busy second is not diluted by the quiet ones before it)."""
    clock = Clock(0.0)
    s = ticking_sampler(clock, {0.0: 0.0, 0.25: 0.03, 0.5: 0.03, 1.0: 0.03, 2.25: 0.53})
    with s.campaign():
        for clock.now in (0.0, 0.25):
            s.sample()
        assert guard.sampled_load(s) == {
            "measured": True,
            "seconds": 0.25,
            "other_cpu_pct": 12.0,
            "source": "sampler",
            "age_s": 0.0,
        }
        for clock.now in (0.5, 1.0):
            s.sample()
        got = guard.sampled_load(s)
        assert got["seconds"] == 1.0 and got["other_cpu_pct"] == pytest.approx(3.0)
        clock.now = 2.25
        s.sample()
        got = guard.sampled_load(s)
        assert got["seconds"] == 1.25 and got["other_cpu_pct"] == pytest.approx(40.0)


def test_the_look_joins_no_interval_that_cannot_tell_the_campaign_apart():
    clock = Clock(0.0)
    s = ticking_sampler(clock, {0.0: 0.0, 0.25: 0.2, 0.5: 0.2, 0.75: 0.2, 1.0: 0.2})
    with s.campaign():
        s.sample()
        with s.in_flight(ctx_with()):  # a run without instances: the intervals it touched are blind
            clock.now = 0.25
            s.sample()
        for clock.now in (0.5, 0.75, 1.0):
            s.sample()
        got = guard.sampled_load(s)
    assert got["seconds"] == 0.25 and got["other_cpu_pct"] == 0.0


@pytest.mark.parametrize("first_busy, confirmed", [(0.05, True), (0.005, False)])
def test_ready_confirms_a_busy_first_look_with_the_next_reading(first_busy, confirmed):
    """QuietHost.ready: the first interval (0.25 s) shows ``first_busy`` CPU-s nobody used; over
    the threshold (20 % of a CPU) the campaign waits for the thread's next reading and the first
    run's look spans both; under it (2 %) it does not wait."""
    import time as _time

    start = _time.monotonic()
    reads: list = []

    def read():
        reads.append(1)
        t = _time.monotonic() - start
        b = (first_busy if len(reads) >= 2 else 0.0) / 2
        return Reading(t, cpus=[cpu(b, 2 * t - b)] * 2)

    s = HostSampler(2.0, read, clock=lambda: _time.monotonic() - start, thread_clock=lambda: 0.0)
    q = QuietHost("t-confirm", sampler=s)
    with q.around_campaign(None):
        s.ensure_started()
        assert q.ready() is True
        n = len(reads)
        look = guard.sampled_load(s)
    assert (n >= 3) is confirmed
    assert (look["seconds"] >= 2.0) is confirmed
    assert look["other_cpu_pct"] < 10.0


def test_the_campaign_takes_the_hosts_first_interval_before_its_first_run(tmp_path, monkeypatch):
    """A campaign on this machine: the sampler started with the campaign, ``QuietHost.ready`` waits
    for its first interval after the start-up and before the first run's hooks, and that run's
    quiet check reads it (``source: sampler``) instead of waiting inside its own time."""
    from labkit.run.campaign import Campaign

    order = []
    ready = QuietHost.ready

    def spy_ready(self):
        got = ready(self)
        order.append(("ready", got))
        return got

    monkeypatch.setattr(QuietHost, "ready", spy_ready)

    class Spy(RunHook):
        def around_run(self, ctx):
            order.append(("run", ctx.metadata["quiet_check"].get("source")))
            return super().around_run(ctx)

    class HereBackend(CountingBackend):
        name = "local"  # runs its instances on this machine: the sampler starts with the campaign

    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 4})
    c = Campaign(
        d,
        backend=HereBackend(),
        workload=Iterating(),
        campaign_id="t-first",
        data_dir=tmp_path,
        progress=False,
        hooks=[Spy()],
        telemetry="off",
    )
    st = c.run()
    assert order == [("ready", True), ("run", "sampler"), ("run", "sampler")]
    assert all(md["quiet_check"]["measured"] for md in st.runs().metadata)


def test_a_reading_the_thread_took_before_a_window_opened_is_no_interval_of_it():
    """The thread reads this machine; before it takes its lock, a run's window opens with a reading
    of its own (cgroups of ours), 0.1 s later. The thread's older reading is not the window's: it
    gave no row yet counted as one of its readings, and the next interval started from it
    (CI of 2026-11-28: 8 readings, 6 row times)."""
    clock = Clock()
    opened: list = []

    def read():
        t = clock.now
        if t == 1.0 and not opened:  # the thread's reading at 1.0; meanwhile the window opens at 1.1
            clock.now = 1.1
            opened.append(s.open(ctx_with(), host=True))
        return Reading(t, gauges={"load1": t})

    s = HostSampler(1.0, read, clock=clock, thread_clock=lambda: 0.0, autostart=False)
    s._groups_for = SimpleNamespace(
        holds_instances=True
    )  # as configure() sets it for a backend with a cgroup driver
    with s.campaign():
        clock.now = 1.0
        s.sample()
        (w,) = opened
        assert w.last.t == 1.1 and w.readings == 1
        clock.now = 2.0
        s.sample()
        clock.now = 2.5
        s.close(w)
    assert w.readings == 3 and [(t, v) for t, m, v, *_ in w.rows if m == "load1"] == [(0.9, 2.0), (1.4, 2.5)]
