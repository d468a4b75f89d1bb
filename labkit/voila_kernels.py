"""What ``labkit dashboard`` (:mod:`labkit.report.dashboard`) runs inside Voila's process: its
kernel manager, and children that die with their parent.

* :func:`die_with_parent`: a ``preexec_fn`` setting Linux's ``PR_SET_PDEATHSIG``;
* :class:`DashboardKernelManager` (Voila's ``VoilaConfiguration.multi_kernel_manager_class``):
  at most ``max_kernels`` kernels at once, a page load past it answered HTTP 503 ("the dashboard
  is busy") without starting anything; a kernel with no connected page (its page never opened
  the websocket, or closed it) shut down after ``unconnected_timeout`` idle seconds;
  jupyter_server's culler (``MappingKernelManager.cull_idle_timeout``, ``cull_interval``,
  ``cull_connected``) for the rest; kernels are :class:`DashboardKernel`, started with
  ``PR_SET_PDEATHSIG`` = SIGKILL so that they end with the Voila process that started them.

A module of its own, outside :mod:`labkit.report`, because Voila imports it by name: importing
labkit.report would load pandas and matplotlib into the web server (~140 MB). The two classes
are built when first asked for (module ``__getattr__``): jupyter_server is imported by Voila's
process only, never by labkit.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from .errors import ConfigError

__all__ = ["DEFAULT_MAX_KERNELS", "DEFAULT_UNCONNECTED_TIMEOUT", "die_with_parent"]

#: kernels running at once, at most (one per open page; a kernel of the explorer holds ~0.5 GB)
DEFAULT_MAX_KERNELS = 4
#: seconds a kernel whose page never connected (or went away) may stay idle
DEFAULT_UNCONNECTED_TIMEOUT = 60
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_KERNEL = "labkit.voila_kernels.DashboardKernel"


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen` making the child receive ``sig`` when the
    thread that starts it (this process's calling thread) ends, however it ends (SIGKILL too):
    Linux's ``PR_SET_PDEATHSIG``, kept across ``exec``. Should this process have died already
    when the child sets it, the child sends ``sig`` to itself. ``None`` where there is no
    ``prctl`` (not Linux). ``sig`` must be a signal number (ConfigError otherwise)."""
    if isinstance(sig, bool) or not isinstance(sig, int) or sig not in set(signal.valid_signals()):
        raise ConfigError(f"die_with_parent: {sig!r} is not a signal number")
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    # resolved here: the forked child must not load libraries (locks held by other threads)
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()
    signum = int(sig)

    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died between fork and prctl
            os.kill(os.getpid(), signum)

    return preexec


@functools.cache
def _server_classes() -> dict[str, type]:
    """The jupyter_server classes Voila loads by name (built on first use: jupyter_server is
    imported only by the Voila process that asks for them)."""
    from datetime import UTC, datetime

    from jupyter_core.utils import ensure_async
    from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager, ServerKernelManager
    from tornado import web
    from traitlets import Integer, default

    class DashboardKernel(ServerKernelManager):
        """One kernel of the dashboard: started with ``PR_SET_PDEATHSIG`` = SIGKILL
        (:func:`die_with_parent`), so it ends with the Voila process that started it."""

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            # jupyter_client: "override in a subclass to launch kernel subprocesses differently";
            # the keywords reach Popen (jupyter_client.launcher.launch_kernel)
            kw.setdefault("preexec_fn", die_with_parent(signal.SIGKILL))
            await super()._async_launch_kernel(kernel_cmd, **kw)

    class DashboardKernelManager(AsyncMappingKernelManager):
        """Voila's kernel manager for the dashboard (``VoilaConfiguration.multi_kernel_manager_class``):
        kernels are :class:`DashboardKernel`; at most ``max_kernels`` run at once (a page load past
        it is answered 503 and starts nothing); a kernel without a connected page is shut down
        after ``unconnected_timeout`` idle seconds; jupyter_server's culler
        (``cull_idle_timeout``, ``cull_interval``, ``cull_connected``) does the rest."""

        max_kernels = Integer(
            DEFAULT_MAX_KERNELS,
            config=True,
            help="Kernels running at once, at most; a page load past it gets HTTP 503.",
        )
        unconnected_timeout = Integer(
            DEFAULT_UNCONNECTED_TIMEOUT,
            config=True,
            help="Seconds a kernel with no connected page may stay idle.",
        )

        @default("kernel_manager_class")
        def _default_kernel_manager_class(self) -> str:
            return _KERNEL

        def __init__(self, **kwargs: Any):
            super().__init__(**kwargs)
            self.starting = 0  # kernels being started (not listed by list_kernel_ids yet)

        async def start_kernel(  # type: ignore[override]  # async, as jupyter_server's own
            self, *, kernel_id: str | None = None, path: Any = None, **kwargs: Any
        ) -> str:
            if kernel_id is not None and kernel_id in self:
                return await super().start_kernel(kernel_id=kernel_id, path=path, **kwargs)
            running = len(self.list_kernel_ids()) + self.starting
            if running >= self.max_kernels:
                self.log.warning(
                    "labkit dashboard: %d kernels run (the most allowed: max_kernels); "
                    "page load refused with 503",
                    running,
                )
                raise web.HTTPError(
                    503,
                    reason=f"the dashboard is busy: {running} pages are open, the most "
                    "it serves at once; try again in a minute",
                )
            self.starting += 1
            try:
                return await super().start_kernel(kernel_id=kernel_id, path=path, **kwargs)
            finally:
                self.starting -= 1

        async def cull_kernel_if_idle(self, kernel_id: str) -> None:
            kernel = self.get_kernel(kernel_id)
            last = getattr(kernel, "last_activity", None)
            if last is not None and getattr(kernel, "execution_state", None) not in ("busy", "dead"):
                idle = (datetime.now(UTC) - last).total_seconds()
                if self.kernel_model(kernel_id)["connections"] == 0 and idle > self.unconnected_timeout:
                    self.log.warning(
                        "labkit dashboard: kernel %s shut down: no page connected to it "
                        "for %d s (unconnected_timeout)",
                        kernel_id,
                        idle,
                    )
                    await ensure_async(self.shutdown_kernel(kernel_id))
                    return
            await super().cull_kernel_if_idle(kernel_id)

    for cls in (DashboardKernel, DashboardKernelManager):
        cls.__qualname__ = cls.__name__  # importable as labkit.voila_kernels.<name>
    return {"DashboardKernel": DashboardKernel, "DashboardKernelManager": DashboardKernelManager}


def __getattr__(name: str) -> Any:
    """:class:`DashboardKernel` and :class:`DashboardKernelManager`, built when first asked for
    (Voila imports them by name; labkit itself never needs jupyter_server)."""
    if name in ("DashboardKernel", "DashboardKernelManager"):
        return _server_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
