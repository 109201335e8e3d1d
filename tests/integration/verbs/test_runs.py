"""The operator's verbs on runs (``runs.py``): cancel, retry, wake, replay_from, purge."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs import signals
from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.timeouts import TimeGuard
from django_durable_jobs.models import Event, JobRun, RunStatus, StepRecord, StepStatus
from django_durable_jobs.verbs import runs
from django_durable_jobs.verbs.runs import RunNotFound, RunStateError, StepNotFound
from django_durable_jobs.worker.execution import execute
from tests.conftest import Driver
from tests.factories import JobRunFactory, StepRecordFactory
from tests.testapp import jobs
from tests.testapp.admin_jobs import fragile, napper, waiter
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db

LEASE = timedelta(minutes=1)


def effects(*names: str) -> list[int]:
    return [Effect.objects.filter(name=name).count() for name in names]


def step_names(run: JobRun) -> list[str]:
    return list(run.steps.order_by("id").values_list("name", flat=True))


# -- cancel ----------------------------------------------------------------------------


@pytest.fixture
def cancelled_signals() -> Any:
    got: list[JobRun] = []

    def receiver(sender: Any, run: JobRun, **kwargs: Any) -> None:
        got.append(run)

    signals.run_cancelled.connect(receiver)
    yield got
    signals.run_cancelled.disconnect(receiver)


def test_cancel_a_queued_run(clock: FakeClock, driver: Driver, cancelled_signals: Any) -> None:
    run = jobs.noop.enqueue()
    cancelled = runs.cancel(run.pk)
    assert cancelled.status == RunStatus.CANCELLED
    assert cancelled.finished_at == clock.now() and cancelled.wake_at is None
    assert cancelled.error_code == "X_RUN_CANCELLED" and cancelled.lease_owner == ""
    assert [r.pk for r in cancelled_signals] == [run.pk]
    assert driver.step() is None  # nothing runnable


@pytest.mark.parametrize(("job", "args"), [(napper, ()), (waiter, ("42",))])
def test_cancel_a_suspended_run(driver: Driver, clock: FakeClock, job: Any, args: Any) -> None:
    run = job.enqueue(*args)
    driver.step()
    run.refresh_from_db()
    assert run.status in (RunStatus.SLEEPING, RunStatus.WAITING)
    runs.cancel(str(run.pk))
    clock.advance("8d")
    assert driver.step() is None  # its wake time came, but it stays cancelled
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.wake_at is None


def test_cancel_a_running_run_keeps_the_lease_until_the_worker_stops(clock: FakeClock) -> None:
    run = fragile.enqueue()
    [claimed] = claim("w", now=clock.now(), lease=LEASE)
    cancelled = runs.cancel(run.pk)
    # The worker still holds it: it stops after the step it is in.
    assert cancelled.status == RunStatus.CANCELLED and cancelled.lease_owner == "w"
    with pytest.raises(RunStateError, match="has not stopped it"):
        runs.retry(run.pk)
    executed = execute(claimed, clock=clock, owner="w", guard=TimeGuard(use_signals=False))
    assert not executed.recorded
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.error_code == "X_RUN_CANCELLED"
    assert run.lease_owner == ""
    # The step it executed (no heartbeat told it of the cancel) is recorded: its side
    # effect happened, and a retry replays it; nothing after it ran.
    assert step_names(run) == ["one"]
    assert list(Effect.objects.values_list("name", flat=True)) == ["fragile-one"]
    assert runs.retry(run.pk).status == RunStatus.QUEUED  # now it can


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_cancel_refuses_finished_runs(status: str) -> None:
    run = JobRunFactory.create(status=status)
    with pytest.raises(RunStateError, match=f"it is {status}; only queued"):
        runs.cancel(run.pk)
    run.refresh_from_db()
    assert run.status == status


@pytest.mark.parametrize("verb", [runs.cancel, runs.retry, runs.wake, runs.get_run])
def test_unknown_and_malformed_run_ids(verb: Any) -> None:
    with pytest.raises(RunNotFound, match="no run has the id"):
        verb(uuid.uuid4())
    with pytest.raises(RunNotFound, match="'nope' is not a run id"):
        verb("nope")


# -- retry -----------------------------------------------------------------------------


def test_retry_a_failed_run_replays_its_completed_steps(driver: Driver, clock: FakeClock) -> None:
    jobs.FAIL_ONCE.add("fragile-two")
    run = fragile.enqueue()
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.attempt == 1
    clock.advance("1h")
    retried = runs.retry(run.pk)
    assert retried.status == RunStatus.QUEUED and retried.attempt == 0
    assert retried.wake_at == clock.now() and retried.finished_at is None
    assert (retried.error, retried.error_code, retried.traceback) == ("", "", "")
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.attempt == 1
    assert run.result == ["fragile-one", "fragile-two", "fragile-three"]
    assert effects("fragile-one", "fragile-two", "fragile-three") == [1, 2, 1]  # "one" replayed
    assert StepRecord.objects.get(run=run, name="two").attempts == 2


def test_retry_a_cancelled_run(driver: Driver) -> None:
    run = fragile.enqueue()
    runs.cancel(run.pk)
    runs.retry(run.pk)
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED


@pytest.mark.parametrize(
    "status", [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SLEEPING, RunStatus.SUCCEEDED]
)
def test_retry_refuses_runs_that_did_not_fail(status: str) -> None:
    run = JobRunFactory.create(status=status)
    with pytest.raises(RunStateError, match="only failed or cancelled runs can be retried"):
        runs.retry(run.pk)


# -- wake ------------------------------------------------------------------------------


def test_wake_a_sleeping_run_ends_its_sleep_now(driver: Driver, clock: FakeClock) -> None:
    run = napper.enqueue()
    driver.step()
    clock.advance("1m")
    woken = runs.wake(run.pk)
    assert woken.status == RunStatus.SLEEPING and woken.wake_at == clock.now()
    driver.step()  # without the step's wake time moved, the engine would sleep again
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    sleep = StepRecord.objects.get(run=run, name="sleep:3d")
    assert sleep.status == StepStatus.COMPLETED and sleep.completed_at == clock.now()
    assert effects("nap-before", "nap-after") == [1, 1]


def test_wake_a_waiting_run_looks_for_its_event_now(driver: Driver, clock: FakeClock) -> None:
    run = waiter.enqueue("42")
    driver.step()
    clock.advance("1s")
    assert driver.step() is None  # the next poll is 30s away
    runs.wake(run.pk)
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING  # no event yet: it waits again
    # An event that did not wake it (written directly, without publish_event's wake-up).
    Event.objects.create(name="order.paid", key="42", payload={"n": 1}, published_at=clock.now())
    runs.wake(run.pk)
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.result == {"n": 1}


def test_wake_a_scheduled_run(driver: Driver, clock: FakeClock) -> None:
    run = jobs.noop.using(run_after=timedelta(hours=1)).enqueue()
    assert driver.step() is None
    runs.wake(run.pk)
    assert driver.step() is not None


@pytest.mark.parametrize("status", [RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED])
def test_wake_refuses_running_and_finished_runs(status: str) -> None:
    run = JobRunFactory.create(status=status)
    with pytest.raises(RunStateError, match="can be woken"):
        runs.wake(run.pk)


# -- replay_from -----------------------------------------------------------------------


def test_replay_from_a_step_forgets_it_and_the_steps_after_it(
    driver: Driver, clock: FakeClock
) -> None:
    run = fragile.enqueue()
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    clock.advance("1h")
    replayed = runs.replay_from(run.pk, "two")
    assert replayed.status == RunStatus.QUEUED and replayed.attempt == 0
    assert replayed.result is None and replayed.finished_at is None
    assert replayed.wake_at == clock.now()
    assert step_names(run) == ["one"]
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert effects("fragile-one", "fragile-two", "fragile-three") == [1, 2, 2]
    assert step_names(run) == ["one", "two", "three"]


def test_replay_from_an_unknown_step_names_the_known_ones_and_changes_nothing(
    driver: Driver,
) -> None:
    run = fragile.enqueue()
    driver.step()
    with pytest.raises(StepNotFound, match="no step 'four'; its steps are: 'one', 'two', 'three'"):
        runs.replay_from(run.pk, "four")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and len(step_names(run)) == 3  # rolled back


def test_replay_from_refuses_a_running_run(clock: FakeClock) -> None:
    run = fragile.enqueue()
    claim("w", now=clock.now(), lease=LEASE)
    with pytest.raises(RunStateError, match="it is running; cancel it first"):
        runs.replay_from(run.pk, "one")


# -- purge -----------------------------------------------------------------------------


def test_purge_deletes_old_finished_runs_with_their_steps_in_batches(clock: FakeClock) -> None:
    now = clock.now()
    old = [
        JobRunFactory.create(status=status, finished_at=now - timedelta(days=40))
        for status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
    ]
    recent = JobRunFactory.create(status=RunStatus.SUCCEEDED, finished_at=now - timedelta(days=1))
    unfinished = JobRunFactory.create(status=RunStatus.SLEEPING)
    for run in [*old, recent, unfinished]:
        StepRecordFactory.create_batch(2, run=run)
    assert runs.purge("30d", batch_size=2) == 3
    assert set(JobRun.objects.values_list("pk", flat=True)) == {recent.pk, unfinished.pk}
    assert StepRecord.objects.count() == 4
    assert runs.purge("30d") == 0


def test_purge_only_the_statuses_asked_for(clock: FakeClock) -> None:
    failed = JobRunFactory.create(
        status=RunStatus.FAILED, finished_at=clock.now() - timedelta(days=9)
    )
    JobRunFactory.create(status=RunStatus.SUCCEEDED, finished_at=clock.now() - timedelta(days=9))
    assert runs.purge("1w", [RunStatus.SUCCEEDED]) == 1
    assert list(JobRun.objects.values_list("pk", flat=True)) == [failed.pk]


def test_purge_refuses_unfinished_statuses() -> None:
    with pytest.raises(ValueError, match="finished runs only"):
        runs.purge("1d", [RunStatus.RUNNING])
