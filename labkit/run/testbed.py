"""A testbed: the hosts a campaign runs on, the platforms each offers, and how runs go to them.

::

    name: rack-a
    platforms:                       # optional: named backend + options (see labkit.run.platforms)
      kvm: {backend: libvirt, uri: "qemu+ssh://{user}@{address}/system"}
      native: {backend: ssh}
    hosts:
      - {name: n1, address: 10.0.0.11, user: root, key: ~/.ssh/id_ed25519,
         platforms: [native, kvm], labels: {rack: a, cpu: epyc-7302}, price_per_hour: 0.8}
      - {name: n2, address: 10.0.0.12, platforms: [native, kvm]}
    assign: blocks            # each replicate block on one host (default); random: any host per run
    on_host_loss: move        # pending runs of a lost host go to others; fail-block: re-run its blocks whole
    connect_timeout: 10       # seconds, every SSH connect
    host_key_policy: strict   # strict (default) | accept-new | insecure; a host may set its own
    known_hosts: ~/lab/known_hosts   # optional, checked besides ~/.ssh/known_hosts; a host may set its own

A host without ``address`` is this machine (the controller); it offers every platform unless it
lists some. A remote host offers ``[ssh]`` unless it lists others. ``Testbed.local()`` (no testbed
file) is this machine alone. Every bad input is a ConfigError naming the file and the key.

A **Slurm testbed** has a ``slurm`` section instead of ``hosts`` (:mod:`labkit.run.slurm_testbed`): its hosts
are the nodes of an allocation asked for when the campaign starts (:meth:`Testbed.allocated`),
each offering ``slurm`` and every declared platform (all of backend ``slurm``: job steps on the node).

``host_key_policy`` and ``known_hosts`` (:mod:`labkit.backends.hostkeys`) go to every SSH path
of a remote host's platforms (:func:`labkit.run.platforms.options_for`): the ``ssh`` backend, docker
over ``ssh://``, generated libvirt URIs, and the MPI launch agent's ``ssh`` commands.
"""

from __future__ import annotations

import contextlib
import getpass
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..backends import hostkeys
from ..backends.hostkeys import known_hosts_path
from ..errors import ConfigError
from .hosts import reachable
from .platforms import BACKENDS, Platform, check_platform_name, parse_platforms, resolve
from .slurm_testbed import SlurmRequest

TESTBED_KEYS = (
    "name",
    "hosts",
    "slurm",
    "platforms",
    "assign",
    "on_host_loss",
    "connect_timeout",
    "host_key_policy",
    "known_hosts",
)
HOST_KEYS = (
    "name",
    "address",
    "port",
    "user",
    "key",
    "platforms",
    "labels",
    "price_per_hour",
    "host_key_policy",
    "known_hosts",
)
ASSIGN = ("blocks", "random")
ON_HOST_LOSS = ("move", "fail-block")
MAX_HOSTS = 4096
_HOST_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
_ADDR_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.:[]")


@dataclass(frozen=True)
class Host:
    """One host: ``address`` None means this machine (the controller)."""

    name: str
    address: str | None = None
    port: int = 22
    user: str = "root"
    key: str | None = None
    platforms: tuple[str, ...] = ()
    labels: dict = field(default_factory=dict, hash=False)
    price_per_hour: float | None = None
    host_key_policy: str = hostkeys.DEFAULT
    known_hosts: str | None = None
    #: the Slurm job whose allocation holds this host (a node of a Slurm testbed), else None
    slurm_job: str | None = None

    @property
    def remote(self) -> bool:
        return self.address is not None

    def describe(self) -> dict:
        return {
            "name": self.name,
            "address": self.address,
            "port": self.port,
            "user": self.user,
            "key": self.key,
            "platforms": list(self.platforms),
            "labels": dict(self.labels),
            "price_per_hour": self.price_per_hour,
            # only when set: a campaign stored before these keys existed still resumes (RESUME_KEYS)
            **({"host_key_policy": self.host_key_policy} if self.host_key_policy != hostkeys.DEFAULT else {}),
            **({"known_hosts": self.known_hosts} if self.known_hosts else {}),
        }


@dataclass
class Testbed:
    __test__ = False  # not a pytest test class
    hosts: list[Host]
    platforms: dict[str, Platform] = field(default_factory=dict)
    assign: str = "blocks"
    on_host_loss: str = "move"
    connect_timeout: float = 10.0
    name: str = "testbed"
    source: str = field(default="testbed", repr=False)
    #: a Slurm testbed's request (its hosts come from :meth:`allocated`), else None
    slurm: SlurmRequest | None = None
    #: how the engine asks whether a host answers: ``probe(host, timeout, thorough) -> (ok, why)``;
    #: None: its sshd's banner (:func:`labkit.run.hosts.reachable`). A Slurm allocation sets its own.
    prober: Callable[[Host, float, bool], tuple[bool, str]] | None = field(default=None, repr=False)

    # -- construction ------------------------------------------------------
    @classmethod
    def local(cls, platforms: dict | None = None) -> Testbed:
        """This machine alone, offering every platform."""
        return cls([Host("local", platforms=())], parse_platforms(platforms or {}), name="local")

    @classmethod
    def load(cls, value) -> Testbed:
        """A Testbed from a Testbed, a dict, a YAML path, or None (this machine alone)."""
        if value is None:
            return cls.local()
        if isinstance(value, Testbed):
            return value
        if isinstance(value, dict):
            return cls.from_dict(value)
        if isinstance(value, (str, os.PathLike)):
            return cls.from_yaml(value)
        raise ConfigError(f"testbed must be a Testbed, a mapping or a YAML path, got {type(value).__name__}")

    @classmethod
    def from_yaml(cls, path) -> Testbed:
        from ..core.yamlsafe import load_yaml

        return cls.from_dict(load_yaml(path), source=str(Path(path)))

    @classmethod
    def from_dict(cls, data, *, source: str = "testbed") -> Testbed:
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: a testbed must be a mapping with keys {', '.join(TESTBED_KEYS)}")
        unknown = sorted(str(k)[:64] for k in data if k not in TESTBED_KEYS)
        if unknown:
            raise ConfigError(
                f"{source}: unknown key(s) {', '.join(map(repr, unknown))}; "
                f"allowed: {', '.join(TESTBED_KEYS)}"
            )
        declared = parse_platforms(data.get("platforms"), source)
        slurm = None
        raw_hosts = data.get("hosts")
        if data.get("slurm") is not None:
            if data.get("hosts") is not None:
                raise ConfigError(
                    f"{source}: a Slurm testbed's hosts are the nodes of its allocation: give "
                    "'slurm' or 'hosts', not both"
                )
            slurm = SlurmRequest.parse(data["slurm"], source, MAX_HOSTS)
            for p in declared.values():
                if p.backend != "slurm":
                    raise ConfigError(
                        f"{source}: platforms.{p.name}.backend: on a Slurm testbed every platform "
                        f"runs as job steps on the allocated nodes: use backend slurm, not {p.backend!r}"
                    )
            raw_hosts = []
        else:
            if not isinstance(raw_hosts, list) or not raw_hosts:
                raise ConfigError(
                    f"{source}: 'hosts' must be a list of at least one host mapping "
                    "(or a 'slurm' section: nodes from a Slurm allocation)"
                )
        if len(raw_hosts) > MAX_HOSTS:
            raise ConfigError(f"{source}: 'hosts': at most {MAX_HOSTS} hosts, got {len(raw_hosts)}")
        keys = _host_keys(source, data, {})
        hosts = [_host(f"{source}: hosts[{i}]", h, declared, keys) for i, h in enumerate(raw_hosts)]
        names = [h.name for h in hosts]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"{source}: 'hosts': duplicate host name(s) {', '.join(dup)}")
        assign = data.get("assign", "blocks")
        if assign not in ASSIGN:
            raise ConfigError(
                f"{source}: 'assign' must be one of {', '.join(ASSIGN)}, got {str(assign)[:64]!r}"
            )
        loss = data.get("on_host_loss", "move")
        if loss not in ON_HOST_LOSS:
            raise ConfigError(
                f"{source}: 'on_host_loss' must be one of {', '.join(ON_HOST_LOSS)}, got {str(loss)[:64]!r}"
            )
        timeout = data.get("connect_timeout", 10)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or not 0 < timeout <= 600
        ):
            raise ConfigError(
                f"{source}: 'connect_timeout' must be seconds in (0, 600], got {str(timeout)[:64]}"
            )
        name = data.get("name", "testbed")
        if not isinstance(name, str) or len(name) > 256:
            raise ConfigError(f"{source}: 'name' must be text of at most 256 characters")
        return cls(hosts, declared, assign, loss, float(timeout), name, source, slurm)

    # -- queries -----------------------------------------------------------
    @property
    def default_platform(self) -> str:
        """The platform of a design without a ``platform`` factor when none is named: ``slurm`` on a
        Slurm testbed, ``ssh`` when every host is remote, else ``local``."""
        if self.slurm is not None:
            return "slurm"
        return "ssh" if all(h.remote for h in self.hosts) else "local"

    def platform(self, name: str) -> Platform:
        return resolve(name, self.platforms, self.source)

    def reachable(self, host: Host, timeout: float, *, thorough: bool = False) -> tuple[bool, str]:
        """(True, "") if ``host`` answers within ``timeout`` s, else (False, why): its sshd's banner, or
        :attr:`prober`'s answer (a Slurm node's state; ``thorough``: after a failed run, also a step
        on it)."""
        if self.prober is not None:
            return self.prober(host, timeout, thorough)
        return reachable(host, timeout)

    @contextlib.contextmanager
    def allocated(self, store, campaign_id: str) -> Iterator[None]:
        """A Slurm testbed: while the block runs, its hosts are the nodes of a new allocation
        recorded in ``store``'s meta (:func:`labkit.run.slurm_testbed.allocated`: released on every way out);
        any other testbed: nothing to do."""
        if self.slurm is None:
            yield
            return
        from . import slurm_testbed

        with slurm_testbed.allocated(self.slurm, store, campaign_id) as alloc:
            plats = tuple(sorted({"slurm", *self.platforms}))
            self.hosts = [
                Host(
                    n.name,
                    n.address,
                    user=getpass.getuser(),
                    platforms=plats,
                    labels={k: v for k, v in (("partitions", n.partitions), ("features", n.features)) if v},
                    slurm_job=alloc.job_id,
                )
                for n in alloc.nodes
            ]
            self.prober = alloc.probe
            try:
                yield
            finally:
                self.hosts, self.prober = [], None

    def offers(self, host: Host, platform: str) -> bool:
        if host.platforms:
            return platform in host.platforms
        return not host.remote or platform == "ssh"

    def hosts_for(self, platform: str) -> list[Host]:
        return [h for h in self.hosts if self.offers(h, platform)]

    def check_platforms(self, names: list[str], where: str = "design") -> None:
        """Every platform in ``names`` is known and offered by some host; blocks assignment needs a
        host offering all of them. ConfigError naming the platform and the hosts otherwise."""
        if self.slurm is not None:  # its hosts are not known yet: every node offers every platform
            for n in names:
                if self.platform(n).backend != "slurm":
                    raise ConfigError(
                        f"{where}: platform {n!r} of Slurm testbed {self.source} must use backend "
                        f"slurm (job steps on the allocated nodes), not {self.platform(n).backend!r}"
                    )
            return
        for n in names:
            self.platform(n)
            if not self.hosts_for(n):
                raise ConfigError(
                    f"{where}: no host of testbed {self.source} offers platform {n!r} "
                    f"(hosts: {', '.join(f'{h.name}: {list(h.platforms) or _default(h)}' for h in self.hosts)})"
                )
        if self.assign == "blocks" and not self.block_hosts(names):
            raise ConfigError(
                f"{where}: assign: blocks runs a whole replicate block on one host, but no host of "
                f"{self.source} offers every platform {names}; offer them all on some host or "
                "use assign: random"
            )

    def block_hosts(self, names: list[str]) -> list[Host]:
        """Hosts that offer every platform in ``names`` (those that can take whole blocks)."""
        return [h for h in self.hosts if all(self.offers(h, n) for n in names)]

    def describe(self) -> dict:
        """What a resumed campaign must match (stored redacted)."""
        if self.slurm is not None:  # the request, not the nodes one allocation gave: a resume gets others
            return {
                "name": self.name,
                "assign": self.assign,
                "on_host_loss": self.on_host_loss,
                "slurm": self.slurm.describe(),
                "hosts": [],
                "platforms": {n: p.describe() for n, p in sorted(self.platforms.items())},
            }
        return {
            "name": self.name,
            "assign": self.assign,
            "on_host_loss": self.on_host_loss,
            "hosts": [h.describe() for h in self.hosts],
            "platforms": {n: p.describe() for n, p in sorted(self.platforms.items())},
        }


def _default(h: Host) -> list[str]:
    return ["ssh"] if h.remote else ["(all)"]


def _host_keys(where: str, raw: dict, defaults: dict) -> dict:
    """``host_key_policy`` and ``known_hosts`` of ``raw`` (a testbed or a host), else ``defaults``."""
    out = dict(defaults)
    if raw.get("host_key_policy") is not None:
        out["host_key_policy"] = hostkeys.check_policy(raw["host_key_policy"], where)
    if raw.get("known_hosts") is not None:
        out["known_hosts"] = known_hosts_path(f"{where}: known_hosts", raw["known_hosts"])
    return out


def _host(where: str, raw, declared: dict, keys: dict) -> Host:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a host must be a mapping with keys {', '.join(HOST_KEYS)}")
    unknown = sorted(str(k)[:64] for k in raw if k not in HOST_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(HOST_KEYS)}"
        )
    name = raw.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 64 or not set(name) <= _HOST_CHARS:
        raise ConfigError(
            f"{where}.name: required, 1-64 letters, digits, '.', '_' or '-'; got {str(name)[:80]!r}"
        )
    where = f"{where.rsplit(':', 1)[0]}: hosts.{name}"
    address = raw.get("address")
    if address is not None and (
        not isinstance(address, str)
        or not 1 <= len(address) <= 253
        or not set(address) <= _ADDR_CHARS
        or address.startswith("-")
    ):
        raise ConfigError(f"{where}.address: a host name or IP address, got {str(address)[:80]!r}")
    port = raw.get("port", 22)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"{where}.port: a TCP port number (1-65535), got {str(port)[:32]!r}")
    user = raw.get("user", "root")
    if not isinstance(user, str) or not 1 <= len(user) <= 32 or not set(user) <= _HOST_CHARS:
        raise ConfigError(f"{where}.user: a user name, got {str(user)[:40]!r}")
    key = raw.get("key")
    if key is not None:
        if not isinstance(key, str) or not key or len(key) > 4096 or "\x00" in key:
            raise ConfigError(f"{where}.key: the path of a private key file, got {str(key)[:80]!r}")
        key = os.path.expanduser(key)
    plats = raw.get("platforms", [])
    if not isinstance(plats, list) or any(not isinstance(p, str) for p in plats):
        raise ConfigError(f"{where}.platforms: a list of platform names")
    for p in plats:
        check_platform_name(f"{where}.platforms", p)
        if p not in declared and p not in BACKENDS:
            raise ConfigError(
                f"{where}.platforms: {p!r} is neither declared under 'platforms' "
                f"({', '.join(declared) or 'none'}) nor a backend ({', '.join(BACKENDS)})"
            )
        if address is not None and (declared[p].backend if p in declared else p) == "local":
            raise ConfigError(
                f"{where}.platforms: {p!r} uses the local backend, which runs on the controller "
                "only; a remote host offers 'ssh' for native runs"
            )
    labels = raw.get("labels", {})
    if (
        not isinstance(labels, dict)
        or len(labels) > 64
        or any(
            not isinstance(k, str) or not isinstance(v, (str, int, float, bool)) or len(str(v)) > 256
            for k, v in labels.items()
        )
    ):
        raise ConfigError(f"{where}.labels: a mapping of at most 64 names to short values (text or numbers)")
    price = raw.get("price_per_hour")
    if price is not None and (
        isinstance(price, bool)
        or not isinstance(price, (int, float))
        or not math.isfinite(price)
        or price < 0
    ):
        raise ConfigError(f"{where}.price_per_hour: a number >= 0, got {str(price)[:32]!r}")
    return Host(
        name,
        address,
        port,
        user,
        key,
        tuple(plats),
        dict(labels),
        None if price is None else float(price),
        **_host_keys(where, raw, keys),
    )
