"""Commands labkit runs on the controller host and waits for: one way to run them.

Every short host command (``ip``, ``tc``, ``iptables``, ``qemu-img``, ``debootstrap``, ``mount``,
the Slurm tools, ``git``, the C compiler) goes through :func:`run_host`, which

* takes an argument list, never a shell string (each element ``str()``-ed, so paths may be given);
* requires a timeout: no host command can hold labkit for longer than its caller allows;
* reads nothing from the controller's terminal (stdin is ``/dev/null`` unless ``input`` or
  ``stdin`` is given) and captures stdout and stderr;
* turns each failure into one labkit error (the caller's ``error`` class), one line naming what
  was being done, the command and the end of its stderr: a missing program, one that cannot be
  started, one killed at its timeout and (with ``check``) one that exits non-zero. Never a
  traceback of ``FileNotFoundError``, ``TimeoutExpired`` or ``CalledProcessError``.

>>> links = run_host(["ip", "-j", "link", "show"], what="listing this host's links", timeout=10).stdout

Children that stream their output or outlive the call (a Slurm step, an instance's command, the
dashboard's server) are started with :class:`subprocess.Popen` where they are used instead.
"""

from __future__ import annotations

import logging
import math
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ..errors import BackendError, LabkitError, shorten

log = logging.getLogger("labkit.host_commands")

#: characters of a command line an error message shows (its start and its end)
COMMAND_CHARS = 300
#: characters of the end of a command's stderr (its stdout when stderr is empty) a message shows
TAIL_CHARS = 600


def command_line(argv: Sequence[object]) -> str:
    """``argv`` as a shell would read it (:func:`shlex.join`), shortened to :data:`COMMAND_CHARS`
    and on one line: for messages."""
    return " ".join(shorten(shlex.join(str(a) for a in argv), COMMAND_CHARS).split("\n"))


def output_tail(text: str | bytes | None, chars: int = TAIL_CHARS) -> str:
    """The end of a command's output on one line: its last ``chars`` characters (``...`` first
    when cut), its non-blank lines joined by `` | ``; "" for no output."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = (text or "").strip()
    cut = len(text) > chars
    lines = [line.strip() for line in text[max(0, len(text) - chars) :].splitlines() if line.strip()]
    return ("..." if cut else "") + " | ".join(lines)


def _said(stderr: str | bytes | None, stdout: str | bytes | None) -> str:
    """What a failed command said: the tail of its stderr, else of its stdout, else a note."""
    return output_tail(stderr) or output_tail(stdout) or "(no output)"


def _validated(argv: object, what: object, timeout: object, input: object, stdin: object) -> list[str]:
    if not isinstance(what, str) or not what.strip():
        raise ValueError(f"run_host: what must say what the command is for (non-empty text), got {what!r}")
    where = f"run_host({what})"
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
        raise TypeError(
            f"{where}: argv must be a list of arguments (never a shell string), got {str(argv)[:80]!r}"
        )
    if not argv:
        raise ValueError(f"{where}: argv is empty: name the program to run")
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"{where}: timeout must be a finite number of seconds > 0, got {timeout!r}")
    if input is not None and stdin is not None:
        raise ValueError(f"{where}: give input or stdin, not both")
    return [str(a) for a in argv]


def run_host(
    argv: Sequence[object],
    *,
    what: str,
    timeout: float,
    check: bool = True,
    input: str | bytes | None = None,
    stdin: IO[Any] | int | None = None,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    text: bool = True,
    error: type[LabkitError] = BackendError,
    missing: type[LabkitError] | None = None,
    hint: str = "",
) -> subprocess.CompletedProcess:
    """Run ``argv`` on this host and wait at most ``timeout`` s for it; its CompletedProcess
    (stdout and stderr captured, text unless ``text`` is False).

    ``what`` says what the command is for ("reading Slurm job 5"); every error message starts
    with it. ``input`` is written to the command's stdin, or ``stdin`` (a file, a descriptor) is
    it; neither: ``/dev/null``. ``cwd`` and ``env`` as for :func:`subprocess.run` (``env`` None:
    this process's environment).

    Raises ``error`` (default BackendError) when the program cannot be started, runs past
    ``timeout`` (it is killed) or, with ``check``, exits non-zero: one line with ``what``, the
    command (:func:`command_line`) and the end of its stderr. A program that is not installed
    raises ``missing`` (default ``error``), followed by ``hint`` (how to install it) when given.
    TypeError/ValueError for a call that is wrong in itself (a shell string, no timeout).
    """
    args = _validated(argv, what, timeout, input, stdin)
    cmd = command_line(args)
    log.debug("%s: %s", what, cmd)
    try:
        if input is None and stdin is None:
            stdin = subprocess.DEVNULL
        res = subprocess.run(
            args,
            input=input,
            stdin=stdin,
            capture_output=True,
            text=text,
            timeout=timeout,
            cwd=cwd,
            env=None if env is None else dict(env),
        )
    except FileNotFoundError as exc:
        if cwd is not None and exc.filename is not None and str(exc.filename) == str(cwd):
            raise error(f"{what}: cannot run {cmd}: its directory {cwd} does not exist") from None
        raise (missing or error)(
            f"{what}: cannot run {cmd}: {args[0]} is not installed here (no such program)"
            + (f"; {hint}" if hint else "")
        ) from None
    except OSError as exc:
        raise error(f"{what}: cannot run {cmd}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired as exc:
        said = output_tail(exc.stderr) or output_tail(exc.output)
        raise error(
            f"{what}: {cmd} did not finish within {timeout:g} s and was killed"
            + (f": {said}" if said else "")
        ) from None
    if check and res.returncode != 0:
        raise error(f"{what}: {cmd} {exit_status(res.returncode)}: {_said(res.stderr, res.stdout)}")
    return res


def exit_status(returncode: int) -> str:
    """``exited 3``, or ``was killed by SIGKILL`` for a negative return code (a signal)."""
    if returncode >= 0:
        return f"exited {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"
