"""Skip tests whose daemon is absent, with the reason; fail instead when LABKIT_REQUIRE names it."""

from __future__ import annotations

import os

import pytest

from labkit.backends.testing import available, required

DAEMON_MARKERS = ("docker", "lxd", "libvirt", "ssh", "slurm")
_cache: dict[str, tuple[bool, str]] = {}


def _root_ok() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root to create cgroups"
    return available("local")


def pytest_runtest_setup(item):
    for name in DAEMON_MARKERS:
        if item.get_closest_marker(name):
            if name not in _cache:
                _cache[name] = available(name)
            ok, why = _cache[name]
            if not ok:
                if name in required():
                    pytest.fail(f"{name} is required (LABKIT_REQUIRE) but unavailable: {why}")
                pytest.skip(f"{name} unavailable: {why}")
    if item.get_closest_marker("root"):
        if "root" not in _cache:
            _cache["root"] = _root_ok()
        ok, why = _cache["root"]
        if not ok:
            if "local" in required():
                pytest.fail(f"local backend required (LABKIT_REQUIRE) but unusable: {why}")
            pytest.skip(why)
