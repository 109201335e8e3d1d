"""Flow control at enqueue and at publish (docs/how-to/flow-control.md): ``RateLimit``
(over the limit, the run is written ``skipped``), ``Debounce`` (one run per quiet period, the latest
arguments win) and ``CancelOn`` (a published event cancels matching runs).

Each decision is taken under the key's ``FlowKey`` row lock, in the caller's
transaction, so concurrent enqueues from several processes cannot both pass a limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from ...definitions.registry import JobDefinition
from ...engine.limits import Limit
from ...models import CancelKey, IdempotencyKey, JobRun, JobRunQuerySet, RunStatus
from .. import dialect
from . import keys as flow_keys


def gated(job: JobDefinition) -> bool:
    return job.rate_limit is not None or job.debounce is not None


def save_gated(run: JobRun, job: JobDefinition, now: datetime, using: str) -> tuple[JobRun, str]:
    """Write ``run`` past its job's rate limit and debounce; returns the run to give
    back and what happened: "skipped", "debounced" (an existing run), "existing" (the
    run of its idempotency key) or "new"."""
    runs = JobRun.objects.using(using)
    with transaction.atomic(using=using):
        key = run.idempotency_key
        if key is not None and (keyed := _keyed(runs, run.job_name, key)) is not None:
            return keyed, "existing"  # the key's run, if any, before any gate
        if job.rate_limit is not None:
            flow_keys.lock(using, job.name, "rate_limit", run.rate_limit_key or "")
            if _over_rate(runs, run, job.rate_limit, now):
                run.status, run.finished_at, run.wake_at = RunStatus.SKIPPED, now, None
                return _insert(runs, run, "skipped")
        if job.debounce is not None:
            flow_keys.lock(using, job.name, "debounce", run.debounce_key or "")
            existing = _debounce(runs, run, job.debounce, now)
            if existing is not None:
                return _join_key(runs, existing, run.idempotency_key)
            first_wake = now + (job.debounce.per or timedelta(0))
            if job.debounce.timeout is not None:
                first_wake = min(first_wake, now + job.debounce.timeout)
            run.wake_at = max(run.wake_at or now, first_wake)
        return _insert(runs, run, "new")


def _insert(runs: JobRunQuerySet, run: JobRun, outcome: str) -> tuple[JobRun, str]:
    """Insert ``run``; with an idempotency key another enqueue may have taken meanwhile
    (read above, inserted since), that one's run instead ("existing"). A plain insert
    failed there with the key's IntegrityError."""
    if run.idempotency_key is None:
        run.save(using=runs.db, force_insert=True)
        return run, outcome
    runs.bulk_create([run], ignore_conflicts=True)
    keyed = _latest(runs.filter(job_name=run.job_name, idempotency_key=run.idempotency_key)).get()
    return (run, outcome) if keyed.pk == run.pk else (keyed, "existing")


def _keyed(runs: JobRunQuerySet, job_name: str, key: str) -> JobRun | None:
    """The run of an idempotency key: the run's own, or one it was joined to.

    The joined key is read without a lock: on MariaDB a locking read of a key not
    there yet locks the gap it would go in, and two enqueues that each held such a
    gap then waited for each other's insert (a deadlock). A key joined meanwhile is
    written again by ``_join_key`` (its conflict ignored) under the debounce's lock."""
    own = _latest(runs.filter(job_name=job_name, idempotency_key=key)).first()
    if own is not None:
        return own
    joined = IdempotencyKey.objects.using(runs.db).filter(job_name=job_name, key=key)
    run_id = joined.values_list("run_id", flat=True).first()
    return None if run_id is None else _latest(runs.filter(pk=run_id)).first()


def _join_key(runs: JobRunQuerySet, existing: JobRun, key: str | None) -> tuple[JobRun, str]:
    """``existing``, the pending run a debounce joined an enqueue to, answers to that
    enqueue's idempotency key from now on: a repeat after the run started gets it back
    instead of starting a second run. A concurrent enqueue with the key that joined it
    first wrote the same row (its conflict is ignored)."""
    if key is not None and key != existing.idempotency_key:
        IdempotencyKey.objects.using(runs.db).bulk_create(
            [IdempotencyKey(run=existing, job_name=existing.job_name, key=key)],
            ignore_conflicts=True,
        )
    return existing, "debounced"


def _over_rate(runs: JobRunQuerySet, run: JobRun, limit: Limit, now: datetime) -> bool:
    enqueued = runs.filter(
        job_name=run.job_name,
        rate_limit_key=run.rate_limit_key,
        created_at__gt=now - (limit.per or timedelta(0)),
    ).exclude(status=RunStatus.SKIPPED)
    return len(_latest(enqueued).values_list("id", flat=True)[: limit.limit]) >= limit.limit


def _latest(rows: JobRunQuerySet) -> JobRunQuerySet:
    """Read the latest committed rows: on MariaDB a plain read in the caller's
    transaction may see a snapshot taken before the key's lock was granted."""
    return dialect.of(rows.db).latest(rows)


def _debounce(runs: JobRunQuerySet, run: JobRun, limit: Limit, now: datetime) -> JobRun | None:
    """The key's pending run, given ``run``'s arguments and a later start; or None."""
    pending = runs.filter(
        job_name=run.job_name,
        debounce_key=run.debounce_key,
        status=RunStatus.QUEUED,
        started_at__isnull=True,
    )
    existing = _latest(pending).order_by("created_at").first()
    if existing is None:
        return None
    wake_at = now + (limit.per or timedelta(0))
    if limit.timeout is not None:
        wake_at = min(wake_at, existing.created_at + limit.timeout)
    # Guarded: a worker that claimed it meanwhile wins, and this enqueue starts a new run.
    if not pending.filter(pk=existing.pk).update(args=run.args, kwargs=run.kwargs, wake_at=wake_at):
        return None
    existing.refresh_from_db()
    return existing


def cancel_keys(
    job: JobDefinition, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> list[tuple[str, str | None]]:
    """The (event, key) of each ``CancelOn`` of ``job`` for a run of these arguments
    (key None: any); raises as a limit's key does when it cannot be made of them."""
    return [
        (
            item.event,
            None
            if item.match is None
            else Limit("cancel_on", 1, item.match).key_of(job.name, job.fn, args, kwargs),
        )
        for item in job.cancel_on
    ]


def add_cancel_keys(
    run: JobRun, job: JobDefinition, args: Sequence[Any], kwargs: Mapping[str, Any], using: str
) -> None:
    """Record which events cancel this new run (``CancelOn``)."""
    rows = [
        CancelKey(run=run, event=event, key=key) for event, key in cancel_keys(job, args, kwargs)
    ]
    if rows:
        CancelKey.objects.using(using).bulk_create(rows)
