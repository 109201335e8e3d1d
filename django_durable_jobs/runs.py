"""The verbs on runs: enqueue, enqueue_many, and the operator's cancel, retry, wake,
replay_from and purge (the admin and ``manage.py jobs`` call these)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from . import children, conf, gates, signals
from .db import flow
from .db import postgres as claims_pg
from .db.migrated import needs_tables
from .db.run_ids import resolve as _pk
from .engine import clock, otel
from .engine.durations import Duration, after, before, parse_duration
from .engine.serialization import MAX_DEPTH, NotStorable, check_payload, roundtrip, unstorable
from .exceptions import (
    InvalidDuration,
    InvalidName,
    InvalidPayload,
    PayloadTooLarge,
    RunCancelled,
    RunNotFound,
    RunStateError,
    StepNotFound,
)
from .failure_handlers import start_handler
from .models import FINISHED, RUNNABLE, JobRun, JobRunQuerySet, RunStatus, StepRecord, StepStatus
from .registry import JobDefinition, JobOptions, check_arguments, get_job


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
    constraint decides).
    """
    clean_args, clean_kwargs = _checked_arguments(job, args, kwargs)
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
        trace_context=otel.carrier(),
    )
    flow.stamp(run, job, clean_args, clean_kwargs)
    gates.stamp(run, job, clean_args, clean_kwargs)
    db = conf.database()
    outcome = "new"
    if gates.gated(job):
        run, outcome = gates.save_gated(run, job, now, db)
    elif run.idempotency_key is None:
        run.save(using=db, force_insert=True)
    else:
        JobRun.objects.using(db).bulk_create([run], ignore_conflicts=True)
        run = JobRun.objects.using(db).get(job_name=job.name, idempotency_key=run.idempotency_key)
    if outcome == "new" and job.cancel_on:
        gates.add_cancel_keys(run, job, clean_args, clean_kwargs, db)
    if outcome == "skipped":
        signals.run_skipped.send(sender=JobRun, run=run)
    elif outcome == "new":
        signals.run_enqueued.send(sender=JobRun, run=run)
    return run


Call = Mapping[str, Any] | tuple[Any, ...]


@needs_tables
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
    if gates.gated(job) or job.cancel_on:
        raise ValueError(
            f"job {job.name!r}: enqueue_many does not apply rate_limit, debounce or "
            "cancel_on; use enqueue() for this job"
        )
    now, context = clock.current().now(), otel.carrier()
    wake_at = _wake_at(options.run_after, now)
    runs = []
    for index, call in enumerate(calls):
        if isinstance(call, tuple):
            args, kwargs = _checked_arguments(job, call, {}, where=f"call {index}: ")
        elif isinstance(call, Mapping):
            args, kwargs = _checked_arguments(job, (), call, where=f"call {index}: ")
        else:
            raise TypeError(
                f"job {job.name!r}: enqueue_many call {index} must be a dict of keyword "
                f"arguments or a tuple of positional arguments, got {type(call).__name__}"
            )
        run = JobRun(
            job_name=job.name,
            queue=options.queue or job.queue,
            priority=job.priority if options.priority is None else options.priority,
            args=args,
            kwargs=kwargs,
            created_at=now,
            wake_at=wake_at,
            trace_context=context,
        )
        flow.stamp(run, job, args, kwargs)
        runs.append(run)
    # A microsecond apart and none later than asked, so workers take them in order.
    for index, run in enumerate(runs):
        run.wake_at = wake_at - timedelta(microseconds=len(runs) - index)
    using = conf.database()
    # The unnest INSERT writes the columns every run has; limits need bulk_create.
    if runs and claims_pg.available(using) and not job.limits:
        claims_pg.insert_runs(using, runs, batch_size)
        created = runs
    else:
        created = JobRun.objects.using(using).bulk_create(runs, batch_size=batch_size)
    for run in created:
        signals.run_enqueued.send(sender=JobRun, run=run)
    return created


def _checked_arguments(
    job: JobDefinition, args: Sequence[Any], kwargs: Mapping[str, Any], *, where: str = ""
) -> tuple[list[Any], dict[str, Any]]:
    job_name = job.name
    limit = int(conf.get("MAX_PAYLOAD_BYTES"))
    try:  # the common case in one encoding; the slow path only names the culprit
        # Two levels of wrapping: each argument may still nest MAX_DEPTH levels.
        clean_args, clean_kwargs = roundtrip(
            [list(args), dict(kwargs)], limit=limit, max_depth=MAX_DEPTH + 2
        )
    except NotStorable:
        pass
    else:
        check_arguments(job, args, kwargs, where)
        return clean_args, clean_kwargs
    for index, value in enumerate(args):
        check_payload(value, what=f"job {job_name!r}: {where}argument {index}", limit=limit)
    for name, value in kwargs.items():
        check_payload(value, what=f"job {job_name!r}: {where}argument {name!r}", limit=limit)
    what = f"job {job_name!r}: {where}the arguments"
    try:
        roundtrip([list(args), dict(kwargs)], limit=limit, max_depth=MAX_DEPTH + 2)
    except NotStorable as exc:
        error = PayloadTooLarge if exc.too_large else InvalidPayload
        raise error(f"{what} cannot be stored as JSON: {exc}") from None
    raise AssertionError("unreachable: the arguments failed to encode once")  # pragma: no cover


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


# -- operating runs ---------------------------------------------------------------
#
# Each verb is one transaction on the jobs database that starts with a status-guarded
# UPDATE of the run: the guard decides, so a worker that claims or finishes the run at
# the same moment makes the verb refuse instead of both writing. (Writing first also
# makes SQLite take its write lock at once instead of failing to upgrade a read.)

RunId = uuid.UUID | str


_NO_ERROR: dict[str, Any] = {"error_code": "", "error": "", "error_type": "", "traceback": ""}
#: What ``retry`` and ``replay_from`` set: runnable now, attempts counted afresh.
_AGAIN: dict[str, Any] = {
    "status": RunStatus.QUEUED,
    "attempt": 0,
    "finished_at": None,
    "result": None,
    **_NO_ERROR,
}


def cancel(
    run_id: RunId, *, now: datetime | None = None, reason: str = "cancelled by an operator"
) -> JobRun:
    """Stop a run. A queued, sleeping or waiting run is cancelled at once; a running
    one is marked cancelled and stops at its next step (``X_RUN_CANCELLED``). Its
    unfinished child runs are cancelled with it, and a parent waiting for it in
    ``step.invoke`` is woken at once (and fails with ``X_CHILD_FAILED``).

    >>> cancel("3f2a9c1e-0000-4000-8000-000000000000")  # doctest: +SKIP
    """
    now = now or clock.current().now()
    pk, using = _pk(run_id), conf.database()
    stopped: dict[str, Any] = {
        "status": RunStatus.CANCELLED,
        "finished_at": now,
        "wake_at": None,
        **_NO_ERROR,
        "error_code": RunCancelled.code,
        "error": reason,
    }
    with transaction.atomic(using=using):
        rows = _rows(pk)
        changed = rows.filter(status__in=RUNNABLE).update(
            **stopped, lease_owner="", lease_expires_at=None
        )
        if not changed:
            # The lease stays: the worker's fenced writes are refused from now on, and
            # it lets go of the run at its next step (execution._settle_cancelled).
            changed = rows.filter(status=RunStatus.RUNNING).update(**stopped)
        run = _changed_or_refuse(
            pk, changed, "cancel", "only queued, sleeping, waiting or running runs can be cancelled"
        )
        # A waiting parent learns now, not at its next poll; children die with the run.
        children.wake_parent(run.parent_id, now)
        along = {**stopped, "error": f"cancelled along with run {pk}"}
        below = children.cancel_descendants(pk, along)
        start_handler(run, stopped, now)
        # SPEC §8: each run cancelled gets its handler, those cancelled along with it too.
        for child in JobRun.objects.using(using).filter(pk__in=below):
            start_handler(child, along, now)
    signals.run_cancelled.send(sender=JobRun, run=run)
    for child in JobRun.objects.using(using).filter(pk__in=below, status=RunStatus.CANCELLED):
        signals.run_cancelled.send(sender=JobRun, run=child)
    return run


def retry(run_id: RunId, *, now: datetime | None = None) -> JobRun:
    """Run a failed or cancelled run again from the top: its attempts start over, its
    completed steps replay from storage and the failed one runs again."""
    now = now or clock.current().now()
    pk, using = _pk(run_id), conf.database()
    with transaction.atomic(using=using):
        changed = (
            _rows(pk)
            .filter(status__in=(RunStatus.FAILED, RunStatus.CANCELLED), lease_owner="")
            .update(**_AGAIN, wake_at=now)
        )
        run = _changed_or_refuse(
            pk, changed, "retry", "only failed or cancelled runs can be retried"
        )
        children.release_failed(pk)
        children.fresh_windows(pk)
    return run


def wake(run_id: RunId, *, now: datetime | None = None) -> JobRun:
    """Make a sleeping, waiting or scheduled (queued for later) run runnable now.

    A sleeping run's sleep ends now. A waiting run looks for its event now, and waits
    again if none was published.
    """
    now = now or clock.current().now()
    pk, using = _pk(run_id), conf.database()
    with transaction.atomic(using=using):
        changed = (
            _rows(pk)
            .filter(status__in=(RunStatus.SLEEPING, RunStatus.WAITING, RunStatus.QUEUED))
            .update(wake_at=now)
        )
        run = _changed_or_refuse(
            pk, changed, "wake", "only sleeping, waiting or queued runs can be woken"
        )
        # Else the engine would see the step's old wake time and sleep again.
        StepRecord.objects.using(using).filter(run_id=pk, status=StepStatus.SLEEPING).update(
            wake_at=now
        )
    return run


def replay_from(run_id: RunId, step: str, *, now: datetime | None = None) -> JobRun:
    """Forget ``step`` and every step recorded after it, and run the run again: the
    steps before it replay from storage, ``step`` and the later ones execute anew."""
    now = now or clock.current().now()
    pk, using = _pk(run_id), conf.database()
    with transaction.atomic(using=using):
        changed = (
            _rows(pk)
            .exclude(status=RunStatus.RUNNING)
            .filter(lease_owner="")
            .update(**_AGAIN, wake_at=now)
        )
        run = _changed_or_refuse(pk, changed, "replay", "cancel it first, or let it stop")
        steps = StepRecord.objects.using(using).filter(run_id=pk)
        first = steps.filter(name=step).values_list("id", flat=True).first()
        if first is None:  # raising rolls the run back too
            known = list(steps.order_by("id").values_list("name", flat=True))
            raise StepNotFound(
                f"run {pk} has no step {step!r}; its steps are: "
                + (", ".join(map(repr, known)) or "(none)")
            )
        steps.filter(id__gte=first).delete()
        children.release_forgotten(pk)
        children.fresh_windows(pk)
    return run


def purge(
    older_than: Duration,
    statuses: Iterable[str] = FINISHED,
    *,
    now: datetime | None = None,
    batch_size: int = 1000,
) -> int:
    """Delete finished runs (with their steps) that finished more than ``older_than``
    ago, in batches of ``batch_size``; returns how many runs were deleted.

    >>> purge("30d")  # doctest: +SKIP
    """
    wanted = _finished_statuses(statuses)
    cutoff = before(now or clock.current().now(), parse_duration(older_than), older_than)
    using, total = conf.database(), 0
    runs = JobRun.objects.using(using)
    while True:
        with transaction.atomic(using=using):
            old = runs.filter(status__in=wanted, finished_at__lt=cutoff, lease_owner="")
            ids = list(old.order_by("finished_at").values_list("id", flat=True)[:batch_size])
            if not ids:
                return total
            _, deleted = old.filter(id__in=ids).delete()
        total += deleted.get(JobRun._meta.label, 0)


def get_run(run_id: RunId) -> JobRun:
    """The run with that id, or ``RunNotFound``."""
    pk = _pk(run_id)
    run = _rows(pk).first()
    if run is None:
        raise RunNotFound(f"no run has the id {pk}")
    return run


def recent_runs(
    *, statuses: Iterable[str] | None = None, job: str | None = None, limit: int = 20
) -> list[JobRun]:
    """The newest ``limit`` runs, optionally only those in ``statuses`` or of ``job``."""
    runs = JobRun.objects.using(conf.database()).order_by("-created_at")
    if statuses:
        runs = runs.filter(status__in=list(statuses))
    if job:
        runs = runs.filter(job_name=job)
    return list(runs.defer("args", "kwargs", "result", "traceback")[:limit])


def _rows(pk: uuid.UUID) -> JobRunQuerySet:
    return JobRun.objects.using(conf.database()).filter(pk=pk)


def _changed_or_refuse(pk: uuid.UUID, changed: int, verb: str, rule: str) -> JobRun:
    """The run after a guarded UPDATE, or why the UPDATE did not apply."""
    run = get_run(pk)
    if changed:
        return run
    if run.status == RunStatus.CANCELLED and run.lease_owner:
        raise RunStateError(
            f"cannot {verb} run {pk} yet: it was cancelled while running and its worker "
            f"({run.lease_owner}) has not stopped it; try again in a moment"
        )
    raise RunStateError(f"cannot {verb} run {pk}: it is {run.status}; {rule}")


def _finished_statuses(statuses: Iterable[str]) -> list[str]:
    wanted = [str(status) for status in statuses]
    unfinished = [status for status in wanted if status not in FINISHED]
    if unfinished or not wanted:
        raise ValueError(
            f"purge deletes finished runs only ({', '.join(FINISHED)}); got {unfinished or wanted}"
        )
    return wanted


__all__ = [
    "RunNotFound",
    "RunStateError",
    "RunStatus",
    "StepNotFound",
    "cancel",
    "enqueue",
    "enqueue_job",
    "get_run",
    "purge",
    "recent_runs",
    "replay_from",
    "retry",
    "wake",
]
