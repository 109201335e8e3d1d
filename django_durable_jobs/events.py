"""Publishing events and waking the runs that wait for them."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from . import clock, conf, signals
from .models import Event, JobRun, RunStatus, StepRecord, StepStatus
from .serialization import check_payload
from .wakeup import notify


def publish_event(event: str, payload: Any = None, *, key: str | None = None) -> Event:
    """Publish ``event`` in the caller's transaction; waiting runs that match wake
    when it commits (a rollback publishes nothing and wakes nothing).

    >>> publish_event("order.paid", {"order_id": 7}, key="42")  # doctest: +SKIP
    """
    if not isinstance(event, str) or not event or len(event) > 200:
        raise ValueError(f"event names are non-empty strings of <= 200 chars, got {event!r}")
    if key is not None and (not isinstance(key, str) or len(key) > 255):
        raise TypeError(f"event {event!r}: key must be a string of <= 255 chars, got {key!r}")
    clean = check_payload(
        payload, what=f"event {event!r}: the payload", limit=int(conf.get("MAX_PAYLOAD_BYTES"))
    )
    using = conf.database()
    row = Event.objects.using(using).create(
        name=event, key=key, payload=clean, published_at=clock.current().now()
    )
    transaction.on_commit(lambda: wake_waiters(row), using=using)
    signals.event_published.send(sender=Event, event=row)
    return row


def wake_waiters(event: Event) -> int:
    """Make every run waiting for ``event`` runnable now; returns how many.

    Runs after the event commits, so a run that parks concurrently either is seen
    here or sees the event itself when it re-checks after parking.
    """
    using = conf.database()
    waiting = (
        StepRecord.objects.using(using)
        .filter(
            run=OuterRef("pk"),
            status=StepStatus.WAITING,
            event=event.name,
            event_cursor__lt=event.id,
        )
        .filter(Q(correlation_key__isnull=True) | Q(correlation_key=event.key))
    )
    woken = (
        JobRun.objects.using(using)
        .filter(Exists(waiting), status=RunStatus.WAITING)
        .update(wake_at=clock.current().now())
    )
    if woken:
        notify_all()
    return woken


def notify_all() -> None:
    notify("*")
