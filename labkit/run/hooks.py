"""Hooks: the declared extras around a campaign's runs (noise neighbours, KSM switching, ...).

A hook is a :class:`RunHook` given to :class:`~labkit.run.campaign.Campaign` (``hooks=[...]``). The
engine enters every hook's :meth:`RunHook.around_run` for each run, on every path (one backend, a
``platform`` factor, a testbed): entered before the run's instances are made, left once its
workload has ended while its instances still exist, on every path out (errors and interrupts
included). Its value is the list of neighbours it started (JSON-ready dicts, or ``[]``), stored
as the run's ``neighbours``; it may add keys to the run's ``metadata``. :meth:`RunHook.around_campaign`
is entered once per :meth:`Campaign.run <labkit.run.campaign.Campaign.run>`, inside the campaign's
lock, before the first run, and left after the last (to put back host state a hook switches).

With ``runs_per_instance`` > 1 the runs of a boot share their instances: the first run's hooks
are entered before the instances are made, the later runs' around their workload only, and
:meth:`RunHook.instances_ready` is called once per boot, right after its instances are made
(before the workload is prepared in them).

The campaign's own hooks: the quiet-host guard (:class:`labkit.run.guard.QuietHost`) is entered
first (its check of the host comes before any of the campaign's load starts) and left last (it
judges the run from what the others recorded); hooks given to the campaign come next, in their
order; then :class:`NoiseNeighbour`, which runs one noisy neighbour for a ``noise`` level; then
the treatment checks (:mod:`labkit.run.treatments`: did each factor's treatment take; off with
the design's ``treatment_checks: false``); the campaign's telemetry (:mod:`labkit.run.telemetry`)
is entered last and left first.
A run's private network is not a hook: its instances are made on it, so it is opened before
them and removed after them, as part of provisioning (:mod:`labkit.run.network_setup`).

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
    clean-up and ``labkit clean`` find them), and ``samples``: ``(t, metric, value[, instance])``
    rows a hook recorded during the run (:mod:`labkit.run.telemetry`), stored with the run in the
    store's ``samples`` table. ``instances`` is the run's live list of instances (empty until they
    are made: for the first run of a boot, after the hooks are entered) and ``neighbours`` the
    instances the hooks entered so far started beside them (a hook's value with an
    ``instances`` attribute, e.g. :class:`~labkit.run.noise.NoiseGroup`)."""

    run: Run
    spec: InstanceSpec
    metadata: dict
    backend: Backend
    prefix: str
    samples: list = field(default_factory=list)
    instances: list = field(default_factory=list)
    neighbours: list = field(default_factory=list)
    #: True while the run's instances are being made (their counters are not all known yet)
    provisioning: bool = False


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

    def instances_ready(self, ctx: RunContext) -> None:  # noqa: B027 (optional hook)
        """Called once per boot, right after its instances (``ctx.instances``) are made, before the
        workload is prepared in them; ``ctx`` is the boot's first run's. An error fails that run."""


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
        return neighbours(
            ctx.backend,
            InstanceSpec(spec.vcpus, spec.memory_mb, spec.affinity, 1),
            kind,
            count=1,
            prefix=ctx.prefix + "noise",
        )


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
            value = stack.enter_context(h.around_run(ctx))
            ctx.neighbours.extend(getattr(value, "instances", None) or [])
            started += list(value or [])
        yield started


def instances_ready(hooks: Sequence[RunHook], ctx: RunContext) -> None:
    """Every hook's :meth:`RunHook.instances_ready`, in order."""
    for h in hooks:
        h.instances_ready(ctx)


@contextlib.contextmanager
def around_campaign(hooks: Sequence[RunHook], campaign: Any):
    """Every hook's :meth:`RunHook.around_campaign`, entered in order and left in reverse."""
    with contextlib.ExitStack() as stack:
        for h in hooks:
            stack.enter_context(h.around_campaign(campaign))
        yield
