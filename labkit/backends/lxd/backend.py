"""The ``lxd`` backend itself (:mod:`labkit.backends.lxd`): :class:`LxdBackend`, system containers
through pylxd's models on LXD's unix socket."""

from __future__ import annotations

import os
import re
import secrets
from typing import Any

from ...core import network_factors as netmod
from ...core.instance import InstanceSpec
from ...core.mounts import parse_mounts
from ...core.waiting import retry
from ...errors import BackendError, BackendUnavailable
from ..base import Backend, check_cpus, check_name, log
from ..containers import CleanupByName, check_image, or_none
from ..private_network import Network, remove_bridges
from . import base as lxd_base
from .api import START_HINT, default_socket, instance_busy, sdk, socket_hint
from .config import DEFAULT_IMAGE, instance_config, lxd_prefix
from .host import cgroup_version, wait_init
from .instance import LxdInstance


class LxdBackend(CleanupByName, Backend):
    """System containers through pylxd's models on LXD's unix socket.

    Options: ``image`` (alias, default ``labkit-debian-12``), ``socket`` (default
    ``$LXD_DIR/unix.socket`` or ``/var/lib/lxd/unix.socket``), ``pool`` (storage pool
    for the root disk; default: the default profile's, else the first pool),
    ``privileged`` (default False), ``mounts`` (host directories as ``disk`` devices, see
    :mod:`labkit.core.mounts`).
    """

    name = "lxd"
    OPTIONS = ("image", "socket", "pool", "privileged", "mounts")
    daemons = ("lxd",)  # the daemon and its forks (lxc monitors, forkstart); comm is "lxd"

    def __init__(self, **options):
        super().__init__(**options)
        self.image = options.get("image") or DEFAULT_IMAGE
        self.socket = options.get("socket") or default_socket()
        self.pool = options.get("pool")
        self.privileged = bool(options.get("privileged", False))
        self.mounts = parse_mounts(options.get("mounts"), "lxd")
        self._client = self._host_cpus = None

    @property
    def client(self) -> Any:
        """pylxd's ``Client`` on the unix socket (models: instances, images, storage_pools)."""
        if self._client is None:
            pylxd = sdk()
            if not os.path.exists(self.socket):
                raise BackendUnavailable(f"LXD is not running: no socket at {self.socket}; {START_HINT}")
            try:
                self._client = pylxd.Client(endpoint=self.socket)
            except Exception as exc:
                raise BackendUnavailable(
                    f"cannot reach LXD at {self.socket} ({type(exc).__name__}: {exc}); {socket_hint(self.socket)}"
                ) from exc
        return self._client

    # -- hooks -------------------------------------------------------------------
    def check(self) -> None:
        ours, errors = self.image.startswith("labkit-"), sdk().exceptions
        hint = (
            "build it with: labkit images build --only lxd" if ours else "import it first (lxc image import)"
        )
        check_image(
            lambda: self.client.images.get_by_alias(self.image),
            f"LXD image alias {self.image!r}",
            errors.NotFound,
            errors.LXDAPIException,
            hint,
        )
        self._pool()

    def _pool(self) -> str:
        """The storage pool for root disks: the option, else the default profile's, else the first."""
        if self.pool:
            return self.pool
        pylxd = sdk()
        try:
            root = self.client.profiles.get("default").devices.get("root") or {}
            pools = [p.name for p in self.client.storage_pools.all()]
        except pylxd.exceptions.LXDAPIException as exc:
            raise BackendError(f"LXD: reading the storage pools failed: {exc}") from exc
        if root.get("pool") in pools:
            self.pool = root["pool"]
        elif pools:
            self.pool = pools[0]
        else:
            raise BackendUnavailable(
                "LXD has no storage pool; run `bash scripts/setup-containers.sh` "
                "(a btrfs pool, a dir pool as fallback)"
            )
        return self.pool

    def host_cpus(self) -> int:
        if self._host_cpus is None:
            try:
                res = self.client.resources
            except sdk().exceptions.LXDAPIException as exc:
                raise BackendError(f"LXD: reading the host's resources failed: {exc}") from exc
            self._host_cpus = int((res.get("cpu") or {}).get("total") or os.cpu_count() or 1)
        return self._host_cpus

    def _create(
        self, spec: InstanceSpec, name: str, index: int, cpus, network: Network | None = None
    ) -> LxdInstance:
        pylxd = sdk()
        lxd_prefix(check_name(name))
        check_cpus(cpus, self.host_cpus())
        config, meta = instance_config(spec, cpus, self.host_cpus())
        # proof of ownership: after a failure, only an instance carrying it is removed
        token = secrets.token_hex(8)
        config["user.labkit.token"] = token
        if self.privileged:
            config["security.privileged"] = "true"
        pool = self._pool()
        # unprivileged: a copy of the image's pre-shifted base starts without LXD's id shift
        base = (
            None
            if self.privileged
            else lxd_base.base_for(
                self.client, pylxd.exceptions, self.image, pool, {"raw.lxc": config["raw.lxc"]}, self.remove
            )
        )
        source = (
            {"type": "copy", "source": base, "instance_only": True}
            if base
            else {"type": "image", "alias": self.image}
        )
        devices: dict[str, dict[str, str]] = {"root": {"type": "disk", "path": "/", "pool": pool}}
        body: dict[str, object] = {
            "name": name,
            "type": "container",
            "source": source,
            "profiles": [],
            "devices": devices,
            "config": config,
            "ephemeral": False,
        }
        for i, m in enumerate(self.mounts):
            devices[f"labkit-mount{i}"] = {
                "type": "disk",
                "source": m.source,
                "path": m.target,
                "readonly": str(m.readonly).lower(),
            }
        meta["mounts"] = [m.as_dict() for m in self.mounts]
        if network is not None:
            host_end = f"{network.device}h{index}"
            devices["eth0"] = {
                "type": "nic",
                "nictype": "bridged",
                "parent": network.device,
                "name": "eth0",
                "host_name": host_end,
            }
        try:
            model = self.client.instances.create(body, wait=True)
            model.start(wait=True)
            inst = LxdInstance(self, name, spec, index, cpus, model)
            # no NIC, but loopback must be up for servers and clients inside (apache + ab, iperf3)
            wait_init(model, name)
            if network is not None:
                address = f"{network.addresses[index]}/{network.prefixlen}"
                inst.exec(
                    [
                        "sh",
                        "-c",
                        f"ip addr add {address} dev eth0 && ip link set eth0 up && "
                        f"printf '{netmod.NO_DNS}' > /etc/resolv.conf",
                    ],
                    timeout=30,
                )
                inst.model.files.put("/etc/hosts", network.hosts_text().encode(), mode=0o644)
                inst.host_device = host_end
        except BaseException as exc:
            self._remove_if_ours(name, token)
            if isinstance(exc, pylxd.exceptions.LXDAPIException):
                if "image" in str(exc).lower() and "not found" in str(exc).lower():
                    raise BackendUnavailable(
                        f"LXD image alias {self.image!r} is missing; build it "
                        "with: labkit images build --only lxd"
                    ) from exc
                raise BackendError(f"LXD: creating {name} failed: {exc}") from exc
            raise
        inst.metadata.update(meta, image=self.image, config=config, pool=pool, base=base)
        return inst

    def _create_network(self, network: Network) -> None:
        """A host bridge without uplink (see :func:`labkit.core.network_factors.create_bridge`), not an LXD
        managed network: that would need dnsmasq even with DHCP and DNS off."""
        network.conntrack_exempt = netmod.create_bridge(
            network.device, network.name, f"{network.host_address}/{network.prefixlen}"
        )

    def _remove_network(self, network: Network) -> None:
        netmod.delete_bridge(network.device, network.name)

    def cleanup(self, prefix: str) -> list[str]:
        """Remove instances named ``prefix*`` (any state), then networks named so."""
        return super().cleanup(prefix) + remove_bridges(prefix)

    def _remove_if_ours(self, name: str, token: str) -> None:
        """Remove ``name`` after a failed create/start, unless it is someone else's
        (LXD reports a name clash only once the create operation runs)."""
        try:
            if self.client.instances.get(name).config.get("user.labkit.token") == token:
                self.remove(name)
        except Exception as exc:  # gone already, or LXD unreachable: nothing more to do here
            if not isinstance(exc, sdk().exceptions.NotFound):
                log.error("could not remove %s after a failed start: %s", name, exc)

    def remove(self, name: str, *, patience_s: float = 30.0) -> None:
        """Force-stop and delete instance ``name``; quiet if it is already gone.

        LXD refuses to delete an instance while another operation (a failed start
        winding down, say) holds it: that is retried for up to ``patience_s``.
        """
        pylxd = sdk()

        def stop_and_delete() -> None:
            model = self.client.instances.get(name)
            if model.status != "Stopped":
                model.stop(force=True, wait=True)
            model.delete(wait=True)

        try:
            retry(
                stop_and_delete,
                transient=instance_busy,
                what=f"LXD: removing {name}",
                timeout=patience_s,
                interval=0.3,
                backoff=1,
            )
        except pylxd.exceptions.NotFound:
            return
        except pylxd.exceptions.LXDAPIException as exc:
            raise BackendError(f"LXD: removing {name} failed: {exc}") from exc

    def fingerprint(self) -> dict:
        env = self.client.host_info.get("environment", {})
        pool = self._pool()
        return {
            "backend": self.name,
            "lxd_version": env.get("server_version"),
            "lxc_version": (env.get("driver_version") or "").split("|")[0].strip() or None,
            "storage_pool": pool,
            "storage_driver": or_none(lambda: self.client.storage_pools.get(pool).driver),
            "storage_drivers_available": env.get("storage"),
            "cgroup_version": cgroup_version(),
            "kernel": env.get("kernel_version"),
            "image": self.image,
            "image_fingerprint": or_none(lambda: self.client.images.get_by_alias(self.image).fingerprint),
        }

    # -- housekeeping ------------------------------------------------------------
    def created(self, names) -> dict[str, float]:
        """Each instance's ``created_at``, as LXD reports it."""
        from datetime import datetime

        wanted, out = set(names), {}
        try:
            found = self.client.instances.all()
        except sdk().exceptions.LXDAPIException as exc:
            raise BackendError(f"LXD: listing instances failed: {exc}") from exc
        for m in found:
            stamp = str(getattr(m, "created_at", "") or "")
            if m.name not in wanted or not stamp:
                continue
            # "2026-11-27T05:00:00.123456789Z": at most microseconds for fromisoformat
            stamp = re.sub(r"(\.\d{6})\d+", r"\1", stamp).replace("Z", "+00:00")
            try:
                out[m.name] = datetime.fromisoformat(stamp).timestamp()
            except ValueError:
                continue
        return out

    def _names(self, prefix: str) -> list[str]:
        lxd_prefix(prefix)
        try:
            return [m.name for m in self.client.instances.all()]
        except sdk().exceptions.LXDAPIException as exc:
            raise BackendError(f"LXD: listing instances failed: {exc}") from exc

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.api.session.close()
            except Exception:
                pass
        self._client = None
