"""papermill's engine with the kernel's channels encrypted: ``papermill --engine labkit``.

papermill's default engine starts the kernel over TCP with no transport encryption (jupyter_client's
``KernelManager.transport_encryption`` defaults to "disabled"), and ipykernel then warns in every
run: "Kernel is running over TCP without encryption". This engine is papermill's nbclient engine
with that policy set to "auto": the kernel manager provisions CurveZMQ keys whenever the kernelspec
declares support (ipykernel's does), so code and outputs no longer travel in plain text over
loopback and the warning has nothing to warn about. Registered as the ``labkit`` entry point of
``papermill.engine`` (pyproject.toml); the Makefile, the README's commands and the notebook tests
use it. papermill is imported only when the engine is used.
"""

from __future__ import annotations

from papermill.engines import NBClientEngine
from traitlets.config import Config

__all__ = ["KERNEL_CONFIG", "LabkitEngine"]

#: the configuration given to the kernel manager (nbclient passes it on)
KERNEL_CONFIG = {"KernelManager": {"transport_encryption": "auto"}}


class LabkitEngine(NBClientEngine):
    """:class:`papermill.engines.NBClientEngine` whose kernel manager encrypts the kernel's
    channels (:data:`KERNEL_CONFIG`); a ``config`` given by the caller is merged over it."""

    @classmethod
    def execute_managed_notebook(cls, nb_man, kernel_name, **kwargs):
        import zmq

        # jupyter_client refuses "auto" where pyzmq's libzmq has no CurveZMQ (no libsodium): there
        # the kernel runs as with papermill's own engine rather than not at all
        config = Config(KERNEL_CONFIG if zmq.has("curve") else {})
        if kwargs.get("config") is not None:
            config.merge(Config(kwargs["config"]))
        kwargs["config"] = config
        return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)
