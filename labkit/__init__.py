"""labkit: performance studies of virtualized and cloud infrastructure, from design to figure."""
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
from .instance import InstanceSpec

__version__ = "0.1.0"

__all__ = ["BackendError", "BackendUnavailable", "BenchmarkError", "CommandError",
           "CommandTimeout", "ConfigError", "InstanceSpec", "LabkitError", "StoreError",
           "__version__"]
