"""The optional SDKs the image importers need (``docker``, ``pylxd``), imported when used."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import BackendUnavailable


def sdk(module: str, pip_name: str) -> ModuleType:
    """Import an optional SDK (``docker``, ``pylxd``) or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BackendUnavailable(
            f"importing images needs the {module} SDK for Python, which is not "
            f"installed; install it with: pip install {pip_name}"
        ) from exc
