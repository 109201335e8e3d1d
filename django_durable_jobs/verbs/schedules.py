"""Schedules: sync from code, start due slots, and the retention schedule.

Any worker calls ``start_due`` from its loop; there is no separate scheduler
process. Exactly one run per (schedule, slot) however many workers tick at once:
the schedule's row is locked (``SELECT ... FOR UPDATE SKIP LOCKED``) while its slot
is started, and the run's idempotency key names the slot, so even where row locks
do not exist (SQLite) the unique constraint refuses a second run for one slot.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.db.models import Min

from .. import conf
from ..db import dialect
from ..definitions.registry import JobDefinition, JobOptions, all_jobs, get_job
from ..engine.cron import Cron, check_expr, latest_slot, next_slot, zone
from ..exceptions import InvalidPayload, InvalidSchedule, UnknownJob
from ..models import JobRun, Schedule

log = logging.getLogger("django_durable_jobs.schedules")

#: How often a worker looks again although no slot is due (an operator may have added
#: or moved a schedule in the admin).
REFRESH = timedelta(seconds=15)


def default_zone() -> str:
    return str(getattr(settings, "TIME_ZONE", None) or "UTC")


def slot_key(schedule_id: int, slot: datetime) -> str:
    """The idempotency key of a slot's run: one run per schedule and instant."""
    return f"schedule:{schedule_id}:{slot.astimezone(zone('UTC')).isoformat()}"


def first_slot(schedule: Schedule, now: datetime) -> datetime:
    """The next slot of ``schedule`` after ``now``."""
    return next_slot(check_expr(schedule.cron), zone(schedule.timezone), now)


def reschedule(schedule: Schedule, now: datetime) -> Schedule:
    """Validate an added or edited schedule and set its next slot (the admin's save).

    Raises ``InvalidSchedule`` or ``UnknownJob`` naming what is wrong. A paused
    schedule has no next slot; enabling it again starts from ``now`` (the slots
    missed while paused do not start).
    """
    schedule.cron = check_expr(schedule.cron)
    zone(schedule.timezone)
    get_job(schedule.job_name)
    schedule.next_run_at = first_slot(schedule, now) if schedule.enabled else None
    if schedule.enabled and not schedule.note.startswith(REMOVED):
        schedule.note = ""
    return schedule


# -- sync from code -------------------------------------------------------------------


def code_key(job_name: str, cron: Cron) -> str:
    """``job|cron|timezone``; one longer than the column ends in its SHA-256 instead."""
    return fit_code_key(f"{job_name}|{cron.expr}|{cron.timezone or default_zone()}")


#: ``Schedule.code_key``'s length (a unique index MariaDB accepts without W003).
CODE_KEY_LENGTH = 255


def fit_code_key(key: str) -> str:
    if len(key) <= CODE_KEY_LENGTH:
        return key
    digest = "|sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return key[: CODE_KEY_LENGTH - len(digest)] + digest


def declared() -> dict[str, tuple[JobDefinition, Cron]]:
    """Every ``@job(cron=...)`` of this process, by code key."""
    return {
        code_key(job.name, cron): (job, cron) for job in all_jobs().values() for cron in job.cron
    }


@dataclass(frozen=True)
class Synced:
    created: int
    disabled: int
    restored: int


def sync(now: datetime) -> Synced:
    """Make the ``Schedule`` rows match the code: add the new ones, disable (never
    delete) those no longer declared, and enable again those declared once more.

    An operator's edits of a code schedule (cron, time zone, pause) are kept. Workers
    that start together may sync at once: a row another one added first is skipped.
    """
    wanted, using = declared(), conf.database()
    with transaction.atomic(using=using):
        _write_first(using)
        rows = Schedule.objects.using(using).select_for_update().exclude(code_key=None)
        existing = {row.code_key or "": row for row in rows}
        new = [
            _new_row(key, job, cron, now)
            for key, (job, cron) in wanted.items()
            if key not in existing
        ]
        Schedule.objects.using(using).bulk_create(new, ignore_conflicts=True)
        restored = disabled = 0
        for key, row in existing.items():
            if key in wanted and row.note.startswith(REMOVED):
                row.enabled, row.note = True, ""
                row.next_run_at = first_slot(row, now)
                row.save(update_fields=["enabled", "note", "next_run_at"])
                restored += 1
            elif key not in wanted and not row.note.startswith(REMOVED):
                row.enabled, row.next_run_at = False, None
                row.note = f"{REMOVED} at {now:%Y-%m-%d %H:%M} UTC; its runs are kept"
                row.save(update_fields=["enabled", "next_run_at", "note"])
                disabled += 1
    if new or disabled or restored:
        log.info("schedules: %d added, %d disabled, %d restored", len(new), disabled, restored)
    return Synced(len(new), disabled, restored)


def _new_row(key: str, job: JobDefinition, cron: Cron, now: datetime) -> Schedule:
    tz = cron.timezone or default_zone()
    first = next_slot(cron.expr, zone(tz), now)
    return Schedule(job_name=job.name, cron=cron.expr, timezone=tz, code_key=key, next_run_at=first)


REMOVED = "removed from code"


# -- starting due slots ---------------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    started: list[JobRun]
    #: When the earliest enabled schedule is next due (None: no schedule).
    next_due: datetime | None


def start_due(now: datetime, *, limit: int = 100) -> Tick:
    """Start one run for each due schedule (its latest slot at or before ``now``)
    and move the schedule on to its next slot after it."""
    using = conf.database()
    schedules = Schedule.objects.using(using)
    earliest = schedules.filter(enabled=True).aggregate(at=Min("next_run_at"))["at"]
    started: list[JobRun] = []
    if earliest is not None and earliest <= now:
        with transaction.atomic(using=using):
            _write_first(using)
            due = schedules.due(now)
            if connections[using].features.has_select_for_update_skip_locked:
                due = due.select_for_update(skip_locked=True)
            for schedule in list(due[:limit]):
                run = _start_slot(schedule, now)
                if run is not None:
                    started.append(run)
        earliest = schedules.filter(enabled=True).aggregate(at=Min("next_run_at"))["at"]
    return Tick(started, earliest)


def _write_first(using: str) -> None:
    """SQLite has no row locks and cannot turn a read transaction into a write one while
    another process writes ("database is locked" at once, not after the busy timeout):
    a write that changes nothing takes the write lock before the transaction reads."""
    dialect.of(using).write_first()


def _start_slot(schedule: Schedule, now: datetime) -> JobRun | None:
    """Start the run of ``schedule``'s latest due slot; the caller holds its row lock."""
    from .enqueue import enqueue_job

    assert schedule.next_run_at is not None  # due() only returns scheduled rows
    try:
        expr, tz = check_expr(schedule.cron), zone(schedule.timezone)
        job = get_job(schedule.job_name)
    except (InvalidSchedule, UnknownJob) as exc:  # one bad row must not stop the others
        _disable(schedule, f"cannot start: {exc}")
        return None
    # Missed slots (no worker ran): only the latest one starts, once.
    slot = max(schedule.next_run_at, latest_slot(expr, tz, now), key=datetime.timestamp)
    try:
        # A savepoint: what a failed start wrote goes, the other schedules' starts stay.
        with transaction.atomic(using=conf.database()):
            run = enqueue_job(
                job,
                _arguments(schedule.args, list),
                _arguments(schedule.kwargs, dict),
                JobOptions(idempotency_key=slot_key(schedule.pk, slot), run_after=slot),
                now=now,
            )
    except DatabaseError:
        raise  # the database's trouble, not the row's: the worker retries the tick
    except Exception as exc:
        # Arguments the job refuses (a row edited by hand), or that its limits' keys
        # cannot be made of (a key callable's KeyError, a key too long to store):
        # this schedule is disabled, every other one still starts.
        _disable(schedule, refusal(exc))
        return None
    # In the same transaction as the insert: no worker sees the run without them.
    JobRun.objects.using(conf.database()).filter(pk=run.pk).update(
        schedule=schedule, scheduled_at=slot
    )
    run.schedule, run.scheduled_at = schedule, slot
    schedule.last_run_at = slot
    schedule.next_run_at = next_slot(expr, tz, slot)
    schedule.save(update_fields=["last_run_at", "next_run_at"])
    log.info("schedule %s: started run %s for slot %s", schedule.pk, run.id, slot.isoformat())
    return run


def run_now(schedule: Schedule, now: datetime) -> JobRun:
    """Start one run of ``schedule`` now, with its arguments, as a tick starts a slot's
    run (linked to the schedule, ``ctx.scheduled_at`` is ``now``); the schedule's next
    slot and last run time stay as they are. A paused schedule starts one too: the
    operator asked for it (the admin's "Run now").

    Raises what ``enqueue`` raises for the schedule's arguments, or ``UnknownJob``;
    then nothing is written and the schedule stays enabled. Each call starts a run
    (no idempotency key: two clicks, two runs).

    >>> run_now(Schedule.objects.get(pk=1), clock.current().now())  # doctest: +SKIP
    """
    from .enqueue import enqueue_job

    job = get_job(schedule.job_name)
    using = conf.database()
    with transaction.atomic(using=using):
        run = enqueue_job(
            job,
            _arguments(schedule.args, list),
            _arguments(schedule.kwargs, dict),
            JobOptions(),
            now=now,
        )
        # In the same transaction as the insert, as _start_slot: no worker sees it without.
        JobRun.objects.using(using).filter(pk=run.pk).update(schedule=schedule, scheduled_at=now)
    run.schedule, run.scheduled_at = schedule, now
    log.info("schedule %s: started run %s now, by hand", schedule.pk, run.id)
    return run


def check_arguments_of(job_name: str, args: Any, kwargs: Any) -> None:
    """Refuse a schedule's arguments as its slots' ``enqueue`` would refuse them (the
    admin's save), raising the same error: then no tick disables the schedule."""
    from .enqueue import check_call

    check_call(get_job(job_name), _arguments(args, list), _arguments(kwargs, dict))


def refusal(exc: BaseException) -> str:
    """Why a schedule's run cannot start, as its note and the schedules admin say it."""
    return f"cannot start: {type(exc).__name__}: {exc}"


def _arguments(value: Any, kind: type) -> Any:
    """A schedule's stored ``args`` (a list) or ``kwargs`` (a dict); anything else (the
    column takes any JSON) is refused as enqueue refuses arguments."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        what = "args must be a JSON list" if kind is list else "kwargs must be a JSON object"
        raise InvalidPayload(f"{what}, got {value!r}")
    return value


def _disable(schedule: Schedule, why: str) -> None:
    log.error("schedule %s (%s) disabled: %s", schedule.pk, schedule.job_name, why)
    schedule.enabled, schedule.next_run_at, schedule.note = False, None, why[:300]
    schedule.save(update_fields=["enabled", "next_run_at", "note"])


class Ticker:
    """The worker's hook: ``tick(now)`` starts due slots when one may be due."""

    def __init__(self) -> None:
        self._next: datetime | None = None

    def tick(self, now: datetime) -> list[JobRun]:
        if self._next is not None and now < self._next:
            return []
        result = start_due(now)
        refresh = now + REFRESH
        self._next = refresh if result.next_due is None else min(result.next_due, refresh)
        return result.started


def describe(schedule: Schedule, now: datetime, count: int = 5) -> list[datetime]:
    """The next ``count`` slots of ``schedule`` after ``now``, in its time zone."""
    from ..engine.cron import slots

    return slots(check_expr(schedule.cron), zone(schedule.timezone), now, count)


__all__ = ["Cron", "Ticker", "describe", "run_now", "start_due", "sync"]
