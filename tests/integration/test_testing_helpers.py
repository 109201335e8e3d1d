"""django_durable_jobs.testing: run jobs inline on a fake clock, for users' test suites."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import TestCase

from django_durable_jobs import conf, job, publish_event
from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine import clock as clocks
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.testing import InlineJobs, RunNotSucceeded, RunStuck, inline_jobs
from django_durable_jobs.verbs import pauses
from tests.conftest import Driver
from tests.testapp import jobs as testjobs
from tests.testapp.event_jobs import parent


@job(name="tests.helpers.forever")
def forever(ctx: Any, n: int) -> None:
    forever.enqueue(n + 1)  # never settles: each run starts another


@pytest.mark.django_db
def test_run_fast_forwards_a_ten_day_flow(durable_jobs: InlineJobs) -> None:
    start = durable_jobs.now
    run = durable_jobs.run(testjobs.onboarding, user_id=42)
    assert run.status == RunStatus.SUCCEEDED
    assert run.result == {"ordered": False, "email": "u42@example.com", "order": None}
    assert durable_jobs.now - start == timedelta(days=10)  # 3d sleep + the 7d wait
    statuses = {step.name: step.status for step in durable_jobs.steps(run)}
    assert statuses == {
        "load-user": "completed",
        "send-welcome": "completed",
        "sleep:3d": "completed",
        "wait-order": "completed",
        "nudge": "completed",
    }
    assert testjobs.CALLS["welcome"] == 1  # replayed on every resume, sent once


@pytest.mark.django_db
def test_advance_and_publish_drive_a_run_step_by_step(durable_jobs: InlineJobs) -> None:
    run = durable_jobs.enqueue(testjobs.onboarding, user_id=7)
    assert run.created_at == durable_jobs.now  # the fake clock stamps enqueues too
    assert durable_jobs.drain() == 1
    assert durable_jobs.refresh(run).status == RunStatus.SLEEPING
    durable_jobs.advance("1d")
    assert durable_jobs.refresh(run).status == RunStatus.SLEEPING
    durable_jobs.advance("2d")
    assert durable_jobs.refresh(run).status == RunStatus.WAITING
    durable_jobs.publish("order.paid", {"order_id": 1}, key="8")  # another customer's
    assert durable_jobs.refresh(run).status == RunStatus.WAITING
    durable_jobs.publish("order.paid", {"order_id": 2}, key="7")
    assert durable_jobs.result(run)["order"] == {"order_id": 2}
    assert durable_jobs.step(run, "wait-order").output == {"order_id": 2}
    assert [event.key for event in durable_jobs.events("order.paid")] == ["8", "7"]


@pytest.mark.django_db
def test_an_event_published_inside_the_test_transaction_wakes_the_waiter(
    durable_jobs: InlineJobs,
) -> None:
    # In a TestCase the on-commit wake-up never fires; drain looks for the event itself.
    run = durable_jobs.enqueue(testjobs.onboarding, user_id=5)
    durable_jobs.drain()
    durable_jobs.advance("3d")
    publish_event("order.paid", {"order_id": 9}, key="5")
    durable_jobs.drain()
    assert durable_jobs.result(run)["ordered"] is True


@pytest.mark.django_db
def test_publish_without_drain_only_publishes(durable_jobs: InlineJobs) -> None:
    run = durable_jobs.enqueue(testjobs.onboarding, user_id=3)
    durable_jobs.drain()
    durable_jobs.advance("3d")
    durable_jobs.publish("order.paid", key="3", drain=False)
    assert durable_jobs.refresh(run).status == RunStatus.WAITING
    durable_jobs.drain()
    assert durable_jobs.refresh(run).status == RunStatus.SUCCEEDED


@pytest.mark.django_db
def test_retries_replay_completed_steps(durable_jobs: InlineJobs) -> None:
    testjobs.FAIL_ONCE.add("two")
    run = durable_jobs.run(testjobs.three_steps, user_id=1)
    assert durable_jobs.result(run)["steps"] == ["one", "two", "three"]
    assert testjobs.CALLS == {"one": 1, "two": 2, "three": 1}
    assert durable_jobs.step(run, "two").attempts == 2 and run.attempt == 2


@pytest.mark.django_db
def test_run_fast_forwards_backoffs_until_the_run_fails(durable_jobs: InlineJobs) -> None:
    run = durable_jobs.run(testjobs.always_fails)
    assert run.status == RunStatus.FAILED and run.attempt == 3
    with pytest.raises(RunNotSucceeded, match=r"is failed: ValueError: always fails"):
        durable_jobs.result(run)


@pytest.mark.django_db
def test_child_runs_are_executed_by_drain(durable_jobs: InlineJobs) -> None:
    run = durable_jobs.run(parent, 4)
    assert durable_jobs.result(run) == {"child": 40}
    (child,) = durable_jobs.runs("tests.child")
    assert child.parent_id == run.pk and child.status == RunStatus.SUCCEEDED


@pytest.mark.django_db
def test_finish_says_when_nothing_will_wake_the_run(durable_jobs: InlineJobs) -> None:
    run = durable_jobs.enqueue(testjobs.noop)
    claim("someone-else", now=durable_jobs.now, lease=timedelta(hours=1))
    with pytest.raises(RunStuck, match="is running and nothing is scheduled to wake it"):
        durable_jobs.finish(run)


@pytest.mark.django_db
def test_drain_stops_a_run_that_never_settles(durable_jobs: InlineJobs) -> None:
    durable_jobs.enqueue(forever, 0)
    with pytest.raises(RuntimeError, match="still runnable after 5 executions"):
        durable_jobs.drain(limit=5)
    assert JobRun.objects.filter(status=RunStatus.QUEUED).count() == 1  # released, not lost


@pytest.mark.django_db
def test_step_lookup_names_the_steps_there_are(durable_jobs: InlineJobs) -> None:
    run = durable_jobs.run(testjobs.add, 1, 2)
    assert durable_jobs.result(run) == 3
    with pytest.raises(LookupError, match=r"no step 'ad' \(steps: 'add'\)"):
        durable_jobs.step(run, "ad")


@pytest.mark.django_db
def test_jobs_can_be_named_and_enqueued_with_options(durable_jobs: InlineJobs) -> None:
    run = durable_jobs.enqueue(testjobs.add.using(run_after=timedelta(hours=1)), 2, 2)
    assert durable_jobs.drain() == 0
    assert durable_jobs.result(durable_jobs.run("tests.add", 1, 1)) == 2
    durable_jobs.advance("1h")
    assert durable_jobs.result(run) == 4


@pytest.mark.django_db
def test_stop_restores_the_clock_and_the_settings() -> None:
    before = clocks.current()
    with inline_jobs() as jobs:
        assert clocks.current() is jobs.clock
        assert conf.get("EVENT_POLL") == "3650d"  # waits park until their deadline
    assert clocks.current() is before
    assert conf.get("EVENT_POLL") == "30s"
    with pytest.raises(RuntimeError, match="already started"):
        jobs.start().start()
    jobs.stop()


class InlineJobsInATestCase(TestCase):
    """The unittest way: start in setUp, stop as a cleanup."""

    def setUp(self) -> None:
        self.jobs = InlineJobs().start()
        self.addCleanup(self.jobs.stop)

    def test_a_flow_in_a_test_case(self) -> None:
        run = self.jobs.enqueue(testjobs.onboarding, user_id=11)
        self.jobs.drain()
        self.jobs.advance("3d")
        publish_event("order.paid", {"order_id": 1}, key="11")
        self.jobs.drain()
        assert self.jobs.result(run)["order"] == {"order_id": 1}


@pytest.mark.django_db
def test_advance_right_after_enqueue_lets_the_time_pass_with_a_worker_running(
    durable_jobs: InlineJobs,
) -> None:
    start = durable_jobs.now
    run = durable_jobs.enqueue(testjobs.onboarding, user_id=7)
    assert durable_jobs.advance("3d") == start + timedelta(days=3)
    # It ran at once, slept three days and now waits; not "still sleeping until day 6".
    assert durable_jobs.refresh(run).status == RunStatus.WAITING
    sleep = durable_jobs.step(run, "sleep:3d")
    assert sleep.started_at == start and sleep.wake_at == start + timedelta(days=3)
    durable_jobs.advance("7d")  # the wait times out on day 10, inside this advance
    assert durable_jobs.result(run)["ordered"] is False
    assert durable_jobs.step(run, "nudge").started_at == start + timedelta(days=10)


@pytest.mark.django_db
def test_advance_without_drain_only_moves_the_clock(durable_jobs: InlineJobs) -> None:
    run = durable_jobs.enqueue(testjobs.onboarding, user_id=7)
    durable_jobs.advance("3d", drain=False)
    assert durable_jobs.refresh(run).status == RunStatus.QUEUED


@pytest.mark.django_db
def test_runs_of_a_paused_queue_or_job_wait_for_the_resume(durable_jobs: InlineJobs) -> None:
    pauses.pause("queue", "default")
    queued = durable_jobs.enqueue(testjobs.add, 1, 2)
    assert durable_jobs.drain() == 0
    with pytest.raises(RunStuck, match="its queue 'default' is paused"):
        durable_jobs.finish(queued)
    pauses.resume("queue", "default")
    pauses.pause("job", "tests.add")
    other = durable_jobs.enqueue(testjobs.noop)
    assert durable_jobs.drain() == 1  # the job's pause holds back its runs only
    assert durable_jobs.refresh(other).status == RunStatus.SUCCEEDED
    assert durable_jobs.refresh(queued).status == RunStatus.QUEUED
    with pytest.raises(RunStuck, match="its job is paused"):
        durable_jobs.finish(queued)
    pauses.resume("job", "tests.add")
    assert durable_jobs.result(durable_jobs.finish(queued)) == 3


@pytest.mark.django_db
def test_a_sleeping_run_of_a_paused_queue_stays_parked_past_its_wake_up(
    durable_jobs: InlineJobs,
) -> None:
    run = durable_jobs.enqueue(testjobs.onboarding, user_id=9)
    durable_jobs.drain()
    assert durable_jobs.refresh(run).status == RunStatus.SLEEPING
    pauses.pause("queue", "default")
    durable_jobs.advance("4d")  # past the 3-day sleep: due, but not executed
    assert durable_jobs.refresh(run).status == RunStatus.SLEEPING
    pauses.resume("queue", "default")
    durable_jobs.drain()
    assert durable_jobs.refresh(run).status == RunStatus.WAITING


@pytest.mark.django_db
def test_the_test_driver_leaves_paused_runs_alone(driver: Driver) -> None:
    run = testjobs.add.enqueue(2, 3)
    pauses.pause("job", "tests.add")
    assert driver.drain() == 0
    pauses.resume("job", "tests.add")
    assert driver.drain() == 1
    run.refresh_from_db()
    assert run.result == 5
