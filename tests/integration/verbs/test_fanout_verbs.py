"""Fan-out and the operator's verbs: cancelling a fan-out parent cancels its children,
and a retry of a failed fan-out step starts new children for the failed ones (the
children that succeeded keep their results) instead of failing again at once."""

from __future__ import annotations

from collections import Counter

import pytest

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.fanout import key_prefix
from django_durable_jobs.models import JobRun, RunStatus, StepRecord, StepStatus
from django_durable_jobs.verbs import runs
from tests.conftest import Driver
from tests.testapp import fanout_jobs, jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db


def children(parent: JobRun) -> list[JobRun]:
    """By position, then oldest first (a retried child has a newer twin)."""
    return sorted(
        JobRun.objects.filter(parent=parent), key=lambda run: (run.args[0], run.created_at)
    )


def refreshed(run: JobRun) -> JobRun:
    run.refresh_from_db()
    return run


def test_cancelling_a_fan_out_parent_cancels_its_unfinished_children(
    clock: FakeClock, driver: Driver
) -> None:
    parent = fanout_jobs.squares.enqueue(3)
    driver.step(parent)
    first, *rest = children(parent)
    driver.step(first)
    runs.cancel(parent.pk)
    assert refreshed(parent).status == RunStatus.CANCELLED
    assert refreshed(first).status == RunStatus.SUCCEEDED  # finished: left alone
    for kid in rest:
        assert refreshed(kid).status == RunStatus.CANCELLED
        assert kid.error == f"cancelled along with run {parent.pk}"
    assert driver.step() is None  # nothing is left to run


def failed_fan_out(driver: Driver) -> JobRun:
    jobs.FAIL_ONCE.add("square-1")  # child 1 fails once, then succeeds
    parent = fanout_jobs.squares.enqueue(3)
    driver.drain()
    assert refreshed(parent).status == RunStatus.FAILED
    assert parent.error_code == "X_CHILD_FAILED"
    driver.clock.advance("1m")
    return parent


def test_retry_of_a_failed_fan_out_starts_new_children_for_the_failed_ones(
    driver: Driver,
) -> None:
    parent = failed_fan_out(driver)
    runs.retry(parent.pk)
    driver.drain()
    assert refreshed(parent).status == RunStatus.SUCCEEDED, parent.error
    assert parent.result == {"results": [0, 1, 4], "total": "total-5"}
    kids = children(parent)
    assert [(kid.args[0], kid.status) for kid in kids] == [
        (0, RunStatus.SUCCEEDED),
        (1, RunStatus.FAILED),
        (1, RunStatus.SUCCEEDED),
        (2, RunStatus.SUCCEEDED),
    ]
    assert kids[1].idempotency_key is None  # the failed child let go of its key
    assert kids[2].idempotency_key == f"{key_prefix(str(parent.pk), 'squares')}1"
    effects = Counter(Effect.objects.values_list("name", flat=True))
    assert (effects["square-0"], effects["square-1"], effects["square-2"]) == (1, 2, 1)
    step = StepRecord.objects.get(run=parent, name="squares")
    assert step.status == StepStatus.COMPLETED
    assert step.output == [0, 1, 4]


def test_retry_of_a_cancelled_fan_out_parent_starts_its_cancelled_children_again(
    clock: FakeClock, driver: Driver
) -> None:
    parent = fanout_jobs.squares.enqueue(2)
    driver.step(parent)
    first, _ = children(parent)
    driver.step(first)
    runs.cancel(parent.pk)
    clock.advance("1m")
    runs.retry(parent.pk)
    driver.drain()
    assert refreshed(parent).status == RunStatus.SUCCEEDED, parent.error
    assert parent.result == {"results": [0, 1], "total": "total-1"}
    assert [kid.status for kid in children(parent)] == [
        RunStatus.SUCCEEDED,
        RunStatus.CANCELLED,
        RunStatus.SUCCEEDED,
    ]


def test_a_timed_out_fan_out_retried_gets_a_fresh_window(clock: FakeClock, driver: Driver) -> None:
    parent = fanout_jobs.slow.enqueue()
    driver.drain()
    clock.advance("11m")
    driver.drain()
    assert refreshed(parent).error_code == "X_JOB_TIMEOUT"
    runs.retry(parent.pk)
    driver.drain()
    # The sleepy child still sleeps; the step waits for it in a new 10-minute window
    # instead of timing out again at once, and starts no second sleepy child.
    assert refreshed(parent).status == RunStatus.WAITING
    assert JobRun.objects.filter(parent=parent).count() == 2
    (sleepy,) = JobRun.objects.filter(parent=parent, status=RunStatus.SLEEPING)
    clock.advance("5m")  # inside the new window
    runs.wake(sleepy.pk)
    driver.drain()
    assert refreshed(parent).status == RunStatus.SUCCEEDED, parent.error
    assert parent.result == [1, 4]


def test_replay_from_a_fan_out_step_starts_every_child_again(
    clock: FakeClock, driver: Driver
) -> None:
    parent = fanout_jobs.squares.enqueue(2)
    driver.drain()
    assert refreshed(parent).status == RunStatus.SUCCEEDED
    clock.advance("1m")
    runs.replay_from(parent.pk, "squares")
    driver.drain()
    assert refreshed(parent).status == RunStatus.SUCCEEDED, parent.error
    assert JobRun.objects.filter(parent=parent, status=RunStatus.SUCCEEDED).count() == 4
    effects = Counter(Effect.objects.values_list("name", flat=True))
    assert (effects["square-0"], effects["square-1"]) == (2, 2)
