"""The only reader of wall time. Everything else takes ``now`` as an argument."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from .durations import Duration, after, parse_duration


class Clock(Protocol):
    """Something that tells the time; always timezone-aware UTC."""

    def now(self) -> datetime: ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock for tests that moves only when told to.

    >>> clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    >>> clock.advance("3d").day
    4
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")

    def now(self) -> datetime:
        return self._now

    def advance(self, by: Duration) -> datetime:
        self._now = after(self._now, parse_duration(by), by)
        return self._now

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")
        self._now = when


def aware(value: datetime, what: str) -> datetime:
    """Reject naive datetimes: a wake time must mean one instant everywhere."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be an aware datetime, got naive {value!r}")
    return value


C = TypeVar("C", bound=Clock)
_current: Clock = SystemClock()


def current() -> Clock:
    """The clock that stamps new runs and events and that workers read: the app
    installs the database's clock (``dbclock.DatabaseClock``); tests swap in a fake."""
    return _current


def install(clock: Clock) -> None:
    """Make ``clock`` the process-wide clock (``use`` swaps it for a while)."""
    global _current
    _current = clock


@contextmanager
def use(clock: C) -> Iterator[C]:
    """Swap the process-wide clock, e.g. for a test: ``with use(FakeClock()) as c: ...``."""
    global _current
    previous, _current = _current, clock
    try:
        yield clock
    finally:
        _current = previous
