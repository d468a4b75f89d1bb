"""LXD's pre-shifted base: one stopped container per image and storage pool whose root
filesystem LXD has already shifted to the unprivileged id map.

LXD 5.0 shifts a new unprivileged container's root filesystem on its first start (the
"Remapping container filesystem" walk over every file: 0.85 s of the 2.3 s that start + exec
+ remove took here on btrfs) unless it can give it an idmapped mount. An instance copied from
a base that was started once is already shifted, so it starts without that walk (1.4 s in all;
``benchmarks/bench_containers.py``). Copies on a btrfs (or zfs) pool are snapshots, as
instances made from the image are.

The base belongs to no campaign: its name ``lkbase-<16 hex>`` (a digest of the image
fingerprint and the pool) does not start with ``labkit-``, so no campaign's cleanup removes it;
like the image it is a cache. A base whose image is gone (the image was rebuilt) is removed
when the next base is made; ``lxc delete lkbase-...`` removes one by hand.

Readiness is read from LXD, never assumed: a base is used only when it is stopped and its
``volatile.last_state.idmap`` says its disk is shifted. One being made by another process is
not waited for (that instance is made from the image); one left half-made (its maker died)
for more than :data:`PATIENCE_S` is removed and made again. Any failure here only costs the
time saved: the instance is then made from the image.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING

from ...errors import BackendError

if TYPE_CHECKING:
    import pylxd

log = logging.getLogger("labkit.backends")

PREFIX = "lkbase-"
#: a base not ready this long after its creation is taken for abandoned and made again
PATIENCE_S = 120.0


def base_name(fingerprint: str, pool: str) -> str:
    """``lkbase-<16 hex>``: a valid LXD name whatever the pool is called."""
    return PREFIX + hashlib.sha256(f"{fingerprint}\0{pool}".encode()).hexdigest()[:16]


def is_ready(config: dict, status: str) -> bool:
    """Whether a base can be copied: stopped, with its disk shifted (a non-empty id map)."""
    return status == "Stopped" and config.get("volatile.last_state.idmap", "[]") not in ("", "[]")


def age_s(created_at: str, now: datetime | None = None) -> float:
    """Seconds since LXD's ``created_at`` (``2026-11-24T11:50:00.123456789Z``, UTC)."""
    created = datetime.fromisoformat(created_at[:19]).replace(tzinfo=UTC)
    return ((now or datetime.now(UTC)) - created).total_seconds()


def base_for(
    client: pylxd.Client,
    errors: ModuleType,
    image: str,
    pool: str,
    config: dict,
    remove: Callable[[str], None],
) -> str | None:
    """The name of a ready base of image alias ``image`` on ``pool``, made if there is none;
    None when none is ready (being made elsewhere, or making it failed: logged).

    ``errors``: pylxd's exceptions module; ``config``: the keys every instance needs to start
    (its init, ``raw.lxc``); ``remove``: the backend's removal of an instance by name (it stops
    it first and waits out LXD's "busy")."""
    try:
        fingerprint = client.images.get_by_alias(image).fingerprint
        name = base_name(fingerprint, pool)
        try:
            model = client.instances.get(name)
        except errors.NotFound:
            model = None
        if model is not None:
            if is_ready(model.config, model.status):
                return name
            if age_s(model.created_at) > PATIENCE_S:
                log.warning("LXD base %s was left half-made; removing it", name)
                remove(name)
            return None
        _remove_stale(client, remove)
        model = client.instances.create(
            {
                "name": name,
                "type": "container",
                "source": {"type": "image", "alias": image},
                "profiles": [],
                "devices": {"root": {"type": "disk", "path": "/", "pool": pool}},
                "config": {**config, "user.labkit.image": fingerprint, "user.labkit.pool": pool},
            },
            wait=True,
        )
        model.start(wait=True)  # LXD shifts the disk here, before the init runs
        model.stop(force=True, wait=True)
        model.sync()
        return name if is_ready(model.config, model.status) else None
    except (errors.LXDAPIException, BackendError) as exc:  # "already exists": being made elsewhere
        log.info("LXD base of %s on pool %s not used: %s", image, pool, exc)
        return None


def _remove_stale(client, remove: Callable[[str], None]) -> None:
    """Remove the bases whose image no longer exists (rebuilt since)."""
    images = {i.fingerprint for i in client.images.all()}
    for model in client.instances.all():
        if model.name.startswith(PREFIX) and model.config.get("user.labkit.image") not in images:
            log.info("removing LXD base %s: its image is gone", model.name)
            try:
                remove(model.name)
            except BackendError as exc:
                log.warning("could not remove stale LXD base %s: %s", model.name, exc)
