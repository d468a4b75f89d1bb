"""A run's network, between the boot runner and the backend (:mod:`labkit.run.boot` calls these
three; the campaign calls :func:`check_nics` before the first run).

* :func:`open_network` reads the run's ``network``, ``link`` and ``nics`` levels (a workload
  that spans instances, e.g. ``iperf3`` with ``path: instances``, defaults to
  ``private``) and asks the backend for the network; the run's metadata records it.
* :func:`run_workload` runs a spanning workload once over all the run's instances
  (``Workload.run_group``), any other workload in every instance (``fallback``: the boot runner's
  :func:`~labkit.run.boot.run_together`, passed in, so this module imports nothing of the run layer).
* :func:`close_network` removes it after the instances are gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..core.network_factors import check_mode, parse_link
from ..core.network_factors import check_nics as check_nics_level
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..backends.base import Backend, Instance
    from ..backends.private_network import Network
    from ..design import Run
    from ..workloads.base import Measurement, Workload

    #: what runs a workload that does not span the instances: (workload, instances, params,
    #: timeout) -> (measurements, seconds of each instance's run)
    Fallback = Callable[
        [Workload, Sequence[Instance], dict, float | None], tuple[list[Measurement], list[float]]
    ]

log = logging.getLogger("labkit.core.network_factors")


def spans(workload: Workload, params: dict) -> bool:
    """Whether ``workload`` runs across the run's instances with these parameters."""
    fn = getattr(workload, "spans", None)
    return bool(fn(params)) if callable(fn) else False


def mode_for(levels: dict, workload: Workload, params: dict) -> str:
    """``network`` of a run: its level, else ``private`` for a spanning workload, else ``none``."""
    default = "private" if spans(workload, params) else "none"
    return check_mode(levels.get("network", default), "factor 'network' level")


def check_nics(backend: Backend | type[Backend], runs: Sequence[Run]) -> None:
    """Refuse, before the first run, a plan with a ``nics`` level the backend cannot bond
    (``Backend.MAX_NICS``); ConfigError naming the level and the backend."""
    top = max((check_nics_level(r.levels.get("nics", 1), "factor 'nics' level") for r in runs), default=1)
    backend.check_nics(top, "factor 'nics' level")


def open_network(
    backend: Backend, levels: dict, workload: Workload, params: dict, count: int, prefix: str, metadata: dict
) -> Network | None:
    """The run's network (None for ``none``); records ``metadata["network"]``."""
    mode = mode_for(levels, workload, params)
    link = parse_link(levels.get("link"), "factor 'link' level")
    nics = check_nics_level(levels.get("nics", 1), "factor 'nics' level")
    if mode == "none":
        if link is not None:
            raise ConfigError(f"factor 'link' level {levels.get('link')!r} needs network: private")
        if nics != 1:
            raise ConfigError(f"factor 'nics' level {nics} needs network: private (NICs are bonded on it)")
        metadata["network"] = {"mode": "none"}
        return None
    net = backend.create_network(prefix, count, link, nics)
    metadata["network"] = net.metadata()
    return net


def close_network(net: Network | None) -> list[Exception]:
    """Remove ``net`` (None: nothing); returns the error (logged) instead of raising it."""
    if net is None:
        return []
    try:
        net.remove()
    except Exception as exc:  # the run's teardown reports it
        log.error("removing network %s failed: %s", net.name, exc)
        return [exc]
    return []


def run_workload(
    workload: Workload, instances: Sequence[Instance], params: dict, timeout: float | None, fallback: Fallback
) -> tuple[list[Measurement], list[float]]:
    """(measurements, [seconds]) of a run: ``workload.run_group`` once for a spanning workload,
    else ``fallback(workload, instances, params, timeout)``."""
    if not spans(workload, params):
        return fallback(workload, instances, params, timeout)
    if timeout is not None:
        params = {**params, "timeout_s": min(timeout, params.get("timeout_s") or timeout)}
    t = time.perf_counter()
    rows = workload.run_group(instances, params)
    return rows, [time.perf_counter() - t]
