"""The ``ssh`` backend (fabric): bare-metal hosts; the host is the instance.

Commands run natively on one remote host, each on its own SSH channel of the
backend's connection, its output read into capped sinks as it arrives
(:func:`~labkit.backends.ssh_channel.read_channel`, :mod:`.output`); control scripts (probe, create, remove, kill,
list) in the connection's one long-lived control shell (:mod:`.ssh_control`: a round trip each,
not a new session and remote login shell), or on a channel of their own while it is busy. The limits of an
:class:`~labkit.core.instance.InstanceSpec` are those of the ``local`` backend,
made by the same cgroup driver (:mod:`labkit.backends.cgroups`), whose file
operations are sent as one shell script (the native-host model of :mod:`.native`, which the
``slurm`` backend shares):

* an instance is a cgroup on the remote host (v1 or v2, detected from its
  ``/proc/self/mounts``) plus a private work directory
  ``~/.cache/labkit/instances/<name>`` (0700, in the login user's home);
* pinned → cpuset = the chosen CPUs; floating → every CPU with a CPU quota of
  ``vcpus``; memory → cgroup memory limit (and no swap);
* a command runs in its own session (``setsid``) and joins the cgroup before it
  ``exec``\\s (:data:`cgroups.JOIN`). A timeout kills its session and, with a
  cgroup, every process left in the instance;
* on a run's private network (``network: private``) each instance also has a network namespace
  on the host, joined by a bridge the backend creates there and removes at teardown and in
  ``cleanup(prefix)``; the link is shaped there with ``tc``, and the host end of the network
  (``host`` in the instances' ``/etc/hosts``) is the ssh host itself (:mod:`.ssh_network`,
  :class:`.ssh_instance.SshHostEnd`). It needs root there and ``ip``, ``nsenter`` and ``unshare``.

Without root or usable cgroups on the remote host the backend refuses with
:class:`BackendUnavailable`, unless ``enforce_limits=False``: then commands run
unconfined (pinned instances through ``taskset``), ``limits_enforced: False`` is
recorded, and a daemon that leaves the command's session survives a timeout
until the instance is destroyed... or not at all: without a cgroup labkit
cannot find it. Use enforced limits for anything that starts daemons.

Where the host is (explicit arguments win over the environment)::

    LABKIT_SSH_HOST   host name or address        (default: localhost)
    LABKIT_SSH_PORT   port                        (default: 22)
    LABKIT_SSH_USER   user to log in as           (default: root)
    LABKIT_SSH_KEY    private key file            (default: ~/.ssh defaults and the agent)

>>> be = get_backend("ssh", host="10.0.0.5", key_filename="~/.ssh/id_ed25519")
>>> [inst] = be.provision(InstanceSpec(vcpus=2, affinity="pinned"))

Host keys are checked by ``host_key_policy`` (strict, the default: the key must be in
``~/.ssh/known_hosts`` or the ``known_hosts`` option's file; accept-new; insecure), for fabric's
connection and for the ``ssh`` commands of an MPI launch agent alike (:mod:`labkit.backends.hostkeys`;
fabric's own policy, which accepts any key, is replaced).

``scripts/setup-ssh.sh`` starts a test sshd on 127.0.0.1:2222 with a dedicated key and records its
host keys in root's ``~/.ssh/known_hosts``.
"""

from __future__ import annotations

import ipaddress
import os
import posixpath
import shlex
import socket
import threading
import time
from collections.abc import Mapping

import invoke
import paramiko
from fabric import Connection

from ..core import network_factors as netmod
from ..core.instance import InstanceSpec
from ..errors import BackendError, BackendUnavailable, ConfigError
from . import cgroups, hostkeys, native, ssh_network
from ._ssh_settings import SshSettings, policy_option
from .base import NAME_PREFIX, Backend, check_prefix
from .hostkeys import known_hosts_path
from .native import PROBE, WORK_ROOT, HostFacts, listing_script
from .private_network import Network
from .ssh_control import ControlShell
from .ssh_instance import SshHostEnd, SshInstance

ENV_HOST, ENV_PORT, ENV_USER, ENV_KEY = (
    "LABKIT_SSH_HOST",
    "LABKIT_SSH_PORT",
    "LABKIT_SSH_USER",
    "LABKIT_SSH_KEY",
)
SETUP_HINT = (
    "for the local test sshd run `bash scripts/setup-ssh.sh` and export "
    "LABKIT_SSH_HOST=127.0.0.1 LABKIT_SSH_PORT=2222 LABKIT_SSH_USER=root "
    "LABKIT_SSH_KEY=/root/.ssh/labkit_test_ed25519"
)
CONTROL_TIMEOUT_S = 120.0
#: how long the listing taken with the connection probe stands for :meth:`SshBackend.list_labkit`
LISTING_FRESH_S = 10.0
q = shlex.quote


def resolve_target(
    host: str | None = None,
    user: str | None = None,
    port: int | str | None = None,
    key_filename: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict:
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


class SshBackend(Backend):
    """Instances as cgroups on one remote host, over SSH (fabric).

    Options: ``host``, ``user``, ``port``, ``key_filename`` (defaults from
    ``LABKIT_SSH_HOST``/``_USER``/``_PORT``/``_KEY``, else localhost, root,
    22, paramiko's default keys and agent), ``connect_timeout`` (seconds, for
    TCP connect, banner and authentication), ``host_key_policy`` (strict, the
    default | accept-new | insecure, :mod:`labkit.backends.hostkeys`; recorded in
    the fingerprint), ``known_hosts`` (a known_hosts file checked besides
    ``~/.ssh/known_hosts``, where accept-new records), ``enforce_limits`` (default True:
    refuse when the remote cgroups can't be used), ``connect_kwargs`` (a dict
    for ``paramiko.SSHClient.connect``: ``password``, ``passphrase``,
    ``allow_agent``...; never stored or logged by labkit).
    """

    name = "ssh"
    OPTIONS = (
        "host",
        "user",
        "port",
        "key_filename",
        "connect_timeout",
        "enforce_limits",
        "connect_kwargs",
        "host_key_policy",
        "known_hosts",
    )

    def __init__(
        self,
        host: str | None = None,
        user: str | None = None,
        port: int | None = None,
        key_filename: str | None = None,
        connect_timeout: float = 10,
        enforce_limits: bool = True,
        connect_kwargs: dict | None = None,
        host_key_policy: str | None = None,
        known_hosts: str | None = None,
        **unknown,
    ):
        super().__init__(**unknown)  # an unknown option is refused with the list of valid ones
        target = resolve_target(host, user, port, key_filename)
        if (
            not isinstance(connect_timeout, (int, float))
            or isinstance(connect_timeout, bool)
            or connect_timeout <= 0
        ):
            raise ConfigError(f"ssh backend: connect_timeout must be > 0 seconds, got {connect_timeout!r}")
        if connect_kwargs is not None and not isinstance(connect_kwargs, dict):
            raise ConfigError("ssh backend: connect_kwargs must be a dict of paramiko connect() arguments")
        bad = sorted({"hostname", "port", "username", "timeout"} & set(connect_kwargs or {}))
        if bad:
            raise ConfigError(
                f"ssh backend: pass host/port/user/connect_timeout as options, "
                f"not as connect_kwargs {', '.join(bad)}"
            )
        policy = policy_option("ssh backend", {"host_key_policy": host_key_policy})
        known_hosts = known_hosts_path("ssh backend: known_hosts", known_hosts)
        self.options = {
            **target,
            "connect_timeout": connect_timeout,
            "enforce_limits": enforce_limits,
            "host_key_policy": policy,
            "known_hosts": known_hosts,
        }
        self.host, self.user, self.port = target["host"], target["user"], target["port"]
        self.key_filename = target["key_filename"]
        self.connect_timeout = connect_timeout
        #: host, key and host-key policy as the ssh binary and paramiko use them
        self.settings = SshSettings(
            self.user, self.host, self.port, self.key_filename, known_hosts, policy, float(connect_timeout)
        )
        self.enforce = bool(enforce_limits)
        self.connect_kwargs = dict(connect_kwargs or {})
        self.conn: Connection | None = None
        #: the connection's control shell, which runs the control scripts (:mod:`.ssh_control`)
        self.shell: ControlShell | None = None
        self._listed: tuple[float, HostFacts] | None = None
        self.facts: HostFacts | None = None
        self.driver: cgroups.Driver | None = None
        self.workroot = ""
        self._why_not = ""
        self._lock = threading.Lock()
        self.sftp_lock = threading.Lock()

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    # -- connection ---------------------------------------------------------------------------
    def _tried(self) -> str:
        key = self.key_filename or "paramiko's default keys (~/.ssh/id_*) and the ssh agent"
        return f"{self.target} with key {key}"

    def _open(self) -> Connection:
        if self.key_filename and not os.path.isfile(self.key_filename):
            raise BackendUnavailable(
                f"ssh backend: key file {self.key_filename} does not exist (from key_filename or "
                f"{ENV_KEY}); create one with ssh-keygen, or {SETUP_HINT}"
            )
        kwargs: dict[str, object] = {
            "banner_timeout": self.connect_timeout,
            "auth_timeout": self.connect_timeout,
            "channel_timeout": self.connect_timeout,
        }
        if self.key_filename:
            kwargs.update(key_filename=[self.key_filename], look_for_keys=False, allow_agent=False)
        kwargs.update(self.connect_kwargs)
        conn = Connection(
            self.host,
            user=self.user,
            port=self.port,
            connect_timeout=self.connect_timeout,
            connect_kwargs=kwargs,
        )
        self.settings.configure(conn.client)  # fabric's own policy accepts every host key
        try:
            conn.open()
            conn.transport.set_keepalive(15)  # a partitioned host must not hang a run forever
            return conn
        except (paramiko.SSHException, EOFError, OSError) as exc:
            conn.close()
            raise BackendUnavailable(f"ssh backend: {self._why_no_connection(exc)}") from exc
        except BaseException:
            conn.close()
            raise

    def _why_no_connection(self, exc: Exception) -> str:
        keys = hostkeys.why_not(exc, self.host, self.port, self.settings.known_hosts)
        if keys:
            return keys
        if isinstance(exc, paramiko.AuthenticationException):
            return (
                f"{self._tried()}: authentication failed ({exc}). Authorize the public key in "
                f"~{self.user}/.ssh/authorized_keys on {self.host}, or choose the user/key with "
                f"user=/key_filename= or {ENV_USER}/{ENV_KEY}; {SETUP_HINT}"
            )
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return (
                f"no answer from {self.host}:{self.port} within {self.connect_timeout}s (tried "
                f"{self._tried()}); check the address and firewall, or set {ENV_HOST}/{ENV_PORT}; "
                f"{SETUP_HINT}"
            )
        if isinstance(exc, (paramiko.SSHException, EOFError)):
            return (
                f"SSH handshake with {self.host}:{self.port} failed ({exc}); is an sshd listening "
                f"there? (tried {self._tried()}); {SETUP_HINT}"
            )
        # refused, unreachable, unknown host (NoValidConnectionsError)
        return (
            f"cannot connect to {self.host}:{self.port} ({exc}; tried {self._tried()}); start an "
            f"sshd there or point {ENV_HOST}/{ENV_PORT} at one; {SETUP_HINT}"
        )

    def connection(self) -> Connection:
        """The open connection, probed (facts, cgroup driver, work root) the first time."""
        return self._connected()[0]

    def host_facts(self) -> HostFacts:
        """What the connection's probe found on the host (connecting first)."""
        return self._connected()[1]

    def _connected(self) -> tuple[Connection, HostFacts]:
        with self._lock:
            if self.conn is not None and self.facts is not None:
                return self.conn, self.facts
            return self._connect_locked()

    def _connect_locked(self) -> tuple[Connection, HostFacts]:
        """Open and probe the connection. The probe's round trip also lists the instances
        (``labkit-*``) on the host, which the first :meth:`list_labkit` uses (a campaign's clean-up
        right after connecting: one round trip fewer)."""
        self.conn = conn = self._open()
        self.shell = ControlShell(conn.transport)
        try:
            script = PROBE + WORK_ROOT + listing_script(NAME_PREFIX) + "true\n"
            facts = HostFacts(
                self._run(
                    conn,
                    script,
                    max(30.0, float(self.connect_timeout)),
                    "probing the host and making the work root",
                ).stdout
            )
            self.workroot = posixpath.join(facts.get("home"), ".cache", "labkit", "instances")
        except BaseException as exc:
            self.close_locked()
            if isinstance(exc, BackendError):
                raise BackendUnavailable(f"ssh backend: probing {self.target} failed: {exc}") from exc
            raise
        self.driver, self._why_not = native.detect_driver(facts, self.target)
        self.facts = facts
        self._listed = (time.monotonic(), facts)
        return conn, facts

    def check(self) -> None:
        facts = self.host_facts()
        native.check_host(self.name, facts, self.driver, self._why_not, self.enforce, self.target)

    def _run(self, conn: Connection, script: str, timeout: float, what: str = "a control script"):
        """Run ``script`` with /bin/sh on the host; BackendError unless it exits 0 in time. In the
        connection's control shell (:mod:`.ssh_control`: no login shell to start), or on a channel
        of its own while the control shell is busy with another thread's script."""
        shell = self.shell
        try:
            reply = (
                shell.run(script, timeout)
                if shell is not None and shell.transport is conn.transport
                else None
            )
            if reply is not None:
                res = invoke.Result(
                    stdout=reply.stdout, stderr=reply.stderr, exited=reply.exited, command=script
                )
            else:
                res = conn.run(
                    "exec /bin/sh -c " + q(script),
                    hide=True,
                    warn=True,
                    in_stream=False,
                    pty=False,
                    timeout=timeout,
                )
        except (invoke.exceptions.CommandTimedOut, TimeoutError) as exc:
            raise BackendError(f"{self.target}: {what} ran past {timeout:.0f}s") from exc
        except paramiko.ChannelException as exc:
            raise BackendError(
                f"{self.target} refused a new SSH channel ({exc}): too many commands at once over one "
                "connection; raise MaxSessions in the remote sshd_config"
            ) from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise BackendError(f"{self.target}: SSH connection failed ({exc})") from exc
        if res.exited == ssh_network.UNAVAILABLE:  # the script found the host unable to do it
            raise BackendUnavailable(f"{self.target}: {what}: {(res.stderr or res.stdout).strip()[-2000:]}")
        if res.exited != 0:
            raise BackendError(
                f"{self.target}: {what} failed (exit {res.exited}): "
                f"{(res.stderr or res.stdout).strip()[-2000:]}"
            )
        return res

    def run_script(self, script: str, what: str, timeout: float = CONTROL_TIMEOUT_S) -> invoke.Result:
        """A short control script (create, kill, remove, list) on the host; its fabric Result."""
        return self._run(self.connection(), script, timeout, what)

    # -- Backend hooks -------------------------------------------------------------------------
    def _cpu_ids(self) -> list[int]:
        return native.cpu_ids(self.host_facts(), self.driver)

    def host_cpus(self) -> int:
        return len(self._cpu_ids())

    def _create(
        self,
        spec: InstanceSpec,
        name: str,
        index: int,
        cpus: list[int] | None,
        network: Network | None = None,
    ) -> SshInstance:
        if network is not None:
            self._check_network(network)
        self._listed = None  # the probe's listing no longer stands
        real, script = native.create_script(
            self.host_facts(), self.driver, self.workroot, spec, name, cpus, self.target
        )
        if network is not None:  # in the same round trip: its namespace on the network
            script += ssh_network.attach_script(
                name, network, index, posixpath.join(self.workroot, name, "hosts")
            )

        def make() -> SshInstance:
            inst = SshInstance(self, name, spec, index, cpus, real, netns=network is not None)
            if network is not None:
                inst.host_device = ssh_network.host_device(network, index)
            return inst

        return native.create(
            name, lambda: self.run_script(script, f"creating instance {name}"), self.remove, make
        )

    def remove(self, names: list[str], bridges: dict[str, str] | None = None) -> None:
        """Kill the instances' processes, remove their cgroups, network namespaces and work dirs
        (the work dir last: while it exists, :meth:`list_labkit` finds the rest); then the
        ``bridges`` (alias -> device) of networks, with their FORWARD rules."""
        self._listed = None
        script = native.remove_script(self.driver, self.workroot, names, also=ssh_network.remove_netns_script)
        for alias, device in (bridges or {}).items():
            script += ssh_network.remove_bridge_script(device, alias)
        if script:
            self.run_script(script, f"removing {', '.join([*names, *(bridges or {})])}")

    # -- private networks (:mod:`.ssh_network`) -------------------------------------------------
    def _check_network(self, network: Network) -> None:
        """ConfigError unless ``network`` is one of this backend's; BackendUnavailable naming what
        the host lacks for it (root, ip, nsenter, unshare, tc)."""
        if network.backend is not self:
            raise ConfigError(f"network {network.name} belongs to another backend ({network.backend.name})")
        self._require_network_tools(network.link)

    def _require_network_tools(self, link: netmod.Link | None) -> None:
        facts = self.host_facts()
        lacking = ssh_network.missing(facts.tools, facts.get("uid"), link)
        if lacking:
            raise BackendUnavailable(
                f"ssh backend: a private network on {self.target} needs {', '.join(lacking)} there (each "
                "instance in its own network namespace on a bridge): log in as root and install "
                "iproute2 and util-linux"
            )

    def _create_network(self, network: Network) -> None:
        """The network's bridge on the host (:func:`.ssh_network.bridge_script`)."""
        self._check_network(network)
        self.run_script(ssh_network.bridge_script(network), f"creating network {network.name}")

    def _remove_network(self, network: Network) -> None:
        self.run_script(
            ssh_network.remove_bridge_script(network.device, network.name), f"removing network {network.name}"
        )

    def host_routes(self) -> list[ipaddress.IPv4Network]:
        """The host's routes, which a new network's subnet must not overlap."""
        self._require_network_tools(None)  # before `ip` is run: what the host lacks, said clearly
        return netmod.parse_routes(
            self.run_script(shlex.join(netmod.ROUTES_ARGV), "reading the host's routes").stdout
        )

    def link_shaped_here(self, network: Network) -> None:
        """Nothing: the veths' host ends are on the ssh host, shaped there as the instance is made."""
        return None

    def host_end(self, network: Network) -> SshHostEnd:
        """The host end of ``network``: the ssh host itself (:class:`SshHostEnd`)."""
        return SshHostEnd(self, network)

    def list_labkit(self, prefix: str = "labkit-") -> list[str]:
        """Instances (cgroups and work dirs) on the host whose names start with ``prefix``. On a
        connection not open yet, the listing rides in the connection probe's round trip (a
        campaign's first call: one round trip fewer)."""
        return self._listing(prefix, bridges=False)[0]

    def _listing(self, prefix: str, bridges: bool = True) -> tuple[list[str], dict[str, str]]:
        """(instances, bridges of networks: alias -> device; with ``bridges``) named ``prefix*`` on
        the host: the connection probe's listing while it is fresh (once), else a new one."""
        check_prefix(prefix)
        with self._lock:
            if self.conn is None:
                self._connect_locked()
            taken, facts = self._listed or (0.0, None)
            self._listed = None  # used once: later calls list again
        if facts is None or time.monotonic() - taken > LISTING_FRESH_S:
            script = native.list_script(self.driver, self.workroot, prefix)
            facts = HostFacts(self.run_script(script, f"listing {prefix}* instances").stdout, probe=False)
        names = native.listed_names(self.driver, facts.listed, prefix)
        found: dict[str, str] = {}
        if bridges and facts.netdevs:  # devices named like networks' bridges: whose? (one more round trip)
            found = ssh_network.parse_bridges(
                self.run_script(ssh_network.BRIDGES, "listing bridges").stdout, prefix
            )
        return names, found

    def cleanup(self, prefix: str) -> list[str]:
        """Remove what instances and networks named ``prefix*`` left (a killed campaign's): none
        when the listing found nothing, else one round trip (and one more to name the bridges
        when the host has any of networks')."""
        names, bridges = self._listing(prefix)
        self.remove(names, bridges)
        return names + sorted(bridges)

    def fingerprint(self) -> dict:
        return {
            "backend": self.name,
            "ssh_host": self.target,
            "host_key_policy": self.settings.host_key_policy,
            **native.host_fingerprint(self.host_facts(), self.driver),
        }

    def close(self) -> None:
        with self._lock:
            self.close_locked()

    def close_locked(self) -> None:
        conn, self.conn = self.conn, None
        shell, self.shell = self.shell, None
        self.facts, self._listed = None, None
        if shell is not None:
            shell.close()
        if conn is not None:
            with self.sftp_lock:
                conn.close()
