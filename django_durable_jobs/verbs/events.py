"""Publishing events and waking the runs that wait for them."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.db.models import (
    BigIntegerField,
    Exists,
    Func,
    OuterRef,
    Q,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce
from django.dispatch import Signal

from .. import conf, signals
from ..db import conflicts, dialect, doorbell, migrated
from ..db.event_log import OrmEventLog
from ..db.migrated import needs_tables
from ..db.store import child_run_outcome
from ..definitions.registry import JobOptions, jobs_on_event
from ..engine import clock
from ..engine.records import RecordedStep
from ..engine.serialization import check_payload, unstorable
from ..engine.vocabulary import StepKind
from ..exceptions import InvalidName, RunStateError
from ..models import (
    CANCELLABLE,
    CancelKey,
    Event,
    JobRun,
    JobRunQuerySet,
    RunStatus,
    StepRecord,
)
from .enqueue import enqueue_job
from .messages import has_unreceived
from .runs import cancel


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
        _wake_after_commit(event, woken_at)
    signals.event_published.send(sender=Event, event=event)


def wake_late(event_ids: Iterable[int], now: datetime) -> int:
    """The pass after the commit of these events' publishers, done by an idle worker
    that heard of them (LISTEN: ``durable_jobs_published``; the doorbell and
    ``db/event_watch.py`` on MariaDB/MySQL) instead of by each publisher: the runs
    waiting for one of them whose wake time is still to come (they parked while the
    publisher's transaction was open, or another transaction held them). The runs the
    publisher woke are runnable already and left alone, so several workers hearing of
    one event write nothing twice; each event is first read for such runs, without a
    lock, and written only if there are some. Returns how many runs it woke. It does
    not raise (an idle worker calls it between claims): after a database error the
    runs it did not wake find their event at their next re-check (``EVENT_POLL``)."""
    using, ids, woken = conf.database(), sorted(event_ids), 0
    for start in range(0, len(ids), _LATE_BATCH):
        batch = ids[start : start + _LATE_BATCH]
        try:
            events = list(Event.objects.using(using).filter(pk__in=batch).order_by("id"))
        except DatabaseError as exc:
            _not_all_woken(batch, exc)
            continue
        for event in events:
            woken += _retried(functools.partial(_wake_unwoken, event, now), event)
    return woken


#: Events read at once by ``wake_late``.
_LATE_BATCH = 500


def _wake_unwoken(event: Event, now: datetime) -> int:
    """The runs waiting for ``event`` not woken at or since ``now``, read first: most
    passes find none and then write (and lock) nothing."""
    if not waiters(event).filter(status=RunStatus.WAITING, wake_at__gt=now).exists():
        return 0
    return wake_waiters(event, unwoken_since=now)


def _not_all_woken(ids: list[int], exc: DatabaseError) -> None:
    log.warning(
        "the runs waiting for events %s were not all woken after their commit (%s); "
        "they find them at their next re-check (EVENT_POLL %s)",
        ids,
        conflicts.describe(exc) if conflicts.is_conflict(exc) else exc,
        conf.get("EVENT_POLL"),
    )


#: Conflicts with concurrent transactions the pass after the commit is retried across.
AFTER_COMMIT_TRIES = 10


def _wake_after_commit(event: Event, woken_at: datetime | None) -> None:
    """The pass after the commit, its own transaction: retried after a conflict with a
    worker's (a deadlock on MariaDB, seen in the process tests). It must not raise:
    the event is committed, and an error here reached the publisher's ``atomic()``
    exit (a view answered 500 for an event it had published). If it still fails, the
    runs it did not wake find the event at their next re-check (``EVENT_POLL``)."""
    _retried(lambda: wake_waiters(event, unwoken_since=woken_at), event)


def _retried(wake: Callable[[], int], event: Event) -> int:
    """``wake()``, again after a conflict with a concurrent transaction; a warning and 0
    if it still fails."""
    for tries_left in range(AFTER_COMMIT_TRIES - 1, -1, -1):
        try:
            return wake()
        except DatabaseError as exc:
            if tries_left and conflicts.is_conflict(exc):
                time.sleep(conflicts.pause())
                continue
            log.warning(
                "event %s (%r): the runs waiting for it were not all woken after its "
                "commit (%s); they find it at their next re-check (EVENT_POLL %s)",
                event.pk,
                event.name,
                conflicts.describe(exc) if conflicts.is_conflict(exc) else exc,
                conf.get("EVENT_POLL"),
            )
            break  # not a conflict (a lost connection): trying again cannot help
    return 0


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


#: Larger than any cursor: stands for "not positioned yet" in comparisons.
_AFTER_EVERY_CURSOR = 2**62


def wake_waiters(
    event: Event,
    *,
    now: datetime | Func[Any] | None = None,
    skip_locked: bool = False,
    unwoken_since: datetime | None = None,
) -> int:
    """Make every run waiting for ``event`` runnable now; returns how many.

    After the event commits, a run that parks concurrently either is seen here or
    sees the event itself when it re-checks after parking. In the publisher's
    transaction (``skip_locked``) the runs another transaction holds are left to the
    pass after the commit, which never waits for a lock while the caller's
    transaction holds others; ``unwoken_since``: only runs not woken at or since then
    (their wake time is later). A wait whose cursor came after the event (it
    positioned the event at or before itself) is not woken; an event no cursor has
    positioned yet committed after every waiting step's cursor.
    """
    using = conf.database()
    now = now or clock.current().now()
    runs = waiters(event)
    if unwoken_since is not None:
        runs = runs.filter(wake_at__gt=unwoken_since)
    if skip_locked and connections[using].features.has_select_for_update_skip_locked:
        ids = dialect.of(using).lock_waiting(runs)
        if not ids:
            return 0
        runs = JobRun.objects.using(using).filter(id__in=ids)
    # Idle workers are told by the row trigger durable_jobs_woken (PostgreSQL), or by
    # the doorbell (MariaDB/MySQL).
    woken = runs.wake_waiting(now)
    if woken:
        doorbell.ring(using)
    return woken


def waiters(event: Event) -> JobRunQuerySet:
    """The runs waiting for ``event`` (``wake_waiters``), whatever their wake time."""
    using = conf.database()
    position = Event.objects.using(using).filter(pk=event.pk).values("position")[:1]
    committed_after = Coalesce(
        Subquery(position, output_field=BigIntegerField()),
        # Typed: a bare Value(int) is an IntegerField, which a server-binding cursor
        # sends as a 4-byte integer, and 2**62 as four bytes is 0 (no wait was woken).
        Value(_AFTER_EVERY_CURSOR, output_field=BigIntegerField()),
    )
    waiting = (
        StepRecord.objects.using(using)
        .waiting_for(event.name, event.key)
        .filter(run=OuterRef("pk"), event_cursor__lt=committed_after)
    )
    return JobRun.objects.using(using).filter(Exists(waiting))


def recheck_after_park(run_id: Any, record: RecordedStep, now: datetime) -> None:
    """Close the lost wake-up window of a run that just parked.

    What it waits for (an event, a message, a child run) may have arrived after the step looked
    and before the run was parked; whoever delivered it then found no waiting run.
    Look once more, and if it is there make the run runnable now.
    """
    arrived = False
    if record.kind is StepKind.RECEIVE and record.event:
        arrived = has_unreceived(run_id, record.event)
    elif record.event and record.event_cursor is not None:
        arrived = (
            OrmEventLog(using=conf.database()).find(
                record.event, record.correlation_key, record.event_cursor
            )
            is not None
        )
    elif record.child:  # step.invoke
        arrived = child_run_outcome(conf.database(), record.child) is not None
    if arrived and JobRun.objects.using(conf.database()).filter(pk=run_id).wake_waiting(now):
        doorbell.ring(conf.database())


def wake_parent(parent_id: Any, now: datetime) -> None:
    """A child run finished: its parent, waiting in ``step.invoke``, runs now."""
    if JobRun.objects.using(conf.database()).filter(pk=parent_id).wake_waiting(now):
        doorbell.ring(conf.database())
