"""A design against the workload it runs: every factor must be a host factor, one of
:data:`OTHER_FACTORS` or a parameter of the workload, and every level one the workload (or the
network factors, or the noise kinds) accepts (:func:`workload_problems`,
:meth:`labkit.design.Design.validate_for`)."""

from __future__ import annotations

from typing import Any, Protocol

from ..core.instance import HOST_FACTORS
from ..errors import ConfigError, did_you_mean
from .factors import Factor, short_value
from .problems import Problem, problems_of


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


#: design factors that are neither host factors nor workload parameters (platform: labkit.run.platforms)
OTHER_FACTORS = ("noise", "network", "link", "nics", "platform")


def workload_problems(
    factors: list[Factor],
    workload: WorkloadSchema,
    *,
    memory_floor_mb: int | None = None,
    canonical: bool = False,
) -> list[Problem]:
    """Every problem of ``factors`` against ``workload`` (:meth:`Design.validate_for`): a factor that
    is neither a host factor, one of :data:`OTHER_FACTORS` nor a parameter of the workload, each
    level a parameter's schema, a network factor or the noise kinds refuse, memory levels below
    what the workload needs. With ``canonical``, the levels of parameter factors are replaced in
    ``factors`` by their canonical form (so ``[8, 8.0]`` is a duplicate)."""
    from ..core.network_factors import check_factor
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
            problems += [
                Problem(
                    f"factor 'noise': level {short_value(v)} not allowed; use {', '.join(NOISE_KINDS)}"
                    f"{did_you_mean(v, NOISE_KINDS)}",
                    (*where, j),
                )
                for j, v in enumerate(f.levels)
                if v not in NOISE_KINDS
            ]
        elif f.name in HOST_FACTORS or f.name in OTHER_FACTORS:
            continue
        elif not workload.accepts(f.name):
            problems.append(
                Problem(
                    f"design factor {f.name!r} is neither a host factor ({', '.join(HOST_FACTORS)}, "
                    f"{', '.join(OTHER_FACTORS[:-1])}) nor a parameter of workload {workload.name!r} "
                    f"({', '.join(params) or 'none'})"
                    + did_you_mean(f.name, [*HOST_FACTORS, *OTHER_FACTORS, *params]),
                    where,
                )
            )
        else:
            levels, bad = [], []
            for j, v in enumerate(f.levels):
                try:
                    levels.append(
                        workload.check_param(f.name, v, where=f"factor {f.name!r} level {short_value(v)}")
                    )
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
                problems.append(
                    Problem(
                        f"factor 'memory_mb': level(s) {[f.levels[j] for j in low]} below the {need} MB that workload "
                        f"{workload.name!r} needs; use levels >= {need}",
                        ("factors", "memory_mb", low[0]),
                    )
                )
    return problems
