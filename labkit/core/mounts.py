"""Host directories made visible inside instances: the backends' ``mounts`` option.

A user's own suite (a PARSEC or NPB install) lives on the host; ``mounts`` gives
it to every instance of a run, read-only unless asked otherwise::

    backend_options={"mounts": [{"source": "/opt/parsec", "target": "/opt/parsec"}]}
    labkit run ... --backend-option mounts=/opt/parsec                # same path, read-only
    labkit run ... --backend-option mounts=/srv/npb:/opt/npb:rw,/opt/parsec

How each backend does it: docker a bind volume, LXD a ``disk`` device, libvirt a
virtiofs share (:mod:`labkit.backends.libvirt.mounts`), local the same path
(its instances share the host's file system; only the same target is allowed,
and read-only is not enforced there: the local backend has no mount namespace).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class Mount:
    """One host directory ``source`` seen at ``target`` inside the instance."""

    source: str
    target: str
    readonly: bool = True

    def as_dict(self) -> dict:
        return {"source": self.source, "target": self.target, "readonly": self.readonly}


def _absolute(value: object, key: str, where: str) -> str:
    """``value`` if it is an absolute path with no newline or comma, else ConfigError."""
    if not isinstance(value, str) or not os.path.isabs(value) or "\n" in value or "," in value:
        raise ConfigError(f"{where}: {key} {value!r} must be an absolute path (no comma)")
    return value


def _one(item: object, where: str) -> Mount:
    if isinstance(item, str):
        parts = item.split(":")
        if len(parts) > 3 or not parts[0]:
            raise ConfigError(f"{where}: {item!r} must be SOURCE[:TARGET[:ro|rw]]")
        mode = parts[2] if len(parts) == 3 else "ro"
        if len(parts) == 2 and parts[1] in ("ro", "rw"):
            parts, mode = [parts[0]], parts[1]
        if mode not in ("ro", "rw"):
            raise ConfigError(f"{where}: mode {mode!r} in {item!r}; allowed: ro, rw")
        item = {
            "source": parts[0],
            "target": parts[1] if len(parts) > 1 else parts[0],
            "readonly": mode == "ro",
        }
    if not isinstance(item, dict):
        raise ConfigError(
            f"{where}: each mount is a mapping or a SOURCE[:TARGET[:ro|rw]] string, not {type(item).__name__}"
        )
    unknown = set(item) - {"source", "target", "readonly"}
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: source, target, readonly"
        )
    source = _absolute(item.get("source"), "source", where)
    target = _absolute(item.get("target", source), "target", where)
    readonly = item.get("readonly", True)
    if os.path.normpath(target) in ("/", "/proc", "/sys", "/dev", "/tmp/labkit"):
        raise ConfigError(f"{where}: target {target!r} would hide the instance's own {target}")
    if not isinstance(readonly, bool):
        raise ConfigError(f"{where}: readonly must be true or false, not {readonly!r}")
    if not os.path.isdir(source):
        raise ConfigError(f"{where}: source {source!r} is not a directory on this host")
    return Mount(os.path.normpath(source), os.path.normpath(target), readonly)


def parse_mounts(value: object, backend: str) -> tuple[Mount, ...]:
    """The ``mounts`` option of ``backend`` as Mount tuples (empty for None).

    ``value``: a list of mappings (``source``, ``target`` default the source, ``readonly``
    default True) or of ``SOURCE[:TARGET[:ro|rw]]`` strings, or one comma-separated string
    of those (the CLI's ``--backend-option mounts=...``). Raises ConfigError naming the
    backend option and what is wrong (relative path, missing source, duplicate target).
    """
    if value is None or value == "" or value == []:
        return ()
    where = f"{backend} option mounts"
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise ConfigError(
            f"{where}: a list of mounts or a comma-separated string, not {type(value).__name__}"
        )
    mounts = tuple(_one(item, where) for item in items)
    targets = [m.target for m in mounts]
    dup = sorted({t for t in targets if targets.count(t) > 1})
    if dup:
        raise ConfigError(f"{where}: target(s) {', '.join(dup)} given twice")
    return mounts


def same_path_mounts(mounts: tuple[Mount, ...]) -> tuple[Mount, ...]:
    """``mounts`` for a backend whose instances share the host's file system (``local``):
    each must be seen at its own path. Raises ConfigError for a different target."""
    for m in mounts:
        if m.target != m.source:
            raise ConfigError(
                f"local option mounts: {m.source} can only be seen at its own path "
                f"inside local instances (they share the host's file system), not at "
                f"{m.target}; use target {m.source}"
            )
    return mounts
