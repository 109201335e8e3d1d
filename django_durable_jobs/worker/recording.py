"""Writing a run's outcome: the one place it is done. ``write`` writes one under the lease
(with its ``on_failure`` handler and its freed concurrency slot), ``settle`` does what
follows once it is written (signals, the parent's wake-up, the re-check of a parked
step), and ``record``, ``record_together``, ``record_all`` and ``record_patiently`` are
what the worker calls: one outcome, a batch of one owner's, a batch of the async lane's,
or one that must not be lost to a brief outage.

When the database refuses an outcome: a value no database stores (a NUL on PostgreSQL, a
text too long for its column, a lone surrogate) is not a lost connection, and retrying
the same write can never succeed. Such an outcome is recorded in short
(``outcome.shorten``) and the worker moves on, instead of retrying it forever (and, on
PostgreSQL, where the outcome rides with the next claim, never claiming again).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connections, transaction

from .. import conf, signals
from ..db import claims, conflicts, dialect, faults, fenced
from ..db.flow import holds
from ..db.flow import keys as flow_keys
from ..db.postgresql import claims as postgres
from ..db.postgresql import flow as postgres_flow
from ..engine.attempt import Outcome, Succeeded, Suspended
from ..engine.serialization import cut, error_line
from ..exceptions import RunCancelled
from ..models import JobRun, RunStatus
from ..verbs.failure_handlers import start_handler
from ..verbs.invocations import last_sibling
from ..verbs.waking import recheck_after_park, wake_parent
from .connections import close_broken_connections
from .outcome import UNSTORABLE, Executed, Pending, batchable, finish_of, shorten, writes_alone

log = logging.getLogger("django_durable_jobs.worker")

#: Conflicts with concurrent transactions ``record_patiently`` retries an outcome
#: across, besides its tries.
CONFLICTS = 20


def record(pending: Pending, owner: str) -> Executed | None:
    """Write ``pending`` on its own (fenced by ``owner``) and settle it; in short if the
    database refuses it, not at all if it refuses that too (the lease then decides:
    None).

    A lost connection raises, leaving ``pending`` to be written again."""
    current: Pending | None = pending
    while current is not None:
        try:
            recorded = write(current, owner)
        except UNSTORABLE as exc:
            current = refused(current, exc)
            continue
        executed = settle(current, recorded, owner)
        log_outcome(current.run, executed)
        return executed
    return None


def record_together(pendings: Sequence[Pending], owner: str) -> Executed | None:
    """Record ``pendings`` (each fenced by ``owner``) together (``write_all``), then settle
    each: one commit for a batch of runs. If the database refuses one of them, each is
    recorded on its own (in short if need be). A lost connection raises, and nothing
    is written: all are left to be written again. Returns what the last came to."""
    try:
        written = write_all([(pending, owner) for pending in pendings])
    except UNSTORABLE:
        executed = None
        for pending in pendings:
            executed = record(pending, owner)
        return executed
    settled = settle_all([(pending, owner) for pending in pendings], written)
    return settled[-1] if settled else None


def record_all(outcomes: Sequence[tuple[Pending, str]]) -> None:
    """Record many outcomes (each fenced by its owner) in one transaction: one commit
    instead of one per run, for async runs that stopped together. Each outcome is
    committed before it is settled (its parent woken, its signals sent). If the
    database refuses any of them, each is recorded on its own instead (in short if
    need be), so that one bad outcome does not hold back the others; one alone, or
    all after a lost connection, are retried a few times (``record_patiently``)."""
    using = conf.database()
    written: list[bool] | None = None
    try:
        faults.hit("outcome.before", using)
        if len(outcomes) > 1:
            written = write_all(outcomes)
    except (DatabaseError, *UNSTORABLE):
        close_broken_connections()
    if written is None:
        for pending, owner in outcomes:
            record_patiently(pending, owner)
    else:
        settle_all(outcomes, written)
    faults.hit("outcome.after", using)


def settle_all(outcomes: Sequence[tuple[Pending, str]], written: Sequence[bool]) -> list[Executed]:
    """Settle outcomes written together (``written``: whether each was recorded, each
    fenced by its owner) and log them: a line per run, and for several one line for
    the write (``log_outcome``, ``log_batch``)."""
    settled = [
        settle(pending, recorded, owner)
        for (pending, owner), recorded in zip(outcomes, written, strict=True)
    ]
    batched = len(settled) > 1
    for (pending, _), executed in zip(outcomes, settled, strict=True):
        log_outcome(pending.run, executed, batched=batched)
    if batched:
        log_batch(settled)
    return settled


def write_all(outcomes: Sequence[tuple[Pending, str]]) -> list[bool]:
    """Write ``outcomes`` (each fenced by its owner) and say which were recorded: on
    PostgreSQL ``batchable`` ones in one statement (the claim's, claiming nothing) and
    one call of the flow function (the outcomes of runs under a concurrency limit),
    else one statement each, in one transaction."""
    using = conf.database()
    if dialect.of(using).fused and all(batchable(pending, True) for pending, _ in outcomes):
        limited = [(p, owner) for p, owner in outcomes if p.frees_slot]
        others = [(p, owner) for p, owner in outcomes if not p.frees_slot]
        now = outcomes[-1][0].now
        recorded: frozenset[Any] = frozenset()
        with transaction.atomic(using=using):
            if limited:
                recorded |= postgres_flow.finish_concurrency(using, _finishes(limited), now)
            if others:
                recorded |= postgres.finish(using, _finishes(others), now)
        return [pending.run.pk in recorded for pending, _ in outcomes]
    with transaction.atomic(using=using):
        return [write(pending, owner) for pending, owner in outcomes]


def _finishes(outcomes: Sequence[tuple[Pending, str]]) -> list[postgres.Finish]:
    return [finish_of(p, owner) for p, owner in outcomes]


def record_patiently(pending: Pending, owner: str, tries: int = 3) -> None:
    """``record``, retried across a few lost connections (a worker that stops), a
    second apart, and across conflicts with concurrent transactions (``conflicts``),
    which do not count as tries, a few milliseconds apart (up to ``CONFLICTS``)."""
    tries_left, conflicts_left = tries - 1, CONFLICTS
    while True:
        try:
            record(pending, owner)
            return
        except DatabaseError as exc:
            if conflicts.is_conflict(exc) and conflicts_left:
                conflicts_left -= 1
                log.info("run %s: %s; retrying", pending.run.id, conflicts.describe(exc))
                close_broken_connections()
                time.sleep(conflicts.pause())
                continue
            if not tries_left:
                log.error(
                    "run not recorded: run=%s (%s); it is taken over once its lease expires",
                    pending.run.id,
                    exc,
                )
                return
            log.warning("run %s: database error (%s); retrying", pending.run.id, exc)
            tries_left -= 1
            close_broken_connections()
            time.sleep(1.0)


def refused(pending: Pending, problem: BaseException) -> Pending | None:
    """What to write instead of an outcome the database refused: its short form, or
    nothing if that was the short form already."""
    if pending.short:
        log.error(
            "run not recorded: run=%s even its short outcome was refused (%s); the run "
            "is taken over once its lease expires",
            pending.run.id,
            problem,
        )
        return None
    log.error(
        "run outcome refused by the database: run=%s (%s: %s); recording it in short",
        pending.run.id,
        type(problem).__name__,
        problem,
    )
    return shorten(pending, problem)


def log_outcome(run: JobRun, executed: Executed, *, batched: bool = False) -> None:
    """One line per outcome: at INFO for a run written alone; at DEBUG for a success or
    a suspension written with others (``log_batch`` sums them up at INFO: a line per
    run costs as much as the run at a few thousand runs a second). Failures and lost
    leases are WARNINGs either way."""
    info = log.debug if batched else log.info
    if not executed.recorded:
        log.warning(
            "run not recorded: run=%s lease lost; outcome %s",
            run.id,
            type(executed.outcome).__name__,
        )
    elif executed.status in {"sleeping", "waiting"}:
        info(
            "run suspended: run=%s status=%s wake_at=%s",
            run.id,
            executed.status,
            run.wake_at.isoformat() if run.wake_at else None,
        )
    elif executed.status == "succeeded":
        info("run succeeded: run=%s job=%s attempt=%s", run.id, run.job_name, run.attempt)
    else:
        # An attempt that will be retried (queued again) is not the run's end.
        retried = executed.status == "queued"
        log.warning(
            "%s: run=%s job=%s attempt=%s code=%s status=%s%s error=%s",
            "attempt failed, will retry" if retried else "run failed",
            run.id,
            run.job_name,
            run.attempt,
            run.error_code or "-",
            executed.status,
            f" retry_at={run.wake_at.isoformat()}" if retried and run.wake_at else "",
            # The user's own exception has no code: its type says what it was.
            cut(error_line("" if run.error_code else run.error_type, run.error), LOGGED_ERROR),
        )


#: The most of an error message a worker's log line carries, in characters.
LOGGED_ERROR = 2_000


def log_batch(outcomes: Sequence[Executed]) -> None:
    """The INFO line of outcomes written together: how many, and how they ended."""
    counts = Counter(executed.status if executed.recorded else "lost" for executed in outcomes)
    ended = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    log.info("runs recorded: %d in one write (%s)", len(outcomes), ended)


def write(pending: Pending, owner: str | None) -> bool:
    """Write the outcome; with ``owner``, only while that worker holds the lease.

    A final failure of a job with ``on_failure`` enqueues the handler in the same
    transaction (see ``failure_handlers``); a run under a concurrency limit frees
    its slot under its key's lock (see ``flow``).
    """
    using = conf.database()
    run = pending.run
    if owner is not None and not writes_alone(pending):
        return bool(_write_fenced(using, run.pk, owner, pending.changes))
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


def _write_fenced(using: str, run_id: Any, owner: str, changes: dict[str, Any]) -> int:
    """``changes`` written to the run while ``owner`` holds it running, in a statement
    built once per set of columns (``fenced.outcome_sql``); the rows written."""
    name, fields, sql, types = fenced.outcome_sql(connections[using], tuple(changes))
    values = [*zip(fields, changes.values(), strict=True), *fenced.lease(run_id, owner)]
    return dialect.of(using).execute_fenced(name, sql, values, types)


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


def _settle_cancelled(run: JobRun, owner: str, now: datetime) -> bool:
    """A run cancelled while this worker executed it: let go of it, keep it cancelled."""
    settled = claims.let_go_cancelled(
        run, owner, now=now, error_code=RunCancelled.code, error="cancelled while running"
    )
    if settled:
        log.info("run cancelled: run=%s stopped by cancellation", run.id)
    return settled


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
