"""The host end of a run's private network as an Instance, so workloads can run a server or a
client there (iperf3 between an instance and its host, both directions, after study 004's
Table 7.2; ab on the host against httpd in every instance, after study 002).

Commands run on this machine, in its own network namespace (where the bridge holds
``network.host_address``), in their own session, unconfined (the host is the reference, not
an instance under test), in a private temporary work directory removed by ``destroy()``. As root
they also run in a cgroup of their own in the CPU-accounting hierarchy, named after the campaign
(``labkit-<id>--host-<hex>``: no limit, only a count), so the campaign's telemetry counts their
CPU as the campaign's and the quiet-host guard does not take a workload's own client on the host
(``ab``, an ``iperf3`` end) for a process outside the campaign; ``destroy()`` kills what is
left in it and removes it, adding its count to :func:`retired_cpu`, and :func:`remove_leftovers`
removes what a killed campaign left. A
backend whose networks are on another machine gives its own host end there
(:meth:`Backend.host_end <labkit.backends.base.Backend.host_end>`; ``ssh``:
:class:`~labkit.backends.ssh_instance.SshHostEnd`), which :func:`host_end` hands out the same way.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..core.instance import InstanceSpec
from ..errors import BenchmarkError, ConfigError, LabkitError
from . import cgroups, child
from .base import NAME_PREFIX, Instance, StatsUnavailable, check_prefix
from .private_network import Network

#: what follows the campaign's prefix in a host end's cgroup name
GROUP_TAG = "host-"


def campaign_prefix_of(network_name: str) -> str:
    """The campaign's prefix (``labkit-<id>--``) the network ``network_name`` is named with;
    ``labkit-`` for a network no campaign made."""
    head, sep, _ = network_name.partition("--")
    return f"{head}--" if sep and head.startswith(NAME_PREFIX) else NAME_PREFIX


def group_name(network_name: str) -> str:
    """A fresh cgroup name for a host end of the network ``network_name``: its campaign's prefix
    (:func:`campaign_prefix_of`) + ``host-`` + 8 hex."""
    return f"{campaign_prefix_of(network_name)}{GROUP_TAG}{secrets.token_hex(4)}"


def _make_group(name: str) -> tuple[cgroups.Driver | None, str | None, str | None]:
    """(driver, directory, None) of a new accounting cgroup ``name`` on this machine, or
    (None, None, why not)."""
    if os.geteuid() != 0:
        return None, None, "not root: the host end's CPU is not told apart from other processes"
    try:
        driver = cgroups.detect_here()
        path = f"{cgroups.accounting_root(driver)}/{name}"
        os.mkdir(path, 0o755)
    except (LabkitError, OSError) as exc:
        return None, None, f"no accounting cgroup: {exc}"
    return driver, path, None


_retired: dict[str, float] = {}
_retired_lock = threading.Lock()


def retired_cpu(prefix: str) -> float:
    """The CPU seconds used by the host ends of campaign ``prefix`` that this process has removed
    (a host end often lives and goes between two readings of the telemetry: its count goes on
    here, so the campaign's CPU stays whole)."""
    with _retired_lock:
        return _retired.get(prefix, 0.0)


def remove_leftovers(prefix: str) -> list[str]:
    """Kill and remove the host ends' cgroups named ``prefix`` + ``host-`` on this machine (a
    killed campaign's); their names ([] without a usable cgroup hierarchy)."""
    check_prefix(prefix)
    try:
        root = cgroups.accounting_root(cgroups.detect_here())
        names = sorted(n for n in os.listdir(root) if n.startswith(prefix + GROUP_TAG))
    except (LabkitError, OSError):
        return []
    cgroups.apply([cgroups.Op("rmdir", f"{root}/{name}") for name in names])
    return names


class HostEnd(Instance):
    """This host on ``network`` (``address`` = the host's address on it)."""

    def __init__(self, network: Network):
        super().__init__(network.backend, "host", InstanceSpec(), 0, None)
        self.network, self.address = network, network.host_address
        self._dir = tempfile.mkdtemp(prefix="labkit-host-")  # 0700, ours
        self.prefix = campaign_prefix_of(network.name)
        self.group_name = group_name(network.name)
        self._driver, self._group, why = _make_group(self.group_name)
        self.metadata.update(address=self.address, cgroup=self.group_name if self._group else why)

    @property
    def workdir(self) -> str:
        return self._dir

    def _start(self, argv, env):
        env = {**os.environ, **(env or {})}
        if self._group is not None:
            env["LABKIT_CGROUP_PROCS"] = f"{self._group}/cgroup.procs"
            argv = ["/bin/sh", "-c", cgroups.JOIN, "labkit-join", *argv]
        return child.start(argv, cwd=self._dir, env=env)

    def _wait(self, handle, timeout):
        # a poll (timeout 0) gives the pipes a moment to reach EOF after the command exited
        return child.wait(handle, None if timeout is None else max(timeout, 0.02))

    def _kill(self, handle) -> None:
        try:
            os.killpg(handle.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self._group is not None:  # what left the session
            cgroups.apply([cgroups.Op("kill", self._group)])

    def _oom_kills(self):
        return None

    def stats(self) -> dict[str, float]:
        """``cpu_s``: the CPU time of the commands run here so far (its cgroup's count)."""
        if self._driver is None:
            raise StatsUnavailable(
                f"the host end of a network is this machine, not an instance ({self.metadata['cgroup']})"
            )
        path, parse = self._driver.cpu_time(self.group_name)
        try:
            return {"cpu_s": parse(cgroups.read_local(path))}
        except (OSError, ValueError) as exc:
            raise StatsUnavailable(f"host end {self.group_name}: {exc}") from exc

    def put(self, local_path: str | os.PathLike, remote_path: str, mode: int = 0o755) -> None:
        dest = remote_path if os.path.isabs(remote_path) else os.path.join(self._dir, remote_path)
        shutil.copyfile(local_path, dest)
        os.chmod(dest, mode)

    def _destroy(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
        if self._group is not None:
            cgroups.apply([cgroups.Op("kill", self._group)])
            try:
                used = self.stats()["cpu_s"]
            except StatsUnavailable:
                used = 0.0
            cgroups.apply([cgroups.Op("rmdir", self._group)])
            self._group = None
            with _retired_lock:  # after the removal: never counted twice by a reading between
                _retired[self.prefix] = _retired.get(self.prefix, 0.0) + used


@contextmanager
def host_end(
    instances: Sequence[Instance], workload: str, path: str, tool: str, package: str
) -> Iterator[Instance]:
    """The host end of the run's private network for a workload's host ``path``
    (:meth:`Backend.host_end <labkit.backends.base.Backend.host_end>`: a :class:`HostEnd` on this
    machine, or the network's own host for a backend whose host is another machine), removed on exit.

    Raises ConfigError when the instances are on no private network (``network: private``)
    and BenchmarkError when ``tool`` is not on that host (naming the Debian ``package``).
    """
    net = instances[0].network if instances else None
    if net is None:
        raise ConfigError(f"{workload} path {path!r} needs network: private")
    host = net.backend.host_end(net)
    try:
        if isinstance(host, HostEnd):
            found = shutil.which(tool) is not None
        else:  # the network's host is another machine (ssh): ask it
            found = host.exec(["sh", "-c", f"command -v {shlex.quote(tool)}"], check=False, timeout=60).ok
        if not found:
            where = "this host" if isinstance(host, HostEnd) else f"the host of network {net.name}"
            raise BenchmarkError(f"{tool} is not installed on {where} (apt-get install {package})")
        yield host
    finally:
        host.destroy()
