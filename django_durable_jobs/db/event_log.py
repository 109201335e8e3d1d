"""The ORM-backed ``EventLookup``: where a wait positions its cursor among the
committed events, and the first event after it (``step.wait_for_event``)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Exists, F, Max

from ..engine.records import EventHit
from ..models import Event, EventPosition
from .reads import Read

_BATCH = 1000


def _next_position(using: str) -> int:
    """Take the next position; the row stays locked until the caller's transaction ends."""
    rows = EventPosition.objects.using(using).filter(pk=1)
    if not rows.update(position=F("position") + 1):
        # The row is missing (a flushed database): start after the largest position.
        start = Event.objects.using(using).aggregate(top=Max("position"))["top"] or 0
        EventPosition.objects.using(using).bulk_create(
            [EventPosition(pk=1, position=start)], ignore_conflicts=True
        )
        rows.update(position=F("position") + 1)
    return int(rows.values_list("position", flat=True).get())


class OrmEventLog:
    """The reads of ``EventLookup`` over ``Event`` rows: cursors are positions, hits
    carry the ids. Publishing is a verb (gates, runs started by the event, wake-ups):
    ``events.EventLog`` adds it, so this layer never imports the verbs."""

    def __init__(self, *, using: str = "default") -> None:
        self.using = using

    def cursor(self, event: str | None = None, key: str | None = None) -> int:
        """A position such that the events committed now (named ``event``, with
        ``key``, if given) come at or before it, and those committed later after it.

        Ids cannot be that: an id is taken at INSERT, so a transaction that inserted
        an event and commits later leaves a smaller id behind a cursor. Instead the
        cursor takes the next position (its row lock makes cursors one after another)
        and stamps it on every committed event still without one; events that commit
        later keep NULL until a later cursor stamps a larger position on them.
        Publishing is untouched: an INSERT, as before.
        """
        events = Event.objects.using(self.using)
        # Usually every committed event of this name and key has a position: then the
        # newest position handed out already separates them from later ones. One
        # statement reads both in one snapshot, and nothing is written.
        newest = (
            EventPosition.objects.using(self.using)
            .filter(pk=1)
            .filter(~Exists(events.unpositioned(event, key)))
            .values_list("position", flat=True)
            .first()
        )
        if newest is not None:
            return int(newest)
        with transaction.atomic(using=self.using):
            position = _next_position(self.using)
            # Read the ids first, then write by primary key: an UPDATE over the index
            # range would wait (MariaDB) on rows other transactions have not committed.
            ids = list(events.unpositioned(event, key).values_list("id", flat=True))
            for start in range(0, len(ids), _BATCH):
                events.filter(id__in=ids[start : start + _BATCH]).update(position=position)
        return position

    def find(self, event: str, key: str | None, after: int) -> EventHit | None:
        if key is None:
            rows = _MATCHING.rows(self.using, event, after)
        else:
            rows = _MATCHING_KEY.rows(self.using, event, key, after)
        return EventHit(*rows[0]) if rows else None


#: The first event a wait's look finds (``OrmEventLog.find``), without and with a key;
#: compiled once (the stand-ins are never sent).
_HIT = ("id", "payload", "published_at")
_MATCHING = Read(
    lambda event, after: Event.objects.matching(event, None, after).values_list(*_HIT)[:1],
    "\x00event",
    -(2**62) + 1,
)
_MATCHING_KEY = Read(
    lambda event, key, after: Event.objects.matching(event, key, after).values_list(*_HIT)[:1],
    "\x00event",
    "\x00key",
    -(2**62) + 1,
)
