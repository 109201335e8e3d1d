"""Retry, cancel and replay over a filter (``verbs/bulk.py``): the same per-run verb
over a set, in batches, counting the runs it skipped."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections

from django_durable_jobs import conf, signals
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.errors import InvalidDuration
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from django_durable_jobs.verbs import bulk
from tests.conftest import Driver
from tests.factories import FIRST, LAST, T0, JobRunFactory
from tests.testapp.admin_jobs import fragile
from tests.testapp.jobs import FAIL_ONCE

pytestmark = pytest.mark.django_db


def failed(n: int, **fields: Any) -> list[JobRun]:
    return [JobRunFactory.create(status=RunStatus.FAILED, **fields) for _ in range(n)]


def statuses(runs: list[JobRun]) -> set[str]:
    return set(JobRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True))


def test_each_filter_narrows_the_runs_retried(clock: FakeClock) -> None:
    clock.advance("10d")
    wanted = failed(2, job_name="shop.charge", queue="pay", error_code="X_PROVIDER_DOWN")
    others = [
        *failed(1, job_name="shop.refund", queue="pay", error_code="X_PROVIDER_DOWN"),
        *failed(1, job_name="shop.charge", queue="mail", error_code="X_PROVIDER_DOWN"),
        *failed(1, job_name="shop.charge", queue="pay", error_code="X_TIMEOUT"),
        # Created 10 days before now: outside --since 3d.
        *failed(1, job_name="shop.charge", queue="pay", error_code="X_PROVIDER_DOWN"),
    ]
    JobRun.objects.filter(pk__in=[r.pk for r in wanted]).update(created_at=clock.now())
    chosen = bulk.run_filter(
        job="shop.charge",
        statuses=["failed"],
        queue="pay",
        since="3d",
        error_code="X_PROVIDER_DOWN",
    )
    done = bulk.apply("retry", chosen.runs(clock.now()))
    assert (done.matched, done.done, done.skipped, done.batches) == (2, 2, 0, 1)
    assert statuses(wanted) == {RunStatus.QUEUED}
    assert statuses(others) == {RunStatus.FAILED}


def test_runs_created_after_the_verb_started_are_left_alone(clock: FakeClock) -> None:
    old = failed(1)
    clock.advance("1s")
    new = failed(1, created_at=clock.now())
    done = bulk.apply("retry", bulk.run_filter(statuses=["failed"]).runs(T0))
    assert done.done == 1
    assert statuses(old) == {RunStatus.QUEUED} and statuses(new) == {RunStatus.FAILED}


def test_batches_of_a_small_size_reach_every_run(clock: FakeClock) -> None:
    runs = failed(7)
    seen: list[list[uuid.UUID]] = []
    done = bulk.apply("retry", JobRun.objects.all(), batch_size=3, each_batch=seen.append)
    assert (done.done, done.batches) == (7, 3)
    assert [len(ids) for ids in seen] == [3, 3, 1]
    assert sorted(pk for ids in seen for pk in ids) == sorted(r.pk for r in runs)
    assert statuses(runs) == {RunStatus.QUEUED}


def test_runs_in_a_status_the_verb_does_not_apply_to_are_skipped_and_counted() -> None:
    retried = failed(2)
    left = [
        JobRunFactory.create(status=RunStatus.SUCCEEDED),
        JobRunFactory.create(status=RunStatus.RUNNING, lease_owner="w1"),
        # Cancelled while running: its worker still holds it, so it cannot be retried yet.
        JobRunFactory.create(status=RunStatus.CANCELLED, lease_owner="w1"),
    ]
    assert bulk.preview("retry", JobRun.objects.all()).applicable == 2
    done = bulk.apply("retry", JobRun.objects.all())
    assert (done.matched, done.done, done.skipped, done.changed) == (5, 2, 3, 0)
    assert statuses(retried) == {RunStatus.QUEUED}
    assert {(r.pk, r.status) for r in left} == set(
        JobRun.objects.filter(pk__in=[r.pk for r in left]).values_list("pk", "status")
    )


def changed_after_the_batch_was_read(pk: uuid.UUID) -> Callable[..., Any]:
    """A database hook: right after the batch's ids are read (the keyset ``SELECT ...
    LIMIT``), before its transaction writes anything, ``pk`` becomes succeeded, as if a
    worker had finished it in between."""
    seen: list[str] = []

    def hook(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        if len(seen) == 1:
            seen.append("fired")
            JobRun.objects.filter(pk=pk).update(status=RunStatus.SUCCEEDED)
        elif not seen and "LIMIT" in sql.upper():
            seen.append("read")
        return execute(sql, params, many, context)

    return hook


def test_a_run_changed_between_the_read_and_its_batch_is_skipped_not_an_error() -> None:
    runs = sorted(failed(3), key=lambda r: r.pk)
    with connections[conf.database()].execute_wrapper(changed_after_the_batch_was_read(runs[2].pk)):
        done = bulk.apply("retry", JobRun.objects.all(), batch_size=10)
    assert (done.done, done.changed, done.skipped) == (2, 1, 1)
    assert statuses(runs[:2]) == {RunStatus.QUEUED} and statuses(runs[2:]) == {RunStatus.SUCCEEDED}


def test_bulk_cancel_cancels_children_and_sends_the_signal(clock: FakeClock) -> None:
    parents = [JobRunFactory.create(status=RunStatus.QUEUED) for _ in range(3)]
    child = JobRunFactory.create(status=RunStatus.SLEEPING, parent=parents[0])
    heard: list[uuid.UUID] = []

    def listen(sender: Any, run: JobRun, **kwargs: Any) -> None:
        heard.append(run.pk)

    signals.run_cancelled.connect(listen)
    try:
        done = bulk.apply("cancel", JobRun.objects.filter(parent=None), batch_size=2)
    finally:
        signals.run_cancelled.disconnect(listen)
    assert (done.done, done.batches) == (3, 2)
    assert statuses([*parents, child]) == {RunStatus.CANCELLED}
    assert sorted(heard) == sorted([*(p.pk for p in parents), child.pk])


def test_runs_cancelled_along_with_a_parent_that_matched_count_as_done_not_skipped(
    clock: FakeClock,
) -> None:
    parent = JobRunFactory.create(id=FIRST, status=RunStatus.QUEUED)
    # The child's own batch comes after its parent's: by then it is cancelled already.
    child = JobRunFactory.create(id=LAST, status=RunStatus.QUEUED, parent=parent)
    # Cancelled along with its parent too, but not of the set: not counted.
    outside = JobRunFactory.create(status=RunStatus.QUEUED, parent=child, queue="other")
    chosen = bulk.run_filter(statuses=["queued"], queue="default").runs(clock.now())
    done = bulk.apply("cancel", chosen, batch_size=1)
    assert (done.matched, done.done, done.along, done.skipped, done.changed) == (2, 2, 1, 0, 0)
    assert statuses([parent, child, outside]) == {RunStatus.CANCELLED}


def test_a_dry_run_of_replay_counts_the_runs_without_the_step_apart(driver: Driver) -> None:
    FAIL_ONCE.add("fragile-three")
    with_step = fragile.enqueue()
    driver.step()
    JobRunFactory.create(job_name="tests.ops.fragile", status=RunStatus.FAILED)
    JobRunFactory.create(job_name="tests.ops.fragile", status=RunStatus.RUNNING, lease_owner="w")
    shown = bulk.preview("replay", JobRun.objects.all(), step="two")
    assert (shown.matched, shown.applicable, shown.without_step) == (3, 1, 1)
    assert shown.first_ids == [with_step.pk]
    done = bulk.apply("replay", JobRun.objects.all(), step="two")
    assert (done.done, done.without_step) == (shown.applicable, shown.without_step)


def test_bulk_replay_skips_runs_without_the_step(driver: Driver) -> None:
    FAIL_ONCE.add("fragile-three")
    with_step = fragile.enqueue()
    driver.step()
    without = JobRunFactory.create(job_name="tests.ops.fragile", status=RunStatus.FAILED)
    done = bulk.apply("replay", JobRun.objects.all(), step="two")
    assert (done.done, done.without_step, done.skipped) == (1, 1, 1)
    assert list(StepRecord.objects.filter(run=with_step).values_list("name", flat=True)) == ["one"]
    assert statuses([with_step]) == {RunStatus.QUEUED}
    assert statuses([without]) == {RunStatus.FAILED}  # its savepoint rolled back alone


def test_mistakes_in_a_filter_are_one_line() -> None:
    with pytest.raises(ValueError, match="unknown status 'faild'; the statuses are: queued, "):
        bulk.run_filter(statuses=["faild"])
    with pytest.raises(InvalidDuration):
        bulk.run_filter(since="3 days")
    with pytest.raises(ValueError, match="replay needs the step"):
        bulk.apply("replay", JobRun.objects.all())
    assert not bulk.run_filter() and bulk.run_filter(since=timedelta(hours=1))
