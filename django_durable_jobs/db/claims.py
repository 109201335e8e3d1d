"""Claiming runnable runs so that no run is ever held by two workers at once, and
giving them back (released on shutdown, requeued when a worker died).

Flow control (per-key concurrency, rate limits, debounce) plugs in here: the
candidate query is one QuerySet (``JobRun.objects.runnable``) that a limit can
narrow with an extra filter or an anti-join on running runs of the same key,
before the guarded UPDATE that takes the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import Case, F, PositiveIntegerField, Q, Value, When
from django.db.models.functions import Coalesce

from .. import conf
from ..engine.clock import Clock
from ..models import RUNNABLE, JobRun, JobRunQuerySet, RunStatus
from . import flow, postgres
from .fields import InstantField

#: What the claim reads of each run it picks.
PICKED = ("id", "status", "started_at")


def claim(
    owner: str,
    *,
    now: datetime,
    lease: timedelta,
    queues: Iterable[str] | None = None,
    limit: int = 1,
    clock: Clock | None = None,
) -> list[JobRun]:
    """Take up to ``limit`` runnable runs for ``owner``; the best first.

    The attempt is counted here for queued runs; a run resuming from a sleep or a
    wait keeps its attempt number. Each returned run remembers the status it was
    claimed from (``claimed_from``) so that ``release`` can give it back unchanged.
    """
    queue_list = None if queues is None else list(queues)
    limited: list[JobRun] = []
    if flow.has_limits():
        limited = flow.claim_limited(
            owner, now=now, lease=lease, queues=queue_list, limit=limit, clock=clock
        )
    if len(limited) >= limit:
        return limited
    return limited + claim_unlimited(owner, now, lease, queue_list, limit - len(limited))


def claim_unlimited(
    owner: str, now: datetime, lease: timedelta, queue_list: list[str] | None, limit: int
) -> list[JobRun]:
    """``claim`` for runs under no limit (flow control has its own, ``flow.claim_limited``)."""
    using = conf.database()
    if postgres.available(using):
        return postgres.claim(using, owner, now, lease, queue_list, limit)[0]
    runs = JobRun.objects.using(using)
    # Runs under a limit are flow.claim_limited's, which locks their key first.
    candidates = runs.runnable(now, queue_list).filter(
        concurrency_limit__isnull=True, throttle_limit__isnull=True
    )
    features = connections[using].features
    locking = features.has_select_for_update_skip_locked
    # Without row locks (SQLite) no transaction is opened: a read that later writes
    # would fail with "database is locked" instead of waiting for the writer.
    with transaction.atomic(using=using) if locking else nullcontext():
        if not locking:
            picked = list(candidates.values_list(*PICKED)[:limit])
        elif features.supports_partial_indexes:
            locked = candidates.select_for_update(skip_locked=True)
            picked = list(locked.values_list(*PICKED)[:limit])
        else:
            picked = lock_shortlisted(candidates, limit)
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
            started_at=Coalesce(F("started_at"), Value(now, output_field=InstantField())),
            lease_owner=owner,
            lease_expires_at=now + lease,
        )
        claimed = list(runs.filter(id__in=before, lease_owner=owner, status=RunStatus.RUNNING))
    for run in claimed:
        run.claimed_from = before[run.id]
        run.claimed_fresh = run.id in fresh
    claimed.sort(key=lambda run: (-run.priority, run.wake_at or now))
    return claimed


#: Runs shortlisted beyond ``limit``: so many workers claiming at the same moment each
#: still find an unlocked one.
SHORTLIST_SPARE = 16


def lock_shortlisted(candidates: JobRunQuerySet, limit: int) -> list[tuple[Any, ...]]:
    """Lock up to ``limit`` of the best runnable runs (MariaDB, MySQL): ``PICKED`` values.

    There the claim's index leads with ``status`` (``schema.PartialIndex``: no partial
    indexes), so the database sorts the due runs rather than reading them in order,
    and a sorting ``FOR UPDATE`` locks every row it sorted: a concurrent worker,
    skipping locked rows, would find nothing. So the best runs are shortlisted by a
    read without locks, then locked by primary key alone (no other condition that
    could lead the database to another index), no more at a time than are still
    wanted; rows another worker holds are skipped and the next ones tried. A run
    taken meanwhile is dropped here by its status; the claim's guarded UPDATE
    checks the rest.
    """
    ids = list(candidates.values_list("id", flat=True)[: limit + SHORTLIST_SPARE])
    by_id = JobRun.objects.using(candidates.db).order_by()
    picked: list[tuple[Any, ...]] = []
    while ids and len(picked) < limit:
        wanted = limit - len(picked)
        chunk, ids = ids[:wanted], ids[wanted:]
        locked = by_id.filter(pk__in=chunk).select_for_update(skip_locked=True)
        picked += [row for row in locked.values_list(*PICKED) if row[1] in RUNNABLE]
    return picked


def renew(owner: str, run_ids: Iterable[object], *, now: datetime, lease: timedelta) -> int:
    """Extend ``owner``'s leases (the heartbeat); returns how many it still holds."""
    return renew_held(dict.fromkeys(run_ids, owner), now=now, lease=lease)


def renew_held(held: Mapping[Any, str], *, now: datetime, lease: timedelta) -> int:
    """Extend every lease in ``held`` (run id -> its owner) in ONE statement; returns
    how many are still held.

    A worker holds runs of many claims at once (an async lane, one owner per claim):
    one UPDATE per owner made each beat queue for SQLite's single write lock once per
    claim, and under load the last ones landed after their lease had expired, so a
    live worker's runs were taken over (and, with no retry left, failed).
    """
    by_owner: dict[str, list[Any]] = {}
    for run_id, owner in held.items():
        by_owner.setdefault(owner, []).append(run_id)
    if not by_owner:
        return 0
    ours = Q()
    for owner, run_ids in by_owner.items():
        ours |= Q(lease_owner=owner, id__in=run_ids)
    return (
        JobRun.objects.using(conf.database())
        .filter(ours, status=RunStatus.RUNNING)
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
