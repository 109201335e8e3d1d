"""RetryAfter, NonRetriable and on_failure handlers, on the fake clock."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections, transaction

from django_durable_jobs import NonRetriable, RetryAfter
from django_durable_jobs.engine.attempt import Failed
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.serialization import ErrorInfo
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from django_durable_jobs.verbs import runs
from django_durable_jobs.worker.outcome import Pending, pending_of
from django_durable_jobs.worker.recording import write
from tests.conftest import Driver
from tests.testapp import flow_jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db


def attempts(run: JobRun) -> list[str]:
    return list(Effect.objects.filter(run_id=str(run.pk)).values_list("name", flat=True))


@pytest.mark.parametrize("where", ["body", "step"])
def test_retry_after_replaces_the_backoff(driver: Driver, clock: FakeClock, where: str) -> None:
    run = flow_jobs.retry_after.enqueue(where)
    driver.step()
    run.refresh_from_db()
    # The job's backoff is 1h; RetryAfter asked for 30s.
    assert run.status == RunStatus.QUEUED and run.error_code == "X_RETRY_AFTER"
    assert run.wake_at == clock.now() + timedelta(seconds=30)
    clock.advance(timedelta(seconds=29))
    assert driver.step() is None
    clock.advance(timedelta(seconds=1))
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.result == 2
    assert attempts(run) == ["attempt-1", "attempt-2"]
    if where == "step":
        step = StepRecord.objects.get(run=run, name="call-api")
        assert step.status == "failed" and "429" in step.error


def test_retry_after_with_no_retries_left_fails(driver: Driver, clock: FakeClock) -> None:
    run = flow_jobs.retry_after.enqueue("always")
    for _ in range(3):
        driver.step()
        clock.advance(timedelta(seconds=30))
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.attempt == 3
    assert run.error_code == "X_RETRY_AFTER" and run.wake_at is None


def test_retry_after_rejects_a_bad_delay() -> None:
    with pytest.raises(ValueError, match="5 mins"):
        RetryAfter("5 mins")


@pytest.mark.parametrize("where", ["body", "step"])
def test_non_retriable_fails_at_once(driver: Driver, where: str) -> None:
    run = flow_jobs.non_retriable.enqueue(where)
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.attempt == 1  # 5 retries were left
    assert run.error_code == NonRetriable.code == "X_NON_RETRIABLE"
    assert "customer 42 was deleted" in run.error
    assert attempts(run) == ["attempt-1"]


def handler_runs() -> list[JobRun]:
    return list(JobRun.objects.filter(job_name="tests.failure_handler").order_by("created_at"))


def test_on_failure_runs_once_after_the_last_attempt(driver: Driver) -> None:
    run = flow_jobs.fails_with_handler.enqueue()
    driver.step()
    assert handler_runs() == []  # a retry is left: not finally failed
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    (handler,) = handler_runs()
    assert handler.idempotency_key == f"on_failure:{run.pk}"
    assert handler.args == [
        {
            "run_id": str(run.pk),
            "job_name": "tests.fails_with_handler",
            "status": "failed",
            "error_code": "",
            "error": "nightly import broke",
            "args": [],
            "kwargs": {},
        }
    ]
    driver.drain()
    handler.refresh_from_db()
    assert handler.status == RunStatus.SUCCEEDED
    assert Effect.objects.filter(name=f"handled:{run.pk}").count() == 1


def test_on_failure_runs_for_a_cancelled_run(driver: Driver) -> None:
    run = flow_jobs.sleeps_with_handler.enqueue()
    driver.step()
    runs.cancel(run.pk)
    (handler,) = handler_runs()
    assert handler.args[0]["status"] == "cancelled"
    assert handler.args[0]["error_code"] == "X_RUN_CANCELLED"


def test_cancelling_a_parent_starts_the_handlers_of_the_children_cancelled_with_it(
    driver: Driver,
) -> None:
    """Every run cancelled gets its handler, also one cancelled by the cascade."""
    parent = flow_jobs.invokes_handled_children.enqueue()
    driver.step(parent)  # invokes the first child
    (child,) = JobRun.objects.filter(parent=parent)
    driver.step(child)  # the child sleeps
    runs.cancel(parent.pk)
    (handler,) = handler_runs()
    assert handler.args[0]["run_id"] == str(child.pk)
    assert handler.args[0]["status"] == "cancelled"
    assert handler.args[0]["error"] == f"cancelled along with run {parent.pk}"


def test_cancel_rolled_back_starts_no_handler(driver: Driver) -> None:
    run = flow_jobs.sleeps_with_handler.enqueue()
    driver.step()
    with transaction.atomic():
        runs.cancel(run.pk)
        transaction.set_rollback(True)
    assert handler_runs() == []


def test_a_failing_handler_starts_no_handler(driver: Driver) -> None:
    flow_jobs.fails_into_failing_handler.enqueue()
    driver.drain()
    statuses = dict(JobRun.objects.values_list("job_name", "status"))
    assert statuses == {
        "tests.fails_into_failing_handler": "failed",
        "tests.handler_of_handler": "failed",
    }  # and no tests.failure_handler run for the handler's own failure


def test_a_failed_handler_run_does_not_recurse(driver: Driver) -> None:
    run = flow_jobs.fails_with_handler.enqueue(handler_fails=True)
    driver.drain()
    run.refresh_from_db()
    (handler,) = handler_runs()
    assert run.status == handler.status == RunStatus.FAILED


def failed_pending(run: JobRun, clock: FakeClock) -> Pending:
    outcome = Failed(ErrorInfo.of(ValueError("boom")), retryable=False)
    return pending_of(run, None, outcome, clock.now(), None)


@pytest.mark.postgres(reason="SQLite has one writer: the race is a PostgreSQL/MariaDB one")
@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_two_writers_racing_start_one_handler(clock: FakeClock) -> None:
    run = flow_jobs.fails_with_handler.enqueue()
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, attempt=2)
    run.refresh_from_db()
    # Two writers without a lease fence (an operator tool and a worker, say): the
    # idempotency key decides, each in its own connection and transaction.
    barrier, results = threading.Barrier(2), []

    def writer() -> None:
        try:
            pending = failed_pending(JobRun.objects.get(pk=run.pk), clock)
            barrier.wait(timeout=10)
            with transaction.atomic():
                results.append(write(pending, None))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == [True, True]
    assert len(handler_runs()) == 1
