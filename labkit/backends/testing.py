"""Probes that tell whether a real daemon is usable, for tests and notebooks, and a test double.

``available(name)`` returns ``(True, "")`` or ``(False, reason)``; it never raises.

:class:`SimulatedBackend` is a stand-in host for measuring the run engine at scale
(``benchmarks/bench_dispatch.py``) and for unit tests of its logic: instances that exist only in
this process, every round trip to the "host" a configurable ``latency`` (slept, no socket), and
``sleep N`` taking N seconds without a process. It is not in the backend registry: nothing runs on
it unless a caller builds it on purpose.
"""

from __future__ import annotations

import os
import threading
import time

from ..errors import LabkitError
from .base import Backend, Instance, RawResult, StatsUnavailable


def _probe(name: str, **options) -> None:
    from .lookup import get_backend

    backend = get_backend(name, **options)
    backend.close()


#: the Slurm test cluster's partition and how many responsive nodes the ``slurm`` tests need
SLURM_PARTITION, SLURM_NODES = "labkit", 3


def _slurm_cluster() -> None:
    """BackendUnavailable unless a Slurm controller answers and partition :data:`SLURM_PARTITION`
    has :data:`SLURM_NODES` nodes that respond (the cluster of scripts/setup-slurm.sh)."""
    from ..errors import BackendUnavailable
    from . import slurm_cli

    hint = "start it with: bash scripts/setup-slurm.sh"
    ping = slurm_cli.run(["scontrol", "ping"], timeout=30, what="asking the Slurm controller", check=False)
    if "UP" not in ping.stdout:
        raise BackendUnavailable(
            f"no Slurm controller answers ({(ping.stderr or ping.stdout).strip()[-200:]}); {hint}"
        )
    states = slurm_cli.run(
        ["sinfo", "-h", "-N", "-p", SLURM_PARTITION, "-o", "%N %T"],
        timeout=30,
        what="listing the Slurm test nodes",
    ).stdout.split("\n")
    good = [
        ln.split()[0]
        for ln in states
        if len(ln.split()) == 2
        and slurm_cli.node_failure(ln.split()[1]) is None
        and not ln.split()[1].startswith(("drain", "down"))
    ]
    if len(good) < SLURM_NODES:
        raise BackendUnavailable(
            f"partition {SLURM_PARTITION} has {len(good)} responsive node(s), the slurm tests "
            f"need {SLURM_NODES} ({'; '.join(s for s in states if s)[:200]}); {hint}"
        )


def available(name: str) -> tuple[bool, str]:
    """Can backend ``name`` provision instances here (daemon up, SDK, image, privilege)? For
    ``slurm``: does the Slurm test cluster answer (controller up, enough responsive nodes)?"""
    try:
        if name == "slurm":
            _slurm_cluster()
            return True, ""
        _probe(name)
    except LabkitError as exc:
        return False, str(exc)
    except Exception as exc:  # an SDK raising something of its own still means "not usable"
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def required() -> set[str]:
    """Backends listed in LABKIT_REQUIRE (comma separated): their absence must fail, not skip."""
    return {x.strip() for x in os.environ.get("LABKIT_REQUIRE", "").split(",") if x.strip()}


class _SimulatedCommand:
    def __init__(self, seconds: float):
        self.done = threading.Event()
        self.end = time.monotonic() + seconds


class SimulatedInstance(Instance):
    """An instance of :class:`SimulatedBackend`: ``sleep N`` lasts N seconds, anything else ends at
    once with exit 0 and no output; each command start and the teardown cost one round trip."""

    backend: SimulatedBackend

    def _start(self, argv, env):
        self.backend.round_trip()
        seconds = 0.0
        if len(argv) == 2 and argv[0] == "sleep":
            try:
                seconds = max(0.0, float(argv[1]))
            except ValueError:
                seconds = 0.0
        return _SimulatedCommand(seconds)

    def _wait(self, handle: _SimulatedCommand, timeout):
        left = handle.end - time.monotonic()
        if timeout is not None and left > timeout:
            handle.done.wait(timeout)
            if not handle.done.is_set():
                return None
        elif left > 0:
            handle.done.wait(left)
        return RawResult(137 if handle.done.is_set() else 0, "", "")

    def _kill(self, handle: _SimulatedCommand) -> None:
        handle.done.set()

    def _oom_kills(self) -> int | None:
        return 0

    def stats(self) -> dict[str, float]:
        raise StatsUnavailable("a simulated instance runs nothing: it has no counters")

    def put(self, local_path, remote_path: str, mode: int = 0o755) -> None:
        self.backend.round_trip()

    def _destroy(self) -> None:
        self.backend.round_trip()


class SimulatedBackend(Backend):
    """A simulated host (see the module docstring). Options: ``latency`` (seconds per round trip,
    default 0), ``cpus`` (default 2), ``host`` (its name in the fingerprint)."""

    name = "simulated"
    OPTIONS = ("latency", "cpus", "host")

    def __init__(self, latency: float = 0.0, cpus: int = 2, host: str = "simulated", **unknown):
        super().__init__(**unknown)
        self.latency, self.cpus, self.host = float(latency), int(cpus), str(host)
        self.options = {"latency": self.latency, "cpus": self.cpus, "host": self.host}
        self.round_trips = 0

    def round_trip(self) -> None:
        self.round_trips += 1
        if self.latency > 0:
            time.sleep(self.latency)

    def check(self) -> None:
        self.round_trip()  # connecting

    def host_cpus(self) -> int:
        return self.cpus

    def fingerprint(self) -> dict:
        return {
            "backend": self.name,
            "hostname": self.host,
            "kernel": "simulated",
            "cpu_model": "simulated",
            "cpus": self.cpus,
        }

    def _create(self, spec, name, index, cpus, network=None) -> Instance:
        self.refuse_network(network)
        self.round_trip()
        return SimulatedInstance(self, name, spec, index, cpus)

    def cleanup(self, prefix: str) -> list[str]:
        self.round_trip()
        return []

    def list_labkit(self, prefix: str = "labkit-") -> list[str]:
        self.round_trip()
        return []
