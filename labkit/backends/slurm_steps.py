"""The output of a Slurm job step as the ``slurm`` backend reads it (:mod:`.slurm`): the command's
stderr with ``srun``'s own lines kept apart (:class:`SrunLines`), and one running step (:class:`Step`)."""

from __future__ import annotations

import re
import subprocess
import threading

from .output import CappedOutput, PipeReader

#: at most this many of srun's own lines are kept per step (the first and the last ones)
SRUN_LINES = 40
_LAUNCHED = re.compile(r"launching StepId=(\d+)\.(\d+)")
#: srun's line for a task that ended on its own (not a failure of the step itself)
_TASK_ENDED = re.compile(r"^srun: error: \S+: task \d+: ")


class SrunLines:
    """A stderr sink that passes the command's lines to ``sink`` and keeps ``srun``'s own lines
    (``srun: ...``) apart in :attr:`lines` (the first and last :data:`SRUN_LINES` // 2). A line
    is held only until it is seen not to start with ``srun: ``; :meth:`flush` passes on what is
    held at the end of the stream."""

    PREFIX = b"srun: "

    def __init__(self, sink: CappedOutput):
        self.sink = sink
        self.lines: list[str] = []
        self.dropped = 0
        self._held = b""
        self._passing = False  # inside a line of the command's, already passed on
        self._lock = threading.Lock()

    def write(self, data: bytes) -> int:
        with self._lock:
            buf = self._held + bytes(data)
            self._held = b""
            while buf:
                if self._passing:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        self.sink.write(buf)
                        return len(data)
                    self.sink.write(buf[: nl + 1])
                    buf, self._passing = buf[nl + 1 :], False
                    continue
                nl = buf.find(b"\n")
                line = buf if nl < 0 else buf[: nl + 1]
                if line.startswith(self.PREFIX):
                    if nl < 0:
                        self._held = buf
                        return len(data)
                    self._keep(line)
                    buf = buf[nl + 1 :]
                elif nl < 0 and self.PREFIX.startswith(line):
                    self._held = buf  # maybe the start of an srun line
                    return len(data)
                else:
                    self._passing = True
        return len(data)

    def _keep(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip("\n")
        if len(self.lines) < SRUN_LINES:
            self.lines.append(text)
        else:  # keep the first half and a moving last half
            self.lines.pop(SRUN_LINES // 2)
            self.lines.append(text)
            self.dropped += 1

    def flush(self) -> None:
        with self._lock:
            held, self._held = self._held, b""
        if held.startswith(self.PREFIX):
            self._keep(held)
        elif held:
            self.sink.write(held)

    def step(self) -> str | None:
        """The step id ``J.S`` srun said it launched, or None."""
        for line in self.lines:
            m = _LAUNCHED.search(line)
            if m:
                return f"{m.group(1)}.{m.group(2)}"
        return None

    def step_errors(self) -> list[str]:
        """srun's error lines about the step itself (not launched, aborted, lost), not a task's end."""
        return [
            ln
            for ln in self.lines
            if (ln.startswith("srun: error:") and not _TASK_ENDED.match(ln))
            or "Job step aborted" in ln
            or "step creation" in ln.lower()
        ]


class Step:
    """One running step: its srun process, output sinks and pid file on the node."""

    def __init__(self, proc: subprocess.Popen, pidfile: str, record: dict):
        self.proc, self.pidfile, self.record = proc, pidfile, record
        self.err = CappedOutput()
        self.srun = SrunLines(self.err)
        self.reader = PipeReader(proc.stdout, proc.stderr, stderr_sink=self.srun)
        self.out = self.reader.stdout
