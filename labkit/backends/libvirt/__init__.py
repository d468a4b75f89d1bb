"""The ``libvirt`` backend: instances are virtual machines (KVM, QEMU/TCG, or Xen by URI).

    >>> from labkit.backends import get_backend
    >>> be = get_backend("libvirt")                          # qemu:///system

The backend (:class:`LibvirtBackend`, described in :mod:`~labkit.backends.libvirt.backend`) and
its instances (:mod:`~labkit.backends.libvirt.domain`) live in the modules named for them; this
package gathers their public names, beside the helpers of its other modules (storage, the guest
agent, networks, mounts, the domain XML).
"""

from __future__ import annotations

from .backend import (
    DEFAULT_URI,
    DOMAIN_TYPES,
    MAX_SOCKET_PATH,
    MIN_MEMORY_MB,
    POOL_NAME,
    POOL_PATH,
    LibvirtBackend,
    agent_socket,
    connect_hint,
    is_session,
)
from .domain import MACHINE_CGROUPS, LibvirtInstance, remove_machine_cgroups, unlink_socket

__all__ = [
    "DEFAULT_URI",
    "DOMAIN_TYPES",
    "MACHINE_CGROUPS",
    "MAX_SOCKET_PATH",
    "MIN_MEMORY_MB",
    "POOL_NAME",
    "POOL_PATH",
    "LibvirtBackend",
    "LibvirtInstance",
    "agent_socket",
    "connect_hint",
    "is_session",
    "remove_machine_cgroups",
    "unlink_socket",
]
