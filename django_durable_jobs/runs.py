"""The verbs on runs: enqueue, enqueue_many (and, later, cancel, retry, wake, replay)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from . import clock, conf, signals
from .models import JobRun, RunStatus
from .registry import JobDefinition, JobOptions, get_job
from .serialization import NotStorable, check_payload, roundtrip


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
    parent: str | None = None,
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
        parent_id=parent,
    )
    db = conf.database()
    if run.idempotency_key is None:
        run.save(using=db, force_insert=True)
    else:
        JobRun.objects.using(db).bulk_create([run], ignore_conflicts=True)
        run = JobRun.objects.using(db).get(job_name=job.name, idempotency_key=run.idempotency_key)
    signals.run_enqueued.send(sender=JobRun, run=run)
    return run


Call = Mapping[str, Any] | tuple[Any, ...]


def enqueue_many_job(
    job: JobDefinition, calls: Iterable[Call], options: JobOptions, *, batch_size: int = 1000
) -> list[JobRun]:
    """Write many queued runs of ``job`` in few statements (``INSERT`` in batches).

    Each call is a ``dict`` of keyword arguments or a ``tuple`` of positional ones.
    Every call is validated before anything is written. Idempotency keys are not
    supported here: use ``enqueue`` for those.
    """
    if options.idempotency_key is not None:
        raise ValueError("enqueue_many does not take an idempotency_key; use enqueue()")
    now = clock.current().now()
    runs = []
    for index, call in enumerate(calls):
        if isinstance(call, tuple):
            args, kwargs = _checked_arguments(job.name, call, {}, where=f"call {index}: ")
        elif isinstance(call, Mapping):
            args, kwargs = _checked_arguments(job.name, (), call, where=f"call {index}: ")
        else:
            raise TypeError(
                f"job {job.name!r}: enqueue_many call {index} must be a dict of keyword "
                f"arguments or a tuple of positional arguments, got {type(call).__name__}"
            )
        runs.append(
            JobRun(
                job_name=job.name,
                queue=options.queue or job.queue,
                priority=job.priority if options.priority is None else options.priority,
                args=args,
                kwargs=kwargs,
                created_at=now,
                wake_at=_wake_at(options.run_after, now),
            )
        )
    created = JobRun.objects.using(conf.database()).bulk_create(runs, batch_size=batch_size)
    for run in created:
        signals.run_enqueued.send(sender=JobRun, run=run)
    return created


def _checked_arguments(
    job_name: str, args: Sequence[Any], kwargs: Mapping[str, Any], *, where: str = ""
) -> tuple[list[Any], dict[str, Any]]:
    limit = int(conf.get("MAX_PAYLOAD_BYTES"))
    try:  # the common case in one encoding; the slow path only names the culprit
        clean_args, clean_kwargs = roundtrip([list(args), dict(kwargs)], limit=limit)
        return clean_args, clean_kwargs
    except NotStorable:
        pass
    for index, value in enumerate(args):
        check_payload(value, what=f"job {job_name!r}: {where}argument {index}", limit=limit)
    for name, value in kwargs.items():
        check_payload(value, what=f"job {job_name!r}: {where}argument {name!r}", limit=limit)
    check_payload(
        [list(args), dict(kwargs)], what=f"job {job_name!r}: {where}the arguments", limit=limit
    )
    raise AssertionError("unreachable: the arguments failed to encode once")  # pragma: no cover


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
