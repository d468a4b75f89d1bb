"""The runs of a plan: :class:`Run` (one configuration's replicate at its place in the
randomized order) and :func:`run_id`, its stable id."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Run:
    """One run of a plan: configuration ``config`` (standard order index), replicate, position."""

    run_id: str
    order: int  # position in the randomized execution order (0-based)
    config: int  # standard (Yates) order index of the configuration
    replicate: int  # 1-based
    levels: dict = field(hash=False)
    block: int = 0  # 1-based block of a blocked design (0: no blocks)
    boot: int = 0  # with runs_per_instance > 1: the 1-based boot of its configuration (0: its own boot)

    @property
    def boot_group(self) -> str:
        """The id of the boot the run belongs to (``c0003b002``); its own run id when it has its own."""
        return f"c{self.config:04d}b{self.boot:03d}" if self.boot else self.run_id


def run_id(config: int, replicate: int) -> str:
    """The stable id of a run: configuration and replicate (``c0003r012``)."""
    return f"c{config:04d}r{replicate:03d}"
