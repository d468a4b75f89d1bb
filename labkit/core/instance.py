"""What an instance is, on every backend (see docs/design.md, "Instances").

An :class:`InstanceSpec` says how many vCPUs an instance may use, its enforced
memory limit, whether its vCPUs are pinned 1:1 to host CPUs or float, and how
many identical instances run the workload at the same time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import ConfigError, did_you_mean

AFFINITIES = ("pinned", "floating")
HOST_FACTORS = ("vcpus", "memory_mb", "affinity", "count")


@dataclass(frozen=True)
class InstanceSpec:
    vcpus: int = 1
    memory_mb: int = 512
    affinity: str = "floating"
    count: int = 1

    def __post_init__(self):
        for key in ("vcpus", "memory_mb", "count"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"InstanceSpec.{key} must be a positive integer, got {value!r}")
        if self.affinity not in AFFINITIES:
            raise ConfigError(
                f"InstanceSpec.affinity must be one of {', '.join(AFFINITIES)}; got {self.affinity!r}"
            )

    @classmethod
    def from_levels(cls, levels: dict, defaults: InstanceSpec | None = None) -> InstanceSpec:
        """Build a spec from a run's factor levels; missing host factors take ``defaults``."""
        base = asdict(defaults or cls())
        for key in HOST_FACTORS:
            if key in levels:
                base[key] = normalize_level(key, levels[key])
        return cls(**base)

    def placement(self, host_cpus: int) -> list[list[int]]:
        """Host CPUs for each of the ``count`` instances when pinned.

        Deterministic: instance ``i`` vCPU ``j`` goes to CPU ``(i*vcpus + j) % host_cpus``.
        Asking for more vCPUs than the host has wraps around (the overcommitted
        case): instances then share CPUs.
        """
        if host_cpus < 1:
            raise ConfigError(f"host_cpus must be >= 1, got {host_cpus}")
        return [[(i * self.vcpus + j) % host_cpus for j in range(self.vcpus)] for i in range(self.count)]

    def overcommitted(self, host_cpus: int) -> bool:
        return self.vcpus * self.count > host_cpus

    def as_dict(self) -> dict:
        return asdict(self)


def normalize_level(key: str, value: object) -> object:
    """Coerce a host factor's level to its type, or raise ConfigError naming it."""
    if key in ("vcpus", "memory_mb", "count"):
        if isinstance(value, bool):
            raise ConfigError(f"factor {key!r}: level {value!r} is not an integer")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"factor {key!r}: level {value!r} must be a positive integer")
        return value
    if key == "affinity":
        aliases = {
            "yes": "pinned",
            "on": "pinned",
            True: "pinned",
            "true": "pinned",
            "no": "floating",
            "off": "floating",
            False: "floating",
            "false": "floating",
        }
        v = value.lower() if isinstance(value, str) else value
        v = aliases.get(v, v)
        if v not in AFFINITIES:
            raise ConfigError(
                f"factor 'affinity': level {value!r} not allowed; use one of {', '.join(AFFINITIES)}"
                f"{did_you_mean(value, AFFINITIES)}"
            )
        return v
    return value
