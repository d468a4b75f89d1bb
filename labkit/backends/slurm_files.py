"""The node's file reader of the ``slurm`` backend (:mod:`.slurm`): one long-lived job step reading
files on request, so an instance's counters cost a line on its stdin, not a step each."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from typing import Any, Protocol

from . import native
from .base import NAME_PREFIX
from .child import exited
from .exec_results import StatsUnavailable


class StepSpawner(Protocol):
    """What the reader needs of the backend (:class:`.slurm.SlurmBackend`): where it runs, and
    starting a step there (a protocol, so that this module does not import the backend's)."""

    @property
    def where(self) -> str: ...

    def spawn(self, name: str, script: str, *, stdin: Any = ..., verbose: bool = ...) -> subprocess.Popen: ...


#: seconds the node's file reader (:class:`FileReader`) may take to answer one request
READ_TIMEOUT_S = 10.0


class FileReader:
    """One long-lived step on the node reading files on request (:data:`.native.FILE_READER`): the
    instances' counters every telemetry interval (:meth:`.slurm.SlurmInstance.stats`) cost a line on its
    stdin, not a step each (a job may start at most ``MaxStepCount`` steps, 40,000 by default, and
    each is a round trip through the controller). Started on the first request, again after it
    ended (the node lost, the step killed); stopped with the backend (:meth:`.slurm.SlurmBackend.close`)."""

    def __init__(self, backend: StepSpawner):
        self.backend = backend
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.lock = threading.Lock()

    def read(self, paths: dict[str, str], timeout: float = READ_TIMEOUT_S) -> dict[str, str | None]:
        """The text of each file of ``paths`` (key -> path; None where it cannot be read);
        StatsUnavailable when the step cannot be started or does not answer within ``timeout``."""
        words = [w for kv in paths.items() for w in kv]
        if any(not w or any(c.isspace() for c in w) for w in words):
            raise StatsUnavailable(f"{self.backend.where}: a counter's file name holds white space: {paths}")
        with self.lock:
            stdin = self.started().stdin
            try:
                if stdin is None:
                    raise ValueError("no stdin")
                stdin.write((" ".join(words) + "\n").encode())
                stdin.flush()
            except (OSError, ValueError) as exc:
                self.stop()
                raise StatsUnavailable(f"{self.backend.where}: the file reader step ended ({exc})") from None
            got: list[str] = []
            deadline = time.monotonic() + timeout
            while True:
                try:
                    line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    self.stop()
                    raise StatsUnavailable(
                        f"{self.backend.where}: the file reader step did not answer within {timeout:g} s"
                    ) from None
                if line is None:
                    self.stop()
                    raise StatsUnavailable(f"{self.backend.where}: the file reader step ended")
                if line == native.END:
                    return native.split_marked("\n".join(got), list(paths))
                got.append(line)

    def started(self) -> subprocess.Popen:
        """The reader's ``srun``, started when there is none alive."""
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        self.lines = queue.Queue()
        proc = self.backend.spawn(
            f"{NAME_PREFIX}files", native.FILE_READER, stdin=subprocess.PIPE, verbose=False
        )
        threading.Thread(
            target=_lines_into, args=(proc.stdout, self.lines), daemon=True, name="labkit-slurm-files"
        ).start()
        self.proc = proc
        return proc

    def stop(self) -> None:
        """End the reader: its stdin closed (the step's loop ends and the step with it), its ``srun``
        killed if it has not ended within a few seconds."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()
        if not exited(proc, 3.0):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            exited(proc, 5.0)


def _lines_into(stream, lines: queue.Queue) -> None:
    """Each line of ``stream`` (bytes) into ``lines`` as text, then None at its end."""
    try:
        for raw in stream:
            lines.put(raw.decode(errors="replace").rstrip("\n"))
    except (OSError, ValueError):
        pass
    finally:
        lines.put(None)
