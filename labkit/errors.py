"""labkit's exception tree: one root, every error says what and where.

LabkitError
├── ConfigError            bad design, parameter or option (names the key and what is allowed)
├── BackendError           a backend could not do what was asked
│   ├── BackendUnavailable daemon/SDK/privilege missing (says how to fix it)
│   └── CommandError       a command in an instance exited non-zero (holds the ExecResult)
│       └── CommandTimeout the command ran past its timeout and was killed
├── BenchmarkError         a workload's output could not be parsed or failed validation
└── StoreError             the result store is unreadable or inconsistent
"""

from __future__ import annotations

from collections.abc import Sequence


class LabkitError(Exception):
    """Root of every error labkit raises on purpose."""


class ConfigError(LabkitError, ValueError):
    """Invalid design, parameter or option.

    Messages name the offending key (and file, when loaded from one) and the
    allowed values.
    """


class BackendError(LabkitError):
    """A backend failed to provision, run or tear down an instance."""


class BackendUnavailable(BackendError):
    """The backend cannot be used here: daemon down, SDK missing, no privilege.

    The message says what was tried and how to fix it.
    """


class CommandError(BackendError):
    """A command exited non-zero. ``result`` holds the :class:`ExecResult` (typed ``object``
    here: this module imports nothing of labkit, so that every module may import it)."""

    def __init__(self, message: str, result: object = None):
        super().__init__(message)
        self.result = result


class CommandTimeout(CommandError):
    """A command was killed after running past its timeout."""


class BenchmarkError(LabkitError):
    """A workload failed, produced output it cannot parse, or a wrong answer.

    ``command`` and ``output_tail`` carry what ran and the end of its output.
    """

    def __init__(self, message: str, command: str | Sequence[str] | None = None, output_tail: str = ""):
        if command is not None or output_tail:
            message = f"{message}\n  command: {command}\n  output (tail):\n{output_tail}"
        super().__init__(message)
        self.command = command
        self.output_tail = output_tail


class StoreError(LabkitError):
    """The result store is corrupt, locked, or belongs to another design."""


def tail(text: str, lines: int = 20) -> str:
    """The last ``lines`` lines of ``text``, indented, for error messages."""
    parts = (text or "").rstrip().splitlines()[-lines:]
    return "\n".join("    " + p for p in parts)


#: characters of free text (an error) a store keeps, half from the start, half from the end
TEXT_CAP = 64 * 1024
TEXT_MARKER = "\n... [{omitted} characters omitted; total {total} characters] ...\n"


def shorten(text: str, limit: int = TEXT_CAP) -> str:
    """``text`` if it has at most ``limit`` characters; else its first and last ``limit // 2``
    characters around a marker saying how many were omitted."""
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return text[:half] + TEXT_MARKER.format(omitted=omitted, total=len(text)) + text[len(text) - half :]


def did_you_mean(name: object, choices: Sequence[object], *, n: int = 3) -> str:
    """`` (did you mean 'x'?)`` naming the ``choices`` closest to ``name`` (:mod:`difflib`, case
    ignored), or "" when none is close: for the end of an error message about an unknown name."""
    import difflib

    names = [str(c) for c in choices]
    by_lower = {c.lower(): c for c in reversed(names)}
    close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=n, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(by_lower[c]) for c in close) + "?)"
