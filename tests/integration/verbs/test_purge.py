"""``runs.purge`` (``db/purge.py``; one statement a batch on PostgreSQL): what goes
with a run, what is never touched, and the count."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import (
    CancelKey,
    IdempotencyKey,
    JobRun,
    Message,
    RunStatus,
    StepRecord,
)
from django_durable_jobs.verbs import runs
from tests.factories import JobRunFactory, StepRecordFactory

pytestmark = pytest.mark.django_db

OLD = timedelta(days=40)


def finished(
    clock: FakeClock, status: str = RunStatus.SUCCEEDED, age: timedelta = OLD, **fields: Any
) -> JobRun:
    """A run finished ``age`` ago, with two step records."""
    run = JobRunFactory.create(status=status, finished_at=clock.now() - age, **fields)
    StepRecordFactory.create_batch(2, run=run)
    return run


def owned(run: JobRun) -> None:
    """A message, a cancel key and a joined idempotency key for ``run``."""
    Message.objects.create(run=run, topic="t", sent_at=run.created_at)
    CancelKey.objects.create(run=run, event="e", key=None)
    IdempotencyKey.objects.create(run=run, job_name=run.job_name, key=f"k-{run.pk}")


def orphans() -> dict[str, int]:
    """Rows whose run is gone, per table: none after any purge."""
    ids = JobRun.objects.values("id")
    return {
        model.__name__: model.objects.exclude(run_id__in=ids).count()
        for model in (StepRecord, Message, CancelKey, IdempotencyKey)
        if model.objects.exclude(run_id__in=ids).exists()
    }


@pytest.mark.django_db(transaction=True)
def test_a_purge_deletes_everything_that_references_its_runs(clock: FakeClock) -> None:
    """Committed batch by batch: the foreign keys hold at each commit (PostgreSQL and
    SQLite check them then, MariaDB at each row)."""
    old = [finished(clock, status) for status in (RunStatus.SUCCEEDED, RunStatus.FAILED) * 3]
    for run in old:
        owned(run)
    kept = finished(clock, age=timedelta(days=1))
    owned(kept)
    assert runs.purge("30d", batch_size=4) == 6
    assert list(JobRun.objects.values_list("pk", flat=True)) == [kept.pk]
    assert orphans() == {}
    assert [
        model.objects.count() for model in (StepRecord, Message, CancelKey, IdempotencyKey)
    ] == [2, 1, 1, 1]


def test_live_runs_and_held_runs_are_never_touched(clock: FakeClock) -> None:
    live = [
        JobRunFactory.create(status=status, finished_at=clock.now() - OLD)
        for status in (
            RunStatus.QUEUED,
            RunStatus.RUNNING,
            RunStatus.SLEEPING,
            RunStatus.WAITING,
        )
    ]
    # Cancelled while its worker held it: the worker has not let go yet.
    held = finished(clock, RunStatus.CANCELLED, lease_owner="w1")
    assert runs.purge("30d") == 0
    assert JobRun.objects.count() == len(live) + 1
    assert StepRecord.objects.filter(run=held).count() == 2


def test_the_children_of_a_live_parent_are_kept(clock: FakeClock) -> None:
    """A parent still running may read its finished children (``step.invoke``)."""
    running = JobRunFactory.create(status=RunStatus.RUNNING, lease_owner="w1")
    held = JobRunFactory.create(status=RunStatus.CANCELLED, lease_owner="w1")
    recent = finished(clock, age=timedelta(days=1))
    kept = [finished(clock, parent=running), finished(clock, parent=held)]
    gone = finished(clock, parent=recent)
    assert runs.purge("30d") == 1
    assert set(JobRun.objects.values_list("pk", flat=True)) == {
        running.pk,
        held.pk,
        recent.pk,
        *(run.pk for run in kept),
    }
    assert not JobRun.objects.filter(pk=gone.pk).exists()
    assert orphans() == {}


def test_the_children_of_a_purged_parent_live_on_without_it(clock: FakeClock) -> None:
    parent = finished(clock)
    sleeping = JobRunFactory.create(status=RunStatus.SLEEPING, parent=parent)
    recent = finished(clock, age=timedelta(days=1), parent=parent)
    old_child = finished(clock, parent=parent)
    assert runs.purge("30d", batch_size=1) == 2
    left = dict(JobRun.objects.values_list("pk", "parent_id"))
    assert left == {sleeping.pk: None, recent.pk: None}
    assert not JobRun.objects.filter(pk=old_child.pk).exists()


def test_a_run_leased_during_the_purge_is_left_alone(clock: FakeClock) -> None:
    """Between two batches an operator retries an old failed run and a worker claims
    it: the batches after that do not take it."""
    old = [finished(clock, RunStatus.FAILED, age=OLD + timedelta(hours=i)) for i in range(5)]
    newest = old[0]  # the oldest go first: this one is in the last batch
    seen: list[int] = []

    def between(total: int) -> None:
        if not seen:
            runs.retry(newest.pk, now=clock.now())
            claimed = claim("w1", now=clock.now(), lease=timedelta(minutes=5))
            assert [run.pk for run in claimed] == [newest.pk]
        seen.append(total)

    assert runs.purge("30d", batch_size=2, progress=between) == 4
    assert seen == [2, 4]
    run = JobRun.objects.get()
    assert (run.pk, run.status, run.lease_owner) == (newest.pk, RunStatus.RUNNING, "w1")
    assert StepRecord.objects.filter(run=run).count() == 2


def test_batches_of_runs_finished_at_one_instant_all_go(clock: FakeClock) -> None:
    """The next batch starts at the last one's finished time (not after it): runs that
    share it are not skipped."""
    for _ in range(7):
        finished(clock)
    assert runs.purge("30d", batch_size=3) == 7
    assert JobRun.objects.count() == 0
    assert StepRecord.objects.count() == 0


def test_each_status_asked_for_is_purged_and_counted(clock: FakeClock) -> None:
    for status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.SKIPPED) * 2:
        finished(clock, status)
    assert runs.purge("30d", [RunStatus.FAILED, RunStatus.SKIPPED], batch_size=1) == 4
    assert set(JobRun.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}


def test_the_command_tells_its_progress_on_stderr_with_verbosity_2(clock: FakeClock) -> None:
    for _ in range(3):
        finished(clock)
    out, err = StringIO(), StringIO()
    call_command(
        "jobs", "purge", "--older-than", "30d", "--batch-size", "2", "--pause", "0",
        verbosity=2, stdout=out, stderr=err,
    )  # fmt: skip
    assert out.getvalue() == "deleted 3 runs and their steps\n"
    assert err.getvalue().splitlines() == ["deleted 2 runs so far", "deleted 3 runs so far"]


def test_a_run_deleted_through_django_takes_what_references_it(clock: FakeClock) -> None:
    """The step records' and messages' ``run`` has no constraint in the database
    (``models/steps.py``): Django's cascade is what deletes them with a run deleted in
    the admin or by ``QuerySet.delete()``."""
    gone, kept = finished(clock), finished(clock)
    owned(gone)
    JobRun.objects.filter(pk=gone.pk).delete()
    assert orphans() == {}
    assert StepRecord.objects.filter(run=kept).count() == 2
