"""Reading many rows at once: JSON values parsed in batches (:class:`JsonBatch`) and Python's
cyclic garbage collector paused meanwhile (:func:`gc_paused`).

At 100,000 runs a store's reader makes millions of small dicts and lists, none of them in a
reference cycle; the collector, run every few hundred allocations, walked the growing heap each
time and took most of the reading time (the 100,000 runs' ``instances`` lists parsed 10,000 at a time: 0.41 s of CPU with it,
0.07 s without; measured on the 100,000-run store of benchmarks/bench_scale.py).
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (reference counting still frees
    everything that is not in a cycle); it is on again after, as it was before, even on an error."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class JsonBatch:
    """JSON texts parsed together, ``size`` at a time: one ``json.loads`` per batch rather than per
    text (at 100,000 runs the calls, not the parsing, were most of the time). :meth:`put` a text
    and where its value goes; :meth:`flush` once all are put. The texts are SQLite's ``json_extract``
    of a valid JSON document: each is JSON whole."""

    def __init__(self, size: int = 10_000):
        self.size = size
        self._slots: list[tuple[dict, str]] = []
        self._texts: list[str] = []

    def put(self, target: dict, key: str, text: str) -> None:
        """``target[key]`` = the value of ``text``, by :meth:`flush` at the latest."""
        self._slots.append((target, key))
        self._texts.append(text)
        if len(self._texts) >= self.size:
            self.flush()

    def flush(self) -> None:
        """Parse the texts put since the last flush and set their values."""
        if self._texts:
            for (target, key), value in zip(
                self._slots, json.loads("[" + ",".join(self._texts) + "]"), strict=True
            ):
                target[key] = value
        self._slots, self._texts = [], []
