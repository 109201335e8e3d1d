"""The django.tasks backend: tasks become durable runs (Django >= 6.0).

Tasks live in tests/testapp/tasks.py; TASKS in tests/settings.py configures two
aliases of DurableJobsBackend ("default" with retries=1, "other" with any queue).
Runs execute inline (django_durable_jobs.testing) except in the one test that
starts a real ``runjobs`` process.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import django
import pytest
from django.core.exceptions import ImproperlyConfigured

from django_durable_jobs import InvalidPayload, signals
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from django_durable_jobs.testing import InlineJobs
from tests.testapp import jobs as testjobs

HAS_TASKS = django.VERSION >= (6, 0)
needs_tasks = pytest.mark.skipif(not HAS_TASKS, reason="django.tasks needs Django 6.0 or newer")

if HAS_TASKS:
    from django.tasks import TaskResultStatus, task, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started

    from django_durable_jobs.contrib.tasks import DurableJobsBackend
    from tests.testapp import tasks


@pytest.mark.skipif(HAS_TASKS, reason="Django 5.2 only: there is no django.tasks to test")
@pytest.mark.django_db
def test_on_django_5_the_backend_imports_and_says_it_needs_django_6() -> None:
    from django_durable_jobs.contrib import tasks as backends

    assert backends.HAS_TASKS is False
    with pytest.raises(ImproperlyConfigured, match=r"needs Django 6\.0 or newer"):
        backends.DurableJobsBackend("default", {})


# -- everything below: Django >= 6.0 -------------------------------------------------


@pytest.fixture
def jobs() -> Iterator[InlineJobs]:
    with InlineJobs() as inline:
        yield inline


@pytest.fixture
def sent() -> Iterator[list[tuple[str, Any, Any, Any]]]:
    """(signal, sender, task_result, its status then) of every django.tasks signal sent."""
    received: list[tuple[str, Any, Any, Any]] = []
    receivers = {}
    for name, signal in (
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ):

        def receiver(sender: Any, task_result: Any, _name: str = name, **kwargs: Any) -> None:
            received.append((_name, sender, task_result, task_result.status))

        receivers[name] = receiver
        signal.connect(receiver)
    yield received
    task_enqueued.disconnect(receivers["enqueued"])
    task_started.disconnect(receivers["started"])
    task_finished.disconnect(receivers["finished"])


@needs_tasks
@pytest.mark.django_db
def test_enqueue_writes_a_queued_run_and_sends_task_enqueued(
    jobs: InlineJobs, sent: list[Any]
) -> None:
    result = tasks.add.enqueue(2, b=3)
    run = JobRun.objects.get(pk=result.id)
    assert run.job_name == "django.tasks:default" and run.status == RunStatus.QUEUED
    assert run.kwargs == {
        "task": "tests.testapp.tasks.add",
        "args": [2],
        "kwargs": {"b": 3},
        "run_after": None,
    }
    assert result.status == TaskResultStatus.READY and result.backend == "default"
    assert result.enqueued_at == run.created_at == jobs.now
    assert result.started_at is None and result.finished_at is None and result.worker_ids == []
    assert (result.args, result.kwargs) == ([2], {"b": 3})
    assert [(name, sender) for name, sender, _, _ in sent] == [("enqueued", DurableJobsBackend)]
    assert sent[0][2].id == result.id
    assert testjobs.CALLS["tasks.add"] == 0  # nothing runs before a worker claims it


@needs_tasks
@pytest.mark.django_db
def test_a_task_runs_as_a_run_and_get_result_matches_it(jobs: InlineJobs, sent: list[Any]) -> None:
    result = tasks.add.enqueue(2, 3)
    jobs.advance("1s", drain=False)
    jobs.drain()
    fetched = tasks.add.get_result(result.id)
    run = JobRun.objects.get(pk=result.id)
    assert run.status == RunStatus.SUCCEEDED and run.result == 5
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.return_value == 5
    assert fetched.started_at == run.started_at == jobs.now
    assert fetched.finished_at == run.finished_at == jobs.now
    assert fetched.last_attempted_at == jobs.now
    assert fetched.worker_ids == ["inline-test-worker"] and fetched.attempts == 1
    assert fetched.errors == []
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    names = [(name, status) for name, _, _, status in sent]
    assert names == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.SUCCESSFUL),
    ]
    assert sent[1][2].worker_ids == ["inline-test-worker"]


@needs_tasks
@pytest.mark.django_db
def test_queue_priority_and_run_after_carry_over_to_the_run(jobs: InlineJobs) -> None:
    later = jobs.now + timedelta(minutes=5)
    result = tasks.send_email.using(run_after=later).enqueue("ada@example.com")
    run = JobRun.objects.get(pk=result.id)
    assert (run.queue, run.priority, run.wake_at) == ("emails", 10, later)
    assert result.task.queue_name == "emails" and result.task.run_after == later
    assert jobs.drain() == 0  # deferred: not runnable yet
    jobs.advance("5m")
    fetched = tasks.send_email.get_result(result.id)
    assert fetched.return_value == "hi -> ada@example.com"
    assert fetched.task.run_after == later and fetched.task.priority == 10


@needs_tasks
@pytest.mark.django_db
def test_higher_priority_runs_first(jobs: InlineJobs) -> None:
    low = tasks.add.enqueue(1, 1)
    high = tasks.add.using(priority=50).enqueue(2, 2)
    jobs.drain()
    # Worker steps are written as each run starts: their ids give the execution order.
    order = StepRecord.objects.filter(name="django.tasks:worker:1").order_by("id")
    assert [str(step.run_id) for step in order] == [high.id, low.id]


@needs_tasks
@pytest.mark.django_db
def test_a_failing_task_is_retried_then_fails_with_its_errors(
    jobs: InlineJobs, sent: list[Any]
) -> None:
    start = jobs.now
    result = tasks.fails.enqueue("bad input")
    jobs.drain()
    retrying = tasks.fails.get_result(result.id)
    assert retrying.status == TaskResultStatus.READY  # ready to be executed again
    assert [error.exception_class for error in retrying.errors] == [ValueError]
    assert "bad input" in retrying.errors[0].traceback
    jobs.advance("10s")  # the backoff (OPTIONS: retries=1, backoff=10s)
    failed = tasks.fails.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED and failed.finished_at is not None
    # The retry ran when its backoff ended: between 1/2 and 1 x 10s (equal jitter).
    assert timedelta(seconds=5) <= failed.finished_at - start <= timedelta(seconds=10)
    assert failed.errors[0].exception_class_path == "builtins.ValueError"
    assert failed.worker_ids == ["inline-test-worker"] * 2 and failed.attempts == 2
    assert testjobs.CALLS["tasks.fails"] == 2
    with pytest.raises(ValueError, match="Task failed"):
        failed.return_value  # noqa: B018
    signals = [(name, status) for name, _, _, status in sent]
    assert signals == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.FAILED),
    ]


@needs_tasks
@pytest.mark.django_db
def test_a_task_with_context_uses_durable_steps(jobs: InlineJobs, sent: list[Any]) -> None:
    result = tasks.durable.enqueue(7)
    jobs.drain()
    sleeping = tasks.durable.get_result(result.id)
    assert JobRun.objects.get(pk=result.id).status == RunStatus.SLEEPING
    assert sleeping.status == TaskResultStatus.RUNNING
    jobs.advance("1h")
    done = tasks.durable.get_result(result.id)
    assert done.return_value == {
        "charged": "charge-7",
        "confirmed": "confirm-7",
        "attempt": 1,
        "result_id": result.id,
    }
    assert testjobs.CALLS["charge-7"] == 1  # replayed after the sleep, not run again
    run = JobRun.objects.get(pk=result.id)
    assert [step.name for step in jobs.steps(run)] == [
        "django.tasks:worker:1",
        "charge",
        "settle",
        "confirm",
    ]
    # One attempt: started once, although it executed twice (before and after the sleep).
    assert [name for name, _, _, _ in sent] == ["enqueued", "started", "finished"]


@needs_tasks
@pytest.mark.django_db
def test_a_retried_task_replays_its_completed_steps(jobs: InlineJobs) -> None:
    result = tasks.flaky.enqueue()
    jobs.drain()
    jobs.advance("10s")
    done = tasks.flaky.get_result(result.id)
    assert done.return_value == 2 and done.attempts == 2
    assert testjobs.CALLS["flaky-before"] == 1
    # As Django documents it: the errors of each execution, also when a later one succeeded.
    assert [error.exception_class for error in done.errors] == [RuntimeError]
    assert "first attempt fails" in done.errors[0].traceback


@needs_tasks
@pytest.mark.django_db
def test_a_return_value_that_is_not_json_fails_the_run(jobs: InlineJobs) -> None:
    result = tasks.not_json.enqueue()
    jobs.drain()
    failed = tasks.not_json.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    # TypeError, as Django's own backends report a return value that is not JSON.
    assert failed.errors[0].exception_class_path == "builtins.TypeError"
    assert issubclass(failed.errors[0].exception_class, TypeError)
    assert JobRun.objects.get(pk=result.id).error_code == "X_STEP_OUTPUT_INVALID"


@needs_tasks
@pytest.mark.django_db
def test_a_cancelled_run_is_a_failed_task(jobs: InlineJobs, sent: list[Any]) -> None:
    result = tasks.add.enqueue(1, 2)
    JobRun.objects.filter(pk=result.id).update(status=RunStatus.CANCELLED, error_code="X")
    run = JobRun.objects.get(pk=result.id)
    signals.run_cancelled.send(sender=JobRun, run=run)  # as runs.cancel does
    cancelled = tasks.add.get_result(result.id)
    assert cancelled.status == TaskResultStatus.FAILED and cancelled.is_finished
    assert cancelled.errors[0].exception_class_path.endswith("RunCancelled")
    assert [(name, status) for name, _, _, status in sent] == [
        ("enqueued", TaskResultStatus.READY),
        ("finished", TaskResultStatus.FAILED),
    ]


@needs_tasks
@pytest.mark.django_db
def test_a_task_whose_module_is_gone_fails_with_job_unknown(jobs: InlineJobs) -> None:
    result = tasks.add.enqueue(1, 2)
    run = JobRun.objects.get(pk=result.id)
    JobRun.objects.filter(pk=run.pk).update(kwargs={**run.kwargs, "task": "tests.testapp.gone"})
    jobs.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_JOB_UNKNOWN"
    assert "tests.testapp.gone" in run.error and "cannot be imported" in run.error


@needs_tasks
@pytest.mark.django_db
def test_each_alias_has_its_own_job_and_results(jobs: InlineJobs) -> None:
    result = tasks.elsewhere.enqueue()
    run = JobRun.objects.get(pk=result.id)
    assert run.job_name == "django.tasks:other" and run.queue == "anything"
    assert result.backend == "other"
    jobs.drain()
    assert tasks.elsewhere.get_result(result.id).return_value == "other backend"
    with pytest.raises(TaskResultDoesNotExist):  # a run of another alias
        task_backends["default"].get_result(result.id)


@needs_tasks
@pytest.mark.django_db
@pytest.mark.parametrize("result_id", ["not-a-uuid", "9a39a4fe-87a5-4c49-b7d8-e76d1965685a", ""])
def test_get_result_of_an_unknown_id_raises(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result_id)


@needs_tasks
@pytest.mark.django_db
def test_get_result_of_a_plain_job_run_raises() -> None:
    from tests.testapp.jobs import noop

    run = noop.enqueue()
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(str(run.id))


@needs_tasks
@pytest.mark.django_db
def test_arguments_must_be_json_and_nothing_is_written() -> None:
    with pytest.raises(InvalidPayload, match=r"task 'tests\.testapp\.tasks\.add'"):
        tasks.add.enqueue({1, 2}, 3)  # type: ignore[arg-type]
    assert not JobRun.objects.exists()


@needs_tasks
@pytest.mark.django_db
def test_a_value_json_cannot_hold_is_named_as_job_enqueue_names_it() -> None:
    add = "task 'tests.testapp.tasks.add': "
    with pytest.raises(InvalidPayload) as positional:
        tasks.add.enqueue([1, {2}], 3)  # type: ignore[arg-type]
    assert str(positional.value).startswith(f"{add}argument 0[1] cannot be stored as JSON")
    with pytest.raises(InvalidPayload) as keyword:
        tasks.add.enqueue(1, b={"items": [float("nan")]})  # type: ignore[arg-type]
    assert str(keyword.value).startswith(f"{add}argument 'b'['items'][0] cannot be stored")
    assert not JobRun.objects.exists()


@needs_tasks
@pytest.mark.django_db
def test_a_task_that_cannot_be_imported_by_its_path_is_refused() -> None:
    from tests.testapp.jobs import effect

    with pytest.raises(InvalidTask, match="cannot be imported by that path"):
        task(effect).enqueue("x")  # tests.testapp.jobs.effect is the function, not the Task
    assert not JobRun.objects.exists()


# -- what django.tasks users expect of errors (issue "the first hour") -------------------


@needs_tasks
@pytest.mark.django_db
def test_errors_holds_the_error_of_each_failed_execution(jobs: InlineJobs) -> None:
    result = tasks.fails.enqueue("bad input")
    jobs.advance("1m")  # both attempts (OPTIONS: retries=1)
    failed = tasks.fails.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED and failed.attempts == 2
    assert [error.exception_class for error in failed.errors] == [ValueError, ValueError]
    assert all("ValueError: bad input" in error.traceback for error in failed.errors)


@needs_tasks
@pytest.mark.django_db
def test_the_error_log_line_of_a_failed_task_carries_its_traceback(
    jobs: InlineJobs, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    result = tasks.fails.enqueue("bad input")
    with caplog.at_level(logging.INFO, logger="django.tasks"):
        jobs.advance("1m")
    (line,) = [r for r in caplog.records if r.name == "django.tasks" and r.levelname == "ERROR"]
    assert f"id={result.id}" in line.getMessage() and "state=FAILED" in line.getMessage()
    assert line.exc_info is not None and line.exc_info[0] is not None  # Django reads exc_info
    text = logging.Formatter().format(line)
    assert "builtins.ValueError: bad input" in text
    assert "raise ValueError(message)" in text  # the task's own frame, as the worker saw it


@needs_tasks
@pytest.mark.django_db
def test_arguments_that_are_not_json_raise_a_type_error_as_django_documents() -> None:
    with pytest.raises(TypeError, match=r"task 'tests\.testapp\.tasks\.add'"):
        tasks.add.enqueue({1, 2}, 3)  # type: ignore[arg-type]


@needs_tasks
@pytest.mark.django_db
def test_a_return_value_that_is_not_json_is_not_retried(jobs: InlineJobs) -> None:
    result = tasks.not_json.enqueue()
    jobs.advance("1m")
    run = JobRun.objects.get(pk=result.id)
    assert (run.status, run.attempt, run.error_code) == ("failed", 1, "X_STEP_OUTPUT_INVALID")
    assert len(tasks.not_json.get_result(result.id).errors) == 1


@needs_tasks
@pytest.mark.django_db
@pytest.mark.parametrize("name", ["counted", "acounted"])
def test_a_task_s_progress_is_stored_and_refresh_still_reads_it(
    jobs: InlineJobs, name: str
) -> None:
    task_of = getattr(tasks, name)
    result = task_of.enqueue(300)
    jobs.drain()
    result.refresh()  # Django's TaskResult API, unchanged: it reads the run back
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 300
    assert JobRun.objects.get(pk=result.id).progress == {"done": 300, "total": 300}
