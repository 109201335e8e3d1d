"""A run's outcome, from its computation to the row: what it changes (``Pending``),
how it is written under the lease (``write``, or ``shorten`` first when the database
refuses it) and what follows once it is written (``settle``: signals, the parent's
wake-up, the re-check of a parked step).

``execution`` computes outcomes; this module is the one place they are written.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import DataError, transaction

from .. import conf, signals
from ..db import dialect
from ..db.flow import holds
from ..db.flow import keys as flow_keys
from ..db.postgresql import claims as postgres
from ..db.postgresql.claims import OUTCOME_COLUMNS
from ..definitions.registry import JobDefinition, max_attempts
from ..engine.attempt import Failed, Outcome, Succeeded, Suspended
from ..engine.records import RecordedStep
from ..engine.retry import backoff_delay
from ..engine.serialization import ascii_text
from ..engine.vocabulary import StepKind
from ..exceptions import RunCancelled, StepOutputInvalid
from ..models import JobRun, RunStatus
from ..verbs.events import recheck_after_park, wake_parent
from ..verbs.failure_handlers import handler_for, start_handler
from ..verbs.invocations import last_sibling

log = logging.getLogger("django_durable_jobs.worker")


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
        """Whether the outcome can be written by the PostgreSQL call that also claims:
        the claim's statement, or for a run under a concurrency limit (``frees_slot``)
        the limited claim's function; not one that starts an ``on_failure`` handler."""
        return set(self.changes) <= _FUSED and not _starts_handler(self)

    @property
    def frees_slot(self) -> bool:
        """The run holds a concurrency slot, which its outcome frees."""
        return self.run.concurrency_limit is not None

    def outcome_values(self) -> dict[str, Any]:
        """Every column an outcome writes: the changes, the rest as claimed."""
        return {name: self.changes.get(name, getattr(self.run, name)) for name in OUTCOME_COLUMNS}


def plain(pending: Pending) -> bool:
    """An outcome that may be written with others in one statement (and wait for the
    batch's): it changes nothing but the outcome's columns (``Pending.fused``), holds
    no concurrency slot, and is not the short form of a refused one (which is
    written on its own)."""
    return pending.fused and not pending.frees_slot and not pending.short


def finish_of(pending: Pending, owner: str) -> postgres.Finish:
    """``pending`` as PostgreSQL's claim and flow functions write it, fenced by ``owner``."""
    run = pending.run
    return postgres.Finish(
        run.pk, owner, pending.outcome_values(), run.job_name, run.concurrency_key
    )


def batchable(pending: Pending, fused: bool) -> bool:
    """An outcome that may wait for the rest of its batch, to be written with them:
    a ``plain`` one; on a database with the flow functions (``fused``: PostgreSQL)
    also one that frees a concurrency slot, which the batch's limited outcomes then
    free in one call (``durable_finish_concurrency``). Its slot stays taken until
    then (``Outbox.HOLD_FOR`` at most): a limit is never exceeded, only freed late."""
    return pending.fused and not pending.short and (fused or not pending.frees_slot)


_FUSED = {*OUTCOME_COLUMNS, "lease_owner", "lease_expires_at"}
#: What a database raises for a value it can never store (a NUL on PostgreSQL, a text
#: over its column, a lone surrogate the driver cannot encode): retrying cannot help.
UNSTORABLE = (DataError, ValueError)
#: The longest error text the short form of an outcome keeps.
SHORT_ERROR = 2000


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
    if owner is not None and pending.fused:
        # A slot to free and nothing else: one call where the dialect has one.
        done = dialect.of(using).finish_concurrency(finish_of(pending, owner), pending.now)
        if done is not None:
            return done
    with transaction.atomic(using=using):
        if run.concurrency_limit is not None:
            flow_keys.lock(using, run.job_name, "concurrency", run.concurrency_key or "")
        recorded = bool(rows.update(**pending.changes))
        if recorded:
            start_handler(run, pending.changes, pending.now)
            if run.concurrency_limit is not None:
                holds.free_slot(using, run, pending.now)
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
    return pending.run.concurrency_limit is not None or _starts_handler(pending)


def _starts_handler(pending: Pending) -> bool:
    return pending.changes.get("status") == RunStatus.FAILED and (
        handler_for(pending.run) is not None
    )


def _settle_cancelled(run: JobRun, owner: str, now: datetime) -> bool:
    """A run cancelled while this worker executed it: let go of it, keep it cancelled."""
    using = conf.database()
    with transaction.atomic(using=using):
        if run.concurrency_limit is not None:
            flow_keys.lock(using, run.job_name, "concurrency", run.concurrency_key or "")
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
            holds.free_slot(using, run, now)
    if settled:
        log.info("run cancelled: run=%s stopped by cancellation", run.id)
    return bool(settled)


def _announce(run: JobRun, outcome: Outcome, changes: dict[str, Any]) -> None:
    if isinstance(outcome, Succeeded):
        signals.announce(signals.run_succeeded, sender=JobRun, run=run)
    elif isinstance(outcome, Suspended):
        signals.announce(
            signals.run_suspended,
            sender=JobRun,
            run=run,
            step=outcome.step,
            wake_at=outcome.wake_at,
            kind=outcome.kind,
            # Until the next release, for receivers written before (CHANGELOG.md, "Deprecated").
            resume_at=outcome.wake_at,
            reason=signals.SUSPENDED_REASON[outcome.kind],
        )
    else:
        signals.announce(
            signals.run_failed,
            sender=JobRun,
            run=run,
            error=outcome.error,
            will_retry=changes["status"] == RunStatus.QUEUED,
        )
