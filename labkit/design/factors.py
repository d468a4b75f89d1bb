"""A design's factors and their levels: what a level may be, and the bounds of every input.

:class:`Factor` holds a factor's name and its levels in canonical form (low level first for a
two-level factor); :func:`check_level` says whether one value may be a level (a scalar or a flat
list of scalars). :data:`LIMITS` bounds every input of a design, :data:`HOST_MAX` the levels of
the host factors (:data:`labkit.core.instance.HOST_FACTORS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.instance import HOST_FACTORS, normalize_level
from ..errors import ConfigError
from .problems import Problem, raise_problems

#: the characters of a factor name
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
#: the bounds of every input of a design (factors, levels per factor, replications, runs, text, ...)
LIMITS = {
    "factors": 16,
    "levels": 64,
    "replications": 10_000,
    "runs": 100_000,
    "text": 4096,
    "list_level": 256,
    "seed": 2**63 - 1,
}
#: upper bounds of host factors' levels (lower bound 1 is checked by InstanceSpec)
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
    raise ConfigError(
        f"{where}: a {type(value).__name__} is not allowed here; use a string, a number, true/false or null"
    )


def short_value(value) -> str:
    """``value`` for a message: its repr cut to 60 characters (a huge integer said in words)."""
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
        if (
            not isinstance(self.name, str)
            or not self.name
            or len(self.name) > 64
            or not set(self.name) <= NAME_CHARS
        ):
            raise ConfigError(f"factor name {str(self.name)[:80]!r}: use 1-64 letters, digits and _ only")
        levels = tuple(self.levels) if isinstance(self.levels, (list, tuple)) else None
        if levels is None:
            raise ConfigError(
                f"factor {self.name!r}: levels must be a list, got a {type(self.levels).__name__}"
            )
        if not 2 <= len(levels) <= LIMITS["levels"]:
            raise ConfigError(
                f"factor {self.name!r}: needs at least 2 levels and at most {LIMITS['levels']}, "
                f"got {len(levels)}"
            )
        checked, problems = [], []
        for i, v in enumerate(levels):  # every bad level is said, not the first one only
            try:
                checked.append(self._level(i, v))
            except ConfigError as exc:
                problems.append(Problem(str(exc), ("factors", self.name, i)))
        raise_problems(None, problems)
        levels = tuple(checked)
        if len({_same_key(v) for v in levels}) != len(levels):
            raise ConfigError(
                f"factor {self.name!r}: duplicate levels in {list(levels)} (8 and 8.0 are the same level)"
            )
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
        except (ValueError, TypeError) as exc:  # e.g. a digit string int() cannot read ("²")
            raise ConfigError(f"factor {self.name!r}: level {i + 1} is not allowed ({exc})") from None
        if (
            self.name in HOST_MAX and isinstance(v, int) and v > HOST_MAX[self.name]
        ):  # an int: normalize_level
            raise ConfigError(f"factor {self.name!r}: level {v} above the maximum {HOST_MAX[self.name]}")
        return v

    @property
    def two_level(self) -> bool:
        return len(self.levels) == 2
