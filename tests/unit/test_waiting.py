"""labkit.core.waiting: the one wait/poll helper and the one retry policy, on a fake clock."""

import sqlite3

import pytest

from labkit.core.waiting import is_transient, retry, wait_until
from labkit.errors import BackendError, CommandTimeout, ConfigError


class FakeClock:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self):
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        assert s >= 0
        self.sleeps.append(s)
        self.now += s


def test_wait_until_returns_the_first_true_value():
    clock = FakeClock()
    values = iter([None, 0, "ready"])
    assert (
        wait_until(lambda: next(values), timeout=10, what="x", interval=0.5, clock=clock, sleep=clock.sleep)
        == "ready"
    )
    assert clock.sleeps == [0.5, 0.5]


def test_wait_until_never_sleeps_past_the_deadline_and_tries_once_at_it():
    clock = FakeClock()
    seen = []

    def never():
        seen.append(clock.now - 1000.0)
        return False

    with pytest.raises(
        BackendError, match=r"timed out after 2 s waiting for the daemon to answer; last: down"
    ):
        wait_until(
            never,
            timeout=2,
            what="the daemon to answer",
            interval=0.3,
            backoff=2,
            max_interval=1,
            detail=lambda: "last: down",
            clock=clock,
            sleep=clock.sleep,
        )
    assert clock.now == 1002.0  # never past the deadline
    assert clock.sleeps == pytest.approx([0.3, 0.6, 1.0, 0.1])  # backoff, capped, then cut at the deadline
    assert seen[-1] == pytest.approx(2.0)  # one last look at the deadline


def test_wait_until_raises_the_error_asked_for_or_returns_the_last_value():
    clock = FakeClock()
    with pytest.raises(CommandTimeout, match="waiting for ab to end"):
        wait_until(
            lambda: False, timeout=1, what="ab to end", error=CommandTimeout, clock=clock, sleep=clock.sleep
        )
    assert wait_until(lambda: [], timeout=1, what="x", error=None, clock=clock, sleep=clock.sleep) == []


def test_wait_until_stops_at_once_when_the_predicate_raises():
    clock = FakeClock()

    def died():
        raise BackendError("VM stopped during boot")

    with pytest.raises(BackendError, match="stopped during boot"):
        wait_until(died, timeout=60, what="x", clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []


def test_wait_until_validates_its_arguments():
    for kwargs in ({"interval": -1}, {"backoff": 0.5}, {"timeout": float("nan")}, {"timeout": "3"}):
        with pytest.raises(ConfigError):
            wait_until(lambda: True, what="x", **{"timeout": 1, **kwargs})


class Busy(Exception):
    pass


def test_retry_retries_transient_errors_only():
    clock = FakeClock()
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise Busy("busy")
        return "done"

    assert (
        retry(flaky, transient=Busy, attempts=5, what="x", interval=0.2, clock=clock, sleep=clock.sleep)
        == "done"
    )
    assert len(calls) == 3 and clock.sleeps == [0.2, 0.4]

    calls.clear()

    def broken():
        calls.append(1)
        raise ValueError("not transient")

    with pytest.raises(ValueError):
        retry(broken, transient=Busy, attempts=5, what="x", clock=clock, sleep=clock.sleep)
    assert len(calls) == 1


def test_retry_gives_up_after_attempts_with_the_last_error_unchanged():
    clock = FakeClock()
    errors = [Busy(str(i)) for i in range(3)]
    it = iter(errors)

    def always():
        raise next(it)

    with pytest.raises(Busy) as info:
        retry(always, transient=(KeyError, Busy), attempts=3, what="x", clock=clock, sleep=clock.sleep)
    assert info.value is errors[2]


def test_retry_respects_its_deadline():
    clock = FakeClock()
    calls = []

    def always():
        calls.append(clock.now - 1000.0)
        raise Busy()

    with pytest.raises(Busy):
        retry(
            always,
            transient=Busy,
            timeout=1.0,
            what="x",
            interval=0.4,
            backoff=1,
            clock=clock,
            sleep=clock.sleep,
        )
    assert clock.now == 1001.0 and calls == pytest.approx([0, 0.4, 0.8, 1.0])


def test_retry_classifies_by_code_through_a_function():
    """SQLite's busy error is told by its code (Python 3.11's sqlite_errorcode), not its text."""
    busy = sqlite3.OperationalError("any text at all")
    busy.sqlite_errorcode = sqlite3.SQLITE_BUSY
    other = sqlite3.OperationalError("database is locked")  # the text says locked, the code does not
    other.sqlite_errorcode = sqlite3.SQLITE_IOERR

    def by_code(e):
        return getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY

    assert is_transient(busy, by_code) and not is_transient(other, by_code)


def test_retry_needs_a_limit():
    with pytest.raises(ConfigError, match="attempts, timeout or both"):
        retry(lambda: 1, transient=Busy, what="x")
    with pytest.raises(ConfigError, match="attempts must be"):
        retry(lambda: 1, transient=Busy, what="x", attempts=0)
