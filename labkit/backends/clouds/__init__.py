"""Cloud providers: servers from a flavor and an image, handed to the ``ssh`` path as hosts.

>>> from labkit.backends.clouds import get_provider
>>> cloud = get_provider("openstack", cloud="labkit", network="provider",
...                      key_filename="~/.ssh/id_ed25519", prices={"m1.small": 0.02})
>>> [server] = cloud.provision("m1.small", "debian-12", prefix="labkit-c1--")
>>> server.provisioning_s, server.host()        # seconds request -> SSH; a testbed host
>>> cloud.cleanup("labkit-c1--")

``openstack`` (openstacksdk) is tested on a real single-node cloud; ``cloudstack`` (cs) and
``azure`` (azure-mgmt-compute) are experimental. See :mod:`labkit.backends.clouds.base` for the contract.

This package only gathers the public names: :mod:`~labkit.backends.clouds.providers` holds the
providers by name and :func:`get_provider`, :mod:`~labkit.backends.clouds.base` the contract, and
each provider its own module.
"""

from __future__ import annotations

from .base import CloudInstance, CloudProvider, ServerRef, ServerState
from .providers import PROVIDERS, get_provider

__all__ = ["PROVIDERS", "CloudInstance", "CloudProvider", "ServerRef", "ServerState", "get_provider"]
