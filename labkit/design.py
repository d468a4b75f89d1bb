"""Experimental designs: factors and levels, full factorials, replications, random run order.

A design is declared as a dict or YAML::

    factors:
      vcpus: [1, 2]
      memory_mb: [256, 512]
      affinity: [floating, pinned]     # first level is the low (-1) level
      count: [1, 2]
    replications: 3
    seed: 2017

``Design.plan()`` lists every (configuration, replicate) once, in an order
shuffled with ``seed``: the same seed always gives the same order.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .instance import HOST_FACTORS, normalize_level

DESIGN_KEYS = {"factors", "replications", "seed", "name", "description"}
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


@dataclass(frozen=True)
class Factor:
    """A named factor and its levels, low level first for two-level factors."""
    name: str
    levels: tuple

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or not set(self.name) <= NAME_CHARS:
            raise ConfigError(f"factor name {self.name!r}: use letters, digits and _ only")
        levels = tuple(self.levels) if isinstance(self.levels, (list, tuple)) else None
        if levels is None:
            raise ConfigError(f"factor {self.name!r}: levels must be a list, got {self.levels!r}")
        if len(levels) < 2:
            raise ConfigError(f"factor {self.name!r}: needs at least 2 levels, got {list(levels)}")
        levels = tuple(normalize_level(self.name, v) for v in levels)
        if len(set(map(repr, levels))) != len(levels):
            raise ConfigError(f"factor {self.name!r}: duplicate levels in {list(levels)}")
        object.__setattr__(self, "levels", levels)

    @property
    def two_level(self) -> bool:
        return len(self.levels) == 2


@dataclass(frozen=True)
class Run:
    """One run of a plan: configuration ``config`` (standard order index), replicate, position."""
    run_id: str
    order: int          # position in the randomized execution order (0-based)
    config: int         # standard (Yates) order index of the configuration
    replicate: int      # 1-based
    levels: dict = field(hash=False)


@dataclass
class Design:
    factors: list[Factor]
    replications: int = 1
    seed: int | None = None
    name: str = "design"
    description: str = ""

    def __post_init__(self):
        if not self.factors:
            raise ConfigError("design: 'factors' must name at least one factor")
        names = [f.name for f in self.factors]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"design: duplicate factor name(s): {', '.join(dup)}")
        if isinstance(self.replications, bool) or not isinstance(self.replications, int) or self.replications < 1:
            raise ConfigError(f"design: 'replications' must be an integer >= 1, got {self.replications!r}")
        if self.seed is None:
            self.seed = random.SystemRandom().randrange(2**31)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"design: 'seed' must be an integer, got {self.seed!r}")

    # -- construction ------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict, *, source: str = "design") -> "Design":
        """Build from a mapping; ``source`` (e.g. a file name) prefixes error messages."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: a design must be a mapping with keys {sorted(DESIGN_KEYS)}")
        unknown = sorted(set(data) - DESIGN_KEYS)
        if unknown:
            raise ConfigError(f"{source}: unknown key(s) {', '.join(map(repr, unknown))}; "
                              f"allowed: {', '.join(sorted(DESIGN_KEYS))}")
        raw = data.get("factors")
        if not isinstance(raw, dict) or not raw:
            raise ConfigError(f"{source}: 'factors' must be a mapping of factor name to a list of levels")
        try:
            factors = [Factor(str(k), v) for k, v in raw.items()]
            return cls(factors, data.get("replications", 1), data.get("seed"),
                       data.get("name", "design"), data.get("description", ""))
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> "Design":
        import yaml
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read design: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description,
                "factors": {f.name: list(f.levels) for f in self.factors},
                "replications": self.replications, "seed": self.seed}

    def digest(self) -> str:
        """Hash of factors, levels, replications and seed: a resumed campaign must match it."""
        d = self.to_dict()
        d.pop("description")
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]

    # -- queries -----------------------------------------------------------
    @property
    def factor_names(self) -> list[str]:
        return [f.name for f in self.factors]

    @property
    def is_two_level(self) -> bool:
        return all(f.two_level for f in self.factors)

    def configurations(self) -> list[dict]:
        """Every combination of levels in standard (Yates) order: the first factor varies fastest."""
        combos = itertools.product(*[f.levels for f in reversed(self.factors)])
        return [dict(zip(reversed(self.factor_names), c)) for c in combos]

    def coded(self) -> list[dict]:
        """Configurations with two-level factors coded -1/+1 (multi-level: level index)."""
        out = []
        for cfg in self.configurations():
            row = {}
            for f in self.factors:
                idx = f.levels.index(cfg[f.name])
                row[f.name] = (-1 if idx == 0 else 1) if f.two_level else idx
            out.append(row)
        return out

    def plan(self) -> list[Run]:
        """All runs (configurations x replications) in the seed's random order."""
        configs = self.configurations()
        slots = [(c, r) for r in range(1, self.replications + 1) for c in range(len(configs))]
        random.Random(self.seed).shuffle(slots)
        return [Run(f"c{c:04d}r{r:03d}", order, c, r, dict(configs[c]))
                for order, (c, r) in enumerate(slots)]

    def table(self):
        """The design as a DataFrame: one row per configuration, standard order."""
        import pandas as pd
        return pd.DataFrame(self.configurations()).rename_axis("config").reset_index()

    def validate_for(self, workload, *, memory_floor_mb: int | None = None) -> None:
        """Check every factor is a host factor or a parameter of ``workload`` (or ``noise``),
        and that memory levels are at least what the workload needs."""
        allowed = set(HOST_FACTORS) | {"noise"}
        for f in self.factors:
            if f.name not in allowed and not workload.accepts(f.name):
                params = sorted(k for k in workload.defaults)
                raise ConfigError(
                    f"design factor {f.name!r} is neither a host factor ({', '.join(HOST_FACTORS)}, noise) "
                    f"nor a parameter of workload {workload.name!r} ({', '.join(params) or 'none'})")
        need = max(workload.min_memory_mb, memory_floor_mb or 0)
        for f in self.factors:
            if f.name == "memory_mb":
                low = [v for v in f.levels if v < need]
                if low:
                    raise ConfigError(
                        f"factor 'memory_mb': level(s) {low} below the {need} MB that workload "
                        f"{workload.name!r} needs; use levels >= {need}")
        if "noise" in self.factor_names:
            from .noise_kinds import NOISE_KINDS
            bad = [v for v in next(f for f in self.factors if f.name == "noise").levels
                   if v not in NOISE_KINDS]
            if bad:
                raise ConfigError(f"factor 'noise': level(s) {bad} not allowed; use {', '.join(NOISE_KINDS)}")
