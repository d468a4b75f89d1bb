"""Noisy neighbours as a design factor (study 003, section 4.3).

While the main instance runs its workload, ``count`` neighbour instances with
the same :class:`~labkit.core.instance.InstanceSpec` run a load chosen by ``kind``:

| kind | what each neighbour runs (Debian package) |
|---|---|
| ``none`` | nothing: no neighbour is created |
| ``cpu`` | ``stress-ng --cpu <vcpus>`` (stress-ng) |
| ``memory`` | ``stress-ng --vm <vcpus> --vm-bytes <40% of memory_mb / vcpus>M`` (stress-ng) |
| ``io`` | ``stress-ng --io 1 --hdd <vcpus>`` writing in the neighbour's work directory (stress-ng) |
| ``network`` | an iperf3 server and client on the neighbour's loopback, TCP unlimited (iperf3) |
| ``command`` | ``command=`` run over and over (a chosen workload, e.g. ``"sysbench cpu --time=60 run"``) |

The order follows 003: neighbours start, labkit **confirms they are running**
(the load's process is alive and, for stress-ng, its workers exist), the main
run executes, then the neighbours are stopped and torn down — on every path,
errors included. Only the main instance's result is the response; the
neighbours' output is discarded.

Use it around a run (the campaign does this for a factor named ``noise``)::

    with neighbours(backend, spec, "cpu", count=1) as group:
        rows = workload.run(main_instance, params)
    metadata["noise"] = list(group)      # JSON-ready dicts, one per neighbour

Pinned neighbours get the same placement as the main instance (each is
provisioned as instance 0 of its own spec), so they share its CPUs: the
worst case of co-location, recorded in each neighbour's ``cpus``.
Every load also carries its own time limit (``max_s``, default 3600 s) so a
neighbour can never spin forever, even if its teardown were to fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import shlex
from collections.abc import Iterable, Iterator

from ..backends.base import Backend, Instance, Process, teardown
from ..core.instance import InstanceSpec
from ..core.waiting import wait_until
from ..errors import BackendError, ConfigError, tail
from ..workloads.base import require_tool, server_port

log = logging.getLogger("labkit.run.noise")

KINDS = ("none", "cpu", "memory", "io", "network", "command")


class NoiseGroup(list[dict]):
    """The running neighbours: a list of JSON-ready dicts (name, index, cpus, kind,
    command, workers, tool_version), plus ``instances`` (the live Instance objects)."""

    def __init__(self, rows: Iterable[dict] = (), instances: Iterable[Instance] = ()):
        super().__init__(rows)
        self.instances = list(instances)


def load_command(
    kind: str,
    spec: InstanceSpec,
    workdir: str,
    *,
    command: str | None = None,
    max_s: int = 3600,
    port: int = 5202,
) -> str:
    """The shell command (foreground) that makes ``kind`` noise in one neighbour.

    ``port`` is the loopback port of the ``network`` load (neighbours of the
    ``local`` backend share the host's network namespace, so each gets its own).
    """
    n = spec.vcpus
    if kind == "cpu":
        return f"stress-ng --cpu {n} --timeout {max_s}s"
    if kind == "memory":
        per_worker = max(8, int(spec.memory_mb * 0.4 / n))
        return f"stress-ng --vm {n} --vm-bytes {per_worker}M --timeout {max_s}s"
    if kind == "io":
        return (
            f"stress-ng --io 1 --hdd {n} --hdd-bytes 64M --temp-path {shlex.quote(workdir)} "
            f"--timeout {max_s}s"
        )
    if kind == "network":
        return (
            f"iperf3 -s -B 127.0.0.1 -p {port} >/dev/null 2>&1 & sleep 0.5; "
            f"iperf3 -c 127.0.0.1 -p {port} -t {max_s} -P {n} >/dev/null 2>&1"
        )
    if kind == "command":
        if not command:
            raise ConfigError("noise kind 'command' needs command='<shell command to repeat>'")
        return f"end=$(($(date +%s)+{max_s})); while [ $(date +%s) -lt $end ]; do {command}; done"
    raise ConfigError(f"noise kind must be one of {', '.join(KINDS)}; got {kind!r}")


def _tools(kind: str) -> list[tuple[str, str]]:
    return {
        "cpu": [("stress-ng", "stress-ng")],
        "memory": [("stress-ng", "stress-ng")],
        "io": [("stress-ng", "stress-ng")],
        "network": [("iperf3", "iperf3")],
    }.get(kind, [])


def _start(inst: Instance, load: str) -> Process:
    """Start ``load`` in the background in ``inst``, output to a log in its work dir; a Process."""
    wd = shlex.quote(inst.workdir)
    log_file = shlex.quote(f"{inst.workdir}/labkit-noise.log")
    return inst.spawn(
        [
            "sh",
            "-c",
            f"mkdir -p {wd} && cd {wd} && exec sh -c {shlex.quote(load)} </dev/null >{log_file} 2>&1",
        ]
    )


# What must be seen running before the main run starts: the parent and a worker
# (stress-ng), the server and the client (iperf3).
_WORKERS = {
    "cpu": ("stress-ng", 2),
    "memory": ("stress-ng", 2),
    "io": ("stress-ng", 2),
    "network": ("iperf3", 2),
}


def confirm(inst: Instance, proc: Process, kind: str, *, wait_s: float = 10.0) -> int:
    """Wait until the load runs: its process alive and, for stress-ng (iperf3), at least two
    processes of that tool in the instance (``pgrep``). Returns how many were seen; raises
    BackendError with the load's log if it exited or never started its workers in ``wait_s``."""
    tool, need = _WORKERS.get(kind, ("", 0))
    seen = 0

    def up() -> str:  # "up": running with its workers; "gone": exited (nothing more to wait for)
        nonlocal seen
        if not proc.running():
            return "gone"
        if tool:
            out = inst.exec(["pgrep", "-c", tool], check=False, timeout=30).stdout.strip()
            seen = int(out) if out.isdigit() else 0
        return "up" if seen >= need else ""

    if wait_until(up, timeout=wait_s, interval=0.2, error=None, what=f"the {kind} neighbour's load") == "up":
        return seen
    log_tail = inst.exec(
        ["sh", "-c", f"tail -n 20 {shlex.quote(inst.workdir)}/labkit-noise.log"], check=False, timeout=30
    ).stdout
    state = "exited" if not proc.running() else f"has {seen} {tool} process(es), expected >= {need}"
    raise BackendError(
        f"noise ({kind}) in {inst.name} is not running: {state}\n  log (tail):\n{tail(log_tail)}"
    )


def stop(proc: Process) -> None:
    """Kill the load's whole process tree. Never raises (teardown follows anyway)."""
    try:
        proc.stop()
    except Exception as exc:
        log.warning("stopping noise in %s failed: %s", getattr(proc.instance, "name", proc), exc)


def _tool_version(inst: Instance, kind: str) -> str | None:
    tools = _tools(kind)
    if not tools:
        return None
    res = inst.exec([tools[0][0], "--version"], check=False, timeout=30)
    m = re.search(r"(?:version|iperf)\s+([0-9][0-9.]*)", res.stdout + res.stderr)
    return f"{tools[0][0]} {m.group(1)}" if m else None


@contextlib.contextmanager
def neighbours(
    backend: Backend,
    spec: InstanceSpec,
    kind: str,
    *,
    count: int = 1,
    prefix: str = "labkit-noise",
    command: str | None = None,
    max_s: int = 3600,
    confirm_s: float = 10.0,
) -> Iterator[NoiseGroup]:
    """Run ``count`` noisy neighbours of ``kind`` for the duration of the ``with`` block.

    Yields a :class:`NoiseGroup` (``[]`` for kind ``none``). Raises ConfigError
    for an unknown kind, BenchmarkError when the load's tool is missing in a
    neighbour (naming its Debian package) and BackendError when a neighbour's
    load cannot be confirmed running; neighbours made so far are torn down first.
    """
    if kind is None or kind == "none" or kind is False:
        yield NoiseGroup()
        return
    if kind not in KINDS:
        raise ConfigError(f"noise kind must be one of {', '.join(KINDS)}; got {kind!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ConfigError(f"noise: count must be a non-negative integer, got {count!r}")
    if kind == "command" and not command:
        raise ConfigError("noise kind 'command' needs command='<shell command to repeat>'")
    one = dataclasses.replace(spec, count=1)
    made: list[Instance] = []
    started: list[tuple[Instance, Process, str]] = []
    group = NoiseGroup()
    try:
        for _ in range(count):
            made += backend.provision(one, prefix=prefix)
        for inst in made:
            for tool, package in _tools(kind):
                require_tool(inst, tool, package)
            load = load_command(kind, one, inst.workdir, command=command, max_s=max_s, port=server_port())
            started.append((inst, _start(inst, load), load))
        for i, (inst, proc, load) in enumerate(started):
            workers = confirm(inst, proc, kind, wait_s=confirm_s)
            group.append(
                {
                    "name": inst.name,
                    "index": i,
                    "cpus": inst.cpus,
                    "kind": kind,
                    "command": load,
                    "workers": workers,
                    "tool_version": _tool_version(inst, kind),
                    "backend": getattr(backend, "name", None),
                }
            )
        group.instances = list(made)
        log.info("noise %s: %d neighbour(s) running", kind, len(group))
        yield group
    finally:
        for _, proc, _ in started:
            stop(proc)
        errors = teardown(made)
        if errors:
            log.error("noise teardown left %d error(s): %s", len(errors), errors)
