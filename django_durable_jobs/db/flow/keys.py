"""A flow-control key: the keys a run carries (``stamp``), a key's lock and its slots;
what the enqueue's gates, the claim under a limit (``limits``) and holding or letting
go of runs (``holds``) all need."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models import Q

from ...definitions.registry import JobDefinition
from ...models import RUNNABLE, JobRun, JobRunQuerySet, RunStatus
from .. import dialect


def lock(using: str, job_name: str, kind: str, key: str) -> None:
    """Lock one key until the transaction ends (``Dialect.lock_key``: an advisory lock
    on PostgreSQL, the key's ``FlowKey`` row elsewhere)."""
    dialect.of(using).lock_key(job_name, kind, key)


def stamp(run: JobRun, job: JobDefinition, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Copy the job's limits and this run's keys onto ``run`` (at enqueue): the
    concurrency and throttle keys the claim locks, the rate-limit and debounce keys
    the enqueue's gates lock (``gates``)."""
    if job.concurrency is not None:
        run.concurrency_key = job.concurrency.key_of(job.name, job.fn, args, kwargs)
        run.concurrency_limit = job.concurrency.limit
    if job.throttle is not None:
        run.throttle_key = job.throttle.key_of(job.name, job.fn, args, kwargs)
        run.throttle_limit = job.throttle.limit
        run.throttle_period = job.throttle.per
    if job.rate_limit is not None:
        run.rate_limit_key = job.rate_limit.key_of(job.name, job.fn, args, kwargs)
    if job.debounce is not None:
        run.debounce_key = job.debounce.key_of(job.name, job.fn, args, kwargs)


def slots(runs: JobRunQuerySet, job_name: str, key: str | None, now: datetime) -> JobRunQuerySet:
    """The runs holding a slot of one concurrency key."""
    return runs.filter(holds_slot(now), job_name=job_name, concurrency_key=key)


def holds_slot(now: datetime) -> Q:
    """Running, or cancelled while running and not yet stopped by its worker (until
    its lease runs out): such a run still executes up to its next step."""
    cancelled_in_hand = Q(status=RunStatus.CANCELLED, lease_expires_at__gte=now) & ~Q(
        lease_owner=""
    )
    return (Q(status=RunStatus.RUNNING) | cancelled_in_hand) & Q(concurrency_limit__isnull=False)


def held(runs: JobRunQuerySet) -> JobRunQuerySet:
    """Runs held back by a saturated concurrency key (queued, no wake time)."""
    return runs.filter(status__in=RUNNABLE, wake_at__isnull=True, concurrency_limit__isnull=False)
