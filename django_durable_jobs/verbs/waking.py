"""Waking the runs that wait: for an event (``wake_waiters``, in the publisher's
transaction, and the pass after its commit, ``wake_late``), for what arrived while a
run parked (``recheck_after_park``), for a child that finished (``wake_parent``)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connections
from django.db.models import BigIntegerField, Func, Subquery, Value
from django.db.models.functions import Coalesce

from .. import conf
from ..db import conflicts, dialect, doorbell
from ..db.event_log import OrmEventLog
from ..db.store import child_run_outcome
from ..engine import clock
from ..engine.records import RecordedStep
from ..engine.vocabulary import StepKind
from ..models import Event, JobRun, JobRunQuerySet, Message, RunStatus, StepRecord

log = logging.getLogger("django_durable_jobs.events")


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
    return wake_runs(waiters(event), now, skip_locked=skip_locked, unwoken_since=unwoken_since)


def wake_runs(
    runs: JobRunQuerySet,
    now: datetime | Func[Any] | None,
    *,
    skip_locked: bool = False,
    unwoken_since: datetime | None = None,
) -> int:
    """Make the waiting runs among ``runs`` runnable at ``now`` (the clock's if None);
    returns how many. ``skip_locked``: in a publisher's or sender's transaction, leave
    the runs another transaction holds (``Dialect.lock_waiting``); ``unwoken_since``:
    only runs not woken at or since then (their wake time is later)."""
    using = conf.database()
    if unwoken_since is not None:
        runs = runs.filter(wake_at__gt=unwoken_since)
    if skip_locked and connections[using].features.has_select_for_update_skip_locked:
        ids = dialect.of(using).lock_waiting(runs)
        if not ids:
            return 0
        runs = JobRun.objects.using(using).filter(id__in=ids)
    # Idle workers are told by the row trigger durable_jobs_woken (PostgreSQL), or by
    # the doorbell (MariaDB/MySQL).
    woken = runs.wake_waiting(now or clock.current().now())
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
    steps = StepRecord.objects.using(using).filter(event_cursor__lt=committed_after)
    return JobRun.objects.using(using).filter(pk__in=steps.waiting_runs(event.name, event.key))


def recheck_after_park(run_id: Any, record: RecordedStep, now: datetime) -> None:
    """Close the lost wake-up window of a run that just parked.

    What it waits for (an event, a message, a child run) may have arrived after the step looked
    and before the run was parked; whoever delivered it then found no waiting run.
    Look once more, and if it is there make the run runnable now.
    """
    arrived = False
    if record.kind is StepKind.RECEIVE and record.event:
        arrived = Message.objects.using(conf.database()).unreceived(run_id, record.event).exists()
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
            woken += retried(functools.partial(_wake_unwoken, event, now), _waiting_for(event))
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


def wake_after_commit(event: Event, woken_at: datetime | None) -> None:
    """The pass after the commit, its own transaction: retried after a conflict with a
    worker's (a deadlock on MariaDB, seen in the process tests). It must not raise:
    the event is committed, and an error here reached the publisher's ``atomic()``
    exit (a view answered 500 for an event it had published). If it still fails, the
    runs it did not wake find the event at their next re-check (``EVENT_POLL``)."""
    retried(lambda: wake_waiters(event, unwoken_since=woken_at), _waiting_for(event))


def retried(wake: Callable[[], int], unwoken: str) -> int:
    """``wake()`` after a commit, again after a conflict with a concurrent transaction;
    if it still fails, a warning that begins with ``unwoken`` (who was not woken) and 0.
    Never raises: what was delivered is committed."""
    for tries_left in range(AFTER_COMMIT_TRIES - 1, -1, -1):
        try:
            return wake()
        except DatabaseError as exc:
            if tries_left and conflicts.is_conflict(exc):
                time.sleep(conflicts.pause())
                continue
            log.warning(
                "%s were not all woken after its commit (%s); they find it at their next "
                "re-check (EVENT_POLL %s)",
                unwoken,
                conflicts.describe(exc) if conflicts.is_conflict(exc) else exc,
                conf.get("EVENT_POLL"),
            )
            break  # not a conflict (a lost connection): trying again cannot help
    return 0


def _waiting_for(event: Event) -> str:
    return f"event {event.pk} ({event.name!r}): the runs waiting for it"
