"""Claiming runnable runs so that no run is ever held by two workers at once, and
giving them back (released on shutdown, requeued when a worker died). A run
cancelled while a worker held it is never given back: it is let go of, cancelled,
by that worker or, once its lease expired, by a reap.

Flow control (per-key concurrency, rate limits, debounce) plugs in here: the
candidate query is one QuerySet (``JobRun.objects.runnable``) that a limit can
narrow with an extra filter or an anti-join on running runs of the same key,
before the guarded UPDATE that takes the rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import Case, F, PositiveIntegerField, Q, When

from .. import conf
from ..engine.clock import Clock
from ..models import JobRun, RunStatus
from . import dialect
from .executable import Executable
from .flow import holds
from .flow import keys as flow_keys
from .flow import limits as flow
from .leases import BATCH, LAPSED, SEPARATOR, LeaseOwner
from .paused import Paused

log = logging.getLogger("django_durable_jobs.worker")


def claim(
    owner: str,
    *,
    now: datetime,
    lease: timedelta,
    queues: Iterable[str] | None = None,
    limit: int = 1,
    clock: Clock | None = None,
    only: Executable | None = None,
    paused: Paused | None = None,
) -> list[JobRun]:
    """Take up to ``limit`` runnable runs for ``owner``; the best first. With ``only``,
    runs of the jobs and versions it lets this worker take (a rolling deploy); with
    ``paused``, none of a paused queue or job (``worker/pauses.py``).

    The attempt is counted here for queued runs; a run resuming from a sleep or a
    wait keeps its attempt number. Each returned run remembers the status it was
    claimed from (``claimed_from``) so that ``release`` can give it back unchanged.
    """
    queue_list = None if queues is None else list(queues)
    limited: list[JobRun] = []
    if flow.has_limits():
        limited = flow.claim_limited(
            owner,
            now=now,
            lease=lease,
            queues=queue_list,
            limit=limit,
            clock=clock,
            only=only,
            paused=paused,
        )[0]
    if len(limited) >= limit:
        return limited
    left = limit - len(limited)
    return limited + claim_unlimited(owner, now, lease, queue_list, left, only, paused)


def claim_unlimited(
    owner: str,
    now: datetime,
    lease: timedelta,
    queue_list: list[str] | None,
    limit: int,
    only: Executable | None = None,
    paused: Paused | None = None,
) -> list[JobRun]:
    """``claim`` for runs under no limit (flow control has its own, ``flow.claim_limited``)."""
    return dialect.of(conf.database()).claim(owner, now, lease, queue_list, limit, only, paused)


def renew(owner: str, run_ids: Iterable[object], *, now: datetime, lease: timedelta) -> int:
    """Extend ``owner``'s leases (the heartbeat); returns how many it still holds."""
    return renew_held(dict.fromkeys(run_ids, owner), now=now, lease=lease)


def renew_held(
    held: Mapping[Any, str],
    *,
    now: datetime,
    lease: timedelta,
    status: str = RunStatus.RUNNING,
    started: Iterable[Any] = (),
    skip_locked: bool = False,
) -> int:
    """Extend every lease in ``held`` (run id -> its owner) of runs in ``status`` in ONE
    statement, and record that the attempts of the runs ``started`` began
    (``record_starts``); returns how many it extended.

    A worker holds runs of many claims at once (an async lane, one owner per claim):
    one UPDATE per owner made each beat queue for SQLite's single write lock once per
    claim, and under load the last ones landed after their lease had expired, so a
    live worker's runs were taken over (and, with no retry left, failed).

    ``status`` cancelled: the runs cancelled in the worker's hand, which it executes
    up to their next step; their lease says the worker is alive
    (``let_go_expired_cancelled``).

    ``skip_locked``: leave the runs whose rows another transaction holds (the
    heartbeat's beat; the next beat renews them). Waiting, the beat deadlocked with its
    own worker's outcome write on PostgreSQL, which locks the finished runs' rows in
    another order (a stall of ``deadlock_timeout`` for one of the two); a row that
    write holds is ending its lease anyway.
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
    using = conf.database()
    features = connections[using].features
    rows = JobRun.objects.using(using).filter(ours, status=status)
    if not (skip_locked and features.has_select_for_update_skip_locked):
        return rows.update(**values)
    free = rows.order_by().select_for_update(skip_locked=True)
    by_id = JobRun.objects.using(using)
    with transaction.atomic(using=using):
        if features.update_can_self_select:  # one statement (PostgreSQL)
            return by_id.filter(pk__in=free.values("pk")).update(**values)
        ids = list(free.values_list("pk", flat=True))  # MySQL: not in its own UPDATE
        return by_id.filter(pk__in=ids).update(**values) if ids else 0


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
    """Give a claimed run back without using up an attempt (worker shutdown); False if
    it was not given back.

    Only a run still running is given back. One cancelled meanwhile (``runs.cancel``
    leaves its worker the lease) stays cancelled: the worker lets go of it instead
    (``let_go_cancelled``). Given back as claimed, it was queued again with its
    X_RUN_CANCELLED error and executed again.
    """
    previous = getattr(run, "claimed_from", RunStatus.QUEUED)
    attempt = run.attempt - 1 if previous == RunStatus.QUEUED else run.attempt
    given_back = (
        JobRun.objects.using(conf.database())
        .filter(pk=run.pk, lease_owner=owner, status=RunStatus.RUNNING)
        .update(
            status=previous,
            attempt=max(attempt, 0),
            wake_at=now,
            lease_owner="",
            lease_expires_at=None,
        )
    )
    if not given_back and let_go_cancelled(run, owner, now=now):
        log.info("run cancelled: run=%s let go by its worker instead of given back", run.id)
    return bool(given_back)


def let_go_cancelled(
    run: JobRun, owner: str, *, now: datetime, expired: bool = False, **values: Any
) -> bool:
    """Let go of ``run``, cancelled while ``owner`` held its lease: the lease is cleared
    (``values`` written with it), the run stays cancelled, and the concurrency slot it
    held frees, under its key's lock (``holds.free_slot``). ``expired``: only if that
    lease ran out before ``now`` (a renewal in between says its worker lives). False if
    the run is not that.
    """
    using = conf.database()
    rows = JobRun.objects.using(using).filter(
        pk=run.pk, lease_owner=owner, status=RunStatus.CANCELLED
    )
    if expired:
        rows = rows.filter(lease_expires_at__lt=now)
    with transaction.atomic(using=using):
        if run.concurrency_limit is not None:
            flow_keys.lock(using, run.job_name, "concurrency", run.concurrency_key or "")
        settled = rows.update(lease_owner="", lease_expires_at=None, **values)
        if settled and run.concurrency_limit is not None:
            holds.free_slot(using, run, now)
    return bool(settled)


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
    ids = list(runs.expired_leases(now, RunStatus.RUNNING).values_list("id", flat=True)[:limit])
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


def let_go_expired_cancelled(*, now: datetime, limit: int = 100) -> int:
    """Let go of runs cancelled in the hand of a worker that then died (their lease
    expired; a live worker renews it until it has stopped the run): the lease is
    cleared and the concurrency slot frees, so that an operator may retry, replay or
    purge the run, which all want a run no worker holds. Its completed steps replay
    on a retry. Returns how many were let go.
    """
    runs = JobRun.objects.using(conf.database())
    found = list(
        runs.expired_leases(now, RunStatus.CANCELLED).only(
            "id", "lease_owner", "job_name", "concurrency_key", "concurrency_limit"
        )[:limit]
    )
    return sum(let_go_cancelled(run, run.lease_owner, now=now, expired=True) for run in found)
