"""Execute one claimed run up to its next stop and record the outcome.

The worker claims runs and calls ``execute``; everything about one run (the
engine, the ORM store, the retry policy, the state change) happens here. Every
write is fenced by the lease ``owner`` when one is given.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from asgiref.sync import async_to_sync, sync_to_async
from django.db import DataError, transaction

from .. import conf, signals
from ..db import flow
from ..db.postgres import OUTCOME_COLUMNS
from ..db.store import OrmStepStore
from ..engine import otel
from ..engine.async_steps import AsyncSteps, IoRunner
from ..engine.attempt import (
    AsyncJobContext,
    Failed,
    JobContext,
    Outcome,
    Succeeded,
    Suspended,
    arun_attempt,
    run_attempt,
    run_logger,
)
from ..engine.clock import Clock, current
from ..engine.records import RecordedStep
from ..engine.retry import backoff_delay
from ..engine.serialization import ErrorInfo, ascii_text
from ..engine.steps import StepEngine, StepLimits
from ..engine.sync_steps import STEP_LOST, Steps
from ..engine.timeouts import TimeGuard
from ..engine.vocabulary import StepKind
from ..events import EventLog, recheck_after_park, wake_parent
from ..exceptions import AttemptsExhausted, RunCancelled, StepOutputInvalid, UnknownJob
from ..failure_handlers import handler_for, start_handler
from ..invocations import OrmChildBatches, OrmChildRuns, last_sibling
from ..models import JobRun, RunStatus, StepRecord, StepStatus
from ..registry import JobDefinition, get_job, max_attempts

log = logging.getLogger("django_durable_jobs.worker")
T = TypeVar("T")


@dataclass(frozen=True)
class Executed:
    """What happened to a run: the outcome and whether it was recorded."""

    outcome: Outcome
    status: str
    recorded: bool


@dataclass(frozen=True)
class Pending:
    """An outcome that is computed but not yet written to the run."""

    run: JobRun
    outcome: Outcome
    changes: dict[str, Any]
    now: datetime
    #: The step a suspended run parked in (re-checked once the run is parked).
    parked: RecordedStep | None = None

    #: True once reduced to its always-storable form (``shorten``).
    short: bool = False

    @property
    def fused(self) -> bool:
        """Whether the outcome fits the PostgreSQL statement that also claims: not one
        that frees a concurrency slot or starts an ``on_failure`` handler."""
        return set(self.changes) <= _FUSED and not writes_alone(self)

    def outcome_values(self) -> dict[str, Any]:
        """Every column an outcome writes: the changes, the rest as claimed."""
        return {name: self.changes.get(name, getattr(self.run, name)) for name in OUTCOME_COLUMNS}


_FUSED = {*OUTCOME_COLUMNS, "lease_owner", "lease_expires_at"}
#: What a database raises for a value it can never store (a NUL on PostgreSQL, a text
#: over its column, a lone surrogate the driver cannot encode): retrying cannot help.
UNSTORABLE = (DataError, ValueError)
#: The longest error text the short form of an outcome keeps.
SHORT_ERROR = 2000


def execute(
    run: JobRun,
    *,
    clock: Clock | None = None,
    owner: str | None = None,
    guard: TimeGuard | None = None,
    rng: random.Random | None = None,
    interrupt: Callable[[], BaseException | None] | None = None,
) -> Executed:
    """Run ``run`` (already claimed by ``owner``) to its next stop and record it.

    ``interrupt`` is asked before each step (see ``Steps``); the worker uses it to
    stop a run that was cancelled while it executed.
    """
    pending = run_to_stop(run, clock=clock, owner=owner, guard=guard, rng=rng, interrupt=interrupt)
    return settle(pending, write(pending, owner), owner)


def run_to_stop(
    run: JobRun,
    *,
    clock: Clock | None = None,
    owner: str | None = None,
    guard: TimeGuard | None = None,
    rng: random.Random | None = None,
    interrupt: Callable[[], BaseException | None] | None = None,
) -> Pending:
    """Run ``run`` to its next stop; the outcome is returned, not yet written.

    An ``async def`` job is awaited on an event loop of its own (``arun_to_stop``), its
    database work brought back to this thread as Django's ``sync_to_async`` does.
    """
    clock = clock or current()
    definition, refused = _definition(run, clock, rng)
    if refused is not None:
        return refused
    assert definition is not None
    if definition.is_async:
        return async_to_sync(arun_to_stop)(
            run, clock=clock, owner=owner, rng=rng, interrupt=interrupt
        )
    guard = guard or TimeGuard()
    steps = Steps(guard=guard, **_engine(run, definition, clock, owner, interrupt))
    ctx = JobContext(
        step=steps,
        run_id=str(run.id),
        attempt=run.attempt,
        job_name=run.job_name,
        logger=run_logger(str(run.id), run.job_name, run.attempt),
        scheduled_at=run.scheduled_at,
    )
    signals.run_started.send(sender=JobRun, run=run)
    with otel.run_span(run.job_name, str(run.id), run.attempt, run.trace_context) as done:
        outcome = run_attempt(
            definition.fn,
            ctx,
            run.args,
            run.kwargs,
            timeout=definition.timeout or conf.duration("TIMEOUT"),
            guard=guard,
            max_result_bytes=int(conf.get("MAX_OUTPUT_BYTES")),
        )
        done(*otel_outcome(outcome))
    return _stopped_at(run, definition, outcome, clock, rng, steps)


async def arun_to_stop(
    run: JobRun,
    *,
    clock: Clock | None = None,
    owner: str | None = None,
    rng: random.Random | None = None,
    interrupt: Callable[[], BaseException | None] | None = None,
    io: IoRunner | None = None,
) -> Pending:
    """``run_to_stop`` for an ``async def`` job, awaited. ``io`` runs the database work
    off the loop (default: Django's ``sync_to_async``, as the async ORM does)."""
    clock = clock or current()
    io = io or django_io
    # Off the loop: a run whose attempts are used up reads its steps to say where.
    found: tuple[JobDefinition | None, Pending | None] = await io(
        lambda: _definition(run, clock, rng)
    )
    definition, refused = found
    if refused is not None:
        return refused
    assert definition is not None
    steps = AsyncSteps(io=io, **_engine(run, definition, clock, owner, interrupt))
    ctx = AsyncJobContext(
        step=steps,
        run_id=str(run.id),
        attempt=run.attempt,
        job_name=run.job_name,
        logger=run_logger(str(run.id), run.job_name, run.attempt),
        scheduled_at=run.scheduled_at,
    )
    await io(lambda: signals.run_started.send(sender=JobRun, run=run))
    with otel.run_span(run.job_name, str(run.id), run.attempt, run.trace_context) as done:
        outcome = await arun_attempt(
            definition.fn,
            ctx,
            run.args,
            run.kwargs,
            timeout=definition.timeout or conf.duration("TIMEOUT"),
            max_result_bytes=int(conf.get("MAX_OUTPUT_BYTES")),
        )
        done(*otel_outcome(outcome))
    return _stopped_at(run, definition, outcome, clock, rng, steps)


async def django_io(work: Callable[[], T]) -> T:
    """Blocking database work from async code, on Django's thread-sensitive executor."""
    return await sync_to_async(work, thread_sensitive=True)()


def _definition(
    run: JobRun, clock: Clock, rng: random.Random | None
) -> tuple[JobDefinition | None, Pending | None]:
    """The run's job, or the outcome of a run that cannot start (unknown job, attempts
    used up)."""
    try:
        definition = get_job(run.job_name)
    except UnknownJob as exc:
        exc.args = (f"{exc} (run {run.id}; was the job renamed or its module not deployed?)",)
        outcome: Outcome = Failed(ErrorInfo.of(exc), retryable=False)
        return None, _pending(run, None, outcome, clock.now(), rng)
    if run.attempt > max_attempts(definition):
        # Only reachable when workers died mid-run (requeue_expired): stop the crash loop.
        return None, _exhausted(run, definition, clock.now(), rng)
    return definition, None


def _engine(
    run: JobRun,
    definition: JobDefinition,
    clock: Clock,
    owner: str | None,
    interrupt: Callable[[], BaseException | None] | None,
) -> dict[str, Any]:
    """What the step engine of one attempt is built from, sync or async alike."""
    using = conf.database()
    return {
        "run_id": str(run.id),
        "job_name": run.job_name,
        "store": OrmStepStore(using=using, owner=owner),
        "events": EventLog(using=using),
        "children": OrmChildRuns(using=using),
        "batches": OrmChildBatches(using=using),
        "clock": clock,
        "limits": StepLimits(
            step_timeout=definition.step_timeout or conf.duration("STEP_TIMEOUT"),
            event_poll=conf.required_duration("EVENT_POLL"),
            max_output_bytes=int(conf.get("MAX_OUTPUT_BYTES")),
        ),
        "records": [] if run.claimed_fresh else None,
        "interrupt": interrupt,
        # A retry may follow a worker that died inside a step: if this one dies too, the
        # step is named. The first attempt keeps one write per step.
        "mark_starts": run.attempt > 1,
    }


def _stopped_at(
    run: JobRun,
    definition: JobDefinition,
    outcome: Outcome,
    clock: Clock,
    rng: random.Random | None,
    steps: StepEngine,
) -> Pending:
    pending = _pending(run, definition, outcome, clock.now(), rng)
    if isinstance(outcome, Suspended):
        parked = next((r for r in steps.records() if r.name == outcome.step), None)
        pending = replace(pending, parked=parked)
    return pending


def _exhausted(
    run: JobRun, definition: JobDefinition, now: datetime, rng: random.Random | None
) -> Pending:
    """The claim counted one attempt too many: fail, naming where the workers died."""
    most = max_attempts(definition)
    exhausted = AttemptsExhausted(
        f"job {run.job_name!r} run {run.id}: all {most} attempts are used up: its workers "
        f"stopped renewing the lease (killed, crashed or cut off) {_where_lost(run)}"
    )
    pending = _pending(run, definition, Failed(ErrorInfo.of(exhausted), False), now, rng)
    # The attempt this claim counted never started.
    return replace(pending, changes={**pending.changes, "attempt": most})


def _where_lost(run: JobRun) -> str:
    steps = StepRecord.objects.using(conf.database()).filter(run=run).order_by("-id")
    lost = steps.filter(error_type=STEP_LOST).values_list("name", flat=True).first()
    if lost is not None:
        return f"while it executed step {lost!r}"
    done = steps.filter(status=StepStatus.COMPLETED).values_list("name", flat=True).first()
    return f"after step {done!r}" if done is not None else "before its first step completed"


def otel_outcome(outcome: Outcome) -> tuple[str, str]:
    """The outcome's name and error code, for the run's span."""
    if isinstance(outcome, Failed):
        return "failed", outcome.error.code
    return ("succeeded" if isinstance(outcome, Succeeded) else "suspended"), ""


def _pending(
    run: JobRun,
    definition: JobDefinition | None,
    outcome: Outcome,
    now: datetime,
    rng: random.Random | None,
) -> Pending:
    changes: dict[str, Any] = {"lease_owner": "", "lease_expires_at": None}
    if isinstance(outcome, Succeeded):
        changes.update(
            status=RunStatus.SUCCEEDED,
            result=outcome.result,
            finished_at=now,
            wake_at=None,
            error_code="",
            error="",
            error_type="",
            traceback="",
        )
    elif isinstance(outcome, Suspended):
        status = RunStatus.SLEEPING if outcome.kind is StepKind.SLEEP else RunStatus.WAITING
        changes.update(status=status, wake_at=outcome.wake_at)
    else:
        changes.update(_failure(run, definition, outcome, now, rng))
    return Pending(run, outcome, changes, now)


def settle(pending: Pending, recorded: bool, owner: str | None) -> Executed:
    """After the outcome was written (or refused): what follows from it."""
    run, changes = pending.run, pending.changes
    if recorded:
        for name, value in changes.items():
            setattr(run, name, value)
        if run.parent_id is not None and run.is_finished and last_sibling(run):
            wake_parent(run.parent_id, pending.now)
        if pending.parked is not None:
            recheck_after_park(run.pk, pending.parked, pending.now)
        _announce(run, pending.outcome, changes)
    elif owner is None or not _settle_cancelled(run, owner, pending.now):
        log.warning("run %s: lease lost to another worker; outcome not recorded", run.id)
    return Executed(pending.outcome, str(changes["status"]), recorded)


def _failure(
    run: JobRun,
    definition: JobDefinition | None,
    outcome: Failed,
    now: datetime,
    rng: random.Random | None,
) -> dict[str, Any]:
    error = outcome.error
    changes: dict[str, Any] = {
        "error_code": error.code,
        "error": error.message,
        "error_type": error.type,
        "traceback": error.traceback,
    }
    if outcome.retryable and definition is not None and run.attempt < max_attempts(definition):
        delay = outcome.retry_after
        if delay is None:
            backoff = definition.backoff if definition.backoff is not None else conf.get("BACKOFF")
            delay = backoff_delay(
                backoff, run.attempt, cap=conf.required_duration("MAX_BACKOFF"), rng=rng
            )
        changes.update(status=RunStatus.QUEUED, wake_at=now + delay)
    else:
        changes.update(status=RunStatus.FAILED, finished_at=now, wake_at=None)
    return changes


def write(pending: Pending, owner: str | None) -> bool:
    """Write the outcome; with ``owner``, only while that worker holds the lease.

    A final failure of a job with ``on_failure`` enqueues the handler in the same
    transaction (see ``failure_handlers``); a run under a concurrency limit frees
    its slot under its key's lock (see ``flow``).
    """
    using = conf.database()
    run = pending.run
    rows = JobRun.objects.using(using).filter(pk=run.pk)
    if owner is not None:
        rows = rows.filter(lease_owner=owner, status=RunStatus.RUNNING)
    if not writes_alone(pending):
        return bool(rows.update(**pending.changes))
    with transaction.atomic(using=using):
        if run.concurrency_limit is not None:
            flow.lock(using, run.job_name, "concurrency", run.concurrency_key or "")
        recorded = bool(rows.update(**pending.changes))
        if recorded:
            start_handler(run, pending.changes, pending.now)
            if run.concurrency_limit is not None:
                flow.free_slot(using, run, pending.now)
    return recorded


def shorten(pending: Pending, problem: BaseException) -> Pending:
    """``pending`` as the database always stores it: ASCII error texts of bounded size,
    no traceback, no result. A success whose result was refused fails, not retried
    (``X_STEP_OUTPUT_INVALID``): nothing is silently lost."""
    changes = dict(pending.changes)
    why = f"the database refused the outcome: {type(problem).__name__}: {problem}"
    if changes.get("status") == RunStatus.SUCCEEDED:
        changes.update(
            status=RunStatus.FAILED,
            error_code=StepOutputInvalid.code,
            error=f"the return value cannot be stored ({why})",
            error_type=f"{StepOutputInvalid.__module__}.{StepOutputInvalid.__qualname__}",
        )
    elif "error" in changes:
        changes["error"] = f"{changes['error']} [recorded in short: {why}]"
    for name, limit in (("error", SHORT_ERROR), ("error_type", 200), ("error_code", 40)):
        if name in changes:
            changes[name] = ascii_text(str(changes[name]), limit)
    if "traceback" in changes:
        changes["traceback"] = ""
    if "result" in changes:
        changes["result"] = None
    return replace(pending, changes=changes, short=True)


def writes_alone(pending: Pending) -> bool:
    """Whether this outcome needs its own transaction (not the claim's statement):
    it enqueues an ``on_failure`` handler, or it frees a concurrency slot."""
    if pending.run.concurrency_limit is not None:
        return True
    return pending.changes.get("status") == RunStatus.FAILED and (
        handler_for(pending.run) is not None
    )


def _settle_cancelled(run: JobRun, owner: str, now: datetime) -> bool:
    """A run cancelled while this worker executed it: let go of it, keep it cancelled."""
    using = conf.database()
    with transaction.atomic(using=using):
        if run.concurrency_limit is not None:
            flow.lock(using, run.job_name, "concurrency", run.concurrency_key or "")
        settled = (
            JobRun.objects.using(using)
            .filter(pk=run.pk, lease_owner=owner, status=RunStatus.CANCELLED)
            .update(
                lease_owner="",
                lease_expires_at=None,
                error_code=RunCancelled.code,
                error="cancelled while running",
            )
        )
        if settled and run.concurrency_limit is not None:
            flow.free_slot(using, run, now)
    if settled:
        log.info("run cancelled: run=%s stopped by cancellation", run.id)
    return bool(settled)


def _announce(run: JobRun, outcome: Outcome, changes: dict[str, Any]) -> None:
    if isinstance(outcome, Succeeded):
        signals.run_succeeded.send(sender=JobRun, run=run)
    elif isinstance(outcome, Suspended):
        signals.run_suspended.send(
            sender=JobRun,
            run=run,
            step=outcome.step,
            wake_at=outcome.wake_at,
            kind=outcome.kind,
            # Until the next release, for receivers written against 0.1 (README "Upgrading").
            resume_at=outcome.wake_at,
            reason=signals.SUSPENDED_REASON[outcome.kind],
        )
    else:
        signals.run_failed.send(
            sender=JobRun,
            run=run,
            error=outcome.error,
            will_retry=changes["status"] == RunStatus.QUEUED,
        )
