"""Async jobs executed to their next stop with the ORM store, as the worker does."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_durable_jobs.engine.attempt import Failed, Succeeded, Suspended
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.vocabulary import StepKind
from django_durable_jobs.models import Event, JobRun, RunStatus, StepStatus
from tests.conftest import Driver
from tests.testapp import async_jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db


def test_an_async_job_runs_its_awaited_steps_once(driver: Driver) -> None:
    run = async_jobs.async_three_steps.enqueue(user_id=7)
    executed = driver.step()
    assert executed is not None
    assert executed.outcome == Succeeded({"steps": ["one", "TWO", "three"], "user_id": 7})
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert [s.name for s in run.steps.order_by("started_at", "id")] == ["one", "two", "three"]
    assert Effect.objects.filter(run_id=str(run.id)).count() == 2


def test_a_failed_async_step_retries_and_completed_steps_replay(
    driver: Driver, calls: dict[str, int]
) -> None:
    from tests.testapp import jobs

    jobs.FAIL_ONCE.add("three")
    run = async_jobs.async_three_steps.enqueue(user_id=1)
    first = driver.step()
    assert first is not None and isinstance(first.outcome, Failed)
    assert driver.step() is not None  # backoff 0: the retry runs at once
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.attempt == 2
    assert calls["one"] == 1  # replayed, not re-executed
    assert calls["three"] == 2


def test_async_sleep_and_event_suspend_the_run(driver: Driver, clock: FakeClock) -> None:
    run = async_jobs.async_onboarding.enqueue(user_id=42)
    executed = driver.step()
    assert executed is not None and isinstance(executed.outcome, Suspended)
    run.refresh_from_db()
    assert run.status == RunStatus.SLEEPING and run.attempt == 1
    clock.advance("3d")
    waiting = driver.step()
    assert waiting is not None and isinstance(waiting.outcome, Suspended)
    assert waiting.outcome.kind is StepKind.WAIT
    Event.objects.create(name="order.paid", payload={"n": 1}, key="42", published_at=clock.now())
    clock.advance("30s")
    done = driver.step()
    assert done is not None and done.outcome == Succeeded({"ordered": True, "order": {"n": 1}})
    assert not Effect.objects.filter(name="swallowed").exists()
    assert Event.objects.filter(name="user.onboarded").count() == 1
    assert JobRun.objects.get(pk=run.pk).steps.get(name="announce").status == StepStatus.COMPLETED


def test_an_async_job_past_its_timeout_is_cancelled_and_fails(driver: Driver) -> None:
    run = async_jobs.async_timeout.enqueue()
    executed = driver.step()
    assert executed is not None and isinstance(executed.outcome, Failed)
    assert executed.outcome.error.code == "X_JOB_TIMEOUT"
    assert not executed.outcome.retryable
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_JOB_TIMEOUT"
    assert "300ms" in run.error


def test_an_async_step_past_its_step_timeout_fails_the_step(driver: Driver) -> None:
    run = async_jobs.async_step_timeout.enqueue()
    executed = driver.step()
    assert executed is not None and isinstance(executed.outcome, Failed)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_JOB_TIMEOUT"
    step = run.steps.get(name="hang")
    assert step.status == StepStatus.FAILED and "step_timeout" in step.error


def test_is_async_tells_the_kinds_apart() -> None:
    from tests.testapp import jobs

    assert async_jobs.async_io.is_async and not jobs.add.is_async


def failed_at_once(driver: Driver, run: JobRun, code: str) -> JobRun:
    """``run`` executed once: failed with ``code``, not retried."""
    executed = driver.step()
    assert executed is not None and isinstance(executed.outcome, Failed)
    assert executed.outcome.error.code == code and not executed.outcome.retryable
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.attempt == 1
    return run


@pytest.mark.parametrize("returned", [False, True], ids=["dropped", "returned"])
def test_a_step_never_awaited_fails_the_run_at_once(
    driver: Driver, returned: bool, recwarn: pytest.WarningsRecorder
) -> None:
    """Without ``await`` the step's function never ran, and the run succeeded (or failed
    on "Object of type coroutine is not JSON serializable"), retried."""
    run = failed_at_once(driver, async_jobs.async_forgot_await.enqueue(returned), "X_STEP_USAGE")
    assert "ctx.step.run('send') was never awaited" in run.error
    assert not Effect.objects.filter(name="sent").exists()
    # Closed by the check: no "coroutine ... was never awaited" warning later.
    import gc

    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_steps_awaited_through_gather_are_awaited(driver: Driver) -> None:
    run = async_jobs.async_gathered.enqueue()
    executed = driver.step()
    assert executed is not None and executed.outcome == Succeeded(["a", "b"])
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert Effect.objects.filter(run_id=str(run.id)).count() == 2


@pytest.mark.parametrize("swallow", [False, True], ids=["blocked-loop", "swallowed-cancel"])
def test_an_async_job_past_its_timeout_fails_even_if_the_cancellation_never_landed(
    driver: Driver, swallow: bool
) -> None:
    run = failed_at_once(driver, async_jobs.async_blocks_the_loop.enqueue(swallow), "X_JOB_TIMEOUT")
    assert run.result is None


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_job_that_swallows_its_suspension_fails_instead_of_skipping_the_sleep(
    driver: Driver, kind: str
) -> None:
    from tests.testapp import jobs

    job = jobs.swallows_sleep if kind == "sync" else async_jobs.async_swallows_sleep
    run = failed_at_once(driver, job.enqueue(), "X_STEP_USAGE")
    assert "step 'nap' suspended the run, but the job carried on" in run.error


@pytest.mark.parametrize("fail", [False, True], ids=["beside-a-sleep", "beside-a-failure"])
@pytest.mark.parametrize("shape", ["gather", "task-group", "wrapped-gather"])
def test_a_step_beside_one_that_ends_the_attempt_runs_once_in_every_shape(
    driver: Driver, clock: FakeClock, shape: str, fail: bool
) -> None:
    """asyncio.gather(sleep, run): the sleep suspended the run while 'slow' executed;
    its record was refused (or never written) and the resumed run executed it again.
    Then a review found the same in a TaskGroup (which cancelled 'slow' after its side
    effect) and in a gather of a coroutine that awaits the step. A step that ends the
    attempt now waits for the steps executing beside it."""
    run = async_jobs.async_gathers_in_shapes.enqueue(shape, fail)
    first = driver.step()
    assert first is not None
    assert isinstance(first.outcome, Failed if fail else Suspended)
    assert JobRun.objects.get(pk=run.pk).steps.get(name="slow").status == StepStatus.COMPLETED
    clock.advance("1h")
    driver.drain()
    run.refresh_from_db()
    if fail:
        assert run.status == RunStatus.FAILED and run.attempt == 4
    else:
        assert run.status == RunStatus.SUCCEEDED and run.result == [None, "slow"]
    assert Effect.objects.filter(name="slow", run_id=str(run.id)).count() == 1


def test_waiting_for_the_steps_beside_one_that_ends_the_attempt_keeps_the_timeout(
    driver: Driver,
) -> None:
    """Found by a review: the attempt waited for 'long' after the sleep suspended it,
    outside the job's timeout: an attempt of a 300 ms job ran 3 s (a step that hangs:
    for ever) and ended suspended. The wait is inside the timeout now."""
    run = async_jobs.async_gathers_past_its_timeout.enqueue()
    first = driver.step()
    assert first is not None and isinstance(first.outcome, Failed)
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.FAILED, "X_JOB_TIMEOUT")


def test_a_step_that_suspends_inside_a_task_group_parks_the_run(
    driver: Driver, clock: FakeClock
) -> None:
    """The TaskGroup raised a BaseExceptionGroup, which no outcome caught: the attempt
    crashed the lane's task and the run stayed 'running' until its lease expired."""
    run = async_jobs.async_task_group.enqueue()
    first = driver.step()
    assert first is not None and isinstance(first.outcome, Suspended)
    assert first.outcome.step == "nap"
    clock.advance("1h")
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.result == 42


@pytest.mark.parametrize(
    ("kind", "error_type", "message"),
    [
        ("plain", "builtins.ValueError", "no such order"),
        ("two", "builtins.ValueError", "first"),
        ("retry-after", "django_durable_jobs.exceptions.RetryAfter", "no such order"),
    ],
    ids=["plain", "two", "retry-after"],
)
def test_a_task_group_that_fails_is_retried_as_its_first_failure(
    driver: Driver, clock: FakeClock, kind: str, error_type: str, message: str
) -> None:
    """The TaskGroup's ExceptionGroup was the failure: stored as "builtins.ExceptionGroup:
    unhandled errors in a TaskGroup (1 sub-exception)", with no code, and a RetryAfter
    in it retried after the backoff, not after its delay."""
    run = async_jobs.async_task_group_fails.enqueue(kind)
    first = driver.step()
    assert first is not None and isinstance(first.outcome, Failed)
    assert first.outcome.retryable
    assert (first.outcome.error.type, first.outcome.error.message) == (error_type, message)
    run.refresh_from_db()
    assert (run.status, run.error_type, run.error) == (RunStatus.QUEUED, error_type, message)
    if kind == "two":  # the traceback is the group's: every failure is in it
        assert "ValueError: first" in run.traceback and "ValueError: second" in run.traceback
    if kind == "retry-after":  # after its delay, not the backoff (0)
        assert run.error_code == "X_RETRY_AFTER"
        assert run.wake_at == clock.now() + timedelta(minutes=5)
    for _ in range(2):  # the retries
        clock.advance("5m")
        assert driver.step() is not None
    run.refresh_from_db()
    assert (run.status, run.attempt, run.error_type) == (RunStatus.FAILED, 3, error_type)


def test_a_task_group_that_fails_with_a_non_retriable_error_fails_at_once(driver: Driver) -> None:
    """The ExceptionGroup around it was retried: a NonRetriable ran the run twice more."""
    run = async_jobs.async_task_group_fails.enqueue("non-retriable")
    run = failed_at_once(driver, run, "X_NON_RETRIABLE")
    assert run.error == "no such order"
    assert JobRun.objects.get(pk=run.pk).steps.get(name="double").status == StepStatus.COMPLETED
