"""The time axis of a run's trace (``trace.py``): instants as percents of its
length, spans as bars, and its tick labels."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .formatting import short_duration


@dataclass(frozen=True)
class Bar:
    """A span on the axis, in percent of its length."""

    left: float
    width: float
    #: Still going: a sleep or wait not over yet, a run not finished.
    open: bool = False

    @property
    def right(self) -> float:
        """From its end to the axis's: a bar drawn from its end (an attempt before a
        gap) grows to its minimum width leftwards, never into the gap."""
        return round(max(100 - self.left - self.width, 0.0), 3)


@dataclass(frozen=True)
class Tick:
    left: float
    label: str


class Axis:
    """A run's time axis, ``start`` to ``end``: where an instant is on it, in percent."""

    def __init__(self, start: datetime, end: datetime) -> None:
        self.start, self.end = start, end
        # A zero-length axis (everything in one instant) still draws: the CSS gives
        # every bar a minimum width.
        self.seconds = max((end - start).total_seconds(), 0.001)

    def at(self, when: datetime) -> float:
        return round(100 * (when - self.start).total_seconds() / self.seconds, 3)

    def bar(self, start: datetime | None, end: datetime | None, *, open: bool = False) -> Bar:
        if start is None:
            return Bar(0.0, 0.0)
        left = self.at(start)
        width = max(self.at(end) - left, 0.0) if end is not None else 0.0
        return Bar(left, round(width, 3), open)

    def ticks(self, count: int = 4) -> tuple[Tick, ...]:
        span = timedelta(seconds=self.seconds)
        return tuple(
            Tick(100 * i / count, "+" + short_duration(span * i / count)) for i in range(count + 1)
        )
