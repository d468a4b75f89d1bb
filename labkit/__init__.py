"""labkit: performance studies of virtualized and cloud infrastructure, from design to figure.

Packages, in the order of the flow (each imports only those below it; see docs/design.md):
``core`` (instance model, lock, registry, waiting ...), ``design``, ``run`` (``run.campaign.Campaign``
is the front door, ``run.engine`` the one engine), ``backends``, ``workloads``, ``images``,
``store``, ``stats``, ``report`` and ``studies`` (the seed studies).
"""

from .core.instance import InstanceSpec
from .errors import (
    BackendError,
    BackendUnavailable,
    BenchmarkError,
    CommandError,
    CommandTimeout,
    ConfigError,
    LabkitError,
    StoreError,
)

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "BenchmarkError",
    "CommandError",
    "CommandTimeout",
    "ConfigError",
    "InstanceSpec",
    "LabkitError",
    "StoreError",
    "__version__",
]
