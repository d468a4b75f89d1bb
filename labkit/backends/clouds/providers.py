"""The cloud providers by name (:data:`PROVIDERS`) and :func:`get_provider`, which imports a
provider's module (and its SDK) only when it is asked for."""

from __future__ import annotations

import importlib

from ...errors import ConfigError
from .base import CloudProvider

#: provider name -> (module of this package, class)
PROVIDERS = {
    "openstack": ("openstack", "OpenStackProvider"),
    "cloudstack": ("cloudstack", "CloudStackProvider"),
    "azure": ("azure", "AzureProvider"),
}


def get_provider(name: str, **options) -> CloudProvider:
    """The provider called ``name`` with ``options``; ConfigError listing the providers otherwise."""
    if name not in PROVIDERS:
        raise ConfigError(f"unknown cloud provider {str(name)[:64]!r}; allowed: {', '.join(PROVIDERS)}")
    module, cls = PROVIDERS[name]
    return getattr(importlib.import_module(f".{module}", __package__), cls)(**options)
