"""Published events and the positions that order them by commit."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from ..db.fields import InstantField
from ..db.schema import ExactCharField


class EventQuerySet(models.QuerySet["Event"]):
    def unpositioned(self, name: str | None, key: str | None) -> EventQuerySet:
        """Committed events (named ``name``, with ``key``, if given) that no cursor has
        positioned yet."""
        qs = self.filter(position__isnull=True)
        if name is not None:
            qs = qs.filter(name=name)
        if key is not None:
            qs = qs.filter(key=key)
        return qs

    def matching(self, name: str, key: str | None, after: int) -> EventQuerySet:
        """Events named ``name`` (with ``key``, if given) committed after the cursor
        ``after``, oldest first: positioned after it, or not positioned yet."""
        qs = self.filter(Q(position__gt=after) | Q(position__isnull=True), name=name)
        if key is not None:
            qs = qs.filter(key=key)
        return qs.order_by(F("position").asc(nulls_last=True), "id")


class Event(models.Model):
    """A published event. ``id`` identifies it; ``position`` orders it by commit."""

    id = models.BigAutoField(primary_key=True)
    name = ExactCharField(max_length=200)
    key = ExactCharField(max_length=255, null=True, blank=True)  # NULL: no key
    payload = models.JSONField(null=True, blank=True)
    published_at = InstantField()
    #: Ids are handed out at INSERT but events become visible at COMMIT, so ids do not
    #: follow commit order. A wait's cursor gives every committed event it can see
    #: (of its name and key) the next position; an event still NULL committed after
    #: every cursor that could have seen it. See ``event_log.OrmEventLog.cursor``.
    position = models.BigIntegerField(null=True, blank=True)

    objects = EventQuerySet.as_manager()

    class Meta:
        ordering = ("-id",)
        indexes = (models.Index(fields=("name", "key", "position"), name="durable_event_position"),)

    def __str__(self) -> str:
        return f"{self.name} #{self.id}"


class EventPosition(models.Model):
    """One row: the newest position a cursor handed out (``Event.position``)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    position = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "event position"

    def __str__(self) -> str:
        return f"event position {self.position}"
