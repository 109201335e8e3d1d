"""The events that committed since an idle worker last looked, where no NOTIFY names
them (MariaDB/MySQL): a worker that heard the doorbell asks (``worker/wakeup.py``),
and does the pass after their publishers' commits (``waking.wake_late``).

An event's id is taken at INSERT and it becomes visible at COMMIT, so ids do not
follow commit order (``Event.position``): a publisher still open when a later one
commits leaves a hole below the newest id seen. The watch keeps the newest id it has
seen and the holes below it, and each look asks for both in one read by primary key.
A hole still empty after ``HOLE_HORIZON`` is forgotten: its publisher rolled back, or
has been open so long that the runs that parked meanwhile are better left to their
next re-check (``EVENT_POLL``); so is the oldest of more than ``MAX_HOLES``.
"""

from __future__ import annotations

from django.db import connections
from django.db.models import Max, Q

from ..models import Event, EventQuerySet

#: Seconds a hole below the newest id seen is looked for.
HOLE_HORIZON = 600.0
#: Holes looked for at most (the newest ones).
MAX_HOLES = 1000
#: Events one look returns at most: the newest. A worker busy while more were published
#: hears of these only; the runs that parked while an older one's publisher was open
#: find it at their next re-check (``EVENT_POLL``).
LOOK_LIMIT = 1000
#: At the start, the ids this far below the newest are holes: a publisher open while
#: the worker starts is heard of when it commits.
START_SPAN = 100


class EventWatch:
    """The newest event id seen on ``using`` and the holes below it. ``now``: the
    caller's monotonic clock, in seconds (a hole's age)."""

    def __init__(self, using: str, now: float) -> None:
        self.using = using
        self.step = _id_step(using)
        self.top = 0
        self.holes: dict[int, float] = {}
        newest = list(self._events().order_by("-id").values_list("id", flat=True)[:START_SPAN])
        if newest:
            self.top = newest[0]
            self._add_holes(self.top - START_SPAN * self.step, set(newest), now)

    def look(self, now: float) -> list[int]:
        """The ids of the events committed since the last look (at most ``LOOK_LIMIT``
        of them, the newest), oldest first."""
        self.holes = {i: t for i, t in self.holes.items() if now - t < HOLE_HORIZON}
        new = self._events().filter(Q(id__gt=self.top) | Q(id__in=list(self.holes)))
        ids = sorted(new.order_by("-id").values_list("id", flat=True)[:LOOK_LIMIT])
        if not ids:
            self._after_reset()
            return []
        found = set(ids)
        for hole in found.intersection(self.holes):
            del self.holes[hole]
        above = [i for i in ids if i > self.top]
        if above:
            # Beyond the limit, the ids below the oldest one returned are let go.
            floor = self.top if len(ids) < LOOK_LIMIT else max(self.top, ids[0] - self.step)
            self.top = above[-1]
            self._add_holes(floor, found, now)
        return ids

    def _add_holes(self, floor: int, found: set[int], now: float) -> None:
        """The ids above ``floor`` and below the newest seen that were not found."""
        added = 0
        for hole in range(self.top - self.step, max(floor, 0), -self.step):
            if added >= MAX_HOLES:
                break
            if hole not in found:
                self.holes.setdefault(hole, now)
                added += 1
        if len(self.holes) > MAX_HOLES:
            self.holes = dict(sorted(self.holes.items())[-MAX_HOLES:])

    def _after_reset(self) -> None:
        """Nothing new: if the newest id is below the one seen (the table was
        truncated, its counter reset), start again from it."""
        newest = self._events().aggregate(newest=Max("id"))["newest"] or 0
        if newest < self.top:
            self.top = newest
            self.holes = {i: t for i, t in self.holes.items() if i < newest}

    def _events(self) -> EventQuerySet:
        return Event.objects.using(self.using)


def _id_step(using: str) -> int:
    """How far apart the server hands out ids (``auto_increment_increment``: more than
    1 on some replicated setups), so the ids between are not taken for holes."""
    connection = connections[using]
    if connection.vendor != "mysql":
        return 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@auto_increment_increment")
        row = cursor.fetchone()
    return max(int(row[0]), 1) if row else 1
