"""Probes that tell whether a real daemon is usable, for tests and notebooks.

``available(name)`` returns ``(True, "")`` or ``(False, reason)``; it never raises.
"""
from __future__ import annotations

import os

from ..errors import LabkitError


def _probe(name: str, **options) -> None:
    from . import get_backend
    backend = get_backend(name, **options)
    backend.close()


def available(name: str) -> tuple[bool, str]:
    """Can backend ``name`` provision instances here (daemon up, SDK, image, privilege)?"""
    try:
        _probe(name)
    except LabkitError as exc:
        return False, str(exc)
    except Exception as exc:  # an SDK raising something of its own still means "not usable"
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def required() -> set[str]:
    """Backends listed in LABKIT_REQUIRE (comma separated): their absence must fail, not skip."""
    return {x.strip() for x in os.environ.get("LABKIT_REQUIRE", "").split(",") if x.strip()}
