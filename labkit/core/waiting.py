"""labkit's one wait/poll helper and one retry policy for transient errors.

* :func:`wait_until` polls a predicate until it holds or a deadline passes: a daemon's state,
  a process gone, a server deleted. It raises ``error`` (BackendError unless told otherwise)
  naming what it waited for.
* :func:`retry` calls a function again while it fails with an error the caller declared
  transient (a daemon busy, a connection not accepted yet), up to a number of attempts and/or
  a deadline; any other error, or the last transient one, propagates unchanged.

Errors are classified by type or by code (``transient`` is an exception class, a tuple of
them, or a function of the exception that reads its code), never by parsing a message here;
a caller that can only tell by the text (a daemon that gives no code) says so where it does.

Both use the monotonic clock, sleep ``interval`` s at first, then ``backoff`` times longer after
each failure up to ``max_interval`` s, never sleep past the deadline and try one last time at it.
``clock`` and ``sleep`` can be replaced (tests use a fake clock). This module imports nothing of
labkit but :mod:`labkit.errors`, so that every layer (backends, clouds, workloads, the store)
may use it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar, cast

from ..errors import BackendError, ConfigError

log = logging.getLogger(__name__)

T = TypeVar("T")
Transient = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]


class _Pauses:
    """The pauses between tries: ``interval``, times ``backoff`` after each, capped, and never
    past the deadline (None: none)."""

    def __init__(
        self,
        timeout: float | None,
        interval: float,
        backoff: float,
        max_interval: float | None,
        clock: Callable[[], float] | None,
        sleep: Callable[[float], object] | None,
    ):
        for name, v in (("interval", interval), ("backoff", backoff)):
            if not isinstance(v, (int, float)) or v != v or v < (1 if name == "backoff" else 0):
                raise ConfigError(f"{name} must be a number >= {1 if name == 'backoff' else 0}, got {v!r}")
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout != timeout):
            raise ConfigError(f"timeout must be a number of seconds or None, got {timeout!r}")
        # looked up at each call, so that a test may replace time.sleep
        self.clock, self.sleep = clock or time.monotonic, sleep or time.sleep
        self.deadline = None if timeout is None else self.clock() + timeout
        self.pause, self.backoff = float(interval), float(backoff)
        self.cap = float("inf") if max_interval is None else max(float(max_interval), float(interval))

    def wait(self) -> bool:
        """Sleep the next pause; False (no sleep) when the deadline has passed already."""
        if self.deadline is None:
            self.sleep(self.pause)
        else:
            left = self.deadline - self.clock()
            if left <= 0:
                return False
            self.sleep(min(self.pause, left))
        self.pause = min(self.pause * self.backoff, self.cap)
        return True


def wait_until(
    predicate: Callable[[], T | None],
    *,
    timeout: float | None,
    what: str,
    interval: float = 0.1,
    backoff: float = 1.0,
    max_interval: float | None = None,
    error: type[Exception] | None = BackendError,
    detail: Callable[[], str] | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], object] | None = None,
) -> T:
    """Call ``predicate()`` until it returns a true value, and return that value.

    Between calls it sleeps as the module docstring says; ``timeout`` s after the start (None:
    never) the predicate is called one last time and, still false, ``error`` is raised with the
    message ``"timed out after <timeout> s waiting for <what>"`` followed by ``"; <detail()>"``
    when ``detail`` is given (the last state seen, a console tail). With ``error=None`` the last
    (false) value is returned instead. An exception from the predicate propagates at once: a
    predicate raises to stop the wait (the VM died, the server failed)."""
    pauses = _Pauses(timeout, interval, backoff, max_interval, clock, sleep)
    while True:
        value = predicate()
        if value or not pauses.wait():
            break
    if value or error is None:
        return cast(T, value)  # with error=None, possibly the predicate's last (false) value
    extra = f"; {detail()}" if detail is not None else ""
    raise error(f"timed out after {timeout:g} s waiting for {what}{extra}")


def is_transient(exc: BaseException, transient: Transient) -> bool:
    """Whether ``exc`` is of the ``transient`` kind: an instance of the class (or of one of the
    tuple's classes), or, for a function, what it says of ``exc``."""
    if isinstance(transient, (type, tuple)):
        return isinstance(exc, transient)
    return bool(transient(exc))


def retry(
    fn: Callable[[], T],
    *,
    transient: Transient,
    what: str,
    attempts: int | None = None,
    timeout: float | None = None,
    interval: float = 0.1,
    backoff: float = 2.0,
    max_interval: float | None = 5.0,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], object] | None = None,
) -> T:
    """``fn()``, called again while it raises an exception that :func:`is_transient` of
    ``transient``: up to ``attempts`` calls in all and/or until ``timeout`` s have passed (at
    least one of them is required; pauses as the module docstring says). Any other exception,
    or the last transient one, propagates unchanged, so that the caller translates it; each retry
    is logged (warning) with ``what``."""
    if attempts is None and timeout is None:
        raise ConfigError(f"retry of {what}: give attempts, timeout or both")
    if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1):
        raise ConfigError(f"retry of {what}: attempts must be an integer >= 1, got {attempts!r}")
    pauses = _Pauses(timeout, interval, backoff, max_interval, clock, sleep)
    tried = 0
    while True:
        tried += 1
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc, transient) or (attempts is not None and tried >= attempts):
                raise
            log.warning(
                "%s failed (%s: %s); trying again (attempt %d%s)",
                what,
                type(exc).__name__,
                exc,
                tried + 1,
                "" if attempts is None else f" of {attempts}",
            )
            if not pauses.wait():
                raise
