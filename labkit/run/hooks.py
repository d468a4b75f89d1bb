"""Hooks: the declared extras around a campaign's runs (noise neighbours, KSM switching, ...).

A hook is a :class:`RunHook` given to :class:`~labkit.run.campaign.Campaign` (``hooks=[...]``). The
engine enters every hook's :meth:`RunHook.around_run` for each run, on every path (one backend, a
``platform`` factor, a testbed): entered before the run's instances are made, left once its
workload has ended while its instances still exist, on every path out (errors and interrupts
included). Its value is the list of neighbours it started (JSON-ready dicts, or ``[]``), stored
as the run's ``neighbours``; it may add keys to the run's ``metadata``. :meth:`RunHook.around_campaign`
is entered once per :meth:`Campaign.run <labkit.run.campaign.Campaign.run>`, inside the campaign's
lock, before the first run, and left after the last (to put back host state a hook switches).

The campaign's own hook, :class:`NoiseNeighbour`, runs one noisy neighbour for a ``noise``
level; hooks given to the campaign are entered before it, in their order, and left after it; the
campaign's telemetry (:mod:`labkit.run.telemetry`) is entered after it and left before it.
A run's private network is not a hook: its instances are made on it, so it is opened before
them and removed after them, as part of provisioning (:mod:`labkit.run.network`).

>>> import contextlib
>>> class Stamp(RunHook):
...     def around_run(self, ctx):
...         ctx.metadata["stamped"] = ctx.run.run_id
...         return contextlib.nullcontext([])
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.instance import InstanceSpec
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..design import Run


@dataclass
class RunContext:
    """What a hook sees of a run: the run (its ``levels``), the instance spec its instances get,
    the ``metadata`` stored with it (a hook may add keys), the backend that runs it and the
    campaign's instance-name ``prefix`` (a hook's own instances must start with it, so that
    clean-up and ``labkit clean`` find them), and ``samples``: ``(t, metric, value)`` rows a hook
    recorded during the run (:mod:`labkit.run.telemetry`), stored with the run in the store's
    ``samples`` table."""
    run: Run
    spec: InstanceSpec
    metadata: dict
    backend: Backend
    prefix: str
    samples: list = field(default_factory=list)


class RunHook:
    """A declared extra around each run; subclass and override :meth:`around_run` and, when the
    hook changes host state, :meth:`around_campaign`."""

    def around_campaign(self, campaign: Any) -> contextlib.AbstractContextManager:
        """Entered once per campaign run before its first run, left after its last."""
        return contextlib.nullcontext()

    def around_run(self, ctx: RunContext) -> contextlib.AbstractContextManager:
        """A context manager around ``ctx.run`` (see the module docstring); its value is the list
        of neighbours it started."""
        return contextlib.nullcontext([])


class NoiseNeighbour(RunHook):
    """A ``noise`` level (``cpu``, ``memory``, ``io``, ``network``, ``command``; ``none``: nothing)
    runs one neighbour of that kind with the run's vCPUs, memory and affinity beside the run's
    instances (:func:`labkit.run.noise.neighbours`); the run's metadata records ``noise``."""

    def around_run(self, ctx: RunContext) -> contextlib.AbstractContextManager:
        kind = ctx.run.levels.get("noise", "none")
        if kind == "none":
            return contextlib.nullcontext([])
        from .noise import neighbours
        ctx.metadata["noise"] = kind
        spec = ctx.spec
        return neighbours(ctx.backend, InstanceSpec(spec.vcpus, spec.memory_mb, spec.affinity, 1), kind,
                          count=1, prefix=ctx.prefix + "noise")


def check_hooks(hooks: Sequence[RunHook] | None) -> list[RunHook]:
    """``hooks`` as a list; ConfigError naming the position of anything that is not a RunHook."""
    if hooks is None:
        return []
    if isinstance(hooks, RunHook) or not isinstance(hooks, (list, tuple)):
        raise ConfigError(f"hooks must be a list of RunHook objects, got {type(hooks).__name__}")
    for i, h in enumerate(hooks):
        if not isinstance(h, RunHook):
            raise ConfigError(f"hooks[{i}]: {type(h).__name__} is not a labkit.run.hooks.RunHook")
    return list(hooks)


@contextlib.contextmanager
def around_run(hooks: Sequence[RunHook], ctx: RunContext):
    """Every hook's :meth:`RunHook.around_run` entered in order and left in reverse; yields the
    neighbours they started, all together."""
    with contextlib.ExitStack() as stack:
        started: list = []
        for h in hooks:
            started += list(stack.enter_context(h.around_run(ctx)) or [])
        yield started


@contextlib.contextmanager
def around_campaign(hooks: Sequence[RunHook], campaign: Any):
    """Every hook's :meth:`RunHook.around_campaign`, entered in order and left in reverse."""
    with contextlib.ExitStack() as stack:
        for h in hooks:
            stack.enter_context(h.around_campaign(campaign))
        yield
