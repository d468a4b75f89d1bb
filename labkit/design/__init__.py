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
shuffled with ``seed``: the same seed always gives the same order. A design
without ``seed`` draws one (``seed_drawn`` is then True): store it, or the
plan cannot be repeated.

Optional structure (all factors two-level where a fraction or confounding is used)::

    fraction: {generators: ["D=ABC"]}     # or {p: 1}: the minimum-aberration table;
                                          # fold_over: true (all signs) or a factor name
    blocks: {by: day, count: 2}           # by: replicate | host | day | factor
    blocks: {by: factor, factor: reboot}  # a hard-to-change factor: one block per level
    replications: {target_ci: 0.02, min: 3, max: 20}   # adaptive (labkit.run.adaptive)
    runs_per_instance: 3                  # k runs per boot of a configuration's instances

With ``runs_per_instance: k`` (default 1: every run provisions fresh instances) the plan is a
restricted randomization (a split-plot): the boots (one provisioning of a configuration's
instances, holding k consecutive replicates of it) run in random order, and the k runs of a boot
run back to back on the same instances (``Run.boot``; the last boot of a configuration holds
fewer runs when k does not divide ``replications``). ``telemetry``, ``exclusive``, ``quarantine``
and ``thresholds`` say how runs are watched (:mod:`labkit.design.options`); ``practical`` and
``family`` the rules every conclusion is held to (:mod:`labkit.design.decision`, docs/conclusions.md).
``treatment_checks: false`` turns off the check, on each run, that its treatments took (the
allowed CPUs, limits, KSM merges, neighbours' CPU read during the run: :mod:`labkit.run.treatments`).

Letters A, B, C, ... name the factors in the order they are declared (I is
skipped). ``describe()`` (and ``str(design)``) shows the defining relation,
resolution, alias structure and what is confounded with blocks. With
``blocks`` the plan runs block after block (``Run.block``, 1-based), in a
random order within each block; ``count`` blocks are whole replicates when
``count`` divides ``replications``, else each replicate is split into
``count / replications`` (a power of two) blocks by confounding interactions
(``confound: ["ABCD"]``, or chosen by :func:`labkit.design.fractional.block_generators`).

Every input is bounded (:data:`LIMITS`) and every bad one raises ConfigError
naming the file and the key: at most 16 factors of at most 64 levels, 10,000
replications and 100,000 runs; a level is one value (string, number, boolean,
null) or a flat list of them.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..core.instance import HOST_FACTORS, normalize_level
from ..errors import ConfigError, did_you_mean
from .decision import DECISION_KEYS, check_family, check_practical
from .options import (
    EXECUTION_KEYS,
    RUN_KEYS,
    check_flag,
    check_interval,
    check_reuse,
    check_runs_per_instance,
    check_thresholds,
)
from .problems import DesignProblems as DesignProblems
from .problems import Problem, problems_of, raise_problems, yaml_lines

if TYPE_CHECKING:
    import pandas as pd


class WorkloadSchema(Protocol):
    """What :meth:`Design.validate_for` reads of a workload (a
    :class:`labkit.workloads.base.Workload` is one): its ``name``, its parameters with their
    ``defaults``, the memory it needs (``min_memory_mb``), whether it ``accepts`` a parameter
    and ``check_param`` (a level in its canonical form, or ConfigError naming ``where``)."""
    name: str
    defaults: dict
    min_memory_mb: int

    def accepts(self, key: str) -> bool: ...

    def check_param(self, key: str, value: object, *, where: str | None = None) -> Any: ...


DESIGN_KEYS = {"factors", "replications", "seed", "name", "description", "fraction", "blocks", "treatment_checks",
               *RUN_KEYS,
               *DECISION_KEYS}
FRACTION_KEYS = {"generators", "p", "fold_over"}
BLOCK_KEYS = {"by", "count", "factor", "confound"}
BLOCK_BY = ("replicate", "host", "day", "factor")
ADAPTIVE_KEYS = {"target_ci", "min", "max", "relative", "confidence", "metric", "batch"}
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
LIMITS = {"factors": 16, "levels": 64, "replications": 10_000, "runs": 100_000, "text": 4096,
          "list_level": 256, "seed": 2**63 - 1}
# upper bounds of host factors' levels (lower bound 1 is checked by InstanceSpec)
HOST_MAX = {"vcpus": 1024, "count": 64, "memory_mb": 4 * 1024 * 1024}


def _check_scalar(where: str, value):
    if value is None or isinstance(value, (bool, int)):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
            raise ConfigError(f"{where}: {value} is too large")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {value!r} is not a finite number")
        return value
    if isinstance(value, str):
        if len(value) > LIMITS["text"] or "\x00" in value:
            raise ConfigError(f"{where}: text longer than {LIMITS['text']} characters or with a NUL byte")
        return value
    raise ConfigError(f"{where}: a {type(value).__name__} is not allowed here; "
                      "use a string, a number, true/false or null")


def _short(value) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge integer"
    return text if len(text) <= 60 else text[:57] + "..."


def check_level(where: str, value: object) -> object:
    """``value`` if it is a valid level (a scalar or a flat list of scalars), else ConfigError."""
    if isinstance(value, (list, tuple)):
        if len(value) > LIMITS["list_level"]:
            raise ConfigError(f"{where}: a list level may hold at most {LIMITS['list_level']} items")
        return [_check_scalar(f"{where}[{i}]", v) for i, v in enumerate(value)]
    return _check_scalar(where, value)


def _same_key(value):
    """Equality key of a level: 8 and 8.0 are the same level, True and 1 are not."""
    if isinstance(value, list):
        return ("list", tuple(_same_key(v) for v in value))
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("num", value)
    return (type(value).__name__, value)


@dataclass(frozen=True)
class Factor:
    """A named factor and its levels, low level first for two-level factors."""
    name: str
    levels: tuple

    def __post_init__(self):
        if (not isinstance(self.name, str) or not self.name or len(self.name) > 64
                or not set(self.name) <= NAME_CHARS):
            raise ConfigError(f"factor name {str(self.name)[:80]!r}: use 1-64 letters, digits and _ only")
        levels = tuple(self.levels) if isinstance(self.levels, (list, tuple)) else None
        if levels is None:
            raise ConfigError(f"factor {self.name!r}: levels must be a list, got a {type(self.levels).__name__}")
        if not 2 <= len(levels) <= LIMITS["levels"]:
            raise ConfigError(f"factor {self.name!r}: needs at least 2 levels and at most {LIMITS['levels']}, "
                              f"got {len(levels)}")
        checked, problems = [], []
        for i, v in enumerate(levels):   # every bad level is said, not the first one only
            try:
                checked.append(self._level(i, v))
            except ConfigError as exc:
                problems.append(Problem(str(exc), ("factors", self.name, i)))
        raise_problems(None, problems)
        levels = tuple(checked)
        if len({_same_key(v) for v in levels}) != len(levels):
            raise ConfigError(f"factor {self.name!r}: duplicate levels in {list(levels)} "
                              "(8 and 8.0 are the same level)")
        object.__setattr__(self, "levels", levels)

    def _level(self, i: int, value: object) -> object:
        """Level ``i`` (0-based) in its canonical form, or ConfigError naming the factor and level."""
        v = check_level(f"factor {self.name!r} level {i + 1}", value)
        if (self.name in HOST_FACTORS or self.name == "noise") and isinstance(v, list):
            raise ConfigError(f"factor {self.name!r}: level {v!r} must be a single value")
        try:
            v = normalize_level(self.name, v)
        except ConfigError:
            raise
        except (ValueError, TypeError) as exc:   # e.g. a digit string int() cannot read ("²")
            raise ConfigError(f"factor {self.name!r}: level {i + 1} is not allowed ({exc})") from None
        if self.name in HOST_MAX and isinstance(v, int) and v > HOST_MAX[self.name]:   # an int: normalize_level
            raise ConfigError(f"factor {self.name!r}: level {v} above the maximum {HOST_MAX[self.name]}")
        return v

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
    block: int = 0      # 1-based block of a blocked design (0: no blocks)
    boot: int = 0       # with runs_per_instance > 1: the 1-based boot of its configuration (0: its own boot)

    @property
    def boot_group(self) -> str:
        """The id of the boot the run belongs to (``c0003b002``); its own run id when it has its own."""
        return f"c{self.config:04d}b{self.boot:03d}" if self.boot else self.run_id


def run_id(config: int, replicate: int) -> str:
    """The stable id of a run: configuration and replicate (``c0003r012``)."""
    return f"c{config:04d}r{replicate:03d}"


@dataclass
class Design:
    factors: list[Factor]
    replications: int = 1
    seed: int | None = None
    name: str = "design"
    description: str = ""
    seed_drawn: bool = field(default=False, compare=False)   # True: no seed was given, one was drawn
    source: str = field(default="design", compare=False, repr=False)  # file name, for messages
    lines: dict = field(default_factory=dict, compare=False, repr=False)  # where -> line (problems.yaml_lines)
    fraction: dict | None = None      # {"generators": [...], "fold_over": False | True | factor}
    blocks: dict | None = None        # {"by": ..., "count": n, "factor": name, "confound": [...]}
    adaptive: dict | None = None      # {"target_ci": .., "max": .., ...}; replications is the minimum
    runs_per_instance: int = 1        # runs per boot of a configuration's instances (labkit.design.options)
    telemetry: float | str | None = None   # seconds between samples, "off", or None (not given)
    exclusive: bool | None = None     # refuse to run beside another campaign (None: not given)
    quarantine: bool | None = None    # run suspect runs again at the end (None: not given)
    thresholds: dict | None = None    # when a run is suspect (None: not given: the defaults)
    practical: float | dict | None = None   # smallest effect that matters (labkit.design.decision)
    family: str | None = None         # family correction of the analysis (None: holm)
    treatment_checks: bool | None = None   # verify each run's treatments (labkit.run.treatments; None: on)

    def __post_init__(self):
        src = self.source
        if not isinstance(self.factors, (list, tuple)) or not self.factors:
            raise ConfigError(f"{src}: 'factors' must name at least one factor")
        if len(self.factors) > LIMITS["factors"]:
            raise ConfigError(f"{src}: 'factors': at most {LIMITS['factors']} factors, got {len(self.factors)}")
        self.factors = list(self.factors)
        if not all(isinstance(f, Factor) for f in self.factors):
            raise ConfigError(f"{src}: 'factors' must be Factor objects")
        names = [f.name for f in self.factors]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"{src}: duplicate factor name(s): {', '.join(dup)}")
        r = self.replications
        if isinstance(r, float) and math.isfinite(r) and r.is_integer():
            r = self.replications = int(r)
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= LIMITS["replications"]:
            raise ConfigError(f"{src}: 'replications' must be an integer from 1 to "
                              f"{LIMITS['replications']:,}, got {_short(r)}")
        from .structure import check_adaptive, check_blocks, check_fraction
        self.fraction = check_fraction(self, self.fraction)
        self.adaptive = check_adaptive(self, self.adaptive)
        runs = r if self.adaptive is None else self.adaptive["max"]
        n_cfg = self.n_configurations
        if runs * n_cfg > LIMITS["runs"]:
            what = "configurations x replications" if self.adaptive is None else \
                "configurations x adaptive max, its worst case"
            raise ConfigError(f"{src}: the design has more than {LIMITS['runs']:,} runs "
                              f"({what}); use fewer levels or replications")
        self.blocks = check_blocks(self, self.blocks)
        self.runs_per_instance = check_runs_per_instance(self.runs_per_instance, src)
        check_reuse(self)
        if self.telemetry is not None:
            self.telemetry = check_interval(self.telemetry, f"{src}: 'telemetry'") or "off"
        self.exclusive = check_flag(self.exclusive, "exclusive", src)
        self.quarantine = check_flag(self.quarantine, "quarantine", src)
        self.thresholds = check_thresholds(self.thresholds, src)
        self.practical = check_practical(self.practical, src)
        self.family = check_family(self.family, src)
        self.treatment_checks = check_flag(self.treatment_checks, "treatment_checks", src)
        if self.seed is None:
            self.seed = random.SystemRandom().randrange(2**31)
            self.seed_drawn = True
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= LIMITS["seed"]:
            raise ConfigError(f"{src}: 'seed' must be an integer from 0 to 2**63-1, got {_short(self.seed)}")
        for key in ("name", "description"):
            v = getattr(self, key)
            if not isinstance(v, str) or len(v) > LIMITS["text"]:
                raise ConfigError(f"{src}: {key!r} must be text of at most {LIMITS['text']} characters")

    # -- construction ------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict, *, source: str = "design", workload: WorkloadSchema | None = None,
                  lines: dict | None = None) -> Design:
        """Build from a mapping; ``source`` (e.g. a file name) prefixes error messages. Unknown keys
        and every bad factor and level are reported together in one :class:`DesignProblems`
        (with ``lines``, ``where -> line`` from :func:`~labkit.design.problems.yaml_lines`, each
        with its line); given a ``workload``, so are the problems :meth:`validate_for` finds."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: a design must be a mapping with keys {sorted(DESIGN_KEYS)}")
        problems = []
        # keys of any type (YAML's ``1: a``): sorted by their text, each shown shortened
        unknown = sorted((k for k in data if not (isinstance(k, str) and k in DESIGN_KEYS)), key=_short)
        if unknown:
            named = ", ".join(_short(k) + did_you_mean(k, sorted(DESIGN_KEYS), n=1) for k in unknown)
            problems.append(Problem(f"unknown key(s) {named}; allowed: {', '.join(sorted(DESIGN_KEYS))}",
                                    (str(unknown[0]),)))
        raw = data.get("factors")
        if not isinstance(raw, dict) or not raw:
            problems.append(Problem("'factors' must be a mapping of factor name to a list of levels", ("factors",)))
            raise DesignProblems(source, problems, lines)
        if len(raw) > LIMITS["factors"]:
            raise ConfigError(f"{source}: 'factors': at most {LIMITS['factors']} factors, got {len(raw)}")
        factors = []
        for k, v in raw.items():
            name = k if isinstance(k, str) else str(k)[:80]
            try:
                factors.append(Factor(name, v))
            except ConfigError as exc:
                problems += problems_of(exc, ("factors", name))
        if workload is not None:
            problems += workload_problems(factors, workload)
        raise_problems(source, problems, lines)
        reps, adaptive = data.get("replications", 1), None
        if isinstance(reps, dict):
            adaptive = dict(reps)
            reps = adaptive.pop("min", 3)
        return cls(factors, reps, data.get("seed"), data.get("name", "design"),
                   data.get("description", ""), source=source, fraction=data.get("fraction"),
                   blocks=data.get("blocks"), adaptive=adaptive,
                   runs_per_instance=data.get("runs_per_instance", 1), telemetry=data.get("telemetry"),
                   exclusive=data.get("exclusive"), quarantine=data.get("quarantine"),
                   thresholds=data.get("thresholds"), practical=data.get("practical"),
                   family=data.get("family"), treatment_checks=data.get("treatment_checks"),
                   lines=dict(lines or {}))

    @classmethod
    def from_yaml(cls, path: str | Path, *, workload: WorkloadSchema | None = None) -> Design:
        """Read a design file (bounded: see :mod:`labkit.core.yamlsafe`); ConfigError naming the file,
        every bad key, factor and level with its line (and, given ``workload``, what
        :meth:`validate_for` finds)."""
        from ..core.yamlsafe import load_yaml
        data = load_yaml(path)
        return cls.from_dict(data, source=str(path), workload=workload, lines=yaml_lines(path))

    def to_dict(self) -> dict:
        out = {"name": self.name, "description": self.description,
               "factors": {f.name: list(f.levels) for f in self.factors},
               "replications": (self.replications if self.adaptive is None
                                else {"min": self.replications, **self.adaptive}),
               "seed": self.seed}
        if self.fraction is not None:
            out["fraction"] = dict(self.fraction)
        if self.blocks is not None:
            out["blocks"] = dict(self.blocks)
        if self.runs_per_instance != 1:   # absent at 1: a design of before keeps its digest
            out["runs_per_instance"] = self.runs_per_instance
        for key in (*EXECUTION_KEYS, *DECISION_KEYS, "treatment_checks"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    def digest(self) -> str:
        """Hash of factors, levels, replications, seed and structure (fraction, blocks, runs per
        instance): a resumed campaign must match it. How runs are watched (telemetry, exclusive,
        quarantine, thresholds) is left out: a resume may change it."""
        d = self.to_dict()
        d.pop("description")
        for key in (*EXECUTION_KEYS, *DECISION_KEYS, "treatment_checks"):
            d.pop(key, None)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]

    # -- queries -----------------------------------------------------------
    @property
    def quarantine_default(self) -> bool:
        """Whether suspect runs run once more at the end for a campaign started from the CLI or a
        notebook: the design's ``quarantine`` when it says, else True (issue 41: on by default
        there; a ``Campaign`` made in code keeps False unless asked)."""
        return True if self.quarantine is None else bool(self.quarantine)

    @property
    def factor_names(self) -> list[str]:
        return [f.name for f in self.factors]

    @property
    def is_two_level(self) -> bool:
        return all(f.two_level for f in self.factors)

    @property
    def n_configurations(self) -> int:
        if self.fraction is not None:
            k, p = len(self.factors), len(self.fraction["generators"])
            return 2 ** (k - p) * (2 if self.fraction.get("fold_over") else 1)
        return math.prod(len(f.levels) for f in self.factors)

    def configurations(self) -> list[dict]:
        """Every configuration in standard (Yates) order: the first factor varies fastest.

        A fractional design lists the 2^(k-p) runs of its fraction (base factors in
        standard order, generated factors from the generators), then its fold-over."""
        if self.fraction is not None:
            from .structure import letter_table
            table = letter_table(self)
            return [{f.name: f.levels[int(row[j] > 0)] for j, f in enumerate(self.factors)}
                    for row in table.to_numpy()]
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
        """All runs (configurations x replications) in the seed's random order; with blocks,
        block after block, in random order within each block (``Run.block`` 1-based). With
        ``runs_per_instance`` k > 1, the boots are shuffled instead, each followed by its runs in
        replicate order (``Run.boot``)."""
        configs = self.configurations()
        rng = random.Random(self.seed)
        if self.runs_per_instance > 1:
            from .structure import boot_sequence
            return [Run(run_id(c, r), order, c, r, dict(configs[c]), blk, boot)
                    for order, (c, r, blk, boot) in enumerate(boot_sequence(self, rng))]
        slots = [(c, r) for r in range(1, self.replications + 1) for c in range(len(configs))]
        if self.blocks is None:
            rng.shuffle(slots)
            return [Run(run_id(c, r), order, c, r, dict(configs[c]))
                    for order, (c, r) in enumerate(slots)]
        from .structure import block_sequence
        ordered = block_sequence(self, slots, rng)
        return [Run(run_id(c, r), order, c, r, dict(configs[c]), b)
                for order, (c, r, b) in enumerate(ordered)]

    # -- structure: fractions, aliases, blocks ---------------------------------
    @property
    def resolution(self) -> int | None:
        """Resolution of a fractional design (None for a full factorial)."""
        from .structure import design_resolution
        return design_resolution(self)

    def aliases(self, order: int = 2) -> pd.DataFrame:
        """Alias structure in factor names (see :func:`labkit.design.fractional.aliases`): ``term``,
        ``aliases`` (whole chain) and ``short`` (effects of at most ``order`` factors);
        empty for a full factorial."""
        from .structure import named_aliases
        return named_aliases(self, order)

    def block_table(self) -> pd.DataFrame:
        """Run id -> block: DataFrame with ``run_id``, ``config``, ``replicate`` and ``block``
        (1-based; 0 without blocks), to join with results for a blocked analysis."""
        import pandas as pd
        return pd.DataFrame([{"run_id": r.run_id, "config": r.config, "replicate": r.replicate,
                              "block": r.block} for r in self.plan()])

    def describe(self) -> str:
        """Text: factors and letters, runs, fraction (generators, defining relation,
        resolution, aliases to two-factor interactions), blocks and what they confound."""
        from .structure import describe
        return describe(self)

    def __str__(self) -> str:
        return self.describe()

    def table(self) -> pd.DataFrame:
        """The design as a DataFrame: one row per configuration, standard order."""
        import pandas as pd
        return pd.DataFrame(self.configurations()).rename_axis("config").reset_index()

    def validate_for(self, workload: WorkloadSchema, *, memory_floor_mb: int | None = None) -> None:
        """Check every factor is a host factor or a parameter of ``workload`` (or ``noise``),
        every workload-parameter level against the workload's schema (levels are replaced by
        their canonical form, so ``[8, 8.0]`` is a duplicate), and that memory levels are at
        least what the workload needs. Raises one ConfigError (:class:`DesignProblems`) naming the
        file and every bad factor and level (with its line when the design was read from a file)."""
        problems = workload_problems(self.factors, workload, memory_floor_mb=memory_floor_mb, canonical=True)
        raise_problems(self.source, problems, self.lines)


#: design factors that are neither host factors nor workload parameters (platform: labkit.run.platforms)
OTHER_FACTORS = ("noise", "network", "link", "nics", "platform")


def workload_problems(factors: list[Factor], workload: WorkloadSchema, *, memory_floor_mb: int | None = None,
                      canonical: bool = False) -> list[Problem]:
    """Every problem of ``factors`` against ``workload`` (:meth:`Design.validate_for`): a factor that
    is neither a host factor, one of :data:`OTHER_FACTORS` nor a parameter of the workload, each
    level a parameter's schema, a network factor or the noise kinds refuse, memory levels below
    what the workload needs. With ``canonical``, the levels of parameter factors are replaced in
    ``factors`` by their canonical form (so ``[8, 8.0]`` is a duplicate)."""
    from ..core.network import check_factor
    from .noise_kinds import NOISE_KINDS
    problems: list[Problem] = []
    params = sorted(workload.defaults)
    for i, f in enumerate(factors):
        where = ("factors", f.name)
        if f.name in ("network", "link", "nics"):
            for j, v in enumerate(f.levels):
                try:
                    check_factor(f.name, [v], "")
                except ConfigError as exc:
                    problems.append(Problem(str(exc).removeprefix(": "), (*where, j)))
        elif f.name == "noise":
            problems += [Problem(f"factor 'noise': level {_short(v)} not allowed; use {', '.join(NOISE_KINDS)}"
                                 f"{did_you_mean(v, NOISE_KINDS)}", (*where, j))
                         for j, v in enumerate(f.levels) if v not in NOISE_KINDS]
        elif f.name in HOST_FACTORS or f.name in OTHER_FACTORS:
            continue
        elif not workload.accepts(f.name):
            problems.append(Problem(
                f"design factor {f.name!r} is neither a host factor ({', '.join(HOST_FACTORS)}, "
                f"{', '.join(OTHER_FACTORS[:-1])}) nor a parameter of workload {workload.name!r} "
                f"({', '.join(params) or 'none'})"
                + did_you_mean(f.name, [*HOST_FACTORS, *OTHER_FACTORS, *params]), where))
        else:
            levels, bad = [], []
            for j, v in enumerate(f.levels):
                try:
                    levels.append(workload.check_param(f.name, v, where=f"factor {f.name!r} level {_short(v)}"))
                except ConfigError as exc:
                    bad.append(Problem(str(exc), (*where, j)))
            problems += bad
            if canonical and not bad:
                try:
                    factors[i] = Factor(f.name, tuple(levels))
                except ConfigError as exc:
                    problems += problems_of(exc, where)
    need = max(workload.min_memory_mb, memory_floor_mb or 0)
    for f in factors:
        if f.name == "memory_mb":
            low = [j for j, v in enumerate(f.levels) if v < need]
            if low:
                problems.append(Problem(
                    f"factor 'memory_mb': level(s) {[f.levels[j] for j in low]} below the {need} MB that workload "
                    f"{workload.name!r} needs; use levels >= {need}", ("factors", "memory_mb", low[0])))
    return problems
