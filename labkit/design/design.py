"""The :class:`Design` class: a design's factors, replications, seed and structure, read from a
mapping or a YAML file (every bad key, factor and level reported at once), its digest and its plan
(every run in the seed's random order).

The design file's keys are :data:`DESIGN_KEYS` (with the nested keys of ``fraction``, ``blocks``
and adaptive ``replications``: :data:`FRACTION_KEYS`, :data:`BLOCK_KEYS`, :data:`ADAPTIVE_KEYS`);
the package's docstring (:mod:`labkit.design`) describes them. Fractions, blocks and adaptive
replication are checked and laid out by :mod:`labkit.design.structure`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, did_you_mean
from .decision import DECISION_KEYS, check_family, check_practical
from .factors import LIMITS, Factor, short_value
from .options import (
    EXECUTION_KEYS,
    RUN_KEYS,
    check_flag,
    check_interval,
    check_reuse,
    check_runs_per_instance,
    check_thresholds,
)
from .problems import DesignProblems, Problem, problems_of, raise_problems, yaml_lines
from .runs import Run, run_id
from .workload_check import WorkloadSchema, workload_problems
from .workload_key import check_workload_key

if TYPE_CHECKING:
    import pandas as pd

#: the keys of a design file
DESIGN_KEYS = {
    "factors",
    "replications",
    "seed",
    "name",
    "description",
    "fraction",
    "blocks",
    "treatment_checks",
    "workload",
    *RUN_KEYS,
    *DECISION_KEYS,
}
#: the keys of ``fraction:``
FRACTION_KEYS = {"generators", "p", "fold_over"}
#: the keys of ``blocks:``
BLOCK_KEYS = {"by", "count", "factor", "confound"}
#: what ``blocks: {by: ...}`` may name
BLOCK_BY = ("replicate", "host", "day", "factor")
#: the keys of adaptive ``replications:`` (a mapping)
ADAPTIVE_KEYS = {"target_ci", "min", "max", "relative", "confidence", "metric", "batch"}


@dataclass
class Design:
    """A design: factors and their levels, replications, the seed of its run order and its
    structure (fraction, blocks, adaptive replication, runs per instance), with how its runs are
    watched and judged. Build it with :meth:`from_yaml` or :meth:`from_dict`; :meth:`plan` lists
    its runs."""

    factors: list[Factor]
    replications: int = 1
    seed: int | None = None
    name: str = "design"
    description: str = ""
    seed_drawn: bool = field(default=False, compare=False)  # True: no seed was given, one was drawn
    source: str = field(default="design", compare=False, repr=False)  # file name, for messages
    lines: dict = field(
        default_factory=dict, compare=False, repr=False
    )  # where -> line (problems.yaml_lines)
    fraction: dict | None = None  # {"generators": [...], "fold_over": False | True | factor}
    blocks: dict | None = None  # {"by": ..., "count": n, "factor": name, "confound": [...]}
    adaptive: dict | None = None  # {"target_ci": .., "max": .., ...}; replications is the minimum
    runs_per_instance: int = 1  # runs per boot of a configuration's instances (labkit.design.options)
    telemetry: float | str | None = None  # seconds between samples, "off", or None (not given)
    exclusive: bool | None = None  # refuse to run beside another campaign (None: not given)
    quarantine: bool | None = None  # run suspect runs again at the end (None: not given)
    thresholds: dict | None = None  # when a run is suspect (None: not given: the defaults)
    practical: float | dict | None = None  # smallest effect that matters (labkit.design.decision)
    family: str | None = None  # family correction of the analysis (None: holm)
    treatment_checks: bool | None = None  # verify each run's treatments (labkit.run.treatments; None: on)
    named_workload: dict | None = None  # the file's workload: {"name", "params"} (labkit.design.workload_key)

    def __post_init__(self):
        src = self.source
        if not isinstance(self.factors, (list, tuple)) or not self.factors:
            raise ConfigError(f"{src}: 'factors' must name at least one factor")
        if len(self.factors) > LIMITS["factors"]:
            raise ConfigError(
                f"{src}: 'factors': at most {LIMITS['factors']} factors, got {len(self.factors)}"
            )
        self.factors = list(self.factors)
        if not all(isinstance(f, Factor) for f in self.factors):
            raise ConfigError(f"{src}: 'factors' must be Factor objects")
        names = [f.name for f in self.factors]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"{src}: duplicate factor name(s): {', '.join(dup)}")
        r: object = self.replications  # a YAML float such as 3.0 is an integer
        if isinstance(r, float) and math.isfinite(r) and r.is_integer():
            r = self.replications = int(r)
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= LIMITS["replications"]:
            raise ConfigError(
                f"{src}: 'replications' must be an integer from 1 to "
                f"{LIMITS['replications']:,}, got {short_value(r)}"
            )
        from .structure import check_adaptive, check_blocks, check_fraction

        self.fraction = check_fraction(self, self.fraction)
        self.adaptive = check_adaptive(self, self.adaptive)
        runs = r if self.adaptive is None else self.adaptive["max"]
        n_cfg = self.n_configurations
        if runs * n_cfg > LIMITS["runs"]:
            what = (
                "configurations x replications"
                if self.adaptive is None
                else "configurations x adaptive max, its worst case"
            )
            raise ConfigError(
                f"{src}: the design has more than {LIMITS['runs']:,} runs "
                f"({what}); use fewer levels or replications"
            )
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
        if self.named_workload is not None:
            try:
                self.named_workload = check_workload_key(self.named_workload)
            except ConfigError as exc:
                raise ConfigError(f"{src}: {exc}") from None
        if self.seed is None:
            self.seed = random.SystemRandom().randrange(2**31)
            self.seed_drawn = True
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not 0 <= self.seed <= LIMITS["seed"]
        ):
            raise ConfigError(
                f"{src}: 'seed' must be an integer from 0 to 2**63-1, got {short_value(self.seed)}"
            )
        for key in ("name", "description"):
            v = getattr(self, key)
            if not isinstance(v, str) or len(v) > LIMITS["text"]:
                raise ConfigError(f"{src}: {key!r} must be text of at most {LIMITS['text']} characters")

    # -- construction ------------------------------------------------------
    @classmethod
    def from_dict(
        cls,
        data: dict,
        *,
        source: str = "design",
        workload: WorkloadSchema | None = None,
        lines: dict | None = None,
    ) -> Design:
        """Build from a mapping; ``source`` (e.g. a file name) prefixes error messages. Unknown keys
        and every bad factor and level are reported together in one :class:`DesignProblems`
        (with ``lines``, ``where -> line`` from :func:`~labkit.design.problems.yaml_lines`, each
        with its line); given a ``workload``, so are the problems :meth:`validate_for` finds."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: a design must be a mapping with keys {sorted(DESIGN_KEYS)}")
        problems = []
        # keys of any type (YAML's ``1: a``): sorted by their text, each shown shortened
        unknown = sorted((k for k in data if not (isinstance(k, str) and k in DESIGN_KEYS)), key=short_value)
        if unknown:
            named = ", ".join(short_value(k) + did_you_mean(k, sorted(DESIGN_KEYS), n=1) for k in unknown)
            problems.append(
                Problem(
                    f"unknown key(s) {named}; allowed: {', '.join(sorted(DESIGN_KEYS))}", (str(unknown[0]),)
                )
            )
        raw = data.get("factors")
        if not isinstance(raw, dict) or not raw:
            problems.append(
                Problem("'factors' must be a mapping of factor name to a list of levels", ("factors",))
            )
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
        if data.get("workload") is not None:
            try:
                check_workload_key(data["workload"])
            except ConfigError as exc:
                problems += problems_of(exc, ("workload",))
        raise_problems(source, problems, lines)
        reps, adaptive = data.get("replications", 1), None
        if isinstance(reps, dict):
            adaptive = dict(reps)
            reps = adaptive.pop("min", 3)
        return cls(
            factors,
            reps,
            data.get("seed"),
            data.get("name", "design"),
            data.get("description", ""),
            source=source,
            fraction=data.get("fraction"),
            blocks=data.get("blocks"),
            adaptive=adaptive,
            runs_per_instance=data.get("runs_per_instance", 1),
            telemetry=data.get("telemetry"),
            exclusive=data.get("exclusive"),
            quarantine=data.get("quarantine"),
            thresholds=data.get("thresholds"),
            practical=data.get("practical"),
            family=data.get("family"),
            treatment_checks=data.get("treatment_checks"),
            named_workload=data.get("workload"),
            lines=dict(lines or {}),
        )

    @classmethod
    def from_yaml(cls, path: str | Path, *, workload: WorkloadSchema | None = None) -> Design:
        """Read a design file (bounded: see :mod:`labkit.core.yamlsafe`); ConfigError naming the file,
        every bad key, factor and level with its line (and, given ``workload``, what
        :meth:`validate_for` finds)."""
        from ..core.yamlsafe import load_yaml

        data = load_yaml(path)
        return cls.from_dict(data, source=str(path), workload=workload, lines=yaml_lines(path))

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "description": self.description,
            "factors": {f.name: list(f.levels) for f in self.factors},
            "replications": (
                self.replications if self.adaptive is None else {"min": self.replications, **self.adaptive}
            ),
            "seed": self.seed,
        }
        if self.fraction is not None:
            out["fraction"] = dict(self.fraction)
        if self.blocks is not None:
            out["blocks"] = dict(self.blocks)
        if self.runs_per_instance != 1:  # absent at 1: a design of before keeps its digest
            out["runs_per_instance"] = self.runs_per_instance
        for key in (*EXECUTION_KEYS, *DECISION_KEYS, "treatment_checks"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.named_workload is not None:  # absent when not named: a design of before keeps its digest
            out["workload"] = {
                "name": self.named_workload["name"],
                "params": dict(self.named_workload["params"]),
            }
        return out

    def digest(self) -> str:
        """Hash of factors, levels, replications, seed and structure (fraction, blocks, runs per
        instance): a resumed campaign must match it. How runs are watched (telemetry, exclusive,
        quarantine, thresholds) is left out: a resume may change it; so is the ``workload:`` key
        (the campaign compares its workload and parameters on a resume itself)."""
        d = self.to_dict()
        d.pop("description")
        for key in (*EXECUTION_KEYS, *DECISION_KEYS, "treatment_checks", "workload"):
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
            return [
                {f.name: f.levels[int(row[j] > 0)] for j, f in enumerate(self.factors)}
                for row in table.to_numpy()
            ]
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

            return [
                Run(run_id(c, r), order, c, r, dict(configs[c]), blk, boot)
                for order, (c, r, blk, boot) in enumerate(boot_sequence(self, rng))
            ]
        slots = [(c, r) for r in range(1, self.replications + 1) for c in range(len(configs))]
        if self.blocks is None:
            rng.shuffle(slots)
            return [Run(run_id(c, r), order, c, r, dict(configs[c])) for order, (c, r) in enumerate(slots)]
        from .structure import block_sequence

        ordered = block_sequence(self, slots, rng)
        return [
            Run(run_id(c, r), order, c, r, dict(configs[c]), b) for order, (c, r, b) in enumerate(ordered)
        ]

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

        return pd.DataFrame(
            [
                {"run_id": r.run_id, "config": r.config, "replicate": r.replicate, "block": r.block}
                for r in self.plan()
            ]
        )

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
