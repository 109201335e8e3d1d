"""The operator's verbs over many runs at once: ``retry``, ``cancel`` and ``replay``
applied to every run of a filter (``manage.py jobs retry --job charge --status failed``)
or of the admin's selection, in batches.

A bulk verb is the per-run verb of ``runs.py`` over a set: the same writes
(``retry_in_transaction``...) under the same guard (``Verb.rule``), given a batch of
runs at once, so a run a worker claims or finishes meanwhile is skipped and counted,
never an error for the batch. (``replay`` goes run by run, each in a savepoint: a run
without the step is left as it was.) A run of the set cancelled along with its parent,
which the set holds too, counts as done (``Outcome.along``), not skipped. The set is
walked by keyset (the run id) in batches of ``batch_size`` runs, one transaction each:
100,000 runs never hold one long transaction, and the workers claim between batches
(and, on PostgreSQL and MariaDB, during them: a batch locks only its own runs).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from .. import conf
from ..definitions.registry import all_jobs
from ..engine import clock
from ..engine.durations import before, parse_duration
from ..exceptions import RunCancelled, StepNotFound
from ..models import JobRun, RunStatus, StepRecord, cancelled
from .runs import (
    VERBS,
    cancel_in_transaction,
    replay_in_transaction,
    retry_in_transaction,
    send_cancelled,
)

#: The verbs that take a filter (``wake`` acts on one run at a time).
BULK_VERBS = ("retry", "cancel", "replay")
#: Runs per transaction.
BATCH_SIZE = 500
#: Run ids a dry run prints.
SHOWN = 10


@dataclass(frozen=True, kw_only=True)
class RunFilter:
    """Which runs a bulk verb considers: every condition given must hold. Only runs
    created before the verb started count (``created_at <= now``), so runs enqueued
    while it works are left alone and a dry run counts what the real one would see."""

    job: str | None = None
    statuses: tuple[str, ...] = ()
    queue: str | None = None
    #: Created at most this long ago.
    since: timedelta | None = None
    error_code: str | None = None

    def __bool__(self) -> bool:
        given = (self.job, self.statuses, self.queue, self.since, self.error_code)
        return any(value not in (None, ()) for value in given)

    def runs(self, now: datetime) -> QuerySet[JobRun]:
        found = JobRun.objects.using(conf.database()).filter(created_at__lte=now)
        if self.job is not None:
            found = found.filter(job_name=self.job)
        if self.statuses:
            found = found.filter(status__in=self.statuses)
        if self.queue is not None:
            found = found.filter(queue=self.queue)
        if self.since is not None:
            found = found.filter(created_at__gte=before(now, self.since, self.since))
        if self.error_code is not None:
            found = found.filter(error_code=self.error_code)
        return found


def run_filter(
    *,
    job: str | None = None,
    statuses: Iterable[str] = (),
    queue: str | None = None,
    since: str | timedelta | None = None,
    error_code: str | None = None,
) -> RunFilter:
    """A ``RunFilter`` from an operator's words; ``ValueError`` (one line) for an
    unknown status or a malformed duration.

    >>> run_filter(job="shop.charge", statuses=["failed"], since="3d")  # doctest: +SKIP
    """
    wanted = tuple(dict.fromkeys(str(status) for status in statuses))
    if unknown := [status for status in wanted if status not in RunStatus.values]:
        raise ValueError(
            f"unknown status {', '.join(map(repr, unknown))}; the statuses are: "
            + ", ".join(RunStatus.values)
        )
    return RunFilter(
        job=job,
        statuses=wanted,
        queue=queue,
        since=None if since is None else parse_duration(since),
        error_code=error_code,
    )


def unregistered_job(job: str | None) -> bool:
    """Whether ``job`` is named but not registered in this deploy (its runs may still
    be cancelled or retried: a retried run waits for a worker that knows the job)."""
    return job is not None and job not in all_jobs()


@dataclass(frozen=True)
class Preview:
    """What a bulk verb would do: ``matched`` runs, ``applicable`` of them in a status
    it applies to (and, for ``replay``, with the step), the first ``first_ids`` of
    those in the order it would act."""

    verb: str
    matched: int
    applicable: int
    first_ids: list[uuid.UUID]
    #: ``replay`` only: runs in a status it applies to but without the step.
    without_step: int = 0


@dataclass
class Outcome:
    """What a bulk verb did."""

    verb: str
    #: Runs of the filter or selection when the verb started.
    matched: int = 0
    #: Runs the verb acted on (``along`` of them through a parent run).
    done: int = 0
    #: ``cancel`` only: runs of the set cancelled along with a parent run the set
    #: holds too (before their own batch reached them).
    along: int = 0
    #: Runs in a status it applies to when read, refused by its guard because a worker
    #: (or another operator) changed them before their batch reached them.
    changed: int = 0
    #: ``replay`` only: runs without the step, left as they were.
    without_step: int = 0
    batches: int = 0
    first_ids: list[uuid.UUID] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        """Runs not acted on: in another status, changed meanwhile or without the step."""
        return max(self.matched - self.done, 0)


def preview(
    verb: str,
    runs: QuerySet[JobRun],
    *,
    step: str | None = None,
    now: datetime | None = None,
    shown: int = SHOWN,
) -> Preview:
    """Count what ``apply`` would act on, without writing (``--dry-run``): for
    ``replay``, only the runs that have ``step``, as ``apply`` replays only those."""
    now = now or clock.current().now()
    in_status = applicable = runs.filter(VERBS[verb].rule.q(now))
    if verb == "replay" and step:
        records = StepRecord.objects.using(conf.database()).filter(run=OuterRef("pk"), name=step)
        applicable = in_status.filter(Exists(records))
    count = applicable.count()
    without_step = in_status.count() - count if applicable is not in_status else 0
    first = list(applicable.order_by("pk").values_list("pk", flat=True)[:shown])
    return Preview(verb, runs.count(), count, first, without_step)


def apply(
    verb: str,
    runs: QuerySet[JobRun],
    *,
    step: str | None = None,
    now: datetime | None = None,
    batch_size: int = BATCH_SIZE,
    reason: str = "cancelled by an operator",
    each_batch: Callable[[list[uuid.UUID]], None] | None = None,
) -> Outcome:
    """Apply ``verb`` (``retry``, ``cancel`` or ``replay`` from ``step``) to every run of
    ``runs`` in a status it applies to, ``batch_size`` runs per transaction.
    ``each_batch`` gets the ids acted on after each batch commits (the admin logs them).

    >>> apply("retry", run_filter(error_code="X_PROVIDER_DOWN").runs(now))  # doctest: +SKIP
    """
    if verb not in BULK_VERBS:
        raise ValueError(f"{verb!r} does not act in bulk; these do: {', '.join(BULK_VERBS)}")
    if verb == "replay" and not step:
        raise ValueError("replay needs the step to replay from")
    if batch_size < 1:
        raise ValueError("the batch size must be at least 1")
    now = now or clock.current().now()
    outcome = Outcome(verb, matched=runs.count())
    applicable = runs.filter(VERBS[verb].rule.q(now)).order_by("pk").values_list("pk", flat=True)
    act = _batch(verb, step or "", now, reason, outcome, applicable)
    last: uuid.UUID | None = None
    while True:
        ids = list((applicable if last is None else applicable.filter(pk__gt=last))[:batch_size])
        if not ids:
            return outcome
        last = ids[-1]
        with transaction.atomic(using=conf.database()):
            done, after_commit = act(ids)
        outcome.batches += 1
        outcome.done += len(done)
        outcome.first_ids.extend(done[: max(SHOWN - len(outcome.first_ids), 0)])
        after_commit()
        if each_batch is not None and done:
            each_batch(done)


#: One batch inside its transaction: the runs acted on, and what to do once it commits.
_Batch = Callable[[list[uuid.UUID]], tuple[list[uuid.UUID], Callable[[], None]]]


def _nothing() -> None:
    return None


def _batch(
    verb: str,
    step: str,
    now: datetime,
    reason: str,
    outcome: Outcome,
    applicable: QuerySet[JobRun, uuid.UUID],
) -> _Batch:
    """The per-run verb's writes for a batch of runs, counting those it refused."""
    stopped = cancelled(now, RunCancelled.code, reason)

    def retry(ids: list[uuid.UUID]) -> tuple[list[uuid.UUID], Callable[[], None]]:
        done = retry_in_transaction(ids, now)
        outcome.changed += len(ids) - len(done)
        return done, _nothing

    def cancel(ids: list[uuid.UUID]) -> tuple[list[uuid.UUID], Callable[[], None]]:
        # Read before the writes: once cancelled, a run no longer matches a filter
        # on its status or error code.
        waiting_below = _in_set_below(ids, applicable)
        found = cancel_in_transaction(ids, stopped, now)
        outcome.changed += len(ids) - len(found)
        along = waiting_below.intersection(pk for _, below in found for pk in below)
        outcome.along += len(along)
        outcome.done += len(along)

        def signals() -> None:
            for run, below in found:
                send_cancelled(run, below)

        return [run.pk for run, _ in found], signals

    def replay(ids: list[uuid.UUID]) -> tuple[list[uuid.UUID], Callable[[], None]]:
        done = []
        for pk in ids:
            try:
                # A savepoint: a run without the step rolls back alone, not its batch.
                with transaction.atomic(using=conf.database()):
                    if replay_in_transaction(pk, step, now):
                        done.append(pk)
                        continue
            except StepNotFound:
                outcome.without_step += 1
                continue
            outcome.changed += 1
        return done, _nothing

    return {"retry": retry, "cancel": cancel, "replay": replay}[verb]


def _in_set_below(ids: list[uuid.UUID], applicable: QuerySet[JobRun, uuid.UUID]) -> set[uuid.UUID]:
    """The runs below ``ids`` (children, their children, ...) that ``applicable`` holds
    and a later batch would reach: those the cancel of ``ids`` cancels along with them."""
    below: set[uuid.UUID] = set()
    level = ids
    runs = JobRun.objects.using(conf.database())
    while level:
        level = list(runs.filter(parent_id__in=level).values_list("pk", flat=True))
        below.update(level)
    below.difference_update(ids)
    return set(applicable.filter(pk__in=below)) if below else set()


__all__ = [
    "BATCH_SIZE",
    "BULK_VERBS",
    "Outcome",
    "Preview",
    "RunFilter",
    "apply",
    "preview",
    "run_filter",
    "unregistered_job",
]
