"""Starting runs: ``enqueue`` by name, ``enqueue_job`` and ``enqueue_many_job`` (what
``Job.enqueue`` and ``Job.enqueue_many`` call), each argument checked once here.

Apart from the operator's verbs (``runs.py``) because those, when a run finally fails
or is cancelled, start its ``on_failure`` handler, which is enqueueing again.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, transaction
from django.utils import timezone

from .. import conf, signals
from ..db import dialect, doorbell
from ..db.flow import gates, holds
from ..db.flow import keys as flow_keys
from ..db.migrated import needs_tables
from ..definitions.registry import JobDefinition, JobOptions, check_arguments, get_job, latest
from ..engine import clock, otel
from ..engine.durations import Duration, after, parse_duration
from ..engine.serialization import Arguments, encode_arguments, unstorable
from ..exceptions import (
    InvalidDuration,
    InvalidName,
)
from ..models import JobRun


def enqueue(job_name: str, /, *args: Any, **kwargs: Any) -> JobRun:
    """Start a run of the job registered as ``job_name``.

    >>> run = enqueue("onboarding", user_id=42)  # doctest: +SKIP
    """
    return enqueue_job(get_job(job_name), args, kwargs, JobOptions())


@needs_tables
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
    constraint decides). The run starts on the job's highest version registered.
    """
    job = latest(job)
    checked = _checked_arguments(job, args, kwargs)
    clean_args, clean_kwargs = checked.args, checked.kwargs
    now = now or clock.current().now()
    run = JobRun.new(
        job_name=job.name,
        job_version=job.version,
        queue=options.queue or job.queue,
        priority=job.priority if options.priority is None else options.priority,
        args=clean_args,
        kwargs=clean_kwargs,
        idempotency_key=_key(options.idempotency_key),
        created_at=now,
        wake_at=_wake_at(options.run_after, now),
        parent_id=parent,
        trace_context=otel.carrier(),
    )
    flow_keys.stamp(run, job, clean_args, clean_kwargs)
    db = conf.database()
    outcome = "new"
    if gates.gated(job):
        run, outcome = gates.save_gated(run, job, now, db)
    else:
        held = holds.hold_saturated(db, [run], now)
        if run.idempotency_key is None:
            dialect.of(db).insert_run(run, checked)
        else:
            JobRun.objects.using(db).bulk_create([run], ignore_conflicts=True)
            key, new = run.idempotency_key, run.pk
            run = JobRun.objects.using(db).get(job_name=job.name, idempotency_key=key)
            if run.pk != new:  # the key's run: no second run_enqueued, no second cancel keys
                outcome = "existing"
        holds.let_go_after_commit(db, job.name, held, run.concurrency_limit or 0)
    if outcome == "new" and job.cancel_on:
        gates.add_cancel_keys(run, job, clean_args, clean_kwargs, db)
    if outcome != "existing":
        doorbell.ring(db)  # MariaDB/MySQL: idle workers hear of it after the commit
    if outcome == "skipped":
        signals.run_skipped.send(sender=JobRun, run=run)
    elif outcome == "new":
        signals.run_enqueued.send(sender=JobRun, run=run)
    return run


def enqueue_on_commit(job_name: str, /, *args: Any, **kwargs: Any) -> None:
    """Start a run of ``job_name`` once the caller's transaction on ``default`` commits.

    >>> enqueue_on_commit("onboarding", user_id=42)  # doctest: +SKIP
    """
    enqueue_job_on_commit(get_job(job_name), args, kwargs, JobOptions())


def enqueue_job_on_commit(
    job: JobDefinition, args: Sequence[Any], kwargs: Mapping[str, Any], options: JobOptions
) -> None:
    """``enqueue_job`` when the transaction on ``options.on_commit_of`` (``default``)
    commits, at once outside one; nothing if it rolls back.

    For jobs on a database of their own: there an enqueue is not in the caller's
    transaction, and a run written before the caller's data commits could start
    before that data is visible, or outlive it when the caller rolls back. The
    arguments are checked now, so that a wrong call raises where it is made. A
    process that dies between the commit and the enqueue loses the run: an
    ``idempotency_key`` lets the caller enqueue again without a duplicate.
    """
    check_call(job, args, kwargs)
    args, kwargs = tuple(args), dict(kwargs)
    transaction.on_commit(
        lambda: enqueue_job(job, args, kwargs, options),
        using=options.on_commit_of or DEFAULT_DB_ALIAS,
    )


def check_call(job: JobDefinition, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Raise what ``enqueue_job`` raises for these arguments before it writes anything:
    they must be storable, fit the job's signature, and make every key of its limits
    (a key function may raise anything). Writes nothing; the schedules admin refuses
    a schedule its job cannot start with this.

    >>> check_call(get_job("shop.sync"), (), {"order_id": 7})  # doctest: +SKIP
    """
    checked = _checked_arguments(job, args, kwargs)
    flow_keys.stamp(JobRun.new(job_name=job.name), job, checked.args, checked.kwargs)
    gates.cancel_keys(job, checked.args, checked.kwargs)


Call = Mapping[str, Any] | tuple[Any, ...]


@needs_tables
def enqueue_many_job(
    job: JobDefinition, calls: Iterable[Call], options: JobOptions, *, batch_size: int = 1000
) -> list[JobRun]:
    """Write many queued runs of ``job`` in few statements (``INSERT`` in batches), in
    one transaction (a savepoint in the caller's): every run, or none.

    Each call is a ``dict`` of keyword arguments or a ``tuple`` of positional ones.
    A call that is refused (the errors of ``enqueue``) writes no run. Idempotency keys
    are not supported here: use ``enqueue`` for those.
    """
    job = latest(job)
    if options.idempotency_key is not None:
        raise ValueError("enqueue_many does not take an idempotency_key; use enqueue()")
    if gates.gated(job) or job.cancel_on:
        raise ValueError(
            f"job {job.name!r}: enqueue_many does not apply rate_limit, debounce or "
            "cancel_on; use enqueue() for this job"
        )
    now, context = clock.current().now(), otel.carrier()
    wake_at = _wake_at(options.run_after, now)
    limit = int(conf.get("MAX_PAYLOAD_BYTES"))
    calls = list(calls)
    queue = options.queue or job.queue
    priority = job.priority if options.priority is None else options.priority

    new_run = JobRun.maker(
        job_name=job.name,
        job_version=job.version,
        queue=queue,
        priority=priority,
        created_at=now,
        trace_context=context,
    )

    def new_runs(start: int, end: int) -> tuple[list[JobRun], list[Arguments]]:
        """The runs of ``calls[start:end]``, checked, and their arguments."""
        checked = [_checked_call(job, index, calls[index], limit) for index in range(start, end)]
        runs = []
        # A microsecond apart and none later than asked, so workers take them in order.
        for index, run_id, arguments in zip(
            range(start, end), new_ids(end - start), checked, strict=True
        ):
            run = new_run(
                id=run_id,
                args=arguments.args,
                kwargs=arguments.kwargs,
                wake_at=wake_at - timedelta(microseconds=len(calls) - index),
            )
            flow_keys.stamp(run, job, arguments.args, arguments.kwargs)
            runs.append(run)
        return runs, checked

    using = conf.database()
    created: list[JobRun] = []
    if calls and not job.limits:
        # The dialect's insert writes the columns every run has (PostgreSQL: one JSON
        # array a batch, sent while the next batch is checked and built).
        writer = dialect.of(using)
        with transaction.atomic(using=using), writer.pipeline():
            for start in range(0, len(calls), batch_size):
                runs, checked = new_runs(start, min(start + batch_size, len(calls)))
                writer.insert_runs(runs, batch_size, checked)
                created.extend(runs)
    else:  # limits: bulk_create, and the runs a saturated key holds
        runs, _ = new_runs(0, len(calls))
        held = holds.hold_saturated(using, runs, now)
        created = JobRun.objects.using(using).bulk_create(runs, batch_size=batch_size)
        limit = job.concurrency.limit if job.concurrency is not None else 0
        holds.let_go_after_commit(using, job.name, held, limit)
    if created:
        doorbell.ring(using)  # MariaDB/MySQL: idle workers hear of them after the commit
    for run in created:
        signals.run_enqueued.send(sender=JobRun, run=run)
    return created


def _checked_call(job: JobDefinition, index: int, call: Call, limit: int) -> Arguments:
    if isinstance(call, tuple):
        return _checked_arguments(job, call, {}, where=f"call {index}: ", limit=limit)
    if isinstance(call, Mapping):
        return _checked_arguments(job, (), call, where=f"call {index}: ", limit=limit)
    raise TypeError(
        f"job {job.name!r}: enqueue_many call {index} must be a dict of keyword "
        f"arguments or a tuple of positional arguments, got {type(call).__name__}"
    )


def new_ids(count: int) -> list[uuid.UUID]:
    """``count`` ids as ``uuid4()`` makes them, from one read of the system's random
    source instead of one each (a system call a run, a tenth of ``enqueue_many``), each
    set as ``UUID.__init__`` sets its value once checked (half its cost: the version
    and variant bits are set here, on a value that cannot be out of range)."""
    raw = os.urandom(16 * count)
    ids = []
    for start in range(0, 16 * count, 16):
        value = (int.from_bytes(raw[start : start + 16]) & _V4_CLEAR) | _V4_SET
        new = _uuid(uuid.UUID)
        _set(new, "int", value)
        _set(new, "is_safe", _UNKNOWN)
        ids.append(new)
    return ids


#: The bits ``UUID(..., version=4)`` clears and sets: the variant (RFC 4122) and the
#: version (4).
_V4_CLEAR = ~((0xC000 << 48) | (0xF000 << 64))
_V4_SET = (0x8000 << 48) | (4 << 76)
_uuid, _set, _UNKNOWN = object.__new__, object.__setattr__, uuid.SafeUUID.unknown


def _checked_arguments(
    job: JobDefinition,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    where: str = "",
    limit: int | None = None,
) -> Arguments:
    if limit is None:
        limit = int(conf.get("MAX_PAYLOAD_BYTES"))
    checked = encode_arguments(f"job {job.name!r}: {where}", args, kwargs, limit=limit)
    check_arguments(job, args, kwargs, where)
    return checked


def _key(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 255:
        raise ValueError(f"idempotency_key must be a non-empty string of <= 255 chars: {value!r}")
    if (why := unstorable(value)) is not None:
        raise InvalidName(f"idempotency_key {value!r} cannot be stored: {why}")
    return value


def _wake_at(run_after: Duration | datetime | None, now: datetime) -> datetime:
    if run_after is None:
        return now
    if isinstance(run_after, datetime):
        if timezone.is_aware(run_after):
            return run_after
        if settings.USE_TZ:
            raise ValueError(f"run_after must be an aware datetime, got naive {run_after!r}")
        return timezone.make_aware(run_after)  # USE_TZ=False: local time, as Django means it
    try:
        return after(now, parse_duration(run_after), run_after)
    except InvalidDuration as exc:
        raise InvalidDuration(f"run_after: {exc}") from None
