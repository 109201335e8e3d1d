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

from django.db.models import Case, F, PositiveIntegerField, Q, When

from .. import conf
from ..engine.clock import Clock
from ..models import JobRun, RunStatus
from . import dialect, flow
from .leases import BATCH, LAPSED, SEPARATOR, LeaseOwner


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
        limited = dialect.of(conf.database()).claim_limited(
            owner, now, lease, queue_list, limit, clock
        )
    if len(limited) >= limit:
        return limited
    return limited + claim_unlimited(owner, now, lease, queue_list, limit - len(limited))


def claim_unlimited(
    owner: str, now: datetime, lease: timedelta, queue_list: list[str] | None, limit: int
) -> list[JobRun]:
    """``claim`` for runs under no limit (flow control has its own, ``flow.claim_limited``)."""
    return dialect.of(conf.database()).claim(owner, now, lease, queue_list, limit)


def renew(owner: str, run_ids: Iterable[object], *, now: datetime, lease: timedelta) -> int:
    """Extend ``owner``'s leases (the heartbeat); returns how many it still holds."""
    return renew_held(dict.fromkeys(run_ids, owner), now=now, lease=lease)


def renew_held(
    held: Mapping[Any, str], *, now: datetime, lease: timedelta, started: Iterable[Any] = ()
) -> int:
    """Extend every lease in ``held`` (run id -> its owner) in ONE statement, and
    record that the attempts of the runs ``started`` began (``record_starts``); returns
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
    values: dict[str, Any] = {"lease_expires_at": now + lease}
    if started := list(started):
        values["attempt_started_by"] = Case(
            When(id__in=started, then=F("lease_owner")), default=F("attempt_started_by")
        )
    return (
        JobRun.objects.using(conf.database())
        .filter(ours, status=RunStatus.RUNNING)
        .update(**values)
    )


def record_starts(run_ids: Iterable[Any], owner: str) -> int:
    """Record that the attempts of ``run_ids`` begin under ``owner``'s lease, before
    they do: a lapse of the lease then counts them (``requeue_expired``). Returns how
    many ``owner`` still holds."""
    runs = JobRun.objects.using(conf.database()).filter(id__in=list(run_ids), lease_owner=owner)
    return runs.update(attempt_started_by=owner)


def start_needs_record(run: JobRun, owner: str) -> bool:
    """Whether ``run``'s start is recorded before it begins (``record_starts``): its last
    lease lapsed and ``owner`` claimed it in a batch, whose sync runs' starts are
    otherwise recorded by the heartbeat just after they began. So a run that kills its
    worker as it begins gets its attempt back once in a row at most."""
    return run.attempt_started_by == LAPSED and LeaseOwner.of_batch(owner)


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


#: A batch's run (``LeaseOwner.batch``: a claim after the owner's last ``SEPARATOR``,
#: ending with ``BATCH``) ...
IN_A_BATCH = Q(lease_owner__contains=SEPARATOR, lease_owner__endswith=BATCH)
#: ... whose start was not recorded: it may not have begun.
UNSTARTED = IN_A_BATCH & ~Q(attempt_started_by=F("lease_owner"))


def requeue_expired(*, now: datetime, limit: int = 100) -> int:
    """Make runs whose worker died runnable again; their completed steps replay.

    The interrupted attempt counts: a run that kills its worker every time stops
    once its attempts are used up (the claim counts the next one). But a batch's runs
    wait in hand before they begin (``LeaseOwner.batch``): one whose start was not
    recorded (``JobRun.attempt_started_by``) may never have begun, and gets its
    attempt back. Each run is marked ``LAPSED``: a batch that claims it again records
    its start before it begins (``start_needs_record``).
    """
    runs = JobRun.objects.using(conf.database())
    ids = list(runs.expired_leases(now).values_list("id", flat=True)[:limit])
    if not ids:
        return 0
    return runs.filter(id__in=ids, status=RunStatus.RUNNING, lease_expires_at__lt=now).update(
        # Before ``lease_owner``: MySQL and MariaDB evaluate SET left to right.
        attempt=Case(
            When(UNSTARTED, attempt__gt=0, then=F("attempt") - 1),
            default=F("attempt"),
            output_field=PositiveIntegerField(),
        ),
        attempt_started_by=LAPSED,
        status=RunStatus.QUEUED,
        wake_at=now,
        lease_owner="",
        lease_expires_at=None,
    )
