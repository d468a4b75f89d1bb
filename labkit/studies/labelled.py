"""Designs with *label factors* (:class:`LabelledDesign`): a study's own factor (``scenario``,
``neighbours``) whose levels stand for settings of other factors (vcpus, count ...), randomized
in one plan and analysed by its own name (the seed studies, :mod:`labkit.studies.seeds`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.instance import HOST_FACTORS
from ..design import Design, WorkloadSchema, check_level
from ..errors import ConfigError

#: what a label's level may set: the host factors, ``noise``, ``network``, ``link``, ``nics``
MAPPABLE = (*HOST_FACTORS, "noise", "network", "link", "nics")


@dataclass
class LabelledDesign(Design):
    """A :class:`Design` with label factors: ``labels`` maps a factor to ``{level: settings}``,
    the settings being host factors, ``noise``, ``network`` or ``link`` levels (possibly none).

    Every configuration carries the label's level *and* its settings, so the campaign builds
    each run's instances from them and the store keeps both (``scenario=shared`` with
    ``vcpus=1, count=2``). The settings are part of the design's digest: a resumed campaign
    refuses a different mapping. Label factors may not be workload parameters.
    """

    labels: dict = field(default_factory=dict)

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.labels, dict) or not self.labels:
            raise ConfigError(f"{self.source}: labels must map a label factor to {{level: settings}}")
        clean: dict = {}
        for name, mapping in self.labels.items():
            f = next((x for x in self.factors if x.name == name), None)
            if f is None:
                raise ConfigError(f"{self.source}: label {name!r} is not a factor of the design")
            if not isinstance(mapping, dict):
                raise ConfigError(f"{self.source}: label {name!r}: settings must be a mapping level -> dict")
            keyed = {str(k): v for k, v in mapping.items()}
            clean[name] = {}
            for level in f.levels:
                settings = keyed.get(str(level))
                if not isinstance(settings, dict):
                    raise ConfigError(f"{self.source}: label {name!r}: no settings for level {level!r}")
                bad = sorted(set(settings) - set(MAPPABLE))
                clash = sorted(set(settings) & set(self.factor_names))
                if bad or clash:
                    raise ConfigError(
                        f"{self.source}: label {name!r} level {level!r}: settings "
                        f"{bad or clash} not allowed; use {', '.join(MAPPABLE)} that are "
                        "not factors of the design"
                    )
                clean[name][str(level)] = {
                    k: check_level(f"label {name!r} {k}", v) for k, v in settings.items()
                }
        self.labels = clean

    @classmethod
    def with_labels(cls, data: dict, labels: dict, *, source: str = "design") -> LabelledDesign:
        """Build from a design mapping (as :meth:`Design.from_dict`) plus ``labels``."""
        d = Design.from_dict(data, source=source)
        return cls(
            d.factors,
            d.replications,
            data.get("seed"),
            d.name,
            d.description,
            source=source,
            fraction=d.fraction,
            blocks=d.blocks,
            adaptive=d.adaptive,
            labels=labels,
        )

    def configurations(self) -> list[dict]:
        out = []
        for cfg in super().configurations():
            extra = {}
            for name, mapping in self.labels.items():
                extra.update(mapping[str(cfg[name])])
            out.append({**cfg, **extra})
        return out

    def to_dict(self) -> dict:
        return {**super().to_dict(), "labels": self.labels}

    def validate_for(self, workload: WorkloadSchema, *, memory_floor_mb: int | None = None) -> None:
        """The non-label factors as in :meth:`Design.validate_for`, plus every mapped setting
        checked as a factor of its own (levels it takes across the label's levels)."""
        for name in self.labels:
            if workload.accepts(name):
                raise ConfigError(
                    f"{self.source}: label factor {name!r} is also a parameter of "
                    f"workload {workload.name!r}; rename it"
                )
        mapped: dict[str, list] = {}
        for mapping in self.labels.values():
            for settings in mapping.values():
                for k, v in settings.items():
                    if v not in mapped.setdefault(k, []):
                        mapped[k].append(v)
        for k, vals in mapped.items():  # each setting checked as a factor would be
            _check_setting(self.source, k, vals, workload, memory_floor_mb)
        rest = [f for f in self.factors if f.name not in self.labels]
        if rest:
            check = Design(rest, self.replications, self.seed, self.name, source=self.source)
            check.validate_for(workload, memory_floor_mb=memory_floor_mb)
            canon = {f.name: f for f in check.factors}
            self.factors = [canon.get(f.name, f) for f in self.factors]


def _check_setting(source: str, key: str, values: list, workload, memory_floor_mb) -> None:
    from ..core.instance import normalize_level
    from ..design.noise_kinds import NOISE_KINDS

    where = f"{source}: label setting {key!r}"
    for v in values:
        if key in HOST_FACTORS:
            v = normalize_level(key, v)
            if key == "memory_mb" and v < max(workload.min_memory_mb, memory_floor_mb or 0):
                raise ConfigError(f"{where}: {v} MB is below what workload {workload.name!r} needs")
        elif key == "noise" and v not in NOISE_KINDS:
            raise ConfigError(f"{where}: {v!r} not allowed; use {', '.join(NOISE_KINDS)}")
    if key in ("network", "link", "nics"):
        from ..core.network_factors import check_factor

        check_factor(key, values, where)
