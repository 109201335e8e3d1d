"""Deleting finished runs in set-based batches (``verbs/runs.py`` ``purge``), the
ORM's way for any database; PostgreSQL does a batch in one statement
(``postgresql/purge.py``). Each database's ``Dialect.purge_batch`` calls one of them.

A batch is the oldest ``limit`` runs of one finished status that finished before the
cutoff and no worker holds (``lease_owner = ""``: a cancelled run still in a worker's
hand is left to it), except the children of a live parent (one not finished, or
finished but still held), which may still read them (``step.invoke``). The runs are
locked as they are chosen (``SKIP LOCKED`` where the database has it: a run an
operator is retrying right now is left for the next purge); then what references them
goes, one ``DELETE … WHERE run_id IN`` per table (step records, messages, cancel keys,
joined idempotency keys), their children keep living without a parent (``parent``
is ``SET_NULL``, as Django's cascade did), and the runs go last. Django's ``delete()``
collected all of it in Python, a row at a time.

Batches walk the index ``durable_run_finished`` (status, finished_at) from the
finished time where the last one stopped (``after``), so a batch does not wade
through the index entries of the runs the batches before it deleted, which stay until
a vacuum.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections, models, transaction
from django.db.models import Exists, OuterRef

from ..models import FINISHED, CancelKey, IdempotencyKey, JobRun, Message, StepRecord

#: The tables whose rows reference a run and go with it (``run_id``), children first.
OWNED: tuple[type[models.Model], ...] = (StepRecord, Message, CancelKey, IdempotencyKey)


@dataclass(frozen=True)
class Batch:
    """One batch of a purge: up to ``limit`` runs in ``status`` that finished before
    ``cutoff``, from ``after`` (the finished time the previous batch reached) on."""

    status: str
    cutoff: datetime
    limit: int
    after: datetime | None = None


@dataclass(frozen=True)
class Purged:
    """What a batch deleted: how many runs, and the finished time of the newest (the
    next batch's ``after``; None when the batch found none)."""

    runs: int
    reached: datetime | None


def purgeable(using: str, batch: Batch) -> models.QuerySet[JobRun]:
    """The runs ``batch`` may delete, oldest first."""
    live_parent = (
        JobRun.objects.using(using)
        .filter(pk=OuterRef("parent_id"))
        .exclude(status__in=list(FINISHED), lease_owner="")
    )
    runs = JobRun.objects.using(using).filter(
        status=batch.status, finished_at__lt=batch.cutoff, lease_owner=""
    )
    if batch.after is not None:
        runs = runs.filter(finished_at__gte=batch.after)
    return runs.filter(~Exists(live_parent)).order_by("finished_at")


def delete_batch(using: str, batch: Batch, write_first: Any = None) -> Purged:
    """One batch in one transaction, statement by statement (the ORM's way);
    ``write_first`` takes SQLite's write lock before the transaction reads."""
    connection = connections[using]
    features = connection.features
    with transaction.atomic(using=using):
        if write_first is not None:
            write_first()
        chosen = purgeable(using, batch)
        if features.has_select_for_update:
            skip = features.has_select_for_update_skip_locked
            chosen = chosen.select_for_update(skip_locked=skip)
        picked = list(chosen.values_list("id", "finished_at")[: batch.limit])
        if not picked:
            return Purged(0, None)
        ids = [pk for pk, _ in picked]
        for model in OWNED:
            _delete(model._default_manager.using(using).filter(run_id__in=ids), using)
        # Children in the batch too: InnoDB checks a foreign key at each row, not at
        # commit, so a parent deleted before its child in one DELETE would fail.
        JobRun.objects.using(using).filter(parent_id__in=ids).update(parent=None)
        deleted = _delete(JobRun.objects.using(using).filter(id__in=ids), using)
    return Purged(deleted, max(finished for _, finished in picked if finished is not None))


def _delete(rows: models.QuerySet[Any], using: str) -> int:
    """One ``DELETE … WHERE``, without Django's collector: what references these rows
    was deleted (or set to NULL) just before, set-based."""
    return int(rows._raw_delete(using))
