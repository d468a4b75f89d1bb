"""The cloud provider contract: instances from a flavor and an image, handed over as SSH hosts.

A :class:`CloudProvider` creates servers named ``<prefix><8 hex>`` (the campaign's prefix
``labkit-<campaign id>--``, as every backend's instances) and tags each with that prefix, waits
until each answers over SSH (an authenticated ``true``, within a deadline), and returns
:class:`CloudInstance` objects: an address, a port, a user and a key, which the ``ssh`` backend
(:class:`labkit.backends.ssh.SshBackend`) and testbed hosts take as they are. The time from the
create request to the first successful SSH command is ``provisioning_s`` (a metric of every run,
as in PerfKitBenchmarker); ``price_per_hour`` comes from the provider's ``prices`` option.

Host keys (options ``host_key_policy``, ``known_hosts``; :mod:`labkit.backends.hostkeys`): the
servers are new, so the default is ``accept-new`` into labkit's own file :data:`CLOUD_KNOWN_HOSTS`
(0600): the first answer records the server's key, and the :class:`CloudInstance` hands the server
on with ``strict`` against that file, so every later connection (the ``ssh`` backend, testbed
hosts) must meet the recorded key. Before waiting for a new server labkit forgets the entries of its
address in its own file only (a recycled address: the old key was a deleted server's); an old key
for that address in ``~/.ssh/known_hosts`` or in a ``known_hosts`` file the user gave is still
checked, so a reused IP with a different key is refused with the ``ssh-keygen -R`` command, never
passed silently. ``strict`` needs the keys listed beforehand; ``insecure`` checks nothing.

``cleanup(prefix)`` deletes what carries both the prefix in its name and the prefix tag, and
nothing else: campaign ids contain no ``--``, so ``labkit-x--`` never matches ``labkit-x-2--``.

Hooks a provider writes::

    class MyCloud(CloudProvider):
        name = "mine"
        EXTRA, MODULE = "mine", "mine_sdk"          # pip install 'labkit[mine]'; import check
        OPTIONS = ("region",)                      # provider options (others: ConfigError)
        def check(self): ...                       # credentials and endpoint; BackendUnavailable
        def _create(self, name, flavor, image, tags) -> str: ...   # request; the server id
        def _state(self, server_id) -> ServerState: ...            # status, address, fault
        def _delete(self, server_id): ...          # request deletion; quiet if already gone
        def _gone(self, server_id) -> bool: ...    # deletion finished
        def _list(self, prefix) -> list[ServerRef]: ...   # servers tagged with prefix
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import secrets
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ...core.waiting import wait_until
from ...errors import BackendError, BackendUnavailable, ConfigError
from .. import hostkeys
from ..base import check_prefix

if TYPE_CHECKING:
    from ..ssh import SshBackend

log = logging.getLogger("labkit.backends.clouds")

#: tag (metadata key) every labkit server carries: the campaign's instance prefix
TAG = "labkit-prefix"
#: server states a provider reports through :class:`ServerState`
BUILDING, ACTIVE, ERROR, GONE = "building", "active", "error", "gone"
COMMON_OPTIONS = (
    "prices",
    "ssh_user",
    "ssh_port",
    "key_filename",
    "boot_timeout",
    "ssh_timeout",
    "poll_interval",
    "host_key_policy",
    "known_hosts",
)
#: where the host keys of the servers labkit creates are recorded, unless ``known_hosts`` is given
CLOUD_KNOWN_HOSTS = "~/.cache/labkit/cloud_known_hosts"
MAX_INSTANCES = 64


@dataclass(frozen=True)
class ServerState:
    """What a provider knows of one server: ``status`` (building/active/error/gone), its SSH
    ``address`` once it has one, and the provider's ``fault`` text in the error state."""

    status: str
    address: str | None = None
    fault: str = ""


@dataclass(frozen=True)
class ServerRef:
    """A server a provider listed: its ``name``, provider ``id`` and ``tags``."""

    name: str
    id: str
    tags: dict = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class CloudInstance:
    """A server that answered over SSH: what the ``ssh`` backend and a testbed host need."""

    name: str
    id: str
    provider: str
    flavor: str
    image: str
    address: str
    port: int = 22
    user: str = "root"
    key_filename: str | None = None
    provisioning_s: float = math.nan
    price_per_hour: float | None = None
    active_s: float = math.nan
    host_key_policy: str = hostkeys.STRICT
    known_hosts: str | None = None

    def host(self) -> dict:
        """A testbed host mapping (``labkit.run.testbed`` ``hosts:`` entry): name, address, port, user,
        key, platforms ``[ssh]``, labels (provider, flavor, image, instance id) and price_per_hour."""
        return {
            "name": self.name,
            "address": self.address,
            "port": self.port,
            "user": self.user,
            "key": self.key_filename,
            "platforms": ["ssh"],
            "labels": {
                "provider": self.provider,
                "flavor": self.flavor,
                "image": self.image,
                "instance_id": self.id,
            },
            "price_per_hour": self.price_per_hour,
            "host_key_policy": self.host_key_policy,
            **({"known_hosts": self.known_hosts} if self.known_hosts else {}),
        }

    def ssh_options(self) -> dict:
        """Keyword arguments of :class:`labkit.backends.ssh.SshBackend` for this server."""
        return {
            "host": self.address,
            "port": self.port,
            "user": self.user,
            "key_filename": self.key_filename,
            "host_key_policy": self.host_key_policy,
            "known_hosts": self.known_hosts,
        }

    def ssh_backend(self, **options: Any) -> SshBackend:
        """An :class:`~labkit.backends.ssh.SshBackend` on this server (``options`` are passed on)."""
        from ..ssh import SshBackend

        return SshBackend(**self.ssh_options(), **options)

    def metrics(self) -> dict:
        """Per-run metrics: ``provisioning_s`` (request -> SSH ready) and ``active_s`` (request ->
        the cloud reports the server active with an address), seconds."""
        return {"provisioning_s": self.provisioning_s, "active_s": self.active_s}


def require_sdk(module: str, extra: str, provider: str) -> ModuleType:
    """``module`` imported, else BackendUnavailable with the pip command of labkit's extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BackendUnavailable(
            f"the {provider} provider needs the Python package {module.split('.')[0]!r} "
            f"({exc}); install it with: pip install 'labkit[{extra}]'"
        ) from exc


def _number(where: str, value, lo: float, hi: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not lo <= value <= hi
    ):
        raise ConfigError(f"{where}: a number in [{lo:g}, {hi:g}], got {str(value)[:40]!r}")
    return float(value)


class CloudProvider(ABC):
    """The shared work of every cloud: names, tags, deadlines, SSH readiness, cleanup."""

    name = "cloud"
    EXTRA = ""
    MODULE = ""
    OPTIONS: tuple[str, ...] = ()

    def __init__(self, **options):
        allowed = COMMON_OPTIONS + self.OPTIONS
        unknown = sorted(k for k in options if k not in allowed)
        if unknown:
            raise ConfigError(
                f"cloud provider {self.name}: unknown option(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(allowed)}"
            )
        where = f"cloud provider {self.name}"
        prices = options.pop("prices", None) or {}
        if not isinstance(prices, dict) or any(
            not isinstance(k, str)
            or isinstance(v, bool)
            or not isinstance(v, (int, float))
            or not math.isfinite(v)
            or v < 0
            for k, v in prices.items()
        ):
            raise ConfigError(f"{where}: 'prices' must map flavor names to a price per hour >= 0")
        self.prices = {k: float(v) for k, v in prices.items()}
        self.ssh_user = options.pop("ssh_user", "root")
        if not isinstance(self.ssh_user, str) or not self.ssh_user or len(self.ssh_user) > 32:
            raise ConfigError(f"{where}: 'ssh_user' must be a user name")
        self.ssh_port = int(_number(f"{where}: 'ssh_port'", options.pop("ssh_port", 22), 1, 65535))
        key = options.pop("key_filename", None)
        if key is not None and (not isinstance(key, str) or not key or "\x00" in key):
            raise ConfigError(f"{where}: 'key_filename' must be the path of a private key file")
        self.key_filename = os.path.expanduser(key) if key else None
        self.boot_timeout = _number(f"{where}: 'boot_timeout'", options.pop("boot_timeout", 900), 1, 7200)
        self.ssh_timeout = _number(f"{where}: 'ssh_timeout'", options.pop("ssh_timeout", 10), 0.5, 120)
        self.poll_interval = _number(f"{where}: 'poll_interval'", options.pop("poll_interval", 2), 0.0, 60)
        self.host_key_policy = hostkeys.check_policy(
            options.pop("host_key_policy", hostkeys.ACCEPT_NEW), where
        )
        given = hostkeys.known_hosts_path(f"{where}: 'known_hosts'", options.pop("known_hosts", None))
        #: True when the known_hosts file is labkit's own (:data:`CLOUD_KNOWN_HOSTS`)
        self.own_known_hosts = given is None
        self.known_hosts = given or os.path.expanduser(CLOUD_KNOWN_HOSTS)
        self.options = options
        self._sdk = None

    # -- hooks ---------------------------------------------------------------
    @abstractmethod
    def check(self) -> None:
        """Raise BackendUnavailable (with the fix) unless credentials and the endpoint work."""

    @abstractmethod
    def _create(self, name: str, flavor: str, image: str, tags: dict) -> str:
        """Request one server; return its provider id (do not wait)."""

    @abstractmethod
    def _state(self, server_id: str) -> ServerState:
        """Where server ``server_id`` is now."""

    @abstractmethod
    def _delete(self, server_id: str) -> None:
        """Request deletion; quiet if the server is already gone."""

    @abstractmethod
    def _gone(self, server_id: str) -> bool:
        """True once the server no longer exists."""

    @abstractmethod
    def _list(self, prefix: str) -> list[ServerRef]:
        """Servers carrying tag :data:`TAG` = ``prefix`` (the provider may return more)."""

    # -- shared --------------------------------------------------------------
    @property
    def sdk(self) -> Any:
        """The provider's SDK module (BackendUnavailable naming the extra when missing)."""
        if self._sdk is None:
            self._sdk = require_sdk(self.MODULE, self.EXTRA, self.name)
        return self._sdk

    def flavor_vcpus(self, flavor: str) -> int | None:
        """vCPUs of ``flavor``, or None when the provider does not say (the default)."""
        return None

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release what this provider object made besides servers (a keypair it imported)."""

    def price_per_hour(self, flavor: str) -> float | None:
        """The price per hour of ``flavor`` from the ``prices`` option, None when not given."""
        return self.prices.get(flavor)

    def provision(self, flavor: str, image: str, prefix: str, count: int = 1) -> list[CloudInstance]:
        """``count`` servers of ``flavor`` from ``image`` named ``<prefix><8 hex>`` and tagged with
        ``prefix``, each ready over SSH. Servers made by a failed call are deleted before the error
        (BackendError naming the server and the provider's fault) propagates."""
        check_prefix(prefix)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_INSTANCES:
            raise ConfigError(f"count must be an integer in [1, {MAX_INSTANCES}], got {count!r}")
        for what, v in (("flavor", flavor), ("image", image)):
            if not isinstance(v, str) or not v or len(v) > 255:
                raise ConfigError(f"cloud provider {self.name}: {what} must be a name, got {v!r}")
        made: list[tuple[str, str, float]] = []
        try:
            for _ in range(count):
                name = f"{prefix}{secrets.token_hex(4)}"
                t0 = time.monotonic()
                made.append((name, self._create(name, flavor, image, {TAG: prefix}), t0))
            return [self._ready(name, sid, t0, flavor, image) for name, sid, t0 in made]
        except BaseException:
            for name, sid, _ in made:
                try:
                    self.delete(sid)
                except Exception as exc:  # the first error is the one to report
                    log.warning("could not delete %s (%s) after a failed provision: %s", name, sid, exc)
            raise

    def _ready(self, name: str, sid: str, t0: float, flavor: str, image: str) -> CloudInstance:
        deadline = t0 + self.boot_timeout
        address = self._wait_active(name, sid, deadline)
        active = time.monotonic() - t0
        self.wait_new_server(address, deadline, f"{self.name} server {name}")
        after = hostkeys.INSECURE if self.host_key_policy == hostkeys.INSECURE else hostkeys.STRICT
        return CloudInstance(
            name,
            sid,
            self.name,
            flavor,
            image,
            address,
            self.ssh_port,
            self.ssh_user,
            self.key_filename,
            time.monotonic() - t0,
            self.price_per_hour(flavor),
            active,
            after,
            self.known_hosts,
        )

    def wait_new_server(self, address: str, deadline: float, what: str) -> float:
        """:func:`wait_ssh` for a server just created, with this provider's user, key and host-key
        policy. Under accept-new with labkit's own known_hosts file the entries of ``address`` are
        dropped first: the server is new, so a key recorded for its address was a deleted server's."""
        if self.host_key_policy == hostkeys.ACCEPT_NEW and self.own_known_hosts:
            hostkeys.forget(self.known_hosts, address, self.ssh_port)
        return wait_ssh(
            address,
            self.ssh_port,
            self.ssh_user,
            self.key_filename,
            deadline,
            connect_timeout=self.ssh_timeout,
            interval=self.poll_interval,
            what=what,
            host_key_policy=self.host_key_policy,
            known_hosts=self.known_hosts,
        )

    def _wait_active(self, name: str, sid: str, deadline: float) -> str:
        """Wait until server ``sid`` is active with an address; that address."""
        last = "none"

        def address() -> str | None:
            nonlocal last
            state = self._state(sid)
            last = state.status
            if state.status == ERROR:
                raise BackendError(
                    f"{self.name} server {name} ({sid}) failed: {state.fault or 'no fault given'}"
                )
            if state.status == GONE:
                raise BackendError(f"{self.name} server {name} ({sid}) disappeared while booting")
            return state.address if state.status == ACTIVE and state.address else None

        return wait_until(
            address,
            timeout=max(0.0, deadline - time.monotonic()),
            interval=self.poll_interval,
            what=f"{self.name} server {name} ({sid}) to be active with an address",
            detail=lambda: f"boot_timeout={self.boot_timeout:g}s, last status {last}",
        )

    def delete(self, server_id: str, timeout: float = 300.0) -> None:
        """Delete one server and wait (up to ``timeout`` s) until it is gone; BackendError then."""
        self._delete(server_id)
        self._wait_gone(server_id, server_id, timeout)

    def _wait_gone(self, server_id: str, label: str, timeout: float) -> None:
        wait_until(
            lambda: self._gone(server_id),
            timeout=timeout,
            interval=self.poll_interval,
            what=f"{self.name} server {label} to be gone after its deletion",
        )

    def destroy(self, instances: list[CloudInstance]) -> None:
        """Delete ``instances`` (teardown); every one is tried, the first failure is raised."""
        first = None
        for inst in instances:
            try:
                self.delete(inst.id)
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first

    def list_labkit(self, prefix: str = "labkit-") -> list[ServerRef]:
        """Servers named ``prefix*`` whose :data:`TAG` starts with ``prefix`` too (sorted by name)."""
        check_prefix(prefix)
        return sorted(
            (
                s
                for s in self._list(prefix)
                if s.name.startswith(prefix) and str(s.tags.get(TAG, "")).startswith(prefix)
            ),
            key=lambda s: s.name,
        )

    def cleanup(self, prefix: str) -> list[str]:
        """Delete every server of :meth:`list_labkit` (``prefix``); returns their names."""
        found = self.list_labkit(prefix)
        for s in found:
            self._delete(s.id)
        deadline = time.monotonic() + 300
        for s in found:
            self._wait_gone(s.id, f"{s.name} ({s.id})", max(0.0, deadline - time.monotonic()))
        return [s.name for s in found]


def wait_ssh(
    address: str,
    port: int,
    user: str,
    key_filename: str | None,
    deadline: float,
    *,
    connect_timeout: float = 10.0,
    interval: float = 2.0,
    what: str = "server",
    host_key_policy: str = hostkeys.STRICT,
    known_hosts: str | None = None,
) -> float:
    """Block until ``user@address:port`` runs ``true`` over SSH (key auth), or the monotonic
    ``deadline`` passes (BackendError with the last error). Returns the time.monotonic() of success.
    Host keys are checked by ``host_key_policy`` (:func:`labkit.backends.hostkeys.configure`); a
    refused key (unknown under strict, changed) is BackendUnavailable at once, not retried."""
    import paramiko

    last = "no attempt"

    def answers() -> float | None:
        nonlocal last
        client = paramiko.SSHClient()
        hostkeys.configure(client, host_key_policy, known_hosts)
        try:
            t = min(connect_timeout, max(deadline - time.monotonic(), 0.1))
            client.connect(
                address,
                port=port,
                username=user,
                key_filename=key_filename,
                timeout=t,
                banner_timeout=t,
                auth_timeout=t,
                allow_agent=key_filename is None,
                look_for_keys=key_filename is None,
            )
            _, out, _ = client.exec_command("true", timeout=t)
            if out.channel.recv_exit_status() == 0:
                return time.monotonic()
            last = "`true` failed"
        except (paramiko.BadHostKeyException, hostkeys.UnknownHostKey) as exc:
            raise BackendUnavailable(f"{what}: {hostkeys.why_not(exc, address, port, known_hosts)}") from exc
        except (OSError, paramiko.SSHException, EOFError) as exc:  # not up yet: tried again
            last = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            client.close()
        return None

    return wait_until(
        answers,
        timeout=max(0.0, deadline - time.monotonic()),
        interval=interval,
        what=f"{what}: SSH on {address}:{port} as {user}",
        detail=lambda: f"last error: {last}",
    )
