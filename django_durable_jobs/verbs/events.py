"""Publishing events: in the caller's transaction, with the runs it cancels, starts
and wakes (``waking.py`` finds and wakes the runs that wait)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import (
    Exists,
    OuterRef,
    Q,
)
from django.dispatch import Signal

from .. import conf, signals
from ..db import dialect, doorbell, migrated
from ..db.event_log import OrmEventLog
from ..db.migrated import needs_tables
from ..definitions.registry import JobOptions, jobs_on_event
from ..engine import clock
from ..engine.serialization import check_payload, unstorable
from ..exceptions import InvalidName, RunStateError
from ..models import (
    CANCELLABLE,
    CancelKey,
    Event,
    JobRun,
)
from .enqueue import enqueue_job
from .runs import cancel
from .waking import wake_after_commit, wake_waiters


class EventLog(OrmEventLog):
    """The engine's ``EventLookup`` over ``Event`` rows: the reads of ``OrmEventLog``,
    and ``step.publish`` through ``publish_event`` like every other publisher."""

    def publish(self, event: str, payload: Any = None, *, key: str | None = None) -> int:
        return publish_event(event, payload, key=key).id


log = logging.getLogger("django_durable_jobs.events")


@needs_tables
def publish_event(event: str, payload: Any = None, *, key: str | None = None) -> Event:
    """Publish ``event`` in the caller's transaction; waiting runs that match wake
    when it commits (a rollback publishes nothing and wakes nothing).

    >>> publish_event("order.paid", {"order_id": 7}, key="42")  # doctest: +SKIP
    """
    _event_name(event)
    if key is not None and not isinstance(key, str):
        raise TypeError(f"event {event!r}: key must be a string, got {key!r}")
    if key is not None and len(key) > 255:  # a name that cannot be stored, as a long name
        raise InvalidName(
            f"event {event!r}: key is {len(key)} characters, over the 255 a key may have: "
            f"{key[:40]!r}..."
        )
    if key is not None and (why := unstorable(key)) is not None:
        raise InvalidName(f"event {event!r}: key {key!r} cannot be stored: {why}")
    clean = check_payload(
        payload, what=f"event {event!r}: the payload", limit=int(conf.get("MAX_PAYLOAD_BYTES"))
    )
    using = conf.database()
    row = Event.objects.using(using).create(
        name=event, key=key, payload=clean, published_at=clock.current().now()
    )
    cancel_on_event(row, using)
    for job in jobs_on_event(event):
        # One run per event and job: the key makes a re-delivery return the same run.
        enqueue_job(job, (clean,), {}, JobOptions(idempotency_key=f"event:{row.id}"))
    woken_at = None
    if transaction.get_connection(using).in_atomic_block:
        # The runs waiting now are woken in this transaction: an idle worker is told
        # (NOTIFY) by its own commit, not by a statement after it (4 ms later). On
        # PostgreSQL they wake at the transaction's start (``now()``) if the clock is
        # not earlier: the trigger that notifies (durable_jobs_woken) compares with it.
        # The pass after the commit looks at the runs with a later wake time only.
        woken_at = clock.current().now()
        wake_waiters(row, now=dialect.of(using).wake_time(woken_at), skip_locked=True)
    if woken_at is not None and dialect.of(using).late_wake != "publisher":
        # No pass after the commit: an idle worker that hears of the event does it
        # (``wake_late``), or no run can have parked meanwhile (SQLite). It hears of it
        # by the NOTIFY of its INSERT (PostgreSQL) or by the doorbell (MariaDB/MySQL:
        # one UPDATE of a MEMORY row after the commit, where the pass took several).
        woken_at = _NO_LATE_PASS
        doorbell.ring(using)
    transaction.on_commit(lambda: _committed(row, woken_at), using=using)
    return row


#: ``_committed`` skips the pass after the commit (``Dialect.late_wake``).
_NO_LATE_PASS = datetime.max


def cancel_on_event(event: Event, using: str) -> list[JobRun]:
    """Cancel the unfinished runs ``event`` cancels, in the publisher's transaction."""
    keys = CancelKey.objects.using(using).filter(run=OuterRef("pk"), event=event.name)
    keys = (
        keys.filter(Q(key__isnull=True) | Q(key=event.key))
        if event.key is not None
        else (keys.filter(key__isnull=True))
    )
    targets = JobRun.objects.using(using).filter(
        Exists(keys),
        CANCELLABLE.q(event.published_at),
        created_at__lte=event.published_at,
    )
    reason = f"cancelled by event {event.name!r}" + (
        f" with key {event.key!r}" if event.key is not None else ""
    )
    cancelled = []
    for run_id in list(targets.values_list("id", flat=True)):
        try:
            cancelled.append(cancel(run_id, now=event.published_at, reason=reason))
        except RunStateError:  # it finished meanwhile
            continue
    return cancelled


def _committed(event: Event, woken_at: datetime | None) -> None:
    # After the commit, the runs the publisher's transaction did not wake: those that
    # parked meanwhile (each either is seen here or sees the event when it re-checks
    # after parking), and those another transaction held locked.
    if woken_at is not _NO_LATE_PASS:
        wake_after_commit(event, woken_at)
    signals.event_published.send(sender=Event, event=event)


def publish_on(
    signal: Signal,
    *,
    event: str,
    sender: Any = None,
    key: Callable[..., str | None] | None = None,
    payload: Callable[..., Any] | None = None,
    when: Callable[..., bool] | None = None,
    dispatch_uid: str | None = None,
) -> Callable[..., None]:
    """Publish ``event`` whenever ``signal`` is sent (by ``sender``, if given).

    ``key``, ``payload`` and ``when`` receive the signal's arguments (``instance``,
    ``created``, ...). The event is written in the sender's transaction: nothing is
    published for a transaction that rolls back. The receiver is held strongly and
    connected once, however often this is called with the same arguments. When the
    sender's database (a model signal's ``using``) is not the jobs database, the event
    is published when the sender's transaction commits, and not if it rolls back.

    >>> publish_on(post_save, sender=Order, event="order.paid",  # doctest: +SKIP
    ...            key=lambda instance, **kw: str(instance.customer_id),
    ...            payload=lambda instance, **kw: {"order_id": instance.pk},
    ...            when=lambda instance, **kw: instance.status == "paid")
    """
    _event_name(event)
    for what, value in (("key", key), ("payload", payload), ("when", when)):
        if value is not None and not callable(value):
            raise TypeError(f"publish_on({event!r}): {what} must be a callable, got {value!r}")

    def receiver(**kwargs: Any) -> None:
        if when is not None and not when(**kwargs):
            return
        if not migrated.has_tables(conf.database()):
            _not_migrated(event)
            return
        body = payload(**kwargs) if payload is not None else None
        event_key = key(**kwargs) if key is not None else None
        sender_db = kwargs.get("using")  # model signals say which database saved
        if isinstance(sender_db, str) and sender_db != conf.database():
            # The jobs on a database of their own: the event cannot be part of the
            # sender's transaction, so it waits for that transaction's commit (at once
            # outside one), and a rollback publishes nothing.
            transaction.on_commit(
                lambda: publish_event(event, body, key=event_key), using=sender_db
            )
            return
        publish_event(event, body, key=event_key)

    uid = dispatch_uid or f"django_durable_jobs:{event}:{id(signal)}:{_label(sender)}"
    signal.connect(receiver, sender=sender, weak=False, dispatch_uid=uid)
    return receiver


#: The events a ``publish_on`` receiver of this process left unpublished, warned once.
_UNPUBLISHED: set[str] = set()


def _not_migrated(event: str) -> None:
    """A save before ``migrate`` created this app's tables: the project's own data
    migrations, its fixtures, ``migrate <its app>``. The sender's save stands and the
    event is not published; raising would not undo a save in autocommit (already
    committed) and would stop the command that saved, ``migrate`` itself included.
    No run exists yet that could wait for the event; no ``on_event`` run starts."""
    if event not in _UNPUBLISHED:
        _UNPUBLISHED.add(event)
        log.warning(
            "event %r not published (publish_on): the tables of django_durable_jobs are "
            "not on database %r yet; run `python manage.py migrate`",
            event,
            conf.database(),
        )


def _label(sender: Any) -> str:
    meta = getattr(sender, "_meta", None)
    if meta is not None:
        return str(meta.label)
    return repr(sender)


def _event_name(event: object) -> str:
    if not isinstance(event, str) or not event or len(event) > 200:
        raise InvalidName(f"event names are non-empty strings of <= 200 chars, got {event!r}")
    if (why := unstorable(event)) is not None:
        raise InvalidName(f"event name {event!r} cannot be stored: {why}")
    return event
