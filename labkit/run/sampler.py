"""The campaign's one sampling thread (:class:`HostSampler`) and each run's window cut from its
readings (:class:`Window`); see :mod:`labkit.run.telemetry` for what is read and stored."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..design.options import DEFAULT_INTERVAL
from .hooks import RunContext
from .readings import (
    DRIVERS,
    DaemonCpu,
    InstanceWatch,
    Reading,
    campaign_watch,
    delta_rows,
    member_names,
    read_host,
    remote_reason,
)

#: readings of this machine the campaign's sampler keeps for the quiet-host guard's look
HISTORY = 4
#: seconds between the sampler's first two readings (at most its interval): the guard's first look
FIRST_S = 0.25


# -- the campaign's sampler ----------------------------------------------------------------------


@dataclass(eq=False)
class Window:
    """One run's share of a :class:`HostSampler`'s readings: ``start`` (the sampler's clock when the
    run's hook was entered), whether this machine's metrics are its own (``host``), its
    :class:`InstanceWatch`, the rows cut so far and the last reading they reach. ``grouped``: its
    instances are cgroups the campaign's :class:`~labkit.run.readings.CgroupWatch` counts (local); else (docker, lxd,
    libvirt) their own stats count, beside the cgroups of the campaign's host ends, even when an
    earlier run of the same campaign on ``local`` made the sampler watch instance cgroups."""

    start: float
    host: bool
    watch: InstanceWatch | None
    cpu0: float
    grouped: bool = True
    rows: list = field(default_factory=list)
    last: Reading | None = None
    readings: int = 0
    cpu_s: float = 0.0  # the sampler's CPU while the window was open (filled at close)
    wall_s: float = 0.0
    closed: bool = False

    def add(self, r: Reading) -> None:
        """Append the rows of the interval from the window's last reading to ``r`` (the first
        reading only sets where the rows start)."""
        if r.groups_whole and not self.grouped:
            r = replace(r, groups_whole=False)
        if self.last is not None:
            t = round(r.t - self.start, 6)
            self.rows += [
                (t, m, float(v), *inst) for m, v, *inst in delta_rows(self.last, r) if math.isfinite(v)
            ]
        self.last = r
        self.readings += 1


class HostSampler:
    """One sampling thread for a whole campaign: a reading of this machine every ``interval``
    seconds (and of the instances of every run in flight), from the campaign's start to its end;
    each run's rows are cut from those readings (:meth:`open` / :meth:`close`).

    The thread runs while the campaign does (:meth:`campaign`, entered by the campaign's hooks'
    ``around_campaign``; it is started by the first run that needs it and stopped, joined, when the
    campaign ends, on an error or an interrupt as well). A run's window (:class:`Window`) gets the
    intervals that overlap it: the one in progress when it starts (from the sampler's last
    reading, with the last stats the thread read of the run's instances when they already exist:
    a later run of a boot), those ending while it runs, and a last one to its end, cut by one
    reading of this machine taken when it ends (no instance stats: those come only from the
    thread, so a slow stats interface never delays a run's start or end; a run's new instances
    wake the thread for their first stats, :meth:`wake`). A run shorter than one interval still
    gets that last interval, hence a summary. Outside a campaign's :meth:`campaign` no thread runs:
    a window then gets one reading of the host at its start and one at its end.

    ``read_host``: how this machine is read (default: :func:`read_host`, set by :meth:`configure`
    for the first run on this machine); ``clock`` the time base (monotonic seconds),
    ``thread_clock`` the sampling thread's CPU clock; ``workers``: threads reading the instances'
    stats when several runs are in flight (a fleet); ``autostart`` False runs no thread (the caller
    calls :meth:`sample`)."""

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        read_host: Callable[[], Reading] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        thread_clock: Callable[[], float] = time.thread_time,
        workers: int = 8,
        autostart: bool = True,
    ):
        self.interval = interval
        self.autostart = autostart  # False: no thread; whoever drives it calls sample() (tests)
        self.read_host = read_host
        self.clock, self.thread_clock = clock, thread_clock
        self.workers = workers
        self.readings = 0
        self.cpu_s = 0.0  # CPU time of the sampling thread's readings
        self.prev: Reading | None = None  # the last two readings of this machine (the guard's look)
        self.last: Reading | None = None
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._windows: list[Window] = []
        self._history: deque[Reading] = deque(maxlen=HISTORY)
        self._interval = threading.Event()  # set once two readings of this machine exist
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._stats: dict[
            str, tuple[float, dict]
        ] = {}  # instance id -> (t, its last stats) read by the thread
        self._thread: threading.Thread | None = None
        self._pool: Any = None
        self._depth = 0  # campaigns entered (campaign())
        self._runs: set[int] = set()  # ids of the contexts of the runs in flight here (in_flight())
        self._runs_changed = False  # a run here without instances ended since the last reading
        self._departed: set[str] = set()  # instances of the runs here that ended since the last reading
        self._groups_for: Any = None
        self.daemons = DaemonCpu(clock)  # the daemons of the backends configured here (configure())

    # -- configuration and life --

    def configure(self, backend: Any, prefix: str) -> None:
        """Read this machine from now on (psutil), with the campaign's cgroups (names starting with
        ``prefix``) when ``backend`` has a cgroup driver (the local backend); a later run's driver
        adds them if the first had none. The daemons of every backend configured here that runs
        on this machine (:attr:`Backend.daemons <labkit.backends.base.Backend.daemons>`) are read
        from then on (:class:`~labkit.run.readings.DaemonCpu`). A reader given to the constructor
        is kept as is."""
        driver = getattr(backend, "driver", None)
        holds = isinstance(driver, DRIVERS)
        if remote_reason(backend) is None:
            self.daemons.add(getattr(backend, "daemons", ()))
        with self._start_lock:
            if self.read_host is not None and not getattr(self.read_host, "labkit_default", False):
                return
            current = self._groups_for
            if self.read_host is not None and (
                not holds or (current is not None and current.holds_instances)
            ):
                return
            import psutil

            watch = campaign_watch(backend, prefix)
            self._groups_for = watch
            proc = psutil.Process()

            def read() -> Reading:
                return read_host(self.clock, watch, proc, self.daemons)

            read.labkit_default = True  # type: ignore[attr-defined]
            self.read_host = read

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @contextlib.contextmanager
    def campaign(self) -> Iterator[HostSampler]:
        """While a campaign runs: runs may start the thread; it is stopped when the last campaign
        context is left (on any path out)."""
        with self._start_lock:
            self._depth += 1
        try:
            yield self
        finally:
            with self._start_lock:
                self._depth -= 1
                last = self._depth == 0
            if last:
                self.stop()

    def ensure_started(self) -> bool:
        """Start the thread when inside :meth:`campaign` and not yet running; whether runs are
        windows of the campaign's readings (inside :meth:`campaign`)."""
        with self._start_lock:
            if self._depth <= 0:
                return False
            if self.autostart and (self._thread is None or not self._thread.is_alive()):
                self._stop.clear()
                self._wake.clear()
                self._thread = threading.Thread(target=self._loop, daemon=True, name="labkit-telemetry")
                self._thread.start()
            return True

    def stop(self) -> None:
        """Stop and join the thread (idempotent)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._lock:  # a campaign run again starts from fresh readings
            self.prev = self.last = None
            self._history.clear()
            self._interval.clear()

    def _loop(self) -> None:
        wait = min(self.interval, FIRST_S)  # a first interval soon (the guard's first look)
        while not self._stop.is_set():
            self.sample()
            self._wake.wait(wait)
            self._wake.clear()
            wait = self.interval

    def wake(self) -> None:
        """Take the next reading now rather than at the end of the interval (a run's instances were
        just made: their first stats as early as can be); returns at once."""
        self._wake.set()

    @contextlib.contextmanager
    def in_flight(self, ctx: RunContext) -> Iterator[None]:
        """``ctx``'s run runs on this machine meanwhile (the quiet-host guard says so): a reading
        whose interval a run here overlaps without a window of its own (telemetry off: its
        instances' CPU is not read) does not tell the campaign's CPU apart unless the campaign's
        cgroups do (the local backend). A run that ends leaves its instances' names: the next
        reading tells the campaign's CPU apart only if a window still reads every one of them (a
        later run of the same boot), as a run that started and ended between two readings would
        otherwise hide its instances' CPU among the other processes'."""
        with self._lock:
            self._runs.add(id(ctx))
        try:
            yield
        finally:
            names = member_names(ctx)
            with self._lock:
                self._runs.discard(id(ctx))
                if names:
                    self._departed |= names
                else:
                    self._runs_changed = True  # no instance known: its CPU cannot be followed

    def wait_interval(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the thread's first interval of this machine (two readings);
        whether there is one."""
        return self._interval.wait(timeout)

    def wait_next(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the thread's next reading of this machine; whether one came
        (False at once when no thread runs)."""
        with self._lock:
            seen = self._history[-1] if self._history else None
        deadline = time.monotonic() + timeout
        while self.running and time.monotonic() < deadline:
            with self._lock:
                if self._history and self._history[-1] is not seen:
                    return True
            time.sleep(0.01)
        return False

    # -- readings --

    def _read(self) -> Reading | None:
        if self.read_host is None:
            return None
        try:
            return self.read_host()
        except Exception:  # telemetry never fails a run
            return None

    def _instances(self, windows: list[Window], host: Reading | None, t: float) -> list[Reading]:
        """Each window's reading: this machine's (a copy, for windows on it) and its instances'."""

        def one(w: Window) -> Reading:
            r = (
                replace(host, instances={}, members=None, campaign_cpu_s=0.0)
                if host and w.host
                else Reading(t)
            )
            if w.watch is not None:
                w.watch.read(r)
            return r

        if len(windows) <= 1:
            return [one(w) for w in windows]
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix="labkit-telemetry-stats"
            )
        return list(self._pool.map(one, windows))

    def sample(self) -> None:
        """One reading: this machine's, and the instances' of every window open; each open window
        gets the interval's rows. The campaign's CPU (``members``) is the sum over the windows on
        this machine, known when every one of them knew its own."""
        c0 = self.thread_clock()
        host = self._read()
        t = host.t if host is not None else self.clock()
        with self._lock:
            windows = [w for w in self._windows if not w.closed]
            seen = {id(w.watch.ctx) for w in windows if w.watch is not None}
            blind = self._runs_changed or bool(self._runs - seen)
            departed, self._departed = self._departed, set()
            self._runs_changed = False
        parts = self._instances(windows, host, t)
        members: frozenset | None = None if blind else frozenset()
        used = 0.0
        for w, r in zip(windows, parts):
            if not w.host:
                continue
            if r.members is None or members is None:
                members = None
            else:
                members, used = members | r.members, used + r.campaign_cpu_s
        if members is not None and not departed <= members:
            members = None  # an ended run's instance no window reads now: its CPU since is unknown
        with self._lock:
            if host is not None:
                host.members, host.campaign_cpu_s = members, used
                if any(w.host and not w.grouped for w in windows):
                    host.groups_whole = False  # a run whose instances are not cgroups of ours was on
                self.prev, self.last = self.last, host
                self._history.append(host)
                if len(self._history) > 1:
                    self._interval.set()
            for r in parts:
                self._stats.update((name, (t, counters)) for name, counters in r.instances.items())
            old = t - 3 * self.interval - 1.0
            self._stats = {name: v for name, v in self._stats.items() if v[0] >= old}
            for w, r in zip(windows, parts):
                if w.closed or (w.last is not None and r.t < w.last.t):
                    continue  # read before the window's own first reading (it opened meanwhile): no interval of it
                if w.host and host is not None:
                    r.members, r.campaign_cpu_s = members, used
                w.add(r)
            self.readings += 1
            self.cpu_s += max(0.0, self.thread_clock() - c0)

    def recent(self, max_age: float | None = None) -> list[tuple[Reading, Reading]]:
        """The last intervals of this machine the thread read (``(reading, next reading)``, newest
        first, at most ``HISTORY - 1``) that end at most ``max_age`` s ago (default 3 intervals + 1 s)."""
        limit = 3 * self.interval + 1.0 if max_age is None else max_age
        with self._lock:
            hist = list(self._history)
        now = self.clock()
        pairs = list(zip(hist, hist[1:]))[::-1]
        return [(a, b) for a, b in pairs if now - b.t <= limit]

    # -- runs --

    def open(self, ctx: RunContext | None, *, host: bool) -> Window:
        """A run's window, from now (see the class docstring); ``host``: this machine is the run's."""
        if host and ctx is not None:
            self.configure(ctx.backend, ctx.prefix)
        threaded = self.ensure_started()
        grouped = ctx is None or isinstance(getattr(ctx.backend, "driver", None), DRIVERS)
        w = Window(self.clock(), host, InstanceWatch(ctx) if ctx is not None else None, self.cpu_s, grouped)
        first = None
        if host and (not threaded or (self._groups_for is not None and self._groups_for.holds_instances)):
            # no thread, or the campaign's cgroups tell its CPU (local): the window starts with a
            # reading now, not the thread's last one (which may hold a removed instance's CPU)
            c0 = self.thread_clock()
            first = self._read()
            w.cpu0 -= max(0.0, self.thread_clock() - c0)
        with self._lock:
            if first is not None:
                w.add(first)
            elif threaded:
                # the run's instances already made (a later run of a boot): their last stats the
                # thread read start the window, beside this machine's last reading
                names = {getattr(i, "name", None) for i in (ctx.instances if ctx is not None else [])}
                known = {n: self._stats[n] for n in names if n in self._stats}
                insts = {n: c for n, (_, c) in known.items()}
                if host and self.last is not None:
                    w.add(replace(self.last, instances=insts))
                elif known:
                    w.add(Reading(max(t for t, _ in known.values()), instances=insts))
            if threaded:
                self._windows.append(w)
        return w

    def close(self, w: Window) -> Window:
        """End ``w`` now: one reading of this machine cuts its last interval (no instance stats).
        Returns it with its ``rows``, ``readings``, ``cpu_s`` and ``wall_s`` set."""
        with self._lock:
            w.closed = True
            with contextlib.suppress(ValueError):
                self._windows.remove(w)
            cpu = self.cpu_s - w.cpu0
        if w.host:
            c0 = self.thread_clock()
            r = self._read()
            if r is not None:
                w.add(r)  # its members unknown (None): no campaign CPU from instance stats in this interval
            cpu += max(0.0, self.thread_clock() - c0)
        w.cpu_s, w.wall_s = cpu, max(0.0, self.clock() - w.start)
        return w
