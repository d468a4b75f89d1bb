"""Apache CloudStack through ``cs`` (experimental: tested on recorded HTTP exchanges only).

Options: ``config`` (a section of ``cloudstack.ini``, read by ``cs.read_config``; the
``CLOUDSTACK_ENDPOINT``/``_KEY``/``_SECRET`` variables work as with the ``cs`` command), ``zone``
(name; default: the only zone), ``network`` (name; default: CloudStack's choice), ``keypair`` (an
SSH keypair already registered; default: labkit registers the public half of ``key_filename`` as
``<prefix>key``), plus the common options (``prices``, ``ssh_user``, ``key_filename``, ...).

The flavor is a service offering name, the image a template name. A server is deployed with
``group=<prefix>`` (atomic with the deploy) and tagged ``labkit-prefix=<prefix>``; cleanup deletes
(expunges) servers named ``<prefix>*`` whose tag or group is that prefix.
"""

from __future__ import annotations

from typing import Any

from ...errors import BackendError, BackendUnavailable, ConfigError
from .base import ACTIVE, BUILDING, ERROR, GONE, TAG, CloudProvider, ServerRef, ServerState
from .openstack import public_key

SETUP_HINT = (
    "set CLOUDSTACK_ENDPOINT, CLOUDSTACK_KEY and CLOUDSTACK_SECRET, or write a "
    "cloudstack.ini section and name it with the 'config' option"
)
_STATE = {"Running": ACTIVE, "Error": ERROR, "Destroyed": GONE, "Expunging": GONE}
#: CloudStack's API error codes (ApiErrorCode): 401 unauthorized, 431 parameter error,
#: 432 unsupported action, 436 insufficient capacity, 530 internal error, 533 resource unavailable,
#: 534 resource allocation error, 535 resource allocation denied (limits)
_CONFIG_CODES = {431, 432}


class CloudStackProvider(CloudProvider):
    name = "cloudstack"
    EXTRA = "cloudstack"
    MODULE = "cs"
    OPTIONS = ("config", "zone", "network", "keypair", "endpoint", "key", "secret")

    def __init__(self, **options):
        super().__init__(**options)
        self._api = None
        self._zone_id = None

    @property
    def api(self) -> Any:
        if self._api is None:
            cs = self.sdk
            direct = {k: self.options[k] for k in ("endpoint", "key", "secret") if self.options.get(k)}
            try:
                conf = direct if "endpoint" in direct else cs.read_config(self.options.get("config"))
            except (SystemExit, ValueError, KeyError) as exc:
                raise BackendUnavailable(f"cloudstack: no configuration ({exc}); {SETUP_HINT}") from exc
            conf = {k: v for k, v in conf.items() if k in ("endpoint", "key", "secret", "timeout", "verify")}
            self._api = cs.CloudStack(**conf)
        return self._api

    def translate(self, exc: Exception, what: str) -> Exception:
        """A ``cs``/requests error as a labkit error naming ``what``."""
        import requests

        cs = self.sdk
        if isinstance(exc, requests.RequestException):
            return BackendUnavailable(f"cloudstack: {what}: cannot reach the endpoint ({exc}); {SETUP_HINT}")
        error = getattr(exc, "error", None)
        if isinstance(exc, cs.CloudStackApiException) and isinstance(error, dict):
            code = error.get("errorcode")
            text = f"cloudstack: {what}: error {code}: {str(error.get('errortext', ''))[:500]}"
            if code == 401:
                return BackendUnavailable(f"{text}; check the API key and secret ({SETUP_HINT})")
            if code in _CONFIG_CODES:
                return ConfigError(text)
            return BackendError(text)
        return BackendError(f"cloudstack: {what}: {type(exc).__name__}: {str(exc)[:500]}")

    def _call(self, what: str, command: str, **params):
        import requests

        cs = self.sdk
        try:
            return getattr(self.api, command)(**params)
        except (cs.CloudStackException, requests.RequestException) as exc:
            raise self.translate(exc, what) from exc

    def _one(self, kind: str, command: str, key: str, wanted: str | None, **params) -> str:
        """The id of the one ``kind`` named ``wanted`` (or the only one when None); ConfigError else."""
        found = self._call(f"list {kind}", command, fetch_list=True, **params)
        if wanted is not None:
            found = [f for f in found if f.get("name") == wanted]
        if len(found) != 1:
            have = ", ".join(sorted(str(f.get("name")) for f in found)[:10])
            raise ConfigError(
                f"cloudstack: {kind} {wanted!r}: {len(found)} match(es)"
                + (f" ({have}); name one with the {key!r} option" if found else "")
            )
        return found[0]["id"]

    # -- hooks -------------------------------------------------------------------------
    def check(self) -> None:
        self._call("list zones", "listZones")

    def _zone(self) -> str:
        if self._zone_id is None:
            self._zone_id = self._one("zone", "listZones", "zone", self.options.get("zone"))
        return self._zone_id

    def _keypair(self, prefix: str) -> str:
        if self.options.get("keypair"):
            return self.options["keypair"]
        if not self.key_filename:
            raise ConfigError(
                "cloud provider cloudstack: give 'keypair' (a registered SSH keypair) or "
                "'key_filename' (a private key labkit registers)"
            )
        name = f"{prefix}key"
        if not self._call("list SSH keypairs", "listSSHKeyPairs", name=name, fetch_list=True):
            self._call(
                "register SSH keypair",
                "registerSSHKeyPair",
                name=name,
                publickey=public_key(self.key_filename),
            )
        return name

    def _create(self, name: str, flavor: str, image: str, tags: dict) -> str:
        zone = self._zone()
        offering = self._one("service offering", "listServiceOfferings", "flavor", flavor, name=flavor)
        template = self._one(
            "template", "listTemplates", "image", image, name=image, templatefilter="executable", zoneid=zone
        )
        params = {
            "serviceofferingid": offering,
            "templateid": template,
            "zoneid": zone,
            "name": name,
            "displayname": name,
            "group": tags[TAG],
            "keypair": self._keypair(tags[TAG]),
        }
        if self.options.get("network"):
            params["networkids"] = [
                self._one("network", "listNetworks", "network", self.options["network"], zoneid=zone)
            ]
        vm = self._call(f"deploy {name}", "deployVirtualMachine", **params)
        try:
            self._call(
                f"tag {name}",
                "createTags",
                resourceids=[vm["id"]],
                resourcetype="UserVm",
                tags=[{"key": k, "value": v} for k, v in tags.items()],
                fetch_result=True,
            )
        except BaseException:  # not returned to provision(): delete it here
            self.delete(vm["id"])
            raise
        return vm["id"]

    def _vm(self, server_id: str) -> dict | None:
        vms = self._call(f"get {server_id}", "listVirtualMachines", id=server_id, listall=True)
        vms = vms.get("virtualmachine", []) if isinstance(vms, dict) else vms
        return vms[0] if vms else None

    def _state(self, server_id: str) -> ServerState:
        vm = self._vm(server_id)
        if vm is None:
            return ServerState(GONE)
        nics = vm.get("nic") or []
        address = next(
            (n.get("ipaddress") for n in nics if n.get("isdefault") and n.get("ipaddress")),
            nics[0].get("ipaddress") if nics else None,
        )
        status = _STATE.get(vm.get("state") or "", BUILDING)
        return ServerState(status, address, "" if status != ERROR else f"state Error ({vm.get('name')})")

    def _delete(self, server_id: str) -> None:
        if self._vm(server_id) is not None:
            self._call(f"destroy {server_id}", "destroyVirtualMachine", id=server_id, expunge=True)

    def _gone(self, server_id: str) -> bool:
        vm = self._vm(server_id)
        return vm is None or vm.get("state") in ("Destroyed", "Expunging")

    def _list(self, prefix: str) -> list[ServerRef]:
        vms = self._call("list servers", "listVirtualMachines", keyword=prefix, listall=True, fetch_list=True)
        out = []
        for vm in vms:
            tags = {t.get("key"): t.get("value") for t in vm.get("tags") or []}
            if TAG not in tags and vm.get("group"):
                tags[TAG] = vm["group"]
            out.append(ServerRef(vm.get("name", ""), vm["id"], tags))
        return out

    def cleanup(self, prefix: str) -> list[str]:
        """Servers of ``prefix`` (see the base class), then labkit's keypair ``<prefix>key``."""
        gone = super().cleanup(prefix)
        if not self.options.get("keypair") and self._call(
            "list SSH keypairs", "listSSHKeyPairs", name=f"{prefix}key", fetch_list=True
        ):
            self._call("delete SSH keypair", "deleteSSHKeyPair", name=f"{prefix}key")
        return gone
