"""Designs that run every platform in one randomized plan (notebook 04, the Slurm tests):
:func:`platform_design`."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError


def platform_design(
    name: str,
    platforms: Sequence[str],
    factors: dict[str, Sequence],
    *,
    replications: int,
    seed: int,
    description: str = "",
) -> tuple[dict, dict]:
    """A design running every platform in one randomized plan, as ``(design, fixed)``:
    ``platform`` first (only with two or more platforms: one platform is the campaign's backend),
    then each of ``factors`` with two or more levels; a factor with one level is no factor, it
    goes into ``fixed`` (the workload's parameters) instead. ConfigError when no platform is
    given, one is given twice, a factor has no level or nothing varies."""
    names = [str(p) for p in platforms]
    if not names:
        raise ConfigError(f"platform_design({name!r}): no platform to run")
    if len(set(names)) != len(names):
        raise ConfigError(f"platform_design({name!r}): platforms {names} name one twice")
    out: dict[str, list] = {"platform": names} if len(names) > 1 else {}
    fixed: dict = {}
    for key, values in factors.items():
        levels = list(values)
        if not levels:
            raise ConfigError(f"platform_design({name!r}): factor {key!r} needs at least one level")
        if len(levels) > 1:
            out[key] = levels
        else:
            fixed[key] = levels[0]
    if not out:
        raise ConfigError(
            f"platform_design({name!r}): one platform {names} and one level of every factor: nothing varies"
        )
    design = {"name": name, "factors": out, "replications": replications, "seed": seed}
    if description:
        design["description"] = description
    return design, fixed
