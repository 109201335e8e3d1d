"""Async tasks through the django.tasks backend (``supports_async_task``), the cases of
Django's own tests/tasks suite for async tasks: enqueue and aenqueue, execution,
results read sync and async, failures, and durable awaited steps (Django >= 6.0)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import django
import pytest
from asgiref.sync import async_to_sync

from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.testing import InlineJobs
from tests.testapp import jobs as testjobs
from tests.testapp.models import Effect

pytestmark = [
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6.0"),
    pytest.mark.django_db,
]

if django.VERSION >= (6, 0):
    from django.tasks import TaskResultStatus, task_backends

    from django_durable_jobs.contrib.tasks import asteps
    from tests.testapp import tasks


def returned(result: Any) -> Any:
    """The return value (the stubs type an async task's as the coroutine it returns)."""
    return result.return_value


@pytest.fixture
def jobs() -> Iterator[InlineJobs]:
    with InlineJobs() as inline:
        yield inline


def test_the_backend_accepts_async_tasks() -> None:
    backend = task_backends["default"]
    assert backend.supports_async_task
    backend.validate_task(tasks.async_add)  # no InvalidTask


def test_an_async_task_is_enqueued_executed_and_its_result_read(jobs: InlineJobs) -> None:
    result = tasks.async_add.enqueue(2, b=3)
    assert str(result.status) == TaskResultStatus.READY
    assert JobRun.objects.get(pk=result.id).kwargs["task"] == "tests.testapp.tasks.async_add"
    jobs.drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and returned(result) == 5
    assert testjobs.CALLS["tasks.async_add"] == 1
    assert returned(tasks.async_add.get_result(result.id)) == 5


def test_aenqueue_and_the_async_result_api(jobs: InlineJobs) -> None:
    async def view() -> Any:
        return await tasks.async_add.aenqueue(40, 2)

    result = async_to_sync(view)()
    jobs.drain()

    async def read() -> tuple[Any, Any]:
        await result.arefresh()
        return result, await tasks.async_add.aget_result(result.id)

    refreshed, fetched = async_to_sync(read)()
    assert refreshed.status == TaskResultStatus.SUCCESSFUL and returned(refreshed) == 42
    assert returned(fetched) == 42 and fetched.id == result.id


def test_a_failing_async_task_records_its_error(jobs: InlineJobs) -> None:
    result = tasks.async_fails.enqueue("no such order")
    jobs.drain()
    jobs.advance("1h")  # "default" retries once
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class_path == "builtins.ValueError"
    assert "no such order" in result.errors[-1].traceback


def test_an_async_task_with_context_awaits_durable_steps(jobs: InlineJobs) -> None:
    result = tasks.async_durable.enqueue(9)
    jobs.drain()
    run = JobRun.objects.get(pk=result.id)
    assert run.status == RunStatus.SLEEPING
    jobs.advance("1h")
    result.refresh()
    assert returned(result) == {
        "charged": "async-charge-9",
        "fetched": "fetched-9",
        "attempt": 1,
    }
    assert testjobs.CALLS["async-charge-9"] == 1  # replayed after the sleep, not run again
    assert testjobs.CALLS["async-fetch-9"] == 1
    assert [step.name for step in jobs.steps(run)] == [
        "django.tasks:worker:1",
        "charge",
        "fetch",
        "settle",
    ]


def test_asteps_of_a_sync_context_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="async def task"):
        asteps(object())


def failed_at_once(jobs: InlineJobs, result: Any, code: str) -> JobRun:
    """The task's run executed once: failed with ``code``, not retried (the backend
    retries once, 10 s later)."""
    jobs.drain()
    jobs.advance("1m")
    run = JobRun.objects.get(pk=result.id)
    assert (run.status, run.error_code, run.attempt) == (RunStatus.FAILED, code, 1), run.error
    return run


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_task_that_swallows_its_suspension_fails_instead_of_skipping_the_sleep(
    jobs: InlineJobs, kind: str
) -> None:
    """The async task's awaited steps suspended the run on a twin of the attempt's
    step API, which the sync attempt's check did not read: the run succeeded with
    "woke early" an hour too soon."""
    task = tasks.swallows_sleep if kind == "sync" else tasks.async_swallows_sleep
    run = failed_at_once(jobs, task.enqueue(), "X_STEP_USAGE")
    assert "step 'nap' suspended the run, but the job carried on" in run.error
    assert run.result is None


@pytest.mark.parametrize("returned", [False, True], ids=["dropped", "returned"])
def test_a_step_an_async_task_never_awaited_fails_the_run_at_once(
    jobs: InlineJobs, returned: bool, recwarn: pytest.WarningsRecorder
) -> None:
    """Without ``await`` the step's function never ran, and the run succeeded (or failed
    as a return value that is not JSON), retried."""
    run = failed_at_once(jobs, tasks.async_forgot_await.enqueue(returned), "X_STEP_USAGE")
    assert "ctx.step.run('send') was never awaited" in run.error
    assert not Effect.objects.filter(name="task-sent").exists()
    # Closed by the check: no "coroutine ... was never awaited" warning later.
    import gc

    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)]
