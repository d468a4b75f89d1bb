"""Run any command as a workload; its wall time (measured around exec) is the response.

Useful for quick studies (``Command(argv=["sleep", "1"])``) and for tools labkit
has no parser for yet.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .base import Measurement, Workload, run_checked
from .params import THREADS, TIMEOUT, StrList
from .template import fill

if TYPE_CHECKING:
    from ..backends.base import Instance


class Command(Workload):
    """Parameters: ``argv`` (list or shell string, required), ``timeout_s`` (default 3600).

    ``{vcpus}`` and ``{threads}`` in the command are replaced by the run's values; every
    other brace is literal (``awk '{print $1}'``, ``find -exec ... {} ;``; see
    :mod:`labkit.workloads.template`).
    Metric: ``wall_time_s``.
    """

    name = "command"
    timed_metrics = ("wall_time_s",)
    length_param = None
    defaults = {"argv": None, "timeout_s": 3600, "threads": None}
    schema = {"argv": StrList(none=True), "timeout_s": TIMEOUT, "threads": THREADS}

    def __init__(self, **params: object):
        super().__init__(**params)
        if not self.params["argv"]:
            raise ConfigError("workload 'command': parameter 'argv' is required (a list or a shell string)")

    def run(self, instance: Instance, params: dict) -> list[Measurement]:
        argv = params["argv"]
        argv = shlex.split(argv) if isinstance(argv, str) else list(argv)
        values = {"vcpus": params["vcpus"], "threads": params.get("threads") or params["vcpus"]}
        argv = [fill(a, values) for a in argv]
        res = run_checked(instance, argv, timeout=params.get("timeout_s"))
        return [Measurement("wall_time_s", res.duration_s, "s", instance.index)]
