"""What a study notebook does first: choose its mode, say so, and make errors and tables readable.

:func:`notebook_mode` decides between viewing stored campaigns and running new ones, so that
Run All never starts instances by surprise: ``mode="auto"`` views when the notebook's campaigns
are stored and runs only when none is (and the backends can start instances here);
``mode="run"`` always runs; ``mode="view"`` only reads, and a campaign that is not stored is a
one-line :class:`~labkit.errors.ConfigError` with "did you mean". It prints the notebook's first
output line: the mode, why, and how to change it.

:func:`one_line_errors` shows labkit's own errors (a wrong parameter, a missing campaign) in
IPython as one line (``ConfigError: ...``) instead of a traceback; other exceptions keep theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, LabkitError, did_you_mean

__all__ = ["MODES", "NotebookMode", "notebook_mode", "one_line_errors"]

MODES = ("auto", "view", "run")


@dataclass
class NotebookMode:
    """The outcome of :func:`notebook_mode`: ``mode`` ("view" or "run"), ``asked`` (the
    parameter as given), ``stored`` and ``missing`` (the notebook's campaign ids found and not
    found under ``data_dir``), ``reason`` (why this mode) and :meth:`line` (what to print)."""

    mode: str
    asked: str
    data_dir: Path
    stored: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    reason: str = ""

    def line(self) -> str:
        """One sentence: the mode, why, and how to switch (parameters cell or papermill ``-p``)."""
        how = (
            (
                'to run the campaign here (starts instances): mode = "run" in the parameters cell '
                "(papermill: -p mode run)"
            )
            if self.mode == "view"
            else (
                'to only read stored results: mode = "view" in the parameters cell (papermill: -p mode view)'
            )
        )
        return f"mode {self.mode} ({self.reason}). To change it: {how}."

    def __str__(self) -> str:
        return self.line()


def _short(names: Sequence[str], n: int = 4) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def notebook_mode(
    mode: object,
    *,
    data_dir: str | Path,
    campaigns: Sequence[str],
    backends: Sequence[str] = (),
    can_run: Callable[[str], tuple[bool, str]] | None = None,
    echo: bool = True,
) -> NotebookMode:
    """Choose a study notebook's mode and print it (its first output, with ``echo``).

    ``campaigns``: the ids the notebook reads in view mode (under ``data_dir``); ``backends``:
    what run mode starts instances on, checked with ``can_run`` (default
    :func:`labkit.backends.testing.available`) only when ``mode="auto"`` finds none of the
    campaigns stored. Rules:

    * ``"view"``: view; ConfigError (with "did you mean") when none of ``campaigns`` is stored.
    * ``"run"``: run (the notebook decides under which campaign id).
    * ``"auto"``: view when at least one of ``campaigns`` is stored (the notebook shows those and
      says which are missing); otherwise run when every backend can start instances here, else a
      ConfigError saying that nothing is stored and why nothing can run.

    Also installs :func:`one_line_errors`. Returns a :class:`NotebookMode`.
    """
    one_line_errors()
    if mode not in MODES:
        raise ConfigError(f"parameter mode={mode!r}: use 'auto', 'view' or 'run'{did_you_mean(mode, MODES)}")
    base = Path(data_dir)
    ids = [str(c) for c in campaigns]
    stored = [c for c in ids if (base / c / "store.sqlite").is_file()]
    missing = [c for c in ids if c not in stored]
    out = NotebookMode(mode="", asked=str(mode), data_dir=base, stored=stored, missing=missing)
    absent = f"; not stored: {_short(missing)}" if missing else ""
    if mode == "run":
        out.mode, out.reason = "run", "asked for: instances are started"
    elif stored:
        out.mode = "view"
        out.reason = (
            f"{'asked for' if mode == 'view' else 'auto'}: reading {_short(stored)} "
            f"under {base} read-only, no instance is started{absent}"
        )
    elif mode == "view":
        from .catalog import campaign_ids

        have = campaign_ids(base) if base.is_dir() else []
        hint = did_you_mean(ids[0], have) if len(ids) == 1 else ""
        raise ConfigError(
            f"view mode: no stored campaign {_short(ids)} under {base}{hint}; "
            f"run it with mode='run' (papermill: -p mode run)"
        )
    else:
        from ..backends.testing import available

        probe = can_run if can_run is not None else available
        blocked = [(b, why) for b, (ok, why) in ((b, probe(b)) for b in backends) if not ok]
        if blocked:
            b, why = blocked[0]
            first = (why.splitlines() or ["unavailable"])[0][:200]
            raise ConfigError(
                f"mode auto: no stored campaign {_short(ids)} under {base} to view, and "
                f"backend {b!r} cannot start instances here ({first})"
            )
        out.mode = "run"
        out.reason = (
            f"auto: no stored campaign {_short(ids)} under {base}, so it runs on "
            f"{', '.join(backends) or 'this machine'} and starts instances"
        )
    if echo:
        print(out.line())
    return out


def _one_line(shell, etype, value, tb, tb_offset=None):
    """IPython custom exception handler: the error shown in IPython's "Minimal" traceback mode,
    ``ErrorName: message``, with no stack (the mode is put back afterwards)."""
    tb_mode = shell.InteractiveTB.mode
    shell.InteractiveTB.set_mode("Minimal")
    try:
        shell.showtraceback((etype, value, tb))
    finally:
        shell.InteractiveTB.set_mode(tb_mode)
    return None


def one_line_errors() -> bool:
    """In IPython (Jupyter, papermill), show :class:`~labkit.errors.LabkitError` as its one-line
    message instead of a traceback: they are mistakes in parameters or data, and the message says
    what to change. Other exceptions keep their traceback. The cell still fails (papermill and
    Run All stop there). Returns False outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((LabkitError,), _one_line)
    return True
