"""Cloud providers: servers from a flavor and an image, handed to the ``ssh`` path as hosts.

>>> from labkit.backends.clouds import get_provider
>>> cloud = get_provider("openstack", cloud="labkit", network="provider",
...                      key_filename="~/.ssh/id_ed25519", prices={"m1.small": 0.02})
>>> [server] = cloud.provision("m1.small", "debian-12", prefix="labkit-c1--")
>>> server.provisioning_s, server.host()        # seconds request -> SSH; a testbed host
>>> cloud.cleanup("labkit-c1--")

``openstack`` (openstacksdk) is tested on a real single-node cloud; ``cloudstack`` (cs) and
``azure`` (azure-mgmt-compute) are experimental. See :mod:`labkit.backends.clouds.base` for the contract.
"""
from __future__ import annotations

import importlib

from ...errors import ConfigError
from .base import CloudInstance, CloudProvider, ServerRef, ServerState

#: provider name -> (module, class)
PROVIDERS = {"openstack": ("openstack", "OpenStackProvider"),
             "cloudstack": ("cloudstack", "CloudStackProvider"),
             "azure": ("azure", "AzureProvider")}


def get_provider(name: str, **options) -> CloudProvider:
    """The provider called ``name`` with ``options``; ConfigError listing the providers otherwise."""
    if name not in PROVIDERS:
        raise ConfigError(f"unknown cloud provider {str(name)[:64]!r}; allowed: {', '.join(PROVIDERS)}")
    module, cls = PROVIDERS[name]
    return getattr(importlib.import_module(f".{module}", __name__), cls)(**options)


__all__ = ["PROVIDERS", "CloudInstance", "CloudProvider", "ServerRef", "ServerState", "get_provider"]
