"""Thread scaling as a design factor (study 000 varied threads from 1 to 8).

Workloads that run parallel code (``sysbench``, ``stream``, ``nqueens``,
``parsec``, ``npb``) accept a ``threads`` parameter; when it is ``None`` (the
default) they use the instance's vCPUs. To sweep it, make ``threads`` a factor
of the design::

    from labkit.design.host_scaling import thread_levels
    design = Design(factors={"vcpus": [4], "threads": thread_levels(4)}, replications=3)
    # threads: [1, 2, 4]; every run passes its level to the workload

A level above the instance's vCPUs is legal (it oversubscribes the instance,
as the "shared" scenario of study 000 did with 2 threads on 2 vCPUs) and is
recorded like any other level.
"""

from __future__ import annotations

from ..errors import ConfigError


def resolve_threads(params: dict, workload: str = "workload") -> int:
    """The run's thread count: ``params['threads']``, or ``params['vcpus']`` when unset.

    Raises ConfigError naming the workload when the level is not a positive integer.
    """
    value = params.get("threads")
    if value is None or value == "":
        value = params.get("vcpus", 1)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"{workload}: parameter 'threads' must be a positive integer or None "
            f"(= the instance's vCPUs), got {value!r}"
        )
    return value
