"""Registry of backends; optional SDKs are imported only when a backend is used.

>>> from labkit.backends import get_backend
>>> be = get_backend("local")

This package only gathers the public names; each lives in the module named for what it owns:
:mod:`~labkit.backends.lookup` (:data:`REGISTRY`, :func:`get_backend`, :func:`backend_class`) and
:mod:`~labkit.backends.base` (the contract every backend keeps: :class:`Backend`, :class:`Instance`,
...), with :class:`~labkit.errors.BackendUnavailable`, what a backend's ``check()`` raises when
it cannot run here. Each backend is a module (or subpackage) of its own, imported through
the registry.
"""

from __future__ import annotations

from ..errors import BackendUnavailable
from .base import Backend, ExecResult, Instance, Process, RawResult, new_name, teardown
from .lookup import REGISTRY, backend_class, get_backend

__all__ = [
    "REGISTRY",
    "Backend",
    "BackendUnavailable",
    "ExecResult",
    "Instance",
    "Process",
    "RawResult",
    "backend_class",
    "get_backend",
    "new_name",
    "teardown",
]
