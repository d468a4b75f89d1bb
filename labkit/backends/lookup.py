"""Backends by name: the registry of backends (each one's module, class and the pip extra of its
SDK), and the functions that import a backend on first use (optional SDKs are imported only when
a backend is). Named ``lookup``, not ``registry``: :mod:`labkit.core.registry` is the host's
registry of running campaigns.

A backend built on another one (``ssh-hosts`` on ``ssh``) gets that backend's class here
(:func:`backend_class`), never by importing the other backend's module.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import BackendUnavailable, ConfigError, did_you_mean
from .base import Backend

#: name -> (module, class, the pip extra that installs its SDK)
REGISTRY = {
    "local": ("labkit.backends.local", "LocalBackend", None),
    "docker": ("labkit.backends.docker", "DockerBackend", "docker"),
    "lxd": ("labkit.backends.lxd", "LxdBackend", "lxd"),
    "libvirt": ("labkit.backends.libvirt", "LibvirtBackend", "libvirt"),
    "ssh": ("labkit.backends.ssh", "SshBackend", "ssh"),
    "ssh-hosts": ("labkit.backends.ssh_hosts", "SshHostsBackend", "ssh"),
    "cloud": ("labkit.backends.cloud", "CloudBackend", None),  # the provider names its own extra
    "slurm": ("labkit.backends.slurm", "SlurmBackend", None),  # the Slurm client tools, no SDK
}


def get_backend(name: str | Backend = "local", **options: Any) -> Backend:
    """Instantiate backend ``name`` with its options and check it can run here (a Backend
    given instead of a name is returned as it is)."""
    if isinstance(name, Backend):
        return name
    backend = backend_class(name)(**options)
    backend.check()
    return backend


def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name``, imported on first use (BackendUnavailable naming the pip
    extra when its SDK is missing). A backend built on another one (``ssh-hosts`` on ``ssh``)
    gets it here, never by importing the other backend's module."""
    if name not in REGISTRY:
        raise ConfigError(
            f"unknown backend {str(name)[:64]!r}{did_you_mean(name, list(REGISTRY), n=1)}; "
            f"available: {', '.join(REGISTRY)}"
        )
    module, cls, extra = REGISTRY[name]
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        hint = f" Install it with: pip install 'labkit[{extra}]'" if extra else ""
        raise BackendUnavailable(f"backend {name!r} needs a module that is missing ({exc}).{hint}") from exc
    return getattr(mod, cls)
