"""How the ``lxd`` backend (:mod:`labkit.backends.lxd`) realises an instance's spec in LXD: the
image, the container's init (:data:`INIT_CMD`), the names LXD can hold (:func:`lxd_prefix`) and the
config keys of the limits (:func:`instance_config`)."""

from __future__ import annotations

from collections.abc import Iterable

from ...core.instance import InstanceSpec
from ...errors import ConfigError
from ..base import check_prefix

DEFAULT_IMAGE = "labkit-debian-12"
#: the container's init: loopback up, then ``sleep infinity`` (no init system is needed).
#: LXC splits ``lxc.init.cmd`` on blanks and honours no quotes, so the script's blanks are ${IFS}.
INIT_SCRIPT = "ip link set lo up && exec sleep infinity"
INIT_CMD = "/bin/sh -c " + INIT_SCRIPT.replace(" ", "${IFS}")


def lxd_prefix(prefix: str) -> str:
    """``prefix`` if LXD can hold names starting with it; ConfigError for ``_`` (see the module doc)."""
    check_prefix(prefix)
    if "_" in prefix:
        raise ConfigError(
            f"LXD instance names cannot contain '_' (they are host names): {prefix!r}; "
            "use a campaign id without '_' to run on lxd"
        )
    return prefix


def cpu_set(cpus: Iterable[int]) -> str:
    """``limits.cpu`` for a pinned set; a single CPU as a range, since LXD reads "1" as a count."""
    unique = sorted(set(int(c) for c in cpus))
    if len(unique) == 1:
        return f"{unique[0]}-{unique[0]}"
    return ",".join(str(c) for c in unique)


def instance_config(spec: InstanceSpec, cpus: list[int] | None, host_cpus: int) -> tuple[dict, dict]:
    """LXD config keys for ``spec`` and the metadata that records how it was realised."""
    config: dict[str, str] = {
        "limits.memory": f"{spec.memory_mb}MiB",
        "limits.memory.enforce": "hard",
        "limits.memory.swap": "false",
        "raw.lxc": f"lxc.init.cmd = {INIT_CMD}",
        "user.labkit": "1",
    }
    meta: dict[str, object] = {"memory_limit_mb": spec.memory_mb}
    if cpus is not None:
        config["limits.cpu"] = cpu_set(cpus)
        meta["limits.cpu"] = config["limits.cpu"]
    else:
        config["limits.cpu.allowance"] = f"{spec.vcpus * 100}ms/100ms"
        meta["limits.cpu.allowance"] = config["limits.cpu.allowance"]
        meta["cpu_quota_cpus"] = min(spec.vcpus, host_cpus)
    return config, meta
