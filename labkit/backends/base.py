"""The backend contract: the base class does the shared work, backends write small hooks.

A :class:`Backend` provisions :class:`Instance` objects from an
:class:`~labkit.core.instance.InstanceSpec`. ``Instance.exec`` owns the deadline,
timing, logging, the kill on timeout and the :class:`ExecResult`; a backend
writes only how to start a command, wait for it and kill its process tree.

Hooks a backend writes (``abc`` refuses a class that misses one)::

    class MyBackend(Backend):
        name = "mine"
        OPTIONS = ("image",)                       # allowed options (others: ConfigError)
        def check(self): ...                       # raise BackendUnavailable with a fix
        def host_cpus(self) -> int: ...
        def fingerprint(self) -> dict: ...         # backend part of the host fingerprint
        def _create(self, spec, name, index, cpus, network=None) -> Instance: ...   # started, ready for exec
        def cleanup(self, prefix) -> list[str]: ...        # remove leftovers named prefix*
        def list_labkit(self, prefix="labkit-") -> list[str]: ...

    class MyInstance(Instance):
        def _start(self, argv, env) -> handle: ...         # start argv, do not wait
        def _wait(self, handle, timeout) -> RawResult | None: ...  # None: still running
        def _kill(self, handle): ...               # SIGKILL the command's process tree
        def _oom_kills(self) -> int | None: ...    # OOM kills in the instance so far
        def stats(self) -> dict[str, float]: ...   # its counters now (STAT_KEYS), or StatsUnavailable
        def put(self, local_path, remote_path, mode=0o755): ...
        def _destroy(self): ...                    # idempotent, quiet if already gone

Instance names (``<prefix><13 base-32 characters>``, unique per campaign prefix) are
:mod:`labkit.backends.names`'s; a command's result (:class:`ExecResult`) and an instance's
counters (:data:`STAT_KEYS`) are :mod:`labkit.backends.exec_results`'s.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import re
import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..core import network_factors as netmod
from ..core.instance import InstanceSpec
from ..errors import BackendError, CommandError, CommandTimeout, ConfigError
from . import private_network

# what an instance gives back, and its names: re-exported where they were defined before
from .exec_results import DESCRIBE_CAP, STAT_KEYS, ExecResult, RawResult, StatsUnavailable  # noqa: F401
from .names import NAME_PREFIX, NAME_RANDOM_CHARS, check_name, check_prefix, name_token, new_name  # noqa: F401
from .output import CommandLog

if TYPE_CHECKING:
    from .private_network import Network

log = logging.getLogger("labkit.backends")

#: how long a killed command may take to be reaped before exec gives up on it
KILL_GRACE_S = 30.0
#: an exit status of 128 + SIGKILL: what the OOM killer leaves
SIGKILL_STATUS = 137


def check_options(backend: str, given: dict, allowed: Sequence[str]) -> None:
    """Refuse unknown backend options, listing the valid ones (a typo must not be ignored)."""
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ConfigError(
            f"{backend} backend: unknown option(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(allowed) or '(none)'}"
        )


def check_timeout(timeout: Any) -> float | None:
    """``None`` or a finite number of seconds > 0."""
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigError(f"exec timeout must be a finite number of seconds > 0, got {timeout!r}")
    return float(timeout)


class Instance(ABC):
    """One running instance (cgroup, container, VM or host).

    ``cpus`` is the list of host CPUs it is pinned to (None when floating);
    ``metadata`` is recorded with every run that used it.
    """

    def __init__(self, backend: Backend, name: str, spec: InstanceSpec, index: int, cpus: list[int] | None):
        self.backend = backend
        self.name = name
        self.spec = spec
        self.index = index
        self.cpus = cpus
        #: ``boot``: how many times the instance has been started within the campaign (labkit starts
        #: an instance once: 1; the runs that reuse it share its ``name``, its id in the store)
        self.metadata: dict = {"name": name, "index": index, "cpus": cpus, "boot": 1}
        self._destroyed = False
        self._oom_seen = 0  # a new instance has seen no OOM kill
        #: on a private network: its Network, this instance's address (the one the host reaches),
        #: the address other instances reach it at (the bonded data address with ``nics`` > 1)
        #: and the host side of its link(s)
        self.network: Network | None = None
        self.address: str | None = None
        self.peer_address: str | None = None
        self.host_device: str | None = None
        #: metric -> (value, unit) the campaign stores as measurements of the run with this
        #: instance's index (the cloud backend's ``provisioning_s``); empty for other backends
        self.run_metrics: dict[str, tuple[float, str]] = {}
        #: every command :meth:`exec` ran, with its output as kept: the first and last MiB of that
        #: log (:class:`~labkit.backends.output.CommandLog`; :func:`exec_log_text` renders it for the
        #: run's output file)
        self.exec_log = CommandLog()

    # -- shared work -------------------------------------------------------
    def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout: float | None = None,
        check: bool = True,
        env: dict | None = None,
        logged: bool = True,
    ) -> ExecResult:
        """Run ``command`` in the instance and wait for it.

        ``command`` is an argv list, or a string run by ``sh -c``. Past
        ``timeout`` seconds the command's whole process tree is killed and
        :class:`CommandTimeout` raised (always, whatever ``check``); a non-zero
        exit raises :class:`CommandError` when ``check``. Both carry the
        :class:`ExecResult`. An interrupt (Ctrl-C, SIGTERM) kills the command too.
        ``logged=False``: labkit's own probe (a run's treatment check), kept out of
        :attr:`exec_log`, the run's command output, which is the workload's.
        """
        timeout = check_timeout(timeout)
        argv = ["sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
        if not argv:
            raise BackendError("exec: empty command")
        if env is not None:
            for key in env:
                if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                    raise ConfigError(f"exec env: {key!r} is not a valid environment variable name")
            env = {k: str(v) for k, v in env.items()}
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        handle = self._start(argv, env)
        timed_out = False
        try:
            raw = self._wait(handle, None if deadline is None else max(0.0, deadline - time.monotonic()))
            if raw is None:
                timed_out = True
                self._kill(handle)
                raw = self._wait(handle, KILL_GRACE_S)
                if raw is None:
                    raise BackendError(f"{self.name}: {argv!r} survived SIGKILL for {KILL_GRACE_S:.0f}s")
        except BaseException:
            try:
                self._kill(handle)
            except Exception as exc:  # the original error matters more
                log.warning("%s: killing %r after an error failed: %s", self.name, argv, exc)
            raise
        result = ExecResult(
            argv,
            raw.exit_code,
            raw.stdout,
            raw.stderr,
            time.monotonic() - start,
            self.name,
            timed_out=timed_out,
            stdout_bytes=raw.stdout_bytes,
            stderr_bytes=raw.stderr_bytes,
            truncated=raw.truncated,
        )
        if raw.exit_code == SIGKILL_STATUS and not timed_out:
            result.oom_killed = self._oom_killed_since_last()
        how = " (timed out)" if result.timed_out else " (OOM-killed)" if result.oom_killed else ""
        if logged:
            self.exec_log.add(
                f"$ {shlex.join(argv)}\n# in {self.name}: exit {result.exit_code}{how} after "
                f"{result.duration_s:.2f}s; stdout {result.stdout_bytes} bytes, stderr "
                f"{result.stderr_bytes} bytes",
                result.stdout,
                result.stderr,
                result.stdout_bytes + result.stderr_bytes,
            )
        log.debug("%s: %s -> %s (%.3fs)", self.name, argv, raw.exit_code, result.duration_s)
        if timed_out:
            raise CommandTimeout(f"timed out after {timeout}s: " + result.describe(), result)
        if check and not result.ok:
            raise CommandError(result.describe(), result)
        return result

    def spawn(self, command: str | Sequence[str], *, env: dict | None = None) -> Process:
        """Start ``command`` in the background (a neighbour's load, a server); see :class:`Process`."""
        argv = ["sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
        return Process(self, argv, self._start(argv, env))

    def _oom_killed_since_last(self) -> bool:
        try:
            count = self._oom_kills()
        except Exception as exc:  # a fact we could not read is not a reason to fail the command
            log.debug("%s: OOM counter unreadable: %s", self.name, exc)
            return False
        if count is None:
            return False
        seen, self._oom_seen = self._oom_seen, count
        return count > seen

    def destroy(self) -> None:
        """Tear the instance down; safe to call twice."""
        if self._destroyed:
            return
        self._destroyed = True
        self._destroy()

    # -- hooks -------------------------------------------------------------
    @abstractmethod
    def _start(self, argv: list[str], env: dict | None) -> Any:
        """Start ``argv`` (stdin empty) in the instance and return a handle; do not wait."""

    @abstractmethod
    def _wait(self, handle: Any, timeout: float | None) -> RawResult | None:
        """Wait up to ``timeout`` seconds (None: forever) for the command to end.

        Returns its :class:`RawResult` (exit code ``128 + n`` when killed by
        signal ``n``), or None if it is still running. Called again after a kill.
        """

    @abstractmethod
    def _kill(self, handle: Any) -> None:
        """SIGKILL the command's whole process tree. Idempotent; quiet if it is gone."""

    @abstractmethod
    def _oom_kills(self) -> int | None:
        """How many processes the OOM killer has killed in this instance so far (None: unknown)."""

    @abstractmethod
    def stats(self) -> dict[str, float]:
        """The instance's counters now, from its backend's own stats interface (cgroup files,
        the Docker stats API, LXD's instance state, libvirt's domain stats, the guest's
        /proc/stat): a dict with some of :data:`STAT_KEYS` (cumulative counters and the memory
        gauge; a key the backend cannot read is absent). Raises :class:`StatsUnavailable`
        (saying why) when the backend has none for this instance. Safe to call from another
        thread while a command runs (the telemetry sampler does, every interval)."""

    @abstractmethod
    def put(self, local_path: str | os.PathLike, remote_path: str, mode: int = 0o755) -> None:
        """Copy a file from the controller into the instance."""

    @abstractmethod
    def _destroy(self) -> None:
        """Remove everything this instance owns. Idempotent; quiet if already gone."""

    @property
    def workdir(self) -> str:
        """A directory inside the instance where workloads may write."""
        return "/tmp/labkit"

    def __repr__(self):
        return f"<{type(self).__name__} {self.name} {self.spec}>"


class Wrapped(Instance):
    """An instance that runs everything in ``inner`` (another backend's instance); a subclass
    changes what it must (the cloud backend deletes the server after ``inner``)."""

    def __init__(self, backend: Backend, name: str, inner: Instance, spec: InstanceSpec, index: int):
        super().__init__(backend, name, spec, index, inner.cpus)
        self.inner = inner

    @property
    def workdir(self) -> str:
        return self.inner.workdir

    def _start(self, argv, env):
        return self.inner._start(argv, env)

    def _wait(self, handle, timeout):
        return self.inner._wait(handle, timeout)

    def _kill(self, handle):
        self.inner._kill(handle)

    def _oom_kills(self):
        return self.inner._oom_kills()

    def stats(self) -> dict[str, float]:
        return self.inner.stats()

    def put(self, local_path: str | os.PathLike, remote_path: str, mode: int = 0o755) -> None:
        self.inner.put(local_path, remote_path, mode)

    def _destroy(self):
        self.inner.destroy()


class Process:
    """A command running in the background in an instance (``Instance.spawn``).

    ``running()`` asks without waiting; ``stop()`` kills its whole process tree
    (the backend's one way to do it) and returns how it ended. Never left
    behind: an instance's teardown kills whatever still runs in it.
    """

    def __init__(self, instance: Instance, argv: list[str], handle: Any):
        self.instance, self.argv, self.handle = instance, argv, handle
        self.result: RawResult | None = None

    def running(self) -> bool:
        if self.result is None:
            self.result = self.instance._wait(self.handle, 0)
        return self.result is None

    def stop(self) -> RawResult | None:
        """Kill it (if still running) and reap it; None if it survived SIGKILL past the grace time."""
        if self.running():
            self.instance._kill(self.handle)
            self.result = self.instance._wait(self.handle, KILL_GRACE_S)
        return self.result


class Backend(ABC):
    """Provisions instances. Subclasses set ``name`` and ``OPTIONS`` and write the hooks."""

    name = "base"
    #: the options this backend accepts; anything else is a ConfigError listing these
    OPTIONS: tuple[str, ...] = ()
    #: most NICs an instance can bond on a private network (``nics`` factor; 1: no aggregation)
    MAX_NICS = 1
    #: program names of the host daemons that do this backend's work when it runs on this machine:
    #: their CPU making and removing a campaign's instances is the campaign's (telemetry's
    #: ``daemon_cpu_pct``), not a process outside it. A process counts as one only when its
    #: executable is that daemon's binary and root (or this user) runs it
    #: (:class:`labkit.run.readings.DaemonCpu`): the name alone is a first filter, never proof
    daemons: tuple[str, ...] = ()

    def __init__(self, **options):
        check_options(self.name, options, self.OPTIONS)
        self.options = options

    @abstractmethod
    def check(self) -> None:
        """Raise BackendUnavailable (with how to fix it) if this backend can't run here."""

    @abstractmethod
    def host_cpus(self) -> int:
        """How many CPUs the host (that instances run on) has."""

    @abstractmethod
    def fingerprint(self) -> dict:
        """Backend-specific facts for the host fingerprint (versions, hypervisor...)."""

    @abstractmethod
    def _create(
        self,
        spec: InstanceSpec,
        name: str,
        index: int,
        cpus: list[int] | None,
        network: Network | None = None,
    ) -> Instance:
        """Create and start one instance, ready for exec; on ``network`` when given (only
        backends with private networks get one: the others call :meth:`refuse_network`)."""

    @abstractmethod
    def cleanup(self, prefix: str) -> list[str]:
        """Remove every instance (and its files) whose name starts with ``prefix``; return the names.

        Used at a campaign's start (leftovers of a killed run of the same
        campaign) and by ``labkit clean``. Never touches a name without ``prefix``.
        """

    @abstractmethod
    def list_labkit(self, prefix: str = NAME_PREFIX) -> list[str]:
        """Names of the instances this backend sees whose names start with ``prefix``."""

    def created(self, names: Iterable[str]) -> dict[str, float]:
        """When each of ``names`` (as :meth:`list_labkit` lists them) was made, in seconds since the
        epoch, for those this backend can tell (the others are left out; {} here). ``labkit clean``
        without an id ages the objects of campaigns no registry on this host knows by it."""
        return {}

    def provision(
        self, spec: InstanceSpec, *, prefix: str = NAME_PREFIX, network: Network | None = None
    ) -> list[Instance]:
        """Create ``spec.count`` instances; on any failure, destroy those made and re-raise.

        With a ``network`` (from :meth:`create_network`), instance ``i`` is connected to
        it as ``inst<i>`` at ``network.addresses[i]``, and its link is shaped.
        """
        placement = spec.placement(self.host_cpus()) if spec.affinity == "pinned" else [None] * spec.count
        if network is not None and spec.count > len(network.addresses):
            raise ConfigError(
                f"network {network.name} has addresses for {len(network.addresses)} "
                f"instances, not {spec.count}"
            )
        made: list[Instance] = []
        try:
            for i in range(spec.count):
                if network is None:
                    made.append(self._create(spec, new_name(prefix), i, placement[i]))
                    continue
                inst = self._create(spec, new_name(prefix), i, placement[i], network=network)
                made.append(inst)
                private_network.join_network(inst, network, self.link_shaped_here(network))
        except BaseException:
            teardown(made)
            raise
        return made

    def create_one(self, spec: InstanceSpec, name: str, index: int, cpus: list[int] | None) -> Instance:
        """One started instance named ``name`` (index ``index``, pinned to ``cpus`` or floating),
        on no network: what a backend composed of others (``ssh-hosts``) asks of each member."""
        return self._create(spec, check_name(name), index, cpus)

    # -- private networks (optional: a backend without them refuses ``network: private``) ----
    @classmethod
    def check_nics(cls, nics: int, where: str) -> None:
        """ConfigError (``<where> <nics>: ...``) when instances of this backend cannot bond
        ``nics`` NICs (:attr:`MAX_NICS`)."""
        if nics > cls.MAX_NICS:
            raise ConfigError(
                f"{where} {nics}: the {cls.name} backend cannot aggregate NICs (it needs "
                "the bonding driver inside each instance); use nics: 1, or the libvirt "
                f"backend, whose guests bond up to {netmod.MAX_NICS} NICs"
            )

    def create_network(
        self, prefix: str = NAME_PREFIX, count: int = 1, link: object = None, nics: int = 1
    ) -> Network:
        """A private network for ``count`` instances of one run (see :mod:`labkit.core.network_factors`).

        ``link``: a :class:`labkit.core.network_factors.Link` level (or None) applied to every instance's
        link at :meth:`provision`. ``nics`` > 1: each instance also bonds that many NICs on a
        data subnet (only where :attr:`MAX_NICS` allows). Remove it with ``Network.remove()``
        after the instances.
        """
        if not 1 <= count <= netmod.MAX_INSTANCES:
            raise ConfigError(f"a private network holds 1-{netmod.MAX_INSTANCES} instances, not {count}")
        self.check_nics(netmod.check_nics(nics), "nics:")
        name = new_name(prefix + "net")
        subnet = netmod.pick_subnet(name, self.host_routes())
        hosts = [str(h) for h in subnet.hosts()]
        data = None if nics == 1 else netmod.pick_subnet(name + "/data", also=[subnet])
        from .private_network import Network

        net = Network(
            name=name,
            subnet=str(subnet),
            host_address=hosts[0],
            addresses=hosts[1 : count + 1],
            device="lk" + netmod.short_id(name),
            link=netmod.parse_link(link),
            backend=self,
            nics=nics,
            data_subnet=None if data is None else str(data),
            data_addresses=[] if data is None else [str(h) for h in data.hosts()][1 : count + 1],
        )
        self._create_network(net)
        return net

    def _create_network(self, network: Network) -> None:
        """Create ``network`` (a bridge the host holds ``network.host_address`` on)."""
        self.refuse_network(network)

    def host_routes(self) -> list[ipaddress.IPv4Network] | None:
        """The routes of the host a network of this backend is made on, which its subnet must not
        overlap; None: this machine's (:func:`labkit.core.network_factors.pick_subnet` reads them)."""
        return None

    def link_shaped_here(self, network: Network) -> netmod.Link | None:
        """What of ``network``'s link :meth:`provision` shapes with this machine's ``tc`` on each
        instance's host-side device: all of it, where those devices are on this machine. A
        backend whose host side is elsewhere (``ssh``) shapes it there itself and returns None."""
        return network.link

    def host_end(self, network: Network) -> Instance:
        """The host end of ``network`` as an instance whose commands run where the network's
        bridge is, in that host's own network namespace (a workload's server or client on
        ``host``); the caller destroys it. This machine's
        (:class:`~labkit.backends.host_end.HostEnd`) unless the backend's host is elsewhere."""
        from .host_end import HostEnd

        return HostEnd(network)

    def refuse_network(self, network: Network | None) -> None:
        """ConfigError unless ``network`` is None: for a backend without private networks."""
        if network is not None:
            raise ConfigError(f"the {self.name} backend has no private networks; use network: none")

    def remove_network(self, network: Network) -> None:
        """Remove ``network`` (what :meth:`Network.remove <labkit.backends.private_network.Network.remove>`
        calls once); idempotent."""
        self._remove_network(network)

    def _remove_network(self, network: Network) -> None:  # noqa: B027 (optional hook)
        """Remove ``network``; idempotent, quiet if it is gone."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release client connections."""


#: USER_HZ: the unit of /proc/stat's CPU times on Linux (fixed by the kernel's ABI)
USER_HZ = 100


def parse_proc_stat(text: str) -> dict[str, float]:
    """``steal_s`` and ``cpu_total_s`` (seconds over every CPU, guest time not counted twice) from
    the ``cpu`` line of a /proc/stat; {} when it has none."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            ticks = [int(x) for x in parts[1:11]] + [0] * (10 - len(parts[1:11]))
            total = sum(ticks[:8])  # user..steal; guest and guest_nice are already in user and nice
            return {"steal_s": ticks[7] / USER_HZ, "cpu_total_s": total / USER_HZ}
    return {}


def check_cpus(cpus: Iterable[int] | None, host_cpus: int) -> None:
    """Pinned CPUs must exist on the host (a daemon may silently accept one that does not)."""
    bad = sorted({c for c in cpus or () if not 0 <= int(c) < host_cpus})
    if bad:
        raise ConfigError(f"pinned CPU(s) {bad} do not exist: the host has CPUs 0-{host_cpus - 1}")


def exec_log_text(instances: Iterable[Instance]) -> str:
    """The commands each of ``instances`` ran (:attr:`Instance.exec_log`) as text: a first line with
    the counts of them all (instances, commands, bytes printed), per instance a line with its
    command count and the bytes they printed, then per command its argv, exit code,
    duration, byte totals and its kept stdout and stderr, the log itself cut to its first and
    last MiB (see :mod:`.output`). "" when none ran anything."""
    logs = [
        (inst.name, log)
        for inst in instances
        if isinstance(log := getattr(inst, "exec_log", None), CommandLog) and log.commands
    ]
    if not logs:
        return ""
    parts = [
        f"# {len(logs)} instance(s), {sum(g.commands for _, g in logs)} command(s), "
        f"{sum(g.printed for _, g in logs)} bytes printed on stdout and stderr\n"
    ]
    parts += [
        f"=== {name}: {log.commands} command(s), {log.printed} bytes printed on stdout and stderr\n"
        f"{log.text()}"
        for name, log in logs
    ]
    return "\n".join(parts)


def restart_exec_logs(instances: Iterable[Instance]) -> None:
    """Give each of ``instances`` a new, empty :attr:`Instance.exec_log`: what :func:`exec_log_text`
    renders next holds only the commands run from now on (the next run of a boot on the same
    instances)."""
    for inst in instances:
        if isinstance(getattr(inst, "exec_log", None), CommandLog):
            inst.exec_log = CommandLog()


def teardown(instances: Iterable[Instance]) -> list[Exception]:
    """Destroy every instance, trying all of them; returns the errors (logged)."""
    errors = []
    for inst in reversed(list(instances)):
        try:
            inst.destroy()
        except Exception as exc:  # keep tearing down the others
            log.error("teardown of %s failed: %s", getattr(inst, "name", inst), exc)
            errors.append(exc)
    return errors
