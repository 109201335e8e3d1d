"""Claiming runnable runs so that no run is ever held by two workers at once, and
giving them back (released on shutdown, requeued when a worker died).

Flow control (per-key concurrency, rate limits, debounce) plugs in here: the
candidate query is one QuerySet (``JobRun.objects.runnable``) that a limit can
narrow with an extra filter or an anti-join on running runs of the same key,
before the guarded UPDATE that takes the rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import nullcontext
from datetime import datetime, timedelta

from django.db import connections, transaction
from django.db.models import Case, DateTimeField, F, PositiveIntegerField, Value, When
from django.db.models.functions import Coalesce

from . import conf
from .models import RUNNABLE, JobRun, RunStatus


def claim(
    owner: str,
    *,
    now: datetime,
    lease: timedelta,
    queues: Iterable[str] | None = None,
    limit: int = 1,
) -> list[JobRun]:
    """Take up to ``limit`` runnable runs for ``owner``; the best first.

    The attempt is counted here for queued runs; a run resuming from a sleep or a
    wait keeps its attempt number. Each returned run remembers the status it was
    claimed from (``claimed_from``) so that ``release`` can give it back unchanged.
    """
    using = conf.database()
    queue_list = None if queues is None else list(queues)
    if connections[using].vendor == "postgresql":
        return _claim_postgresql(using, owner, now, lease, queue_list, limit)
    runs = JobRun.objects.using(using)
    candidates = runs.runnable(now, queue_list)
    locking = connections[using].features.has_select_for_update_skip_locked
    # Without row locks (SQLite) no transaction is opened: a read that later writes
    # would fail with "database is locked" instead of waiting for the writer.
    with transaction.atomic(using=using) if locking else nullcontext():
        if locking:
            candidates = candidates.select_for_update(skip_locked=True)
        picked = list(candidates.values_list("id", "status", "started_at")[:limit])
        before = {run_id: status for run_id, status, _ in picked}
        fresh = {run_id for run_id, _, started_at in picked if started_at is None}
        if not before:
            return []
        # The status guard makes this safe where rows cannot be locked (SQLite
        # serialises writers): a run another worker took meanwhile is not runnable.
        # ``attempt`` is assigned before ``status``: MySQL and MariaDB evaluate SET
        # left to right, so a CASE after ``status = 'running'`` would never count.
        runs.filter(id__in=before, status__in=RUNNABLE, wake_at__lte=now).update(
            attempt=Case(
                When(status=RunStatus.QUEUED, then=F("attempt") + 1),
                default=F("attempt"),
                output_field=PositiveIntegerField(),
            ),
            status=RunStatus.RUNNING,
            started_at=Coalesce(F("started_at"), Value(now), output_field=DateTimeField()),
            lease_owner=owner,
            lease_expires_at=now + lease,
        )
        claimed = list(runs.filter(id__in=before, lease_owner=owner, status=RunStatus.RUNNING))
    for run in claimed:
        run.claimed_from = before[run.id]
        run.claimed_fresh = run.id in fresh
    claimed.sort(key=lambda run: (-run.priority, run.wake_at or now))
    return claimed


_CLAIM_POSTGRESQL = """
WITH picked AS (
    SELECT id, status, started_at FROM {table}
    WHERE status IN ('queued', 'sleeping', 'waiting') AND wake_at <= %(now)s {queues}
    ORDER BY priority DESC, wake_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {table} AS run SET
    status = 'running',
    attempt = CASE WHEN picked.status = 'queued' THEN run.attempt + 1 ELSE run.attempt END,
    started_at = COALESCE(run.started_at, %(now)s),
    lease_owner = %(owner)s,
    lease_expires_at = %(expires)s
FROM picked WHERE run.id = picked.id
RETURNING run.*, picked.status AS claimed_from, picked.started_at IS NULL AS claimed_fresh
"""


def _claim_postgresql(
    using: str,
    owner: str,
    now: datetime,
    lease: timedelta,
    queues: list[str] | None,
    limit: int,
) -> list[JobRun]:
    """The same claim in one statement (one round trip, no explicit transaction)."""
    sql = _CLAIM_POSTGRESQL.format(
        table=connections[using].ops.quote_name(JobRun._meta.db_table),
        queues=_queue_filter(queues),
    )
    params = {
        "now": now,
        "limit": limit,
        "owner": owner,
        "expires": now + lease,
        "queues": queues,
        "queue": queues[0] if queues else None,
    }
    claimed = list(JobRun.objects.using(using).raw(sql, params))
    claimed.sort(key=lambda run: (-run.priority, run.wake_at or now))
    return claimed


def _queue_filter(queues: list[str] | None) -> str:
    # One queue is an equality so the planner can walk durable_run_runnable in order;
    # "= ANY(array)" cannot, and would sort the whole backlog on every claim.
    if queues is None:
        return ""
    return "AND queue = %(queue)s" if len(queues) == 1 else "AND queue = ANY(%(queues)s)"


def renew(owner: str, run_ids: Iterable[object], *, now: datetime, lease: timedelta) -> int:
    """Extend ``owner``'s leases (the heartbeat); returns how many it still holds."""
    return (
        JobRun.objects.using(conf.database())
        .filter(id__in=list(run_ids), lease_owner=owner, status=RunStatus.RUNNING)
        .update(lease_expires_at=now + lease)
    )


def release(run: JobRun, owner: str, *, now: datetime) -> bool:
    """Give a claimed run back without using up an attempt (worker shutdown)."""
    previous = getattr(run, "claimed_from", RunStatus.QUEUED)
    attempt = run.attempt - 1 if previous == RunStatus.QUEUED else run.attempt
    return bool(
        JobRun.objects.using(conf.database())
        .filter(pk=run.pk, lease_owner=owner)
        .update(
            status=previous,
            attempt=max(attempt, 0),
            wake_at=now,
            lease_owner="",
            lease_expires_at=None,
        )
    )


def requeue_expired(*, now: datetime, limit: int = 100) -> int:
    """Make runs whose worker died runnable again; their completed steps replay.

    The interrupted attempt counts: a run that kills its worker every time stops
    once its attempts are used up (the claim counts the next one).
    """
    runs = JobRun.objects.using(conf.database())
    ids = list(runs.expired_leases(now).values_list("id", flat=True)[:limit])
    if not ids:
        return 0
    return runs.filter(id__in=ids, status=RunStatus.RUNNING, lease_expires_at__lt=now).update(
        status=RunStatus.QUEUED, wake_at=now, lease_owner="", lease_expires_at=None
    )
