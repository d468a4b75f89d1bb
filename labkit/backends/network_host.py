"""The host end of a run's private network as an Instance, so workloads can run a server or a
client there (iperf3 between an instance and its host, both directions, after study 004's
Table 7.2; ab on the host against httpd in every instance, after study 002).

Commands run on this machine, in its own network namespace (where the bridge holds
``network.host_address``), in their own session, unconfined (the host is the reference, not
an instance under test), in a private temporary work directory removed by ``destroy()``. A
backend whose networks are on another machine gives its own host end there
(:meth:`Backend.host_end <labkit.backends.base.Backend.host_end>`; ``ssh``:
:class:`~labkit.backends.ssh.SshHostEnd`), which :func:`host_end` hands out the same way.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..core.instance import InstanceSpec
from ..errors import BenchmarkError, ConfigError
from . import child
from .base import Instance, StatsUnavailable
from .networks import Network


class HostEnd(Instance):
    """This host on ``network`` (``address`` = the host's address on it)."""

    def __init__(self, network: Network):
        super().__init__(network.backend, "host", InstanceSpec(), 0, None)
        self.network, self.address = network, network.host_address
        self._dir = tempfile.mkdtemp(prefix="labkit-host-")   # 0700, ours
        self.metadata.update(address=self.address)

    @property
    def workdir(self) -> str:
        return self._dir

    def _start(self, argv, env):
        return child.start(argv, cwd=self._dir, env={**os.environ, **(env or {})})

    def _wait(self, handle, timeout):
        # a poll (timeout 0) gives the pipes a moment to reach EOF after the command exited
        return child.wait(handle, None if timeout is None else max(timeout, 0.02))

    def _kill(self, handle) -> None:
        try:
            os.killpg(handle.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _oom_kills(self):
        return None

    def stats(self) -> dict[str, float]:
        raise StatsUnavailable("the host end of a network is this machine, not an instance: the host's "
                               "telemetry covers it")

    def put(self, local_path: str | os.PathLike, remote_path: str, mode: int = 0o755) -> None:
        dest = remote_path if os.path.isabs(remote_path) else os.path.join(self._dir, remote_path)
        shutil.copyfile(local_path, dest)
        os.chmod(dest, mode)

    def _destroy(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


@contextmanager
def host_end(instances: Sequence[Instance], workload: str, path: str, tool: str,
             package: str) -> Iterator[Instance]:
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
        else:   # the network's host is another machine (ssh): ask it
            found = host.exec(["sh", "-c", f"command -v {shlex.quote(tool)}"], check=False, timeout=60).ok
        if not found:
            where = "this host" if isinstance(host, HostEnd) else f"the host of network {net.name}"
            raise BenchmarkError(f"{tool} is not installed on {where} (apt-get install {package})")
        yield host
    finally:
        host.destroy()
