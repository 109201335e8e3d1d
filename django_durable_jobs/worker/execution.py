"""Execute one claimed run up to its next stop and record the outcome.

The worker claims runs and calls ``execute``; everything about running one run (the
engine, the ORM store) happens here, and its outcome is written by ``outcome``. Every
write is fenced by the lease ``owner`` when one is given.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from asgiref.sync import async_to_sync, sync_to_async

from .. import conf, signals
from ..db.mailbox import OrmMailbox
from ..db.progress import progress_writer
from ..db.store import OrmStepStore
from ..definitions.registry import (
    JobDefinition,
    all_jobs,
    attempts_of,
    get_job,
    max_attempts,
)
from ..engine import otel
from ..engine.async_steps import AsyncSteps, IoRunner, StepWriter
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
from ..engine.core import Interrupt, StepLimits
from ..engine.progress import Progress
from ..engine.serialization import ErrorInfo
from ..engine.steps import StepEngine
from ..engine.sync_steps import STEP_LOST, Steps
from ..engine.timeouts import TimeGuard
from ..exceptions import AttemptsExhausted, UnknownJob
from ..models import JobRun, RunStatus, StepRecord, StepStatus
from ..verbs.events import EventLog
from ..verbs.invocations import OrmChildBatches, OrmChildRuns
from . import recording
from .outbox import Outbox
from .outcome import Executed, Pending, pending_of
from .recording import settle

log = logging.getLogger("django_durable_jobs.worker")
T = TypeVar("T")


def execute(
    run: JobRun,
    *,
    clock: Clock | None = None,
    owner: str | None = None,
    guard: TimeGuard | None = None,
    rng: random.Random | None = None,
    interrupt: Interrupt | None = None,
) -> Executed:
    """Run ``run`` (already claimed by ``owner``) to its next stop and record it through
    the worker's own writer (``Outbox``: on PostgreSQL the claim's statement), so
    that tests and ``InlineJobs`` write outcomes the way production does. Without
    ``owner`` the outcome is written unfenced.

    ``interrupt`` is asked before each step (see ``Steps``); the worker uses it to
    stop a run that was cancelled while it executed.
    """
    clock = clock or current()
    pending = run_to_stop(run, clock=clock, owner=owner, guard=guard, rng=rng, interrupt=interrupt)
    if owner is None:
        return settle(pending, recording.write(pending, None), None)
    outbox = Outbox(conf.required_duration("LEASE"), None, clock)
    outbox.owner = owner
    executed = outbox.write(pending, clock.now())
    if executed is None:  # refused even in short: the lease decides
        return Executed(pending.outcome, str(pending.changes["status"]), False)
    return executed


def run_to_stop(
    run: JobRun,
    *,
    clock: Clock | None = None,
    owner: str | None = None,
    guard: TimeGuard | None = None,
    rng: random.Random | None = None,
    interrupt: Interrupt | None = None,
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
    run_id = str(run.id)  # once: a UUID's text is made in Python
    engine = _engine(run, run_id, definition, clock, owner, interrupt, inline=True)
    steps = Steps(guard=guard, **engine)
    ctx = JobContext(
        step=steps,
        run_id=run_id,
        attempt=run.attempt,
        job_name=run.job_name,
        logger=run_logger(run_id, run.job_name, run.attempt),
        scheduled_at=run.scheduled_at,
        progress=engine["progress"],
    )
    signals.announce(signals.run_started, sender=JobRun, run=run)
    with otel.run_span(run.job_name, run_id, run.attempt, run.trace_context) as done:
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
    ctx.progress.flush_at_stop()
    return _stopped_at(run, definition, outcome, clock, rng, steps)


async def arun_to_stop(
    run: JobRun,
    *,
    clock: Clock | None = None,
    owner: str | None = None,
    rng: random.Random | None = None,
    interrupt: Interrupt | None = None,
    io: IoRunner | None = None,
    put: StepWriter | None = None,
    call: IoRunner | None = None,
) -> Pending:
    """``run_to_stop`` for an ``async def`` job, awaited. ``io`` runs the database work
    off the loop (default: Django's ``sync_to_async``, as the async ORM does); ``put``
    writes its step records (default: one by one through ``io``)."""
    clock = clock or current()
    io = io or django_io
    # Off the loop only for a run whose attempts are used up: it reads its steps to
    # say where (a hop to a thread per run costs more than a no-op run).
    found: tuple[JobDefinition | None, Pending | None]
    if _exhausted_attempts(run):
        found = await io(lambda: _definition(run, clock, rng))
    else:
        found = _definition(run, clock, rng)
    definition, refused = found
    if refused is not None:
        return refused
    assert definition is not None
    run_id = str(run.id)
    engine = _engine(run, run_id, definition, clock, owner, interrupt, inline=False)
    if engine["records"] is None:  # read first: ``ctx.patched`` answers without awaiting
        store = engine["store"]
        engine["records"] = await io(lambda: store.list(run_id))
    steps = AsyncSteps(io=io, put=put, call=call, **engine)
    ctx = AsyncJobContext(
        step=steps,
        run_id=run_id,
        attempt=run.attempt,
        job_name=run.job_name,
        logger=run_logger(run_id, run.job_name, run.attempt),
        scheduled_at=run.scheduled_at,
        progress=engine["progress"],
    )
    if signals.heard(signals.run_started, run):  # receivers may use the ORM: off the loop
        await io(lambda: signals.announce(signals.run_started, sender=JobRun, run=run))
    with otel.run_span(run.job_name, run_id, run.attempt, run.trace_context) as done:
        outcome = await arun_attempt(
            definition.fn,
            ctx,
            run.args,
            run.kwargs,
            timeout=definition.timeout or conf.duration("TIMEOUT"),
            max_result_bytes=int(conf.get("MAX_OUTPUT_BYTES")),
        )
        done(*otel_outcome(outcome))
    if ctx.progress.waiting:  # off the loop only when a value waits
        await io(ctx.progress.flush_at_stop)
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
        definition = get_job(run.job_name, run.job_version)
    except UnknownJob as exc:
        # Another version of the job is here: the message says which (``get_job``).
        known = run.job_name in all_jobs()
        hint = "" if known else "; was the job renamed or its module not deployed?"
        exc.args = (f"{exc} (run {run.id}{hint})",)
        outcome: Outcome = Failed(ErrorInfo.of(exc), retryable=False)
        return None, pending_of(run, None, outcome, clock.now(), rng)
    if run.attempt > max_attempts(definition):
        # Only reachable when workers died mid-run (requeue_expired): stop the crash loop.
        return None, _exhausted(run, definition, clock.now(), rng)
    return definition, None


def _exhausted_attempts(run: JobRun) -> bool:
    """Whether the claim counted one attempt too many (``_definition`` then reads)."""
    most = attempts_of(run.job_name, run.job_version)
    return most is not None and run.attempt > most


def _engine(
    run: JobRun,
    run_id: str,
    definition: JobDefinition,
    clock: Clock,
    owner: str | None,
    interrupt: Interrupt | None,
    *,
    inline: bool,
) -> dict[str, Any]:
    """What the step engine of one attempt is built from, sync or async alike
    (``inline``: whether ``set_progress`` may write from the calling thread)."""
    using = conf.database()
    return {
        "run_id": run_id,
        "job_name": run.job_name,
        "store": OrmStepStore(using=using, owner=owner),
        **_stateless(using),
        "progress": Progress(
            progress_writer(run, using, owner),
            clock,
            inline=inline,
            max_bytes=int(conf.get("MAX_PAYLOAD_BYTES")),
        ),
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


@functools.cache
def _stateless(using: str) -> dict[str, Any]:
    """The parts of an attempt's engine that keep nothing but their database: made once
    per database, not once per run (four objects a run, with a thousand async runs in
    flight)."""
    return {
        "events": EventLog(using=using),
        "children": OrmChildRuns(using=using),
        "batches": OrmChildBatches(using=using),
        "mailbox": OrmMailbox(using=using),
    }


def _stopped_at(
    run: JobRun,
    definition: JobDefinition,
    outcome: Outcome,
    clock: Clock,
    rng: random.Random | None,
    steps: StepEngine,
) -> Pending:
    pending = pending_of(run, definition, outcome, clock.now(), rng)
    if isinstance(outcome, Suspended):
        parked = next((r for r in steps.records() if r.name == outcome.step), None)
        pending = replace(pending, parked=parked)
    elif pending.changes["status"] in FINISHING and (unreached := steps.unreached_steps()):
        # Steps the code that finished the run never reached: said, not silently kept.
        pending = replace(pending, changes={**pending.changes, "unreached_steps": unreached})
    return pending


#: The outcomes of an attempt that finish its run.
FINISHING = (RunStatus.SUCCEEDED, RunStatus.FAILED)


def _exhausted(
    run: JobRun, definition: JobDefinition, now: datetime, rng: random.Random | None
) -> Pending:
    """The claim counted one attempt too many: fail, naming where the workers died."""
    most = max_attempts(definition)
    exhausted = AttemptsExhausted(
        f"job {run.job_name!r} run {run.id}: all {most} attempts are used up: its workers "
        f"stopped renewing the lease (killed, crashed or cut off) {_where_lost(run)}"
    )
    pending = pending_of(run, definition, Failed(ErrorInfo.of(exhausted), False), now, rng)
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
