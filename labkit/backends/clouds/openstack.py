"""OpenStack through openstacksdk: ``clouds.yaml`` as OpenStack users have it.

Options: ``cloud`` (the clouds.yaml entry; default ``$OS_CLOUD``), ``network`` (name or id of the
network the servers get their address on; default: the only one the project sees), ``key_name``
(an existing keypair; default: labkit imports the public half of ``key_filename`` as keypair
``<prefix>key``, deleted by cleanup with the servers), plus the common options of
:class:`~labkit.backends.clouds.base.CloudProvider` (``prices``, ``ssh_user``, ``key_filename``, ...).

Servers carry the metadata ``labkit-prefix: <prefix>``; :meth:`cleanup` lists servers whose name
matches ``^<prefix>`` (nova's name filter) and deletes those whose metadata agrees. Ports made by
nova go with their server; labkit makes no volume and no image.
"""

from __future__ import annotations

import os

from ...core.waiting import retry
from ...errors import BackendError, BackendUnavailable, ConfigError
from .base import ACTIVE, BUILDING, ERROR, GONE, TAG, CloudProvider, ServerRef, ServerState

SETUP_HINT = (
    "write a clouds.yaml entry (~/.config/openstack/clouds.yaml or /etc/openstack/clouds.yaml) "
    "and name it with the 'cloud' option or $OS_CLOUD; for labkit's test cloud run "
    "`bash scripts/setup-openstack.sh` (cloud 'labkit')"
)
#: requests sent again after a dropped connection (a reset, a refused connect), ATTEMPTS in all
IDEMPOTENT = ("get", "find", "list", "delete")
ATTEMPTS = 3
_STATUS = {
    "ACTIVE": ACTIVE,
    "ERROR": ERROR,
    "DELETED": GONE,
    "SOFT_DELETED": GONE,
    "BUILD": BUILDING,
    "REBUILD": BUILDING,
    "HARD_REBOOT": BUILDING,
    "REBOOT": BUILDING,
}


class OpenStackProvider(CloudProvider):
    name = "openstack"
    EXTRA = "openstack"
    MODULE = "openstack"
    OPTIONS = ("cloud", "network", "key_name")

    def __init__(self, **options):
        super().__init__(**options)
        self.cloud = self.options.get("cloud") or os.environ.get("OS_CLOUD")
        self.network = self.options.get("network")
        self.key_name = self.options.get("key_name")
        for k in ("cloud", "network", "key_name"):
            v = self.options.get(k)
            if v is not None and (not isinstance(v, str) or not v or len(v) > 255):
                raise ConfigError(f"cloud provider openstack: {k!r} must be a name, got {str(v)[:60]!r}")
        self._conn = None
        self._net_id = None
        self._imported: set[str] = set()  # keypairs this object imported (deleted by close)

    # -- connection and errors -------------------------------------------------------
    @property
    def conn(self):
        if self._conn is None:
            sdk = self.sdk
            if not self.cloud:
                raise BackendUnavailable(
                    f"openstack: no cloud named (option 'cloud' or $OS_CLOUD); {SETUP_HINT}"
                )
            try:
                self._conn = sdk.connect(cloud=self.cloud)
            except Exception as exc:
                raise self.translate(exc, f"cloud {self.cloud!r}") from exc
        return self._conn

    def translate(self, exc: Exception, what: str) -> Exception:
        """An openstacksdk/keystoneauth error as a labkit error naming ``what``."""
        from keystoneauth1 import exceptions as ka
        from openstack import exceptions as ox
        from openstack.config import exceptions as cx

        msg = f"openstack: {what}: {type(exc).__name__}: {str(exc)[:500]}"
        if isinstance(exc, cx.OpenStackConfigException):
            return BackendUnavailable(f"{msg}; {SETUP_HINT}")
        if isinstance(
            exc,
            (
                ka.Unauthorized,
                ka.ConnectFailure,
                ka.MissingAuthPlugin,
                ka.DiscoveryFailure,
                ka.EndpointNotFound,
                ka.catalog.EmptyCatalog,
            ),
        ):
            return BackendUnavailable(f"{msg}; check the credentials and auth_url of cloud {self.cloud!r}")
        if isinstance(exc, ox.ResourceNotFound):
            return ConfigError(msg)
        if isinstance(exc, ox.HttpException) and exc.status_code == 403:
            return BackendError(f"{msg} (quota or policy)")
        return BackendError(msg)

    def _call(self, what: str, fn, *args, **kwargs):
        """``fn(*args, **kwargs)``, its errors translated. A request that only reads or deletes
        (``what`` starts with one of :data:`IDEMPOTENT`) is sent again after a dropped connection
        (up to :data:`ATTEMPTS` times in all); a create never is (it could make a second server)."""
        from keystoneauth1 import exceptions as ka
        from openstack import exceptions as ox

        attempts = ATTEMPTS if what.split(" ", 1)[0] in IDEMPOTENT else 1
        try:
            return retry(
                lambda: fn(*args, **kwargs),
                transient=ka.ConnectionError,
                attempts=attempts,
                what=f"openstack cloud {self.cloud!r}: {what}",
                interval=1.0,
                backoff=2.0,
            )
        except (ox.SDKException, ka.ClientException) as exc:
            raise self.translate(exc, what) from exc

    # -- hooks -------------------------------------------------------------------------
    def check(self) -> None:
        self._call("list flavors", lambda: next(iter(self.conn.compute.flavors()), None))

    def flavor_vcpus(self, flavor: str) -> int | None:
        return self._find("flavor", self.conn.compute.find_flavor, flavor).vcpus

    def _find(self, kind: str, finder, name: str):
        found = self._call(f"find {kind} {name!r}", finder, name, ignore_missing=True)
        if found is None:
            raise ConfigError(f"openstack cloud {self.cloud!r}: no {kind} {name!r}")
        return found

    def _network_id(self) -> str:
        if self._net_id is None:
            if self.network:
                self._net_id = self._find("network", self.conn.network.find_network, self.network).id
            else:
                nets = self._call("list networks", lambda: list(self.conn.network.networks()))
                if len(nets) != 1:
                    raise ConfigError(
                        f"openstack cloud {self.cloud!r}: {len(nets)} networks "
                        f"({', '.join(n.name for n in nets[:10])}); name one with the 'network' option"
                    )
                self._net_id = nets[0].id
        return self._net_id

    def _keypair(self, prefix: str) -> str:
        if self.key_name:
            return self.key_name
        if not self.key_filename:
            raise ConfigError(
                "cloud provider openstack: give 'key_name' (an existing keypair) or "
                "'key_filename' (a private key labkit imports as a keypair)"
            )
        name = f"{prefix}key"
        if self._call("find keypair", self.conn.compute.find_keypair, name, ignore_missing=True) is None:
            self._call(
                "create keypair",
                self.conn.compute.create_keypair,
                name=name,
                public_key=public_key(self.key_filename),
            )
            self._imported.add(name)
        return name

    def _create(self, name: str, flavor: str, image: str, tags: dict) -> str:
        fl = self._find("flavor", self.conn.compute.find_flavor, flavor)
        im = self._find("image", self.conn.image.find_image, image)
        server = self._call(
            f"create server {name}",
            self.conn.compute.create_server,
            name=name,
            flavor_id=fl.id,
            image_id=im.id,
            networks=[{"uuid": self._network_id()}],
            key_name=self._keypair(tags[TAG]),
            metadata=dict(tags),
        )
        return server.id

    def _state(self, server_id: str) -> ServerState:
        s = self._call(
            f"get server {server_id}", self.conn.compute.find_server, server_id, ignore_missing=True
        )
        if s is None:
            return ServerState(GONE)
        status = _STATUS.get(s.status, BUILDING)
        fault = (s.fault or {}).get("message", "") if isinstance(s.fault, dict) else str(s.fault or "")
        return ServerState(status, first_address(s.addresses or {}, self.network), fault)

    def _delete(self, server_id: str) -> None:
        self._call(
            f"delete server {server_id}", self.conn.compute.delete_server, server_id, ignore_missing=True
        )

    def _gone(self, server_id: str) -> bool:
        return (
            self._call(
                f"get server {server_id}", self.conn.compute.find_server, server_id, ignore_missing=True
            )
            is None
        )

    def _list(self, prefix: str) -> list[ServerRef]:
        servers = self._call("list servers", lambda: list(self.conn.compute.servers(name=f"^{prefix}")))
        return [ServerRef(s.name, s.id, dict(s.metadata or {})) for s in servers]

    def close(self) -> None:
        """Delete the keypairs this object imported (a campaign's end: its servers are gone)."""
        while self._imported:
            name = self._imported.pop()
            self._call("delete keypair", self.conn.compute.delete_keypair, name, ignore_missing=True)

    def cleanup(self, prefix: str) -> list[str]:
        """Servers of ``prefix`` (see the base class), then labkit's keypair ``<prefix>key``."""
        gone = super().cleanup(prefix)
        if not self.key_name:
            kp = self._call(
                "find keypair", self.conn.compute.find_keypair, f"{prefix}key", ignore_missing=True
            )
            if kp is not None:
                self._call("delete keypair", self.conn.compute.delete_keypair, kp, ignore_missing=True)
        return gone


def first_address(addresses: dict, network: str | None = None) -> str | None:
    """The first IPv4 address of a nova ``addresses`` mapping (``network -> [{addr, version}]``),
    on ``network`` when that names one of its keys; None when there is none."""
    nets = [network] if network in addresses else sorted(addresses)
    for net in nets:
        for a in addresses.get(net) or []:
            if a.get("version") == 4 and a.get("addr"):
                return a["addr"]
    return None


def public_key(key_filename: str) -> str:
    """The OpenSSH public key line of a private key file (``<file>.pub`` if present, else derived)."""
    pub = key_filename + ".pub"
    if os.path.isfile(pub):
        with open(pub, encoding="ascii") as f:
            return " ".join(f.read().split()[:2])
    import paramiko

    try:
        key = paramiko.PKey.from_path(key_filename)
    except (OSError, ValueError, paramiko.SSHException) as exc:
        raise ConfigError(f"key_filename {key_filename}: not a readable private key ({exc})") from exc
    return f"{key.get_name()} {key.get_base64()}"
