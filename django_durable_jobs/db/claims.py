"""Claiming runnable runs so that no run is ever held by two workers at once, and
giving them back (released on shutdown, requeued when a worker died).

Flow control (per-key concurrency, rate limits, debounce) plugs in here: the
candidate query is one QuerySet (``JobRun.objects.runnable``) that a limit can
narrow with an extra filter or an anti-join on running runs of the same key,
before the guarded UPDATE that takes the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from .. import conf
from ..engine.clock import Clock
from ..models import JobRun, RunStatus
from . import dialect
from .executable import Executable
from .flow import limits as flow


def claim(
    owner: str,
    *,
    now: datetime,
    lease: timedelta,
    queues: Iterable[str] | None = None,
    limit: int = 1,
    clock: Clock | None = None,
    only: Executable | None = None,
) -> list[JobRun]:
    """Take up to ``limit`` runnable runs for ``owner``; the best first. With ``only``,
    runs of the jobs and versions it lets this worker take (a rolling deploy).

    The attempt is counted here for queued runs; a run resuming from a sleep or a
    wait keeps its attempt number. Each returned run remembers the status it was
    claimed from (``claimed_from``) so that ``release`` can give it back unchanged.
    """
    queue_list = None if queues is None else list(queues)
    limited: list[JobRun] = []
    if flow.has_limits():
        limited = flow.claim_limited(
            owner, now=now, lease=lease, queues=queue_list, limit=limit, clock=clock, only=only
        )[0]
    if len(limited) >= limit:
        return limited
    return limited + claim_unlimited(owner, now, lease, queue_list, limit - len(limited), only)


def claim_unlimited(
    owner: str,
    now: datetime,
    lease: timedelta,
    queue_list: list[str] | None,
    limit: int,
    only: Executable | None = None,
) -> list[JobRun]:
    """``claim`` for runs under no limit (flow control has its own, ``flow.claim_limited``)."""
    return dialect.of(conf.database()).claim(owner, now, lease, queue_list, limit, only)


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


def give_back(run: JobRun, owner: str) -> bool:
    """Give a claimed run back as it was before the claim, wake time included: a run
    this worker cannot execute (its job or version is not registered here) stays
    runnable for a worker that can, and how long it has been runnable still counts
    (``UNKNOWN_JOB_GRACE``). Unlike ``release``, which makes the run due now."""
    previous = getattr(run, "claimed_from", RunStatus.QUEUED)
    attempt = run.attempt - 1 if previous == RunStatus.QUEUED else run.attempt
    changes: dict[str, Any] = {
        "status": previous,
        "attempt": max(attempt, 0),
        "lease_owner": "",
        "lease_expires_at": None,
    }
    if getattr(run, "claimed_fresh", False):
        changes["started_at"] = None  # the claim started it; it has not started
    rows = JobRun.objects.using(conf.database()).filter(pk=run.pk, lease_owner=owner)
    return bool(rows.filter(status=RunStatus.RUNNING).update(**changes))


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
