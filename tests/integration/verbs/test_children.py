"""The operator's verbs and child runs.

- retry / replay of a step that invoked a child start a new child instead of
  attaching to the old one again (whose key outlived the forgotten step);
- cancelling a child wakes its waiting parent at once; cancelling a parent cancels
  its unfinished children (and theirs);
- a retry gives waits and invokes that did not complete a fresh deadline.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_durable_jobs import signals
from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.memory import MemoryEventLog, MemoryStepStore
from django_durable_jobs.engine.sync_steps import Steps
from django_durable_jobs.exceptions import JobTimeoutError, Suspension
from django_durable_jobs.models import JobRun, RunStatus, StepRecord, StepStatus
from django_durable_jobs.verbs import runs
from django_durable_jobs.verbs.events import publish_event
from tests.conftest import Driver
from tests.testapp import jobs
from tests.testapp.event_jobs import parent, waiter
from tests.testapp.input_jobs import grandparent
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db


def children_of(run: JobRun) -> list[JobRun]:
    """Oldest first: the tests move the fake clock on before a child starts again."""
    return list(JobRun.objects.filter(parent=run).order_by("created_at"))


def refreshed(run: JobRun) -> JobRun:
    run.refresh_from_db()
    return run


# -- 14. retry and replay start the child again -----------------------------------------


def failed_with_child(driver: Driver) -> JobRun:
    jobs.FAIL_ONCE.add("child")  # tests.child refuses while this is set
    run = parent.enqueue(5)
    driver.drain()
    assert refreshed(run).status == RunStatus.FAILED and run.error_code == "X_CHILD_FAILED"
    jobs.FAIL_ONCE.discard("child")
    driver.clock.advance("1m")
    return run


def test_retry_after_the_child_failed_runs_a_new_child(driver: Driver) -> None:
    run = failed_with_child(driver)
    runs.retry(run.pk)
    driver.drain()
    assert refreshed(run).status == RunStatus.SUCCEEDED, run.error
    assert run.result == {"child": 50}
    old, new = children_of(run)
    assert old.status == RunStatus.FAILED and old.idempotency_key is None
    assert new.status == RunStatus.SUCCEEDED
    assert new.idempotency_key == f"invoke:{run.pk}:call-child"
    step = StepRecord.objects.get(run=run, name="call-child")
    assert step.child == new.pk and step.status == StepStatus.COMPLETED


@pytest.mark.parametrize("how", ["runs", "command", "admin"])
def test_replay_from_an_invoke_step_runs_the_child_again(
    driver: Driver, how: str, admin_client: Any
) -> None:
    run = parent.enqueue(3)
    driver.drain()
    assert refreshed(run).status == RunStatus.SUCCEEDED
    driver.clock.advance("1m")
    if how == "runs":
        runs.replay_from(run.pk, "call-child")
    elif how == "command":
        call_command("jobs", "replay", str(run.pk), "call-child")
    else:
        url = reverse(
            "admin:django_durable_jobs_jobrun_operate",
            kwargs={"object_id": run.pk, "verb": "replay"},
        )
        posted = admin_client.post(url, {"step": "call-child", "confirmed": "yes"})
        assert posted.status_code == 302
    driver.drain()
    assert refreshed(run).status == RunStatus.SUCCEEDED
    first, second = children_of(run)
    assert first.status == second.status == RunStatus.SUCCEEDED
    assert StepRecord.objects.get(run=run, name="call-child").child == second.pk
    assert Effect.objects.filter(name="after-child").count() == 2


def test_replay_of_a_failed_parent_from_its_invoke_step_runs_the_child_again(
    driver: Driver,
) -> None:
    run = failed_with_child(driver)
    runs.replay_from(run.pk, "call-child")
    driver.drain()
    assert refreshed(run).status == RunStatus.SUCCEEDED, run.error
    assert [child.status for child in children_of(run)] == [
        RunStatus.FAILED,
        RunStatus.SUCCEEDED,
    ]


def test_retry_of_a_parent_cancelled_with_its_child_runs_a_new_child(
    driver: Driver, clock: FakeClock
) -> None:
    run = parent.using(queue="parents").enqueue(4)
    driver.step(run)
    runs.cancel(run.pk)
    (old,) = children_of(run)
    assert refreshed(old).status == RunStatus.CANCELLED
    clock.advance("1m")
    runs.retry(run.pk)
    driver.drain()
    assert refreshed(run).status == RunStatus.SUCCEEDED, run.error
    assert [child.status for child in children_of(run)] == [
        RunStatus.CANCELLED,
        RunStatus.SUCCEEDED,
    ]


def test_replay_from_a_later_step_keeps_the_child(driver: Driver) -> None:
    run = parent.enqueue(2)
    driver.drain()
    runs.replay_from(run.pk, "after")
    driver.drain()
    assert refreshed(run).status == RunStatus.SUCCEEDED
    (child,) = children_of(run)
    assert child.idempotency_key == f"invoke:{run.pk}:call-child"


# -- 16. a retry gives unfinished waits a fresh deadline ----------------------------------


def test_retry_after_a_required_wait_timed_out_waits_again(
    driver: Driver, clock: FakeClock
) -> None:
    run = jobs.required_wait.enqueue()
    driver.step(run)
    clock.advance("1h")
    driver.drain()
    assert refreshed(run).status == RunStatus.FAILED and run.error_code == "X_JOB_TIMEOUT"
    clock.advance("1d")
    runs.retry(run.pk)
    driver.step(run)
    assert refreshed(run).status == RunStatus.WAITING, run.error
    step = StepRecord.objects.get(run=run, name="must")
    assert step.deadline == clock.now() + timedelta(hours=1)
    publish_event("never.happens", {"at": "last"})
    runs.wake(run.pk)  # what the publish does on commit, which a test transaction never reaches
    driver.step(run)
    assert refreshed(run).status == RunStatus.SUCCEEDED and run.result == {"at": "last"}


def test_retry_of_a_run_cancelled_while_waiting_waits_a_full_timeout_again(
    driver: Driver, clock: FakeClock
) -> None:
    run = waiter.enqueue("k")
    driver.step(run)
    runs.cancel(run.pk)
    clock.advance("2h")  # the wait's 1h deadline passed while it was cancelled
    runs.retry(run.pk)
    driver.step(run)
    assert refreshed(run).status == RunStatus.WAITING
    clock.advance("59m")
    driver.drain()
    assert refreshed(run).status == RunStatus.WAITING
    clock.advance("1m")
    driver.drain()
    assert refreshed(run).status == RunStatus.SUCCEEDED and run.result is None


def test_retry_after_an_invoke_timed_out_waits_for_the_same_child_again(
    driver: Driver, clock: FakeClock
) -> None:
    run = parent.using(queue="parents").enqueue(6)  # the child runs on "default"
    driver.step(run)
    (child,) = children_of(run)
    JobRun.objects.filter(pk=child.pk).update(
        status="sleeping", wake_at=clock.now() + timedelta(days=30)
    )
    clock.advance("1h")
    driver.drain()
    assert refreshed(run).status == RunStatus.FAILED and run.error_code == "X_JOB_TIMEOUT"
    runs.retry(run.pk)
    driver.step(run)
    assert refreshed(run).status == RunStatus.WAITING, run.error
    assert StepRecord.objects.get(run=run, name="call-child").deadline == clock.now() + timedelta(
        hours=1
    )
    runs.wake(child.pk)
    driver.drain()
    assert refreshed(run).status == RunStatus.SUCCEEDED and run.result == {"child": 60}
    assert children_of(run) == [child]  # the unfinished child was not replaced


# -- 15. cancelling children and parents --------------------------------------------------


def test_cancelling_a_child_wakes_its_waiting_parent_at_once(
    driver: Driver, clock: FakeClock
) -> None:
    run = parent.using(queue="parents").enqueue(7)
    driver.step(run)
    assert refreshed(run).status == RunStatus.WAITING
    assert run.wake_at is not None and run.wake_at > clock.now()
    (child,) = children_of(run)
    runs.cancel(child.pk)
    assert refreshed(run).wake_at == clock.now()
    driver.step(run)
    assert refreshed(run).status == RunStatus.FAILED and run.error_code == "X_CHILD_FAILED"


@pytest.fixture
def cancelled() -> Any:
    got: list[Any] = []

    def receiver(sender: Any, run: JobRun, **kwargs: Any) -> None:
        got.append(run.pk)

    signals.run_cancelled.connect(receiver)
    yield got
    signals.run_cancelled.disconnect(receiver)


def test_cancelling_a_parent_cancels_its_children_and_theirs(
    driver: Driver, clock: FakeClock, cancelled: list[Any]
) -> None:
    top = grandparent.using(queue="top").enqueue(1)
    driver.step(top)
    (middle,) = children_of(top)
    JobRun.objects.filter(pk=middle.pk).update(queue="middle")
    driver.step(middle)
    (bottom,) = children_of(middle)
    assert refreshed(middle).status == RunStatus.WAITING
    assert refreshed(bottom).status == RunStatus.QUEUED
    runs.cancel(top.pk)
    for run in (top, middle, bottom):
        assert refreshed(run).status == RunStatus.CANCELLED
        assert run.error_code == "X_RUN_CANCELLED" and run.finished_at == clock.now()
    assert middle.error == bottom.error == f"cancelled along with run {top.pk}"
    assert set(cancelled) == {top.pk, middle.pk, bottom.pk}
    assert driver.drain() == 0  # nothing of the family runs any more


def test_cancelling_a_parent_stops_a_running_child_at_its_next_step(
    driver: Driver, clock: FakeClock
) -> None:
    run = parent.using(queue="parents").enqueue(8)
    driver.step(run)
    (child,) = claim("other-worker", now=clock.now(), lease=timedelta(minutes=1), limit=1)
    runs.cancel(run.pk)
    child.refresh_from_db()
    assert child.status == RunStatus.CANCELLED
    assert child.lease_owner == "other-worker"  # its worker stops it and lets go


def test_cancelling_a_parent_leaves_finished_children_alone(driver: Driver) -> None:
    run = grandparent.enqueue(1)
    driver.step(run)
    (middle,) = children_of(run)
    JobRun.objects.filter(pk=middle.pk).update(status=RunStatus.SUCCEEDED)
    runs.cancel(run.pk)
    assert refreshed(middle).status == RunStatus.SUCCEEDED


def test_the_engine_keeps_a_recorded_deadline_and_opens_a_fresh_one_when_cleared() -> None:
    clock = FakeClock()
    store, events = MemoryStepStore(), MemoryEventLog(clock)

    def wait() -> None:
        steps = Steps(run_id="r", job_name="j", store=store, events=events, clock=clock)
        steps.wait_for_event("wait", "e", timeout="1h", required=True)

    with pytest.raises(Suspension):
        wait()
    first = store.get("r", "wait")
    assert first is not None and first.deadline == clock.now() + timedelta(hours=1)
    clock.advance("30m")
    with pytest.raises(Suspension):
        wait()
    later = store.get("r", "wait")
    assert later is not None and later.deadline == first.deadline  # not counted from now
    clock.advance("1h")
    with pytest.raises(JobTimeoutError):
        wait()
    timed_out = store.get("r", "wait")
    assert timed_out is not None
    store.put(replace(timed_out, deadline=None))  # what runs.retry does
    with pytest.raises(Suspension):
        wait()
    again = store.get("r", "wait")
    assert again is not None and again.deadline == clock.now() + timedelta(hours=1)
    assert again.started_at == first.started_at and again.event_cursor == first.event_cursor
