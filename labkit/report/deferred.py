"""Views shown after the page: the explorer's first analysis computed once its page is served.

Under ``labkit dashboard`` (issue 46: 32 s to the first page), the kernel that runs notebook 00
returns the explorer's widgets before the first campaign's slow views (analysis, telemetry) are
computed: :func:`fill_later` puts a line "Computing …" in each of their Output widgets and a
background thread fills them. The outputs are set as the widgets' state (:func:`output`), never
captured with ``with out:``: a capturing client (nbclient running the notebook for Voila) would
send its own copy of the outputs back after the cell; the state also reaches a page that
connects later. :data:`DEFER_ENV` is how the dashboard asks for it; :func:`shown_path` is the
data folder as a page names it (never the server's absolute path).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFER_ENV", "THREAD_NAME", "fill_later", "output", "shown_path"]

#: set to "1" in the kernels of ``labkit dashboard``: :meth:`labkit.report.explore.Explorer.show`
#: then defers the first analysis, so that the page is served before it is computed
DEFER_ENV = "LABKIT_EXPLORER_DEFER"
#: the background thread's name (tests wait for it)
THREAD_NAME = "labkit-explorer-first-analysis"


def output(item: Any) -> dict:
    """``item`` as one output of an Output widget (what ``display`` inside it would add)."""
    from IPython.core.interactiveshell import InteractiveShell

    formatter = InteractiveShell.instance().display_formatter
    assert formatter is not None  # an InteractiveShell always has one
    data, metadata = formatter.format(item)
    return {"output_type": "display_data", "data": data, "metadata": metadata}


def fill_later(
    jobs: Sequence[tuple[Any, Any, Callable[[], Iterable]]],
    *,
    lock: threading.RLock,
    current: Callable[[], bool],
    failed: Callable[[BaseException], Any],
) -> threading.Thread:
    """Fill each ``(out, waiting, make)`` of ``jobs`` in a background thread (returned, started):
    ``out`` (an Output widget) shows ``waiting`` (a displayable) at once, then ``make()``'s items,
    or ``failed(exc)`` if it raised. Each job runs holding ``lock`` (the callbacks' lock: pyplot
    is not thread-safe); once ``current()`` is false (a newer pick), the rest is dropped."""
    for out, waiting, _ in jobs:
        out.outputs = (output(waiting),)

    def work() -> None:
        for out, _, make in jobs:
            with lock:
                if not current():
                    return
                try:
                    items = list(make())
                except Exception as exc:  # noqa: BLE001  # shown where the view would be
                    items = [failed(exc)]
                if current():
                    out.outputs = tuple(output(item) for item in items)

    thread = threading.Thread(target=work, name=THREAD_NAME, daemon=True)
    thread.start()
    return thread


def shown_path(folder: str | Path) -> str:
    """``folder`` as a page names it, never the server's absolute path (issue 46): relative to the
    labkit checkout or the working directory when under one (``data/``), else its name."""
    from ..core import paths

    here = Path(os.path.abspath(folder))
    for base in (paths.checkout(), Path.cwd()):
        if base is not None and here.is_relative_to(os.path.abspath(base)):
            rel = here.relative_to(os.path.abspath(base)).as_posix()
            return "./" if rel == "." else f"{rel}/"
    return f"{here.name}/"
