"""The verbs on runs: enqueue (and, later, cancel, retry, wake, replay)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from . import clock, conf, signals
from .models import JobRun, RunStatus
from .registry import JobDefinition, JobOptions, get_job
from .serialization import check_payload
from .wakeup import notify


def enqueue(job_name: str, /, *args: Any, **kwargs: Any) -> JobRun:
    """Start a run of the job registered as ``job_name``.

    >>> run = enqueue("onboarding", user_id=42)  # doctest: +SKIP
    """
    return enqueue_job(get_job(job_name), args, kwargs, JobOptions())


def enqueue_job(
    job: JobDefinition,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    options: JobOptions,
    *,
    now: datetime | None = None,
) -> JobRun:
    """Write a queued run in the caller's transaction on the jobs database.

    With an ``idempotency_key`` already used for this job, the existing run is
    returned and nothing is written (also under concurrent enqueues: the unique
    constraint decides).
    """
    clean_args, clean_kwargs = _checked_arguments(job.name, args, kwargs)
    now = now or clock.current().now()
    run = JobRun(
        job_name=job.name,
        queue=options.queue or job.queue,
        priority=job.priority if options.priority is None else options.priority,
        args=clean_args,
        kwargs=clean_kwargs,
        idempotency_key=_key(options.idempotency_key),
        created_at=now,
        wake_at=_wake_at(options.run_after, now),
    )
    db = conf.database()
    if run.idempotency_key is None:
        run.save(using=db, force_insert=True)
    else:
        JobRun.objects.using(db).bulk_create([run], ignore_conflicts=True)
        run = JobRun.objects.using(db).get(job_name=job.name, idempotency_key=run.idempotency_key)
    notify(run.queue)
    signals.run_enqueued.send(sender=JobRun, run=run)
    return run


def _checked_arguments(
    job_name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    limit = int(conf.get("MAX_PAYLOAD_BYTES"))
    clean_args = [
        check_payload(value, what=f"job {job_name!r}: argument {index}", limit=limit)
        for index, value in enumerate(args)
    ]
    clean_kwargs = {
        name: check_payload(value, what=f"job {job_name!r}: argument {name!r}", limit=limit)
        for name, value in kwargs.items()
    }
    check_payload([clean_args, clean_kwargs], what=f"job {job_name!r}: the arguments", limit=limit)
    return clean_args, clean_kwargs


def _key(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 255:
        raise ValueError(f"idempotency_key must be a non-empty string of <= 255 chars: {value!r}")
    return value


def _wake_at(run_after: timedelta | datetime | None, now: datetime) -> datetime:
    if run_after is None:
        return now
    if isinstance(run_after, timedelta):
        return now + run_after
    if timezone.is_naive(run_after):
        raise ValueError(f"run_after must be an aware datetime, got naive {run_after!r}")
    return run_after


__all__ = ["RunStatus", "enqueue", "enqueue_job"]
