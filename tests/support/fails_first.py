"""A real workload that fails its first run: an injected failure for ``Campaign.run(retries=...)``.

:class:`FailsFirst` is the ``command`` workload except that the first call of :meth:`run` made
through this object (on any thread: a fleet's workers share the campaign's workload) raises
:class:`~labkit.errors.BenchmarkError` naming the instance, before running anything; every later
call runs the command for real. The campaign stores that run as ``failed`` and, with
``retries=1``, runs it again; the failed attempt stays in ``Store.attempts()``. ``failed_in``
lists the instance that took the injected failure.
"""

from __future__ import annotations

import threading

from labkit.errors import BenchmarkError
from labkit.workloads.command import Command

#: text of the injected error, for a test to find it in ``Store.attempts()``
INJECTED = "injected first failure"


class FailsFirst(Command):
    """``command`` whose first run raises BenchmarkError (see the module docstring)."""

    def __init__(self, **params: object):
        super().__init__(**params)
        self.failed_in: list[str] = []
        self._guard = threading.Lock()

    def run(self, instance, params):
        with self._guard:
            first = not self.failed_in
            if first:
                self.failed_in.append(instance.name)
        if first:
            raise BenchmarkError(f"{INJECTED} in {instance.name}")
        return super().run(instance, params)
