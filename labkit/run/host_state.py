"""What the run engine (:mod:`labkit.run.engine`) keeps of each host of a testbed while it runs a
campaign (:class:`HostState`), and the block a run belongs to (:func:`block_of`): the unit a host is
given (``assign: blocks``) and that moves whole when a host is lost (:mod:`labkit.run.host_loss`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..design import Run
    from .testbed import Host


@dataclass
class HostState:
    host: Host
    lost: bool = False
    reason: str = ""
    current: Run | None = None  # the run in flight
    since: float = 0.0  # when it was claimed (monotonic)
    claimed: list = field(default_factory=list)  # the run_ids of the boot in flight not stored yet
    live: list = field(default_factory=list)  # its instances while they exist
    failures: int = 0  # failed probes in a row
    done: int = 0
    bar: Any = None  # its tqdm progress bar (None without progress)


def block_of(run: Run) -> int:
    """The fleet block of ``run``: its boot (with ``runs_per_instance`` > 1, so that the runs of a
    boot stay on one host), else its replicate."""
    return run.boot or run.replicate
