"""The operator's verbs on runs: cancel, retry, wake, replay_from (the admin and
``manage.py jobs`` call these); purge is ``purge.py``, re-exported here. Starting runs
is ``enqueueing.py``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from .. import conf, signals
from ..db import dialect, doorbell
from ..db.run_ids import resolve as _pk
from ..engine import clock
from ..exceptions import (
    RunCancelled,
    RunNotFound,
    RunStateError,
    StepNotFound,
)
from ..models import (
    CANCELLABLE,
    REPLAYABLE,
    RERUNS_KEPT,
    RETRYABLE,
    WAKEABLE,
    JobRun,
    JobRunQuerySet,
    Rule,
    RunStatus,
    StepRecord,
    cancelled,
)
from . import children
from .failure_handlers import start_handler
from .messages import release_received
from .purge import PURGE_BATCH, PURGE_PAUSE, purge

# -- operating runs ---------------------------------------------------------------
#
# Each verb is one transaction on the jobs database that starts with a guarded UPDATE
# of the run (a ``JobRunQuerySet`` transition, guarded by its ``Rule``): the guard
# decides, so a worker that claims or finishes the run at the same moment makes the
# verb refuse instead of both writing. (Writing first also makes SQLite take its write
# lock at once instead of failing to upgrade a read.)

RunId = uuid.UUID | str


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
    stopped = cancelled(now, RunCancelled.code, reason)
    with transaction.atomic(using=using):
        done = cancel_in_transaction([pk], stopped, now)
        if not done:
            raise _refusal(pk, VERBS["cancel"])
    send_cancelled(*done[0])
    return done[0][0]


def cancel_in_transaction(
    pks: Sequence[uuid.UUID], stopped: dict[str, Any], now: datetime
) -> list[tuple[JobRun, list[uuid.UUID]]]:
    """``cancel``'s writes for the runs ``pks``, inside the caller's transaction: each
    run cancelled (those its guard refused are left as they were) with the runs
    cancelled along with it."""
    # The lease of a running run stays: its worker lets go of the run at its next
    # step (execution._settle_cancelled).
    changed = _guarded(pks, VERBS["cancel"].rule, now, lambda rows: rows.cancel(stopped))
    if not changed:
        return []
    found = list(JobRun.objects.using(conf.database()).filter(pk__in=changed))
    # A waiting parent learns now, not at its next poll; children die with the run.
    children.wake_parents([run.parent_id for run in found], now)
    parents = set(
        JobRun.objects.using(conf.database())
        .filter(parent_id__in=changed)
        .values_list("parent_id", flat=True)
    )
    done = []
    for run in found:
        start_handler(run, stopped, now)
        below: list[uuid.UUID] = []
        if run.pk in parents:
            along = {**stopped, "error": f"cancelled along with run {run.pk}"}
            below = children.cancel_descendants(run.pk, along)
            # Each run cancelled gets its handler, those cancelled along with it too.
            for child in JobRun.objects.using(conf.database()).filter(pk__in=below):
                start_handler(child, along, now)
        done.append((run, below))
    return done


def send_cancelled(run: JobRun, below: list[uuid.UUID]) -> None:
    """``run_cancelled`` for a run and the runs cancelled along with it, once committed."""
    signals.run_cancelled.send(sender=JobRun, run=run)
    if below:
        along = JobRun.objects.using(conf.database()).filter(
            pk__in=below, status=RunStatus.CANCELLED
        )
        for child in along:
            signals.run_cancelled.send(sender=JobRun, run=child)


def retry(run_id: RunId, *, now: datetime | None = None) -> JobRun:
    """Run a failed or cancelled run again from the top: its attempts start over, its
    completed steps replay from storage and the failed one runs again."""
    now = now or clock.current().now()
    pk, using = _pk(run_id), conf.database()
    with transaction.atomic(using=using):
        if not retry_in_transaction([pk], now):
            raise _refusal(pk, VERBS["retry"])
    return get_run(pk)


def retry_in_transaction(pks: Sequence[uuid.UUID], now: datetime) -> list[uuid.UUID]:
    """``retry``'s writes for the runs ``pks``, inside the caller's transaction; returns
    those retried (the others' guard refused them: nothing written)."""
    changed = _guarded(pks, VERBS["retry"].rule, now, lambda rows: rows.retry(now), "retry")
    if changed:
        doorbell.ring(conf.database())
        children.release_failed(changed)
        children.fresh_windows(changed)
    return changed


def _guarded(
    pks: Sequence[uuid.UUID],
    rule: Rule,
    now: datetime,
    transition: Callable[[JobRunQuerySet], int],
    rerun: str | None = None,
) -> list[uuid.UUID]:
    """The runs of ``pks`` that ``transition``, a guarded UPDATE following ``rule``,
    changed. The runs are locked first (on SQLite, the database's write lock), the rule
    checked on the rows read, so the UPDATE changes exactly those. With ``rerun`` (the
    verb that runs them again), each finished run's ``reruns`` notes it (the timeline's
    idle gap), in one more statement for the batch."""
    using = conf.database()
    dialect.of(using).write_first()
    # Locked by primary key alone, the rule checked here: a condition on the status in
    # the SQL can lead the planner to the status index and read every failed run.
    held = JobRun.objects.using(using).filter(pk__in=pks).order_by("pk").select_for_update()
    columns = ("id", "status", "lease_owner", "wake_at", "finished_at", "reruns")
    fitting = [run for run in held.only(*columns) if rule.holds(run, lambda: now)]
    if not fitting:
        return []
    transition(JobRun.objects.using(using).filter(pk__in=[run.pk for run in fitting]))
    if rerun is not None:
        noted = [run for run in fitting if run.finished_at is not None]
        for run in noted:
            run.reruns = noted_rerun(run, now, rerun)
        JobRun.objects.using(using).bulk_update(noted, ["reruns"])
    return [run.pk for run in fitting]


def wake(run_id: RunId, *, now: datetime | None = None) -> JobRun:
    """Make a sleeping, waiting or scheduled (queued for later) run runnable now.

    A sleeping run's sleep ends now. A waiting run looks for its event now, and waits
    again if none was published.
    """
    now = now or clock.current().now()
    pk, using = _pk(run_id), conf.database()
    with transaction.atomic(using=using):
        run = _changed_or_refuse(pk, _rows(pk).wake(now), VERBS["wake"])
        doorbell.ring(using)
        StepRecord.objects.using(using).filter(run_id=pk).wake(now)
    return run


def replay_from(run_id: RunId, step: str, *, now: datetime | None = None) -> JobRun:
    """Forget ``step`` and every step recorded after it, and run the run again: the
    steps before it replay from storage, ``step`` and the later ones execute anew (the
    messages their receives took are received again, by the steps that execute anew)."""
    now = now or clock.current().now()
    pk, using = _pk(run_id), conf.database()
    with transaction.atomic(using=using):
        if not replay_in_transaction(pk, step, now):
            raise _refusal(pk, VERBS["replay"])
    return get_run(pk)


def replay_in_transaction(pk: uuid.UUID, step: str, now: datetime) -> bool:
    """``replay_from``'s writes, inside the caller's transaction; ``False`` if the
    run's guard refused it (nothing written). ``StepNotFound`` after the guarded
    UPDATE: the caller's transaction (or savepoint) must roll back."""
    replayed = _guarded([pk], VERBS["replay"].rule, now, lambda rows: rows.replay(now), "replay")
    if not replayed:
        return False
    doorbell.ring(conf.database())
    steps = StepRecord.objects.using(conf.database()).filter(run_id=pk)
    first = steps.filter(name=step).values_list("id", flat=True).first()
    if first is None:  # raising rolls the run back too
        known = list(steps.order_by("id").values_list("name", flat=True))
        raise StepNotFound(
            f"run {pk} has no step {step!r}; its steps are: "
            + (", ".join(map(repr, known)) or "(none)")
        )
    forgotten = steps.filter(id__gte=first)
    release_received(pk, list(forgotten.values_list("name", flat=True)))
    forgotten.delete()
    children.release_forgotten(pk)
    children.fresh_windows([pk])
    return True


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


def noted_rerun(run: JobRun, now: datetime, verb: str) -> list[dict[str, str]]:
    """``run.reruns`` with this rerun noted, if the run had finished: when and how its
    last attempt ended and when ``verb`` ran it again (the timeline's idle gap)."""
    noted = list(run.reruns or [])
    if run.finished_at is not None:
        noted.append(
            {
                "ended": run.finished_at.isoformat(),
                "status": run.status,
                "again": now.isoformat(),
                "by": verb,
            }
        )
    return noted[-RERUNS_KEPT:]


def _changed_or_refuse(pk: uuid.UUID, changed: int, verb: Verb) -> JobRun:
    """The run after a guarded UPDATE, or why the UPDATE did not apply."""
    if not changed:
        raise _refusal(pk, verb)
    return get_run(pk)


def _refusal(pk: uuid.UUID, verb: Verb) -> RunStateError:
    """Why ``verb``'s guarded UPDATE did not apply to the run (``RunNotFound`` if it
    does not exist)."""
    run = get_run(pk)
    if run.status == RunStatus.CANCELLED and run.lease_owner:
        return RunStateError(
            f"cannot {verb.name} run {pk} yet: it was cancelled while running and its "
            f"worker ({run.lease_owner}) has not stopped it; try again in a moment (if "
            "that worker died: once its lease has expired)"
        )
    return RunStateError(f"cannot {verb.name} run {pk}: it is {run.status}; {verb.refusal}")


@dataclass(frozen=True)
class Verb:
    """One thing an operator can do to a run, for the admin and ``manage.py jobs``
    alike: which runs it applies to (``rule``, also the SQL guard of its transition)
    and what to say when it does not."""

    name: str
    rule: Rule
    #: ``manage.py jobs <name> --help``.
    help: str
    #: Why the verb refused a run in another status.
    refusal: str

    def allows(self, run: JobRun, now: datetime | None = None) -> bool:
        """Whether the verb would apply to ``run`` as read (the verb has the last word:
        a worker may change the run between this read and the guarded UPDATE)."""
        return self.rule.holds(run, lambda: now or clock.current().now())


VERBS: dict[str, Verb] = {
    verb.name: verb
    for verb in (
        Verb(
            "retry",
            RETRYABLE,
            "Run a failed or cancelled run again (completed steps replay).",
            "only failed or cancelled runs can be retried",
        ),
        Verb(
            "cancel",
            CANCELLABLE,
            "Cancel a queued, sleeping, waiting or running run.",
            "only queued, sleeping, waiting or running runs can be cancelled",
        ),
        Verb(
            "wake",
            WAKEABLE,
            "Make a sleeping, waiting or scheduled run runnable now.",
            "only sleeping, waiting or scheduled (queued for later) runs can be woken",
        ),
        Verb(
            "replay",
            REPLAYABLE,
            "Forget a step and the steps after it; run again.",
            "cancel it first, or let it stop",
        ),
    )
}


__all__ = [
    "PURGE_BATCH",
    "PURGE_PAUSE",
    "VERBS",
    "RunNotFound",
    "RunStateError",
    "RunStatus",
    "StepNotFound",
    "Verb",
    "cancel",
    "cancel_in_transaction",
    "get_run",
    "purge",
    "recent_runs",
    "replay_from",
    "replay_in_transaction",
    "retry",
    "retry_in_transaction",
    "send_cancelled",
    "wake",
]
