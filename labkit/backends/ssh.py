"""The ``ssh`` backend (fabric): bare-metal hosts; the host is the instance.

Commands run natively on one remote host over one SSH connection. The limits
of an :class:`~labkit.instance.InstanceSpec` are those of the ``local``
backend, applied on the remote side with shell commands
(:mod:`labkit.backends.remote_cgroup`):

* an instance is a cgroup on the remote host (v1 or v2, detected from its
  ``/proc/self/mounts``) plus a work directory ``/tmp/labkit-instances/<name>``;
* pinned   → cpuset = the chosen CPUs (``base.provision``'s placement mapped to the
  remote's CPU ids, from the cgroup root's cpuset);
* floating → cpuset = every CPU, CPU quota = ``vcpus`` CPUs' worth of time;
* memory   → cgroup memory limit (and no swap);
* a command joins the cgroup through the same ``sh`` wrapper as ``local`` (write
  ``$$`` to the ``cgroup.procs`` files, then ``exec``).

Without root or usable cgroups on the remote host the backend refuses with
:class:`BackendUnavailable`, unless ``enforce_limits=False``: then commands
run unconfined, pinned instances through ``taskset``, and
``limits_enforced: False`` is recorded in every instance's metadata.

A timeout kills the command's whole remote process tree: every process an
exec starts carries ``LABKIT_EXEC=<token>`` in its environment and all of
them are SIGKILLed (and, with a cgroup, every process in it, as ``local`` does).

Where the host is (explicit arguments win over the environment)::

    LABKIT_SSH_HOST   host name or address        (default: localhost)
    LABKIT_SSH_PORT   port                        (default: 22)
    LABKIT_SSH_USER   user to log in as           (default: root)
    LABKIT_SSH_KEY    private key file            (default: ~/.ssh defaults and the agent)

>>> be = get_backend("ssh", host="10.0.0.5", key_filename="~/.ssh/id_ed25519")
>>> [inst] = be.provision(InstanceSpec(vcpus=2, affinity="pinned"))

``scripts/setup-ssh.sh`` starts a test sshd on 127.0.0.1:2222 with a dedicated key.
"""
from __future__ import annotations

import os
import posixpath
import secrets
import socket
import threading
import time
from dataclasses import dataclass

import invoke
import paramiko
from fabric import Connection

from ..errors import BackendError, BackendUnavailable, ConfigError
from ..instance import InstanceSpec
from . import remote_cgroup as rc
from .base import Backend, Instance, RawResult

ENV_HOST, ENV_PORT, ENV_USER, ENV_KEY = "LABKIT_SSH_HOST", "LABKIT_SSH_PORT", "LABKIT_SSH_USER", "LABKIT_SSH_KEY"
WORKROOT = "/tmp/labkit-instances"
SETUP_HINT = ("for the local test sshd run `bash scripts/setup-ssh.sh` and export "
              "LABKIT_SSH_HOST=127.0.0.1 LABKIT_SSH_PORT=2222 LABKIT_SSH_USER=root "
              "LABKIT_SSH_KEY=/root/.ssh/labkit_test_ed25519")
_RESERVED = {"hostname", "port", "username", "timeout"}
CONTROL_TIMEOUT_S = 120.0


@dataclass
class ControlResult:
    """A control script's outcome (the attributes of fabric's Result that labkit uses)."""
    exited: int
    stdout: str
    stderr: str = ""


def resolve_target(host=None, user=None, port=None, key_filename=None, environ=None) -> dict:
    """Host, user, port and key: explicit arguments, else LABKIT_SSH_* variables, else defaults."""
    environ = os.environ if environ is None else environ
    host = host or environ.get(ENV_HOST) or "localhost"
    user = user or environ.get(ENV_USER) or "root"
    src, raw = ("port", port) if port is not None else (ENV_PORT, environ.get(ENV_PORT) or 22)
    try:
        port = int(raw)
    except (TypeError, ValueError):
        port = 0
    if isinstance(raw, bool) or not 0 < port < 65536:
        raise ConfigError(f"ssh backend: {src} must be a TCP port number (1-65535), got {raw!r}")
    key = key_filename or environ.get(ENV_KEY) or None
    if key is not None:
        key = os.path.expanduser(str(key))
    return {"host": str(host), "user": str(user), "port": port, "key_filename": key}


class SshInstance(Instance):
    """A cgroup (or, unenforced, a marker in the environment) and a work dir on the remote host."""

    def __init__(self, backend: "SshBackend", name, spec, index, cpus, host_cpu_ids):
        super().__init__(backend, name, spec, index, cpus)
        self.host_cpu_ids = host_cpu_ids
        self.metadata.update(host_cpu_ids=host_cpu_ids, limits_enforced=backend.driver is not None,
                             cgroup_version=backend.driver.version if backend.driver else None,
                             ssh_host=backend.target)

    @property
    def workdir(self) -> str:
        return f"{WORKROOT}/{self.name}"

    def script(self, argv: list[str], token: str, env: dict | None) -> str:
        """The remote command line of one exec (see remote_cgroup.exec_script)."""
        be: SshBackend = self.backend
        return rc.exec_script(
            argv, name=self.name, token=token, workdir=self.workdir,
            procs_files=be.driver.procs_files(self.name) if be.driver else None,
            taskset_cpus=None if be.driver else self.host_cpu_ids, env=env)

    def _exec(self, argv, timeout, env) -> RawResult:
        if timeout is not None and timeout <= 0:
            raise ConfigError(f"exec timeout must be > 0 seconds, got {timeout!r}")
        be: SshBackend = self.backend
        token = secrets.token_hex(8)
        command = self.script(argv, token, env)
        try:
            res = be._run(command, timeout=timeout)
        except invoke.exceptions.CommandTimedOut as exc:
            self._kill(token)
            return RawResult(137, exc.result.stdout, exc.result.stderr, True)
        except BaseException:
            self._kill(token, quiet=True)
            raise
        if res.exited == rc.JOIN_FAILED and "cgroup.procs" in res.stderr:
            raise BackendError(f"could not join cgroup {self.name} on {be.target}: {res.stderr.strip()}")
        if res.exited is None or res.exited < 0:
            raise BackendError(f"{be.target}: no exit status for {argv!r} in {self.name} "
                               "(the connection was lost or the remote shell was killed)")
        return RawResult(res.exited, res.stdout, res.stderr, False)

    def _kill(self, token: str, quiet: bool = False) -> None:
        be: SshBackend = self.backend
        try:
            be._check(be._ctl(rc.kill_exec_script(token, be.driver, self.name)), f"killing exec in {self.name}")
        except Exception:
            if not quiet:
                raise

    def put(self, local_path, remote_path, mode=0o755) -> None:
        be: SshBackend = self.backend
        path = str(remote_path)
        if not posixpath.isabs(path):
            path = posixpath.join(self.workdir, path)
        be._check(be._ctl(f"mkdir -p {rc.q(posixpath.dirname(path) or '/')}"), f"mkdir for {path}")
        try:
            with be._sftp_lock:
                be.conn.put(os.fspath(local_path), remote=path, preserve_mode=False)
                be.conn.sftp().chmod(path, mode)
        except FileNotFoundError:
            if not os.path.exists(local_path):
                raise
            raise BackendError(f"put {local_path} -> {be.target}:{path}: no such remote directory") from None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise BackendError(f"put {local_path} -> {be.target}:{path} failed: {exc}") from exc

    def cpu_time_s(self) -> float:
        """CPU time consumed by the instance's cgroup so far (seconds)."""
        be: SshBackend = self.backend
        if be.driver is None:
            raise BackendError("cpu_time_s needs enforced limits (a cgroup)")
        res = be._check(be._ctl(be.driver.cpu_time_script(self.name)), f"cpu time of {self.name}")
        return be.driver.parse_cpu_time(res.stdout)

    def _destroy(self) -> None:
        be: SshBackend = self.backend
        be._check(be._ctl(rc.destroy_script(self.name, be.driver, self.workdir)), f"removing {self.name}")


class SshBackend(Backend):
    """Instances as cgroups on one remote host, over SSH (fabric).

    Options: ``host``, ``user``, ``port``, ``key_filename`` (defaults from
    ``LABKIT_SSH_HOST``/``_USER``/``_PORT``/``_KEY``, else localhost, root,
    22, paramiko's default keys and agent), ``connect_timeout`` (seconds, for
    TCP connect, banner and authentication), ``enforce_limits`` (default True:
    refuse when the remote cgroups can't be used); any other keyword goes to
    ``paramiko.SSHClient.connect`` (``password``, ``passphrase``, ``allow_agent``...).
    """

    name = "ssh"

    def __init__(self, host: str | None = None, user: str | None = None, port: int | None = None,
                 key_filename: str | None = None, connect_timeout: float = 10,
                 enforce_limits: bool = True, **connect_kwargs):
        target = resolve_target(host, user, port, key_filename)
        bad = sorted(_RESERVED & set(connect_kwargs))
        if bad:
            raise ConfigError(f"ssh backend: pass host/port/user/connect_timeout as options, "
                              f"not as connect kwargs {', '.join(bad)}")
        if not isinstance(connect_timeout, (int, float)) or connect_timeout <= 0:
            raise ConfigError(f"ssh backend: connect_timeout must be > 0 seconds, got {connect_timeout!r}")
        super().__init__(**target, connect_timeout=connect_timeout, enforce_limits=enforce_limits)
        self.host, self.user, self.port = target["host"], target["user"], target["port"]
        self.key_filename = target["key_filename"]
        self.connect_timeout = connect_timeout
        self.enforce = bool(enforce_limits)
        self.connect_kwargs = dict(connect_kwargs)
        self.conn: Connection | None = None
        self.facts: rc.HostFacts | None = None
        self.driver = None
        self._why_not = ""
        self._lock = threading.Lock()
        self._sftp_lock = threading.Lock()
        self._ctl_lock = threading.Lock()
        self._ctl_chan = None

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    # -- connection ---------------------------------------------------------------------------
    def _tried(self) -> str:
        key = self.key_filename or "paramiko's default keys (~/.ssh/id_*) and the ssh agent"
        return f"{self.target} with key {key}"

    def _connect(self) -> None:
        with self._lock:
            if self.facts is not None:
                return
            if self.key_filename and not os.path.isfile(self.key_filename):
                raise BackendUnavailable(
                    f"ssh backend: key file {self.key_filename} does not exist (from key_filename or "
                    f"{ENV_KEY}); create one with ssh-keygen, or {SETUP_HINT}")
            kwargs = {"banner_timeout": self.connect_timeout, "auth_timeout": self.connect_timeout,
                      "channel_timeout": self.connect_timeout}
            if self.key_filename:
                kwargs.update(key_filename=[self.key_filename], look_for_keys=False, allow_agent=False)
            kwargs.update(self.connect_kwargs)
            conn = Connection(self.host, user=self.user, port=self.port,
                              connect_timeout=self.connect_timeout, connect_kwargs=kwargs)
            try:
                conn.open()
            except paramiko.BadHostKeyException as exc:
                conn.close()
                raise BackendUnavailable(
                    f"ssh backend: the host key of {self.host}:{self.port} does not match the one in "
                    f"~/.ssh/known_hosts ({exc}); if the host was reinstalled, remove the old entry with "
                    f"ssh-keygen -R '[{self.host}]:{self.port}'") from exc
            except paramiko.AuthenticationException as exc:
                conn.close()
                raise BackendUnavailable(
                    f"ssh backend: {self._tried()}: authentication failed ({exc}). Authorize the public "
                    f"key in ~{self.user}/.ssh/authorized_keys on {self.host}, or choose the user/key "
                    f"with user=/key_filename= or {ENV_USER}/{ENV_KEY}; {SETUP_HINT}") from exc
            except (socket.timeout, TimeoutError) as exc:
                conn.close()
                raise BackendUnavailable(
                    f"ssh backend: no answer from {self.host}:{self.port} within {self.connect_timeout}s "
                    f"(tried {self._tried()}); check the address and firewall, or set "
                    f"{ENV_HOST}/{ENV_PORT}; {SETUP_HINT}") from exc
            except (paramiko.SSHException, EOFError) as exc:
                conn.close()
                raise BackendUnavailable(
                    f"ssh backend: SSH handshake with {self.host}:{self.port} failed ({exc}); is an sshd "
                    f"listening there? (tried {self._tried()}); {SETUP_HINT}") from exc
            except OSError as exc:   # refused, unreachable, unknown host (NoValidConnectionsError)
                conn.close()
                raise BackendUnavailable(
                    f"ssh backend: cannot connect to {self.host}:{self.port} ({exc}; tried {self._tried()}); "
                    f"start an sshd there or point {ENV_HOST}/{ENV_PORT} at one; {SETUP_HINT}") from exc
            self.conn = conn
            try:
                res = self._run(rc.PROBE, timeout=max(30.0, float(self.connect_timeout)))
                facts = rc.parse_probe(res.stdout)
            except (BackendError, invoke.exceptions.CommandTimedOut) as exc:
                self.close()
                raise BackendUnavailable(f"ssh backend: probing {self.target} failed: {exc}") from exc
            try:
                driver = rc.detect(facts)
                driver.check_writable(facts)
                self.driver = driver
            except BackendUnavailable as exc:
                self._why_not = str(exc)
            self.facts = facts

    def check(self) -> None:
        self._connect()
        if self.driver is None and self.enforce:
            raise BackendUnavailable(
                f"ssh backend cannot enforce instance limits on {self.target}: {self._why_not}. "
                "Log in as root, or pass enforce_limits=False to run unconfined "
                "(recorded as limits_enforced=False in every run's metadata).")

    def _run(self, command: str, timeout: float | None = None):
        """Run a shell command line on the remote host; returns fabric's Result (exit code not checked).

        Raises invoke's CommandTimedOut past ``timeout`` and BackendError when the connection fails.
        """
        if self.conn is None:
            self._connect()
        start = time.monotonic()
        try:
            res = self.conn.run(command, hide=True, warn=True, in_stream=False, pty=False,
                                timeout=timeout)
            # invoke's timer closes the channel and only then ends; if the run returns in between,
            # it sees no timeout and hands back exit -1. A channel closed past the deadline is one.
            if (timeout is not None and (res.exited is None or res.exited < 0)
                    and time.monotonic() - start >= timeout):
                raise invoke.exceptions.CommandTimedOut(res, timeout=timeout)
            return res
        except invoke.exceptions.CommandTimedOut:
            raise
        except paramiko.ChannelException as exc:
            raise BackendError(
                f"{self.target} refused a new SSH channel ({exc}): too many commands at once over one "
                "connection; raise MaxSessions in the remote sshd_config") from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise BackendError(f"{self.target}: SSH connection failed ({exc})") from exc

    def _ctl(self, script: str, timeout: float = CONTROL_TIMEOUT_S) -> ControlResult:
        """Run a short control script through the control shell (one round trip, no new session).

        Scripts run one at a time, each in a child ``sh`` (stdout and stderr merged);
        any failure drops the control shell and the next call opens a new one.
        """
        if self.conn is None:
            self._connect()
        with self._ctl_lock:
            token = secrets.token_hex(8)
            try:
                chan = self._ctl_chan
                if chan is None or chan.closed or chan.exit_status_ready():
                    self._drop_ctl()
                    chan = self.conn.create_session()
                    chan.exec_command(rc.CONTROL_SHELL)
                    self._ctl_chan = chan
                chan.sendall(rc.control_command(script, token).encode())
                data, deadline = b"", time.monotonic() + timeout
                while True:
                    done = rc.parse_control(data, token)
                    if done is not None:
                        return ControlResult(*done)
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise BackendError(f"{self.target}: control script ran past {timeout}s:\n{script[:2000]}")
                    chan.settimeout(min(left, 1.0))
                    try:
                        chunk = chan.recv(65536)
                    except socket.timeout:
                        continue
                    if not chunk:
                        err = chan.recv_stderr(65536).decode("utf-8", "replace") if chan.recv_stderr_ready() else ""
                        raise BackendError(f"{self.target}: the control shell exited ({err.strip()})")
                    data += chunk
            except BaseException as exc:
                self._drop_ctl()
                if isinstance(exc, (paramiko.SSHException, EOFError, OSError)):
                    raise BackendError(f"{self.target}: SSH connection failed ({exc})") from exc
                raise

    def _drop_ctl(self) -> None:
        chan, self._ctl_chan = self._ctl_chan, None
        if chan is not None:
            try:
                chan.close()
            except Exception:
                pass

    def _check(self, res, what: str):
        if res.exited != 0:
            raise BackendError(f"{self.target}: {what} failed (exit {res.exited}): "
                               f"{(res.stderr or res.stdout).strip()[-2000:]}")
        return res

    # -- Backend hooks -------------------------------------------------------------------------
    def _cpu_ids(self) -> list[int]:
        self._connect()
        if self.driver is not None:
            return self.driver.available_cpus(self.facts)
        return self.facts.cpus_allowed()

    def host_cpus(self) -> int:
        return len(self._cpu_ids())

    def _create(self, spec: InstanceSpec, name, index, cpus) -> SshInstance:
        rc.check_name(name)
        ids = self._cpu_ids()
        real = [ids[c] for c in cpus] if cpus is not None else None
        if self.driver is None and real is not None and "taskset" not in self.facts.tools:
            raise BackendUnavailable(f"{self.target} has no taskset to pin an unconfined instance; "
                                     "install it with: apt-get install util-linux")
        workdir = f"{WORKROOT}/{name}"
        script = ""
        if self.driver is not None:
            script += self.driver.create_script(name, real if real is not None else ids,
                                                None if real is not None else spec.vcpus, spec.memory_mb)
        script += f"mkdir -p {rc.q(WORKROOT)} && mkdir -m 700 {rc.q(workdir)} || exit 1\n"
        try:
            self._check(self._ctl(script), f"creating instance {name}")
            return SshInstance(self, name, spec, index, cpus, real)
        except BaseException:
            try:
                self._ctl(rc.destroy_script(name, self.driver, workdir))
            except Exception:
                pass
            raise

    def cleanup(self, prefix: str) -> list[str]:
        """Remove cgroups, processes and work dirs left by a killed process (names with ``prefix``)."""
        rc.check_prefix(prefix)
        self._connect()
        names: list[str] = []
        if self.driver is not None:
            res = self._check(self._ctl(self.driver.glob_script(prefix)), f"listing {prefix}* cgroups")
            names = sorted({n for n in res.stdout.split() if n.startswith(prefix)})
        self._check(self._ctl(rc.cleanup_script(prefix, names, self.driver, WORKROOT)), f"cleanup of {prefix}*")
        return names

    def list_labkit(self) -> list[str]:
        """Names of the ``labkit-`` cgroups and work dirs on the remote host."""
        self._connect()
        script = f"for d in {rc.q(WORKROOT)}/labkit-*; do [ -d \"$d\" ] && basename \"$d\"; done; true\n"
        if self.driver is not None:
            script += self.driver.glob_script("labkit-")
        res = self._check(self._ctl(script), "listing labkit- instances")
        return sorted(set(res.stdout.split()))

    def pids(self, name: str) -> set[int]:
        """Pids in instance ``name``'s cgroup (enforced) or carrying its marker (unenforced)."""
        self._connect()
        if self.driver is not None:
            script = self.driver.pids_script(name)
        else:
            script = (f"grep -lazE {rc.q(rc.marker_regex(rc.check_name(name)))} /proc/[0-9]*/environ "
                      "2>/dev/null | cut -d/ -f3; true\n")
        res = self._check(self._ctl(script), f"listing processes of {name}")
        return {int(p) for p in res.stdout.split() if p.isdigit()}

    def exists(self, name: str) -> bool:
        """Whether any cgroup directory or the work dir of instance ``name`` is still there."""
        self._connect()
        script = f"[ -d {rc.q(f'{WORKROOT}/{rc.check_name(name)}')} ]"
        if self.driver is not None:
            script += " || " + self.driver.exists_script(name)
        return self._ctl(script).exited == 0

    def fingerprint(self) -> dict:
        self._connect()
        f = self.facts
        return {"backend": self.name, "ssh_host": self.target, "hostname": f.get("hostname"),
                "kernel": f.get("kernel"), "machine": f.get("machine"), "cpu_model": f.get("cpu_model"),
                "cpus": self.host_cpus(), "cgroup_version": self.driver.version if self.driver else None,
                "limits_enforced": self.driver is not None}

    def close(self) -> None:
        with self._ctl_lock:
            self._drop_ctl()
        conn, self.conn = self.conn, None
        self.facts = None
        if conn is not None:
            with self._sftp_lock:
                conn.close()
