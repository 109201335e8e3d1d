"""A run's outcome as values: what an attempt's end changes on the run (``Pending``,
computed by ``pending_of``: the next status, the retry's wake time, the error), what
it came to once written (``Executed``), and the forms it can be written in (with the
next claim, in a batch: ``plain``, ``batchable``; in short when the database refuses
it: ``shorten``).

``recording`` is the one place outcomes are written.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import DataError

from .. import conf
from ..db.postgresql import claims as postgres
from ..db.postgresql.claims import OUTCOME_COLUMNS
from ..definitions.registry import JobDefinition, max_attempts
from ..engine.attempt import Failed, Outcome, Succeeded, Suspended
from ..engine.records import RecordedStep
from ..engine.retry import backoff_delay
from ..engine.serialization import ascii_text
from ..engine.vocabulary import StepKind
from ..exceptions import StepOutputInvalid
from ..models import JobRun, RunStatus
from ..verbs.failure_handlers import handler_for

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


def pending_of(
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
