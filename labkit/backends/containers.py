"""What the container backends (docker, lxd) share: exec as a killable session, cleanup by name.

Their exec APIs run a process to its end but offer no way to signal it or its
children. :class:`SessionExec` turns such an API (two hooks: ``_run`` blocking,
``_run_quick``) into the Instance hooks ``_start``, ``_wait`` and ``_kill``: the
exec runs on a thread, as its own session::

    sh -c 'setsid "$@" & echo $! > PIDFILE; wait $!; s=$?; rm -f PIDFILE; exit $s' sh ARGV...

The background child is never a process-group leader, so ``setsid`` does not fork:
it becomes the leader of a new session whose id (= its pid) is written to PIDFILE,
then execs ARGV. Every descendant stays in that session unless it calls setsid()
itself (a daemon that detaches on purpose). ``wait`` gives ARGV's exit status, or
128 + n when a signal n killed it, as a shell would. A missing command exits 127.

:func:`kill_argv` SIGKILLs the session: its process group at once (atomic in the
kernel), then any member that moved to another group (``pkill -s``), until only
zombies are left (a container's ``sleep`` pid 1 reaps nobody). It is a no-op
once the command has ended (the wrapper removes PIDFILE).
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Callable
from typing import TypeVar

from ..errors import BackendUnavailable
from . import host_end
from .base import NAME_PREFIX, RawResult

T = TypeVar("T")

_RUN = 'setsid "$@" & echo $! > {f}; wait $!; s=$?; rm -f {f}; exit $s'
# wait briefly for a just-started command to record its session, then kill it until empty
_KILL = (
    "f={f}; i=0; while [ ! -s $f ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; "
    'p=$(cat $f 2>/dev/null); [ -n "$p" ] || exit 0; '
    "for _ in 1 2 3 4 5 6 7 8 9 10; do kill -KILL -- -$p $p 2>/dev/null; "
    "pkill -KILL -s $p 2>/dev/null; ps -o stat= -s $p | grep -qv ^Z || break; sleep 0.1; done; "
    "rm -f $f"
)
_OOM_KILL = re.compile(r"^oom_kill (\d+)$", re.MULTILINE)


def new_pidfile() -> str:
    """A fresh path (a safe shell word) where the wrapper records the session id."""
    return f"/tmp/.labkit-exec-{secrets.token_hex(8)}.pid"


def session_argv(argv: list[str], pidfile: str) -> list[str]:
    """``argv`` wrapped to run as a new session whose id is written to ``pidfile``."""
    return ["sh", "-c", _RUN.format(f=pidfile), "sh", *argv]


def kill_argv(pidfile: str) -> list[str]:
    """A command that SIGKILLs every process of the session recorded in ``pidfile``."""
    return ["sh", "-c", _KILL.format(f=pidfile)]


def oom_kill_count(text: str) -> int | None:
    """The ``oom_kill N`` counter of a cgroup v1 ``memory.oom_control`` or v2 ``memory.events``."""
    m = _OOM_KILL.search(text or "")
    return int(m.group(1)) if m else None


class Running:
    """A blocking exec call (``call() -> result``) run on a daemon thread, and its session's pidfile.

    A daemon thread, not a pool's: an exec stuck in a dead daemon must not keep the
    interpreter from exiting.
    """

    def __init__(self, call: Callable[[], RawResult], pidfile: str):
        self.pidfile = pidfile
        self._result: RawResult | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        threading.Thread(
            target=self._run, args=(call,), daemon=True, name=f"labkit-exec-{pidfile[-12:-4]}"
        ).start()

    def _run(self, call: Callable[[], RawResult]) -> None:
        try:
            self._result = call()
        except BaseException as exc:  # handed to the waiting thread
            self._error = exc
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None) -> RawResult | None:
        """The call's result, None if it is still running after ``timeout`` s; re-raises its error."""
        if not self._done.wait(timeout):
            return None
        if self._error is not None:
            raise self._error
        return self._result


class SessionExec:
    """Mixin for an Instance whose backend writes ``_run`` and ``_run_quick`` instead of
    ``_start``/``_wait``/``_kill``. ``_run`` errors must already be labkit errors."""

    def _run(self, argv: list[str], env: dict | None) -> RawResult:
        """Run ``argv`` to its end (blocking) and return its result."""
        raise NotImplementedError

    def _run_quick(self, argv: list[str]) -> str:
        """Run a short helper command; return its output ("" if the instance is gone)."""
        raise NotImplementedError

    def _start(self, argv, env) -> Running:
        pidfile = new_pidfile()
        return Running(lambda: self._run(session_argv(argv, pidfile), env), pidfile)

    def _wait(self, handle: Running, timeout):
        return handle.wait(timeout)

    def _kill(self, handle: Running) -> None:
        if not handle.done:
            self._run_quick(kill_argv(handle.pidfile))


def check_image(
    get: Callable[[], object],
    label: str,
    not_found: type[BaseException],
    api_error: type[BaseException],
    hint: str,
) -> None:
    """Look the image up with ``get()``: BackendUnavailable naming ``label`` if the SDK raises
    ``not_found`` (with ``hint``, how to make it) or ``api_error``."""
    try:
        get()
    except not_found as exc:
        raise BackendUnavailable(f"{label} is missing; {hint}") from exc
    except api_error as exc:
        raise BackendUnavailable(f"{label} cannot be read: {exc}") from exc


def or_none(call: Callable[[], T]) -> T | None:
    """``call()``, or None if it raises: a fingerprint field that cannot be read is left empty."""
    try:
        return call()
    except Exception:
        return None


class CleanupByName:
    """Mixin for a Backend with ``remove(name)`` (force, any state, quiet if gone) and
    ``_names(prefix)``: ``list_labkit`` and ``cleanup``."""

    def remove(self, name: str, /) -> None:
        raise NotImplementedError

    def _names(self, prefix: str) -> list[str]:
        """Check ``prefix`` for this backend; return the names of instances (at least every
        one starting with ``prefix``), SDK errors as BackendError."""
        raise NotImplementedError

    def list_labkit(self, prefix: str = NAME_PREFIX) -> list[str]:
        """Names of every instance (any state) whose name starts with ``prefix``."""
        return sorted({n for n in self._names(prefix) if n.startswith(prefix)})

    def cleanup(self, prefix: str) -> list[str]:
        """Remove every instance (any state) whose name starts with ``prefix``, and the cgroups of
        host ends named so (:func:`~labkit.backends.host_end.remove_leftovers`); return the names."""
        names = self.list_labkit(prefix)
        for name in names:
            self.remove(name)
        return names + host_end.remove_leftovers(prefix)
