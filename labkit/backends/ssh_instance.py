"""The instances of the ``ssh`` backend (:mod:`.ssh`): a cgroup (when limits are enforced) and a
private work dir on the remote host, each command on its own SSH channel of the backend's
connection (:class:`SshInstance`); and the host end of a private network there, the ssh host
itself (:class:`SshHostEnd`)."""

from __future__ import annotations

import os
import posixpath
import shlex
import threading
from typing import TYPE_CHECKING

import paramiko

from ..core.instance import InstanceSpec
from ..errors import BackendError
from . import cgroups, native, ssh_network
from .base import Instance, RawResult, check_name
from .cgroup_counters import CgroupCounters
from .private_network import Network
from .ssh_channel import RemoteCommand, read_channel

if TYPE_CHECKING:
    from .ssh import SshBackend

q = shlex.quote


class SshInstance(CgroupCounters, Instance):
    """A cgroup (when limits are enforced) and a private work dir on the remote host; on a
    private network also a network namespace there (``netns``, :mod:`.ssh_network`)."""

    backend: SshBackend

    def __init__(self, backend: SshBackend, name, spec, index, cpus, host_cpu_ids, netns: bool = False):
        super().__init__(backend, name, spec, index, cpus)
        self.host_cpu_ids = host_cpu_ids
        #: whether its commands join its cgroup (one exists: limits enforced)
        self.confined = backend.driver is not None
        #: on a private network: its network namespace (named after it) and hosts file
        self.netns: str | None = name if netns else None
        self.hosts_file: str | None = f"{self.workdir}/hosts" if netns else None
        self.metadata.update(native.instance_facts(backend.driver, host_cpu_ids), ssh_host=backend.target)

    @property
    def workdir(self) -> str:
        return f"{self.backend.workroot}/{self.name}"

    def command_line(self, argv: list[str], pidfile: str, env: dict | None) -> str:
        """The remote command line of one exec: in the work dir, in its own session, in the cgroup."""
        script = native.command_line(
            self.cgroup_driver, self.name, self.workdir, argv, pidfile, env, self.host_cpu_ids, self.enter()
        )
        return "exec /bin/sh -c " + q(script)

    @property
    def cgroup_driver(self) -> cgroups.Driver | None:
        """The backend's cgroup driver when this instance's commands join its cgroup, else None."""
        return self.backend.driver if self.confined else None

    def enter(self) -> list[str]:
        """The argv prefix that puts a command in its network namespace (none without one)."""
        if self.netns is None or self.hosts_file is None:
            return []
        return ssh_network.enter_argv(self.netns, self.hosts_file)

    #: :meth:`host_command` goes through the remote user's shell, which parses its last word
    remote_shell = True

    def host_command(self, argv: list[str]) -> list[str]:
        """An ``ssh`` argv for this machine that runs ``argv`` in this instance (its work dir and
        cgroup, or its CPUs when unconfined): an MPI launch agent's command. Host keys by the
        backend's ``host_key_policy``, as its own connection."""
        be: SshBackend = self.backend
        remote = ["env", "-C", self.workdir]
        driver = self.cgroup_driver
        if driver is not None:
            remote += [
                f"LABKIT_CGROUP_PROCS={' '.join(driver.procs_files(self.name))}",
                "/bin/sh",
                "-c",
                cgroups.JOIN,
                "sh",
            ]
        elif self.host_cpu_ids:
            remote += ["taskset", "-c", cgroups.format_cpulist(self.host_cpu_ids)]
        return be.settings.ssh_argv(remote + self.enter() + list(argv))

    # -- exec hooks --------------------------------------------------------
    def _start(self, argv, env):
        be: SshBackend = self.backend
        handle = RemoteCommand(f"{self.workdir}/.exec-{os.urandom(6).hex()}.pid")
        line = self.command_line(argv, handle.pidfile, env)
        conn = be.connection()

        def run():
            try:
                with conn.create_session() as chan:
                    chan.exec_command(line)
                    chan.shutdown_write()  # stdin empty
                    handle.exit_status = read_channel(chan, handle.out, handle.err)
            except BaseException as exc:  # re-raised by _wait in the caller's thread
                handle.error = exc

        handle.thread = threading.Thread(target=run, name=f"ssh-exec-{self.name}", daemon=True)
        handle.thread.start()
        return handle

    def _wait(self, handle: RemoteCommand, timeout):
        handle.thread.join(timeout)
        if handle.thread.is_alive():
            return None
        be: SshBackend = self.backend
        if handle.error is not None:
            raise BackendError(
                f"{be.target}: SSH connection failed while running in {self.name} ({handle.error})"
            ) from handle.error
        status = -1 if handle.exit_status is None else handle.exit_status  # -1: none came
        res = RawResult.from_sinks(status, handle.out, handle.err)
        if res.exit_code is None or res.exit_code < 0:
            raise BackendError(
                f"{be.target}: no exit status from {self.name} "
                "(the connection was lost or the remote shell was killed)"
            )
        if res.exit_code == cgroups.JOIN_FAILED and "cgroup.procs" in res.stderr:
            raise BackendError(f"could not join cgroup {self.name} on {be.target}: {res.stderr.strip()}")
        return res

    def _kill(self, handle: RemoteCommand) -> None:
        script = native.kill_script(self.cgroup_driver, self.name, handle.pidfile)
        self.backend.run_script(script, f"killing a command in {self.name}")

    def _read(self, path: str) -> str:
        return self.backend.run_script(f"cat {q(path)}", f"reading {path} of {self.name}").stdout

    def _read_many(self, paths: dict[str, str]) -> dict[str, str | None]:
        """Every file of ``paths`` in one round trip (None where it cannot be read)."""
        out = self.backend.run_script(
            native.read_files_script(paths), f"reading the counters of {self.name}"
        ).stdout
        return native.split_marked(out, list(paths))

    def stats(self) -> dict[str, float]:
        """Its cgroup's counters and the ssh host's steal time, in one round trip
        (:func:`.native.instance_stats`); without a cgroup (limits not enforced, a network's host end)
        only the steal counters."""
        driver = self.cgroup_driver
        return native.instance_stats(
            driver,
            self._read_many(native.stat_paths(driver, self.name)),
            f"{self.name} on {self.backend.target}",
        )

    def put(self, local_path: str | os.PathLike, remote_path: str, mode: int = 0o755) -> None:
        be: SshBackend = self.backend
        path = str(remote_path)
        if not posixpath.isabs(path):
            path = posixpath.join(self.workdir, path)
        be.run_script(f"mkdir -p {q(posixpath.dirname(path) or '/')}", f"mkdir for {path}")
        try:
            with be.sftp_lock:
                conn = be.connection()
                conn.put(os.fspath(local_path), remote=path, preserve_mode=False)
                conn.sftp().chmod(path, mode)
        except FileNotFoundError:
            if not os.path.exists(local_path):
                raise
            raise BackendError(f"put {local_path} -> {be.target}:{path}: no such remote directory") from None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise BackendError(f"put {local_path} -> {be.target}:{path} failed: {exc}") from exc

    def _destroy(self) -> None:
        self.backend.remove([self.name])


class SshHostEnd(SshInstance):
    """The host end of a private network on the ssh host (:meth:`.ssh.SshBackend.host_end`): commands
    run natively there, in the host's own network namespace (where the bridge holds
    ``network.host_address``), in their own session, unconfined (the host is the reference, not
    an instance under test), in a private work dir (``<network name>h``, so ``cleanup(prefix)``
    finds it) removed by ``destroy()``."""

    def __init__(self, backend: SshBackend, network: Network):
        name = check_name(network.name + "h")
        backend.connection()  # the work root is known once connected
        backend.run_script(
            f"mkdir -m 700 {q(posixpath.join(backend.workroot, name))}",
            f"making the work dir of {network.name}'s host end",
        )
        super().__init__(backend, name, InstanceSpec(), 0, None, None)
        self.confined = False
        self.network, self.address = network, network.host_address
        self.metadata.update(address=self.address)

    def _oom_kills(self):
        return None

    def _destroy(self) -> None:
        be: SshBackend = self.backend
        be.run_script(f"rm -rf {q(self.workdir)}", f"removing {self.name}")
