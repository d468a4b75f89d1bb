"""What an instance gives back: a command's result, as a backend's ``_wait`` hook returns it
(:class:`RawResult`) and as :meth:`Instance.exec <labkit.backends.base.Instance.exec>` returns it
(:class:`ExecResult`), and the counters :meth:`Instance.stats
<labkit.backends.base.Instance.stats>` may return (:data:`STAT_KEYS`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..errors import BackendError, shorten, tail
from .output import CappedOutput

#: characters of each stream an error message (ExecResult.describe) shows at most
DESCRIBE_CAP = 8 * 1024


#: what :meth:`Instance.stats` may return, each only where the backend's own stats interface has it
STAT_KEYS = {
    "cpu_s": "CPU time the instance used so far (all its processes, or the whole VM), seconds",
    "throttled_periods": "CFS periods in which its CPU quota throttled it, so far",
    "throttled_s": "time it was throttled, so far, seconds",
    "memory_bytes": "memory in use now, bytes",
    "vcpu_s": "time its vCPUs ran so far (VMs), seconds",
    "steal_s": "steal time seen inside it (a VM's, or the remote host's for ssh) so far, seconds",
    "cpu_total_s": "all CPU time seen inside it (the denominator of steal_s) so far, seconds",
}


class StatsUnavailable(BackendError):
    """:meth:`Instance.stats` of an instance whose backend has no stats interface for it (or
    cannot read it now); the message says why."""


@dataclass
class RawResult:
    """What a backend's ``_wait`` hook returns once the command has ended.

    ``stdout``/``stderr`` are the text a backend kept (at most the head and tail of each
    stream, see :mod:`.output`); ``stdout_bytes``/``stderr_bytes`` count every byte the
    command printed (counted from the text when a backend gives no count), ``truncated``
    says whether some were dropped. :meth:`from_sinks` builds one from two sinks.
    """

    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: int = -1  # -1: count the bytes of ``stdout``
    stderr_bytes: int = -1
    truncated: bool = False

    def __post_init__(self):
        if self.stdout_bytes < 0:
            self.stdout_bytes = len(self.stdout.encode("utf-8", "surrogateescape"))
        if self.stderr_bytes < 0:
            self.stderr_bytes = len(self.stderr.encode("utf-8", "surrogateescape"))

    @classmethod
    def from_sinks(cls, exit_code: int, out: CappedOutput, err: CappedOutput) -> RawResult:
        """The result of a command whose output went into ``out`` and ``err``."""
        return cls(exit_code, out.text(), err.text(), out.total, err.total, out.truncated or err.truncated)


@dataclass
class ExecResult:
    """A finished command with its context.

    ``timed_out``: labkit killed it at its deadline. ``oom_killed``: the
    instance's OOM killer ended it (read from the backend, never guessed from
    the exit code alone).
    """

    command: list[str]
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    instance: str = ""
    timed_out: bool = False
    oom_killed: bool = False
    #: every byte the command printed on each stream, and whether ``stdout``/``stderr`` dropped
    #: some (they keep the head and tail of each stream: :mod:`labkit.backends.output`)
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def describe(self) -> str:
        how = (
            " (killed at its deadline)"
            if self.timed_out
            else " (killed by the OOM killer: memory limit reached)"
            if self.oom_killed
            else ""
        )
        return (
            f"command {shlex.join(self.command)!r} in {self.instance or 'instance'} "
            f"exited {self.exit_code}{how} after {self.duration_s:.2f}s\n"
            f"  stdout (tail):\n{tail(shorten(self.stdout, DESCRIBE_CAP))}\n"
            f"  stderr (tail):\n{tail(shorten(self.stderr, DESCRIBE_CAP))}"
        )
