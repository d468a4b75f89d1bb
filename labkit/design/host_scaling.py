"""Levels of a design factor scaled to the host a study runs on."""

from __future__ import annotations

from ..errors import ConfigError


def thread_levels(vcpus: int, *, include_max: bool = True) -> list[int]:
    """Powers of two from 1 up to ``vcpus``, plus ``vcpus`` itself if it is not one.

    >>> thread_levels(8)
    [1, 2, 4, 8]
    >>> thread_levels(6)
    [1, 2, 4, 6]
    >>> thread_levels(1)
    [1]
    """
    if isinstance(vcpus, bool) or not isinstance(vcpus, int) or vcpus < 1:
        raise ConfigError(f"thread_levels: vcpus must be a positive integer, got {vcpus!r}")
    levels = []
    t = 1
    while t <= vcpus:
        levels.append(t)
        t *= 2
    if include_max and levels[-1] != vcpus:
        levels.append(vcpus)
    return levels
