"""The workload contract.

A workload prepares an instance (copies or checks what it needs), runs with
parameters, and returns :class:`Measurement` rows. It never touches the store.

    class MyWorkload(Workload):
        name = "mine"
        response = "wall_time_s"           # the metric notebooks analyse by default
        defaults = {"size": 10}            # every parameter it accepts, with defaults
        schema = {"size": Int(1, 100)}     # its type and range (labkit.workloads.params)
        min_memory_mb = 32
        def prepare(self, instance): ...   # once per instance, before run
        def run(self, instance, params) -> list[Measurement]: ...
        def version(self, instance) -> dict: ...   # tool versions, recorded in metadata

``params`` holds the defaults, overridden by constructor arguments, overridden
by the run's workload factor levels, plus ``vcpus`` (the instance's vCPUs).
"""

from __future__ import annotations

import json
import random
import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.base import ExecResult
from ..errors import BenchmarkError, CommandError, ConfigError, did_you_mean, tail
from .params import Param

if TYPE_CHECKING:
    from ..backends.base import Instance


@dataclass
class Measurement:
    """One measured value of a run: ``instance`` is the index of the instance that measured it,
    ``iteration`` the 1-based iteration inside the run for a workload that repeats its work
    within one run (N-queens' ``iterations``), None when it does not."""

    metric: str
    value: float
    unit: str
    instance: int = 0
    iteration: int | None = None


class Workload(ABC):
    name = "base"
    response = "wall_time_s"
    defaults: dict = {}
    schema: dict[str, Param] = {}  # parameter -> type/range; a parameter without one must be a scalar
    min_memory_mb = 16
    #: seconds of measured work a run needs for a trustworthy timing (:mod:`labkit.run.runlength`
    #: counts and warns about the runs below it), and the one-line reason for the value
    min_measured_s: float = 1.0
    min_measured_why: str = (
        "below 1 s of measured work, per-run start-up (process start, page "
        "faults, caches, frequency ramp) and the timer's resolution are a large "
        "share of what is timed"
    )
    #: the metric(s) that are the workload's own timing of its measured work, the first a run
    #: reports counting; none: the seconds its ``run`` took (the run's ``workload_s``)
    timed_metrics: tuple[str, ...] = ()
    #: the parameter that makes a run longer (None: none does; change what the workload runs)
    length_param: str | None = None

    @classmethod
    def measured_seconds(cls, metrics: dict[str, float], params: dict) -> float | None:
        """Seconds of measured work of one run, derived from its metrics (each the median over the
        run's instances) and parameters, for a workload whose timed work is neither a metric of its
        own nor the whole of its process (:mod:`labkit.run.runlength`). Default None: not derived."""
        return None

    def __init__(self, **params: object):
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise ConfigError(
                f"workload {self.name!r}: unknown parameter(s) {', '.join(map(str, unknown))[:400]}"
                f"{did_you_mean(unknown[0], list(self.defaults)) if len(unknown) == 1 else ''}; "
                f"allowed: {', '.join(sorted(self.defaults)) or '(none)'}"
            )
        self.params = {**self.defaults, **{k: self.check_param(k, v) for k, v in params.items()}}

    @classmethod
    def check_param(cls, key: str, value: object, *, where: str | None = None) -> Any:
        """``value`` of parameter ``key`` in canonical form (e.g. 8.0 -> 8), or ConfigError naming
        the workload, the key and what its schema allows."""
        where = where or f"workload {cls.name!r} parameter {key!r}"
        spec = cls.schema.get(key)
        if spec is not None:
            return spec.check(where, value)
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise ConfigError(f"{where}: {type(value).__name__} not allowed; use a single value")
        return value

    @classmethod
    def param_from_text(cls, key: str, text: str) -> Any:
        """The value of ``--param key=text``: read by the parameter's schema (a string parameter
        keeps the text as is), JSON for a parameter without a schema."""
        where = f"--param {key}"
        spec = cls.schema.get(key)
        if spec is not None:
            return spec.from_text(where, text)
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return cls.check_param(key, text, where=where)
        return cls.check_param(key, value, where=where)

    def accepts(self, key: str) -> bool:
        """Whether a design factor named ``key`` is one of this workload's parameters."""
        return key in self.defaults

    def params_for(self, levels: dict, vcpus: int) -> dict:
        """Parameters of one run: defaults < constructor < factor levels, plus vcpus."""
        merged = dict(self.params)
        merged.update({k: v for k, v in levels.items() if k in self.defaults})
        merged["vcpus"] = vcpus
        return merged

    def prepare(self, instance: Instance) -> None:  # noqa: B027 (optional hook)
        """Make the instance ready (copy binaries, check tools). Default: nothing."""

    @abstractmethod
    def run(self, instance: Instance, params: dict) -> list[Measurement]:
        """Run once in ``instance`` and return its measurements."""

    def version(self, instance: Instance) -> dict:
        """Versions of the tools used, recorded in the run metadata."""
        return {}

    def spans(self, params: dict) -> bool:
        """Whether a run with ``params`` goes across the run's instances (then the campaign calls
        :meth:`run_group` once instead of :meth:`run` in each). Default: never."""
        return False

    def run_group(self, instances: Sequence[Instance], params: dict) -> list[Measurement]:
        """Run once across all of ``instances`` (a workload that :meth:`spans` them); a workload
        that never spans raises ConfigError."""
        raise ConfigError(f"workload {self.name!r} does not run across instances")

    def describe(self) -> dict:
        return {"name": self.name, "params": self.params, "response": self.response}


#: how often :func:`require_tool` asks when an exec exits 0 with its output lost
LOST_OUTPUT_TRIES = 3


def require_tool(instance: Instance, tool: str, package: str) -> str:
    """Path of ``tool`` in the instance, or BenchmarkError naming its Debian package. ``command -v``
    exits non-zero when the tool is missing, so exit 0 with nothing printed is output lost on the
    way back (LXD's exec under load, lxd#11890): asked again, up to :data:`LOST_OUTPUT_TRIES` times."""
    for _ in range(LOST_OUTPUT_TRIES):
        res = instance.exec(["sh", "-c", f"command -v {shlex.quote(tool)}"], check=False, timeout=30)
        if not res.ok or res.stdout.strip():
            break
    if res.ok and not res.stdout.strip():
        raise BenchmarkError(
            f"looking for {tool!r} in {instance.name}: `command -v` exited 0 and printed nothing "
            f"{LOST_OUTPUT_TRIES} times (the exec's output was lost on the way back)"
        )
    if not res.ok:
        raise BenchmarkError(
            f"{tool!r} is not installed in {instance.name}; it comes with the Debian package "
            f"{package!r} (apt-get install {package}; for container/VM images: labkit images build)"
        )
    return res.stdout.strip()


def network_address(instance: Instance, *, peer: bool = False) -> str:
    """``instance``'s address on the run's private network (``peer``: the one the other instances
    reach it at, the bonded data address with ``nics`` > 1); ConfigError when it is on none."""
    address = instance.peer_address if peer else instance.address
    if address is None:
        raise ConfigError(
            f"{instance.name} has no address on the run's private network (the design needs network: private)"
        )
    return address


#: ports the servers of workloads listen on: below Linux's default range of ephemeral ports
#: (32768-60999, net.ipv4.ip_local_port_range), so no outgoing connection of an instance holds one
SERVER_PORTS = (20000, 32767)


def server_port() -> int:
    """A random port in :data:`SERVER_PORTS` for a server a workload starts; a caller that finds
    it busy tries another."""
    return random.randint(*SERVER_PORTS)


#: a decimal number in a tool's report, as one regex group
NUMBER = r"([0-9]+(?:\.[0-9]+)?)"


def find_number(
    pattern: str, text: str, what: str, command: Sequence[str] | None, *, tool: str, flags: int = 0
) -> float:
    """The first group of ``pattern`` in ``text`` (a tool's report) as a float; BenchmarkError
    "<tool> output has no <what>" with the command and the output's tail when it is missing."""
    m = re.search(pattern, text, flags)
    if not m:
        raise BenchmarkError(f"{tool} output has no {what}", command, tail(text))
    return float(m.group(1))


def run_checked(
    instance: Instance, argv: str | Sequence[str], *, timeout: float | None = None, env: dict | None = None
) -> ExecResult:
    """exec ``argv``; a non-zero exit becomes BenchmarkError with the command and output tail."""
    try:
        return instance.exec(argv, timeout=timeout, env=env)
    except CommandError as exc:
        if type(exc).__name__ == "CommandTimeout":
            raise
        r = exc.result
        if not isinstance(r, ExecResult):  # every CommandError of an exec holds its result
            raise
        raise BenchmarkError(
            f"benchmark command failed (exit {r.exit_code})", r.command, tail(r.stdout + "\n" + r.stderr)
        ) from exc
