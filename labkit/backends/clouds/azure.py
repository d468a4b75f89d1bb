"""Microsoft Azure through ``azure-mgmt-compute`` + ``azure-identity`` (experimental: tested on
recorded HTTP exchanges; ``labkit cloud check --provider azure`` runs the contract on a real account).

Options: ``subscription_id`` (default ``$AZURE_SUBSCRIPTION_ID``), ``resource_group`` (exists
already), ``location``, ``subnet_id`` (the resource id of the subnet the servers join),
``public_ip`` (true: SSH goes to a public address made with the server; default false: the private
address, for a controller inside the virtual network), ``admin_username`` (default ``labkit``;
the same key also opens ``root``, which the ``ssh`` backend uses by default), plus the common
options (``prices``, ``ssh_user``, ``key_filename``, ...). Credentials: ``DefaultAzureCredential``
(``AZURE_CLIENT_ID``/``AZURE_TENANT_ID``/``AZURE_CLIENT_SECRET``, a managed identity, ``az login``).

The flavor is a VM size (``Standard_B1s``), the image a marketplace URN
``publisher:offer:sku:version`` or an image resource id. The compute API makes the network
interface (and public address) itself (``networkInterfaceConfigurations``) with
``deleteOption: Delete``, as it does the OS disk: deleting the server deletes them all. Servers are
tagged ``labkit-prefix: <prefix>``; the server id labkit keeps is the VM name (one resource group).
"""

from __future__ import annotations

import base64
import os
from typing import Any

from ...errors import BackendError, BackendUnavailable, ConfigError
from .base import ACTIVE, BUILDING, ERROR, GONE, CloudProvider, ServerRef, ServerState
from .openstack import public_key

NETWORK_API = "2023-09-01"
SETUP_HINT = (
    "set AZURE_SUBSCRIPTION_ID and the credentials DefaultAzureCredential reads "
    "(AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET, or `az login`)"
)
_STATE = {
    "Succeeded": ACTIVE,
    "Failed": ERROR,
    "Creating": BUILDING,
    "Updating": BUILDING,
    "Deleting": BUILDING,
    "Migrating": BUILDING,
}
_CONFIG_CODES = {
    "InvalidParameter",
    "SkuNotAvailable",
    "ImageNotFound",
    "PlatformImageNotFound",
    "InvalidResourceReference",
    "ResourceGroupNotFound",
    "InvalidTemplate",
    "BadRequest",
}
_AUTH_CODES = {
    "AuthorizationFailed",
    "InvalidAuthenticationToken",
    "ExpiredAuthenticationToken",
    "SubscriptionNotFound",
    "InvalidSubscriptionId",
}
#: cloud-init: the admin user's key opens root too (the ssh backend logs in as root by default)
CLOUD_CONFIG = "#cloud-config\ndisable_root: false\n"


class AzureProvider(CloudProvider):
    name = "azure"
    EXTRA = "azure"
    MODULE = "azure.mgmt.compute"
    OPTIONS = ("subscription_id", "resource_group", "location", "subnet_id", "public_ip", "admin_username")

    def __init__(self, *, credential=None, **options):
        super().__init__(**options)
        self.subscription_id = self.options.get("subscription_id") or os.environ.get("AZURE_SUBSCRIPTION_ID")
        self.resource_group = self.options.get("resource_group")
        self.location = self.options.get("location")
        self.subnet_id = self.options.get("subnet_id")
        self.public_ip = self.options.get("public_ip", False)
        self.admin_username = self.options.get("admin_username", "labkit")
        if not isinstance(self.public_ip, bool):
            raise ConfigError("cloud provider azure: 'public_ip' must be true or false")
        for k in ("resource_group", "location", "admin_username"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, str) or not v or len(v) > 90):
                raise ConfigError(f"cloud provider azure: {k!r} must be a name, got {str(v)[:60]!r}")
        self._credential = credential
        self._client = None

    @property
    def client(self) -> Any:
        if self._client is None:
            compute = self.sdk
            if not self.subscription_id:
                raise BackendUnavailable(f"azure: no subscription (option 'subscription_id'); {SETUP_HINT}")
            if not self.resource_group:
                raise ConfigError("cloud provider azure: 'resource_group' is required")
            cred = self._credential
            if cred is None:
                identity = self._identity()
                cred = identity.DefaultAzureCredential()
            self._client = compute.ComputeManagementClient(cred, self.subscription_id)
        return self._client

    def _identity(self):
        from .base import require_sdk

        return require_sdk("azure.identity", self.EXTRA, self.name)

    def translate(self, exc: Exception, what: str) -> Exception:
        """An azure-core/azure-identity error as a labkit error naming ``what``."""
        from azure.core import exceptions as ax

        if (
            isinstance(exc, ax.ClientAuthenticationError)
            or type(exc).__name__ == "CredentialUnavailableError"
        ):
            return BackendUnavailable(f"azure: {what}: {str(exc)[:400]}; {SETUP_HINT}")
        if isinstance(exc, ax.ServiceRequestError):
            return BackendUnavailable(
                f"azure: {what}: cannot reach Azure Resource Manager ({str(exc)[:300]})"
            )
        if isinstance(exc, ax.HttpResponseError):
            code = getattr(getattr(exc, "error", None), "code", None) or ""
            text = f"azure: {what}: HTTP {exc.status_code} {code}: {str(getattr(exc.error, 'message', '') or exc.message)[:500]}"
            if code in _AUTH_CODES or exc.status_code == 401:
                return BackendUnavailable(f"{text}; {SETUP_HINT}")
            if code in _CONFIG_CODES or exc.status_code == 400:
                return ConfigError(text)
            return BackendError(text)
        return BackendError(f"azure: {what}: {type(exc).__name__}: {str(exc)[:500]}")

    def _call(self, what: str, fn, *args, **kwargs):
        from azure.core.exceptions import AzureError

        try:
            return fn(*args, **kwargs)
        except AzureError as exc:
            raise self.translate(exc, what) from exc

    # -- hooks -------------------------------------------------------------------------
    def check(self) -> None:
        self._call(
            "list servers", lambda: next(iter(self.client.virtual_machines.list(self.resource_group)), None)
        )

    def body(self, name: str, flavor: str, image: str, tags: dict) -> dict:
        """The VirtualMachine resource (REST JSON) of server ``name``."""
        if not self.location or not self.subnet_id:
            raise ConfigError(
                "cloud provider azure: 'location' and 'subnet_id' are required to create servers"
            )
        if not self.key_filename:
            raise ConfigError(
                "cloud provider azure: 'key_filename' (a private key; its public half opens the server) "
                "is required"
            )
        if image.startswith("/subscriptions/"):
            ref = {"id": image}
        else:
            parts = image.split(":")
            if len(parts) != 4 or not all(parts):
                raise ConfigError(
                    f"cloud provider azure: image {image!r}: a URN publisher:offer:sku:version "
                    "or an image resource id"
                )
            ref = dict(zip(("publisher", "offer", "sku", "version"), parts))
        ipconf: dict[str, Any] = {
            "name": "ipconfig1",
            "properties": {"subnet": {"id": self.subnet_id}, "primary": True},
        }
        if self.public_ip:
            ipconf["properties"]["publicIPAddressConfiguration"] = {
                "name": f"{name}-ip",
                "properties": {"deleteOption": "Delete"},
                "sku": {"name": "Standard"},
            }
        return {
            "location": self.location,
            "tags": dict(tags),
            "properties": {
                "hardwareProfile": {"vmSize": flavor},
                "storageProfile": {
                    "imageReference": ref,
                    "osDisk": {"createOption": "FromImage", "deleteOption": "Delete"},
                },
                "osProfile": {
                    "computerName": name,
                    "adminUsername": self.admin_username,
                    "customData": base64.b64encode(CLOUD_CONFIG.encode()).decode(),
                    "linuxConfiguration": {
                        "disablePasswordAuthentication": True,
                        "ssh": {
                            "publicKeys": [
                                {
                                    "path": f"/home/{self.admin_username}/.ssh/authorized_keys",
                                    "keyData": public_key(self.key_filename),
                                }
                            ]
                        },
                    },
                },
                "networkProfile": {
                    "networkApiVersion": "2020-11-01",
                    "networkInterfaceConfigurations": [
                        {
                            "name": f"{name}-nic",
                            "properties": {
                                "primary": True,
                                "deleteOption": "Delete",
                                "ipConfigurations": [ipconf],
                            },
                        }
                    ],
                },
            },
        }

    def _create(self, name: str, flavor: str, image: str, tags: dict) -> str:
        self._call(
            f"create server {name}",
            self.client.virtual_machines.begin_create_or_update,
            self.resource_group,
            name,
            self.body(name, flavor, image, tags),
            polling=False,
        )
        return name

    def _get(self, name: str):
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return self._call(
                f"get server {name}",
                self.client.virtual_machines.get,
                self.resource_group,
                name,
                expand="instanceView",
            )
        except BackendError as exc:
            if isinstance(exc.__cause__, ResourceNotFoundError):
                return None
            raise

    def _arm_get(self, resource_id: str) -> dict:
        from azure.core.rest import HttpRequest

        req = HttpRequest("GET", f"{resource_id}?api-version={NETWORK_API}")
        resp = self._call(f"get {resource_id}", self.client.send_request, req)
        try:
            resp.raise_for_status()
        except Exception as exc:
            raise self.translate(exc, f"get {resource_id}") from exc
        return resp.json()

    def _address(self, vm) -> str | None:
        nics = (vm.get("properties") or {}).get("networkProfile", {}).get("networkInterfaces") or []
        if not nics:
            return None
        nic = self._arm_get(nics[0]["id"])
        conf = ((nic.get("properties") or {}).get("ipConfigurations") or [{}])[0].get("properties") or {}
        if not self.public_ip:
            return conf.get("privateIPAddress")
        pip = conf.get("publicIPAddress")
        return self._arm_get(pip["id"]).get("properties", {}).get("ipAddress") if pip else None

    def _state(self, server_id: str) -> ServerState:
        vm = self._get(server_id)
        if vm is None:
            return ServerState(GONE)
        vm = vm.as_dict() if hasattr(vm, "as_dict") and not isinstance(vm, dict) else vm
        props = vm.get("properties") or {}
        status = _STATE.get(props.get("provisioningState") or "", BUILDING)
        statuses = (props.get("instanceView") or {}).get("statuses") or []
        fault = "; ".join(
            str(s.get("message") or s.get("code")) for s in statuses if s.get("level") == "Error"
        )
        return ServerState(status, self._address(vm) if status == ACTIVE else None, fault)

    def _delete(self, server_id: str) -> None:
        if self._get(server_id) is not None:
            self._call(
                f"delete server {server_id}",
                self.client.virtual_machines.begin_delete,
                self.resource_group,
                server_id,
                polling=False,
            )

    def _gone(self, server_id: str) -> bool:
        return self._get(server_id) is None

    def _list(self, prefix: str) -> list[ServerRef]:
        vms = self._call("list servers", lambda: list(self.client.virtual_machines.list(self.resource_group)))
        return [ServerRef(vm.name, vm.name, dict(vm.tags or {})) for vm in vms]
