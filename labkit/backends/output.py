"""A command's output kept within a bound, whatever the command prints.

Every backend feeds a command's stdout and stderr, chunk by chunk as they
arrive, into one :class:`CappedOutput` each. A sink keeps the first
``head`` bytes and the last ``tail`` bytes of its stream (1 MiB each by
default, :data:`HEAD_BYTES` / :data:`TAIL_BYTES`) and counts every byte, so the
controller's memory stays bounded (about ``head + 2 * tail`` per stream) even
when a workload prints gigabytes. :meth:`CappedOutput.text` renders what was kept
as text, with a marker where bytes were dropped::

    first MiB of output
    ... [1071644672 bytes omitted; total 1073741824 bytes] ...
    last MiB of output

Bytes are decoded as UTF-8 (invalid bytes become U+FFFD) only when rendered, and a
multi-byte character cut by the head or tail boundary is dropped whole (counted in
the omitted bytes), never rendered as a broken character.

:func:`labkit.errors.shorten` applies the same head/tail rule to a text already in memory.
:class:`PipeReader` drains a child's pipes into sinks on threads (the local backend).
:class:`CommandLog` keeps an instance's commands, one after the other, in one such sink: the
first and last MiB of the log of everything it ran (what a run's output file holds).
"""

from __future__ import annotations

import codecs
import os
import threading
import time

#: bytes of the start and of the end of each stream a sink keeps
HEAD_BYTES = 1 << 20
TAIL_BYTES = 1 << 20
#: how much a reader asks for at a time
CHUNK = 64 * 1024
MARKER = "\n... [{omitted} bytes omitted; total {total} bytes] ...\n"


class CappedOutput:
    """A write-only sink that keeps the first ``head`` and last ``tail`` bytes of a stream.

    ``write(data)`` takes bytes (or text, encoded as UTF-8); ``total`` counts every
    byte written, ``truncated`` says whether some were dropped, ``text()`` renders it.
    Thread-safe: one writer and any readers may use it at once.
    """

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES):
        if head < 0 or tail < 0:
            raise ValueError(f"CappedOutput: head and tail must be >= 0, got {head}, {tail}")
        self.head_limit, self.tail_limit = head, tail
        self._head = bytearray()
        self._tail = bytearray()  # the bytes after the head; trimmed to the last tail_limit
        self.total = 0
        self._lock = threading.Lock()

    def write(self, data: bytes | bytearray | memoryview | str) -> int:
        """Add ``data`` (the next bytes of the stream); returns its length in bytes."""
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")
        view = memoryview(data).cast("B")
        n = len(view)
        with self._lock:
            self.total += n
            room = self.head_limit - len(self._head)
            if room > 0:
                self._head += view[:room]
                view = view[room:]
            if len(view) and self.tail_limit:
                if len(view) >= self.tail_limit:
                    self._tail[:] = view[len(view) - self.tail_limit :]
                else:
                    self._tail += view
                    if len(self._tail) > 2 * self.tail_limit:  # trim now and then, not per write
                        del self._tail[: len(self._tail) - self.tail_limit]
        return n

    def _parts(self) -> tuple[bytes, bytes]:
        with self._lock:
            tail = bytes(self._tail[max(0, len(self._tail) - self.tail_limit) :])
            return bytes(self._head), tail

    @property
    def truncated(self) -> bool:
        """Whether some bytes of the stream were dropped (it was longer than head + tail)."""
        head, tail = self._parts()
        return self.total > len(head) + len(tail)

    def text(self) -> str:
        """The kept bytes as text, with the omitted-bytes marker between head and tail if any
        were dropped (see the module docstring)."""
        head, tail = self._parts()
        if self.total == len(head) + len(tail):
            return (head + tail).decode("utf-8", "replace")
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        start = decoder.decode(head, final=False)  # leaves a cut character undecoded
        cut = 0
        while cut < min(3, len(tail)) and tail[cut] & 0xC0 == 0x80:  # continuation bytes
            cut += 1
        end = tail[cut:].decode("utf-8", "replace")
        kept = len(head) - len(decoder.getstate()[0]) + len(tail) - cut
        return start + MARKER.format(omitted=self.total - kept, total=self.total) + end


class CommandLog:
    """The log of every command an instance ran, in one :class:`CappedOutput` (the first ``head``
    and last ``tail`` bytes of it): per command its header (argv, exit, duration, byte totals) and
    its kept stdout and stderr. ``commands`` and ``printed`` (every byte the commands printed on
    both streams, kept or not) count everything; :meth:`text` renders the log. Thread-safe as its
    sink is; bounded whatever is added (about ``head + 2 * tail`` bytes)."""

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES):
        self.sink = CappedOutput(head, tail)
        self.commands = 0
        self.printed = 0

    def add(self, header: str, stdout: str, stderr: str, printed: int) -> None:
        """One command: its ``header`` line(s), the text kept of its streams, and ``printed``, the
        bytes it printed in all."""
        self.commands += 1
        self.printed += printed
        for part in (header, "\n--- stdout ---\n", stdout, "\n--- stderr ---\n", stderr, "\n\n"):
            self.sink.write(part)

    def text(self) -> str:
        return self.sink.text()


class PipeReader:
    """Drains a child's stdout and stderr (binary file objects or fds) into two sinks, on two
    daemon threads, as the bytes come; ``join(timeout)`` says whether both reached EOF.
    ``stderr_sink``: where stderr goes instead of :attr:`stderr` (anything with ``write(bytes)``,
    e.g. a filter that passes the command's own lines on to :attr:`stderr`)."""

    def __init__(self, stdout, stderr, head: int = HEAD_BYTES, tail: int = TAIL_BYTES, *, stderr_sink=None):
        self.stdout, self.stderr = CappedOutput(head, tail), CappedOutput(head, tail)
        err_sink = self.stderr if stderr_sink is None else stderr_sink
        self._threads = [
            threading.Thread(target=_drain, args=(src, sink), daemon=True, name=f"labkit-output-{name}")
            for name, src, sink in (("out", stdout, self.stdout), ("err", stderr, err_sink))
            if src is not None
        ]
        for t in self._threads:
            t.start()

    def join(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` s (None: forever) for both pipes to reach EOF; True if they did."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                return False
        return True


def _drain(src, sink) -> None:
    fd = src if isinstance(src, int) else src.fileno()
    try:
        while True:
            data = os.read(fd, CHUNK)
            if not data:
                return
            sink.write(data)
    except OSError:  # the pipe was closed under us: what was read is what there is
        return
    finally:
        if not isinstance(src, int):
            src.close()
