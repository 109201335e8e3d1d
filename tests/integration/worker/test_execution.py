"""Executing claimed runs to their next stop with the engine and the ORM store."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.attempt import Failed, Succeeded, Suspended
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.retry import backoff_delay
from django_durable_jobs.engine.vocabulary import StepKind
from django_durable_jobs.models import Event, JobRun, RunStatus, StepStatus
from django_durable_jobs.worker.execution import execute
from tests.conftest import Driver
from tests.factories import JobRunFactory
from tests.testapp import jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db


def publish(name: str, payload: object, key: str | None, clock: FakeClock) -> Event:
    return Event.objects.create(name=name, payload=payload, key=key, published_at=clock.now())


def steps_of(run: JobRun) -> dict[str, tuple[str, int]]:
    return {s.name: (s.status, s.attempts) for s in run.steps.all()}


def test_simple_run_succeeds(driver: Driver) -> None:
    run = jobs.add.enqueue(2, 3)
    executed = driver.step()
    assert executed is not None and executed.outcome == Succeeded(5)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.result == 5 and run.attempt == 1
    assert run.finished_at == driver.clock.now() and run.lease_owner == ""
    assert driver.step() is None  # nothing left


def test_onboarding_flow_through_sleep_and_event(driver: Driver, clock: FakeClock) -> None:
    run = jobs.onboarding.enqueue(user_id=42)
    executed = driver.step()
    assert executed is not None and isinstance(executed.outcome, Suspended)
    run.refresh_from_db()
    assert run.status == RunStatus.SLEEPING and run.wake_at == clock.now() + timedelta(days=3)
    assert driver.step() is None  # asleep: not runnable

    clock.advance("3d")
    executed = driver.step()
    assert executed is not None and isinstance(executed.outcome, Suspended)
    assert executed.outcome.kind is StepKind.WAIT
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING and run.attempt == 1  # suspension is not an attempt

    publish("order.paid", {"order_id": 1}, "7", clock)  # someone else's order
    clock.advance("30s")
    executed = driver.step()
    assert executed is not None and isinstance(executed.outcome, Suspended)

    publish("order.paid", {"order_id": 9}, "42", clock)
    clock.advance("30s")
    executed = driver.step()
    assert executed is not None and isinstance(executed.outcome, Succeeded)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.result == {"ordered": True, "email": "u42@example.com", "order": {"order_id": 9}}
    assert Effect.objects.filter(name="welcome").count() == 1  # sent once across 4 executions
    assert list(run.steps.values_list("name", flat=True)) == [
        "load-user",
        "send-welcome",
        "sleep:3d",
        "wait-order",
    ]
    assert all(status == StepStatus.COMPLETED for status, _ in steps_of(run).values())


def test_event_wait_times_out_and_nudges(driver: Driver, clock: FakeClock) -> None:
    run = jobs.onboarding.enqueue(user_id=5)
    driver.step()
    clock.advance("3d")
    driver.step()
    clock.advance("7d")
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.result == {"ordered": False, "email": "u5@example.com", "order": None}
    assert Effect.objects.filter(name="nudge").count() == 1


def test_failure_retries_and_replays_completed_steps(driver: Driver) -> None:
    jobs.FAIL_ONCE.add("three")
    run = jobs.three_steps.enqueue(user_id=1)
    executed = driver.step()
    assert executed is not None and isinstance(executed.outcome, Failed)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED and run.attempt == 1  # backoff=0: runnable at once
    assert run.error_type == "builtins.RuntimeError" and "injected" in run.error
    assert steps_of(run)["three"] == (StepStatus.FAILED, 1)

    executed = driver.step()
    assert executed is not None and isinstance(executed.outcome, Succeeded)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.attempt == 2
    assert run.error == "" and run.error_code == ""
    counts = {n: Effect.objects.filter(name=n).count() for n in ["one", "two", "three"]}
    assert counts == {"one": 1, "two": 1, "three": 2}  # completed steps were replayed
    assert steps_of(run)["three"] == (StepStatus.COMPLETED, 2)


def test_retries_run_out_with_backoff(driver: Driver, clock: FakeClock) -> None:
    run = jobs.always_fails.enqueue()
    for attempt in (1, 2):
        driver.step()
        run.refresh_from_db()
        assert run.status == RunStatus.QUEUED and run.attempt == attempt
        assert run.wake_at is not None
        delay = run.wake_at - clock.now()
        base = timedelta(seconds=10) * 2 ** (attempt - 1)
        assert base / 2 <= delay <= base
        assert driver.step() is None  # not before the backoff
        clock.advance(delay)
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.attempt == 3  # 1 + retries=2
    assert run.error == "always fails" and run.finished_at == clock.now()
    assert Effect.objects.filter(name="boom-before").count() == 1
    assert "always_fails" in run.traceback


def test_unstorable_output_is_not_retried(driver: Driver) -> None:
    run = jobs.bad_output.enqueue()
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.attempt == 1
    assert run.error_code == "X_STEP_OUTPUT_INVALID"


def test_required_wait_fails_without_retry(driver: Driver, clock: FakeClock) -> None:
    run = jobs.required_wait.enqueue()
    driver.step()
    clock.advance("1h")
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_JOB_TIMEOUT"


def test_broad_except_in_job_does_not_swallow_suspension(driver: Driver, clock: FakeClock) -> None:
    run = jobs.swallower.enqueue()
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SLEEPING
    clock.advance("1h")
    driver.step()
    run.refresh_from_db()
    assert run.result == "slept"


def test_unknown_job_fails_instead_of_staying_claimed(driver: Driver) -> None:
    run = JobRunFactory.create(job_name="tests.renamed_away", wake_at=driver.clock.now())
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_JOB_UNKNOWN"
    assert "tests.renamed_away" in run.error and run.lease_owner == ""


def test_stale_owner_cannot_record(clock: FakeClock) -> None:
    run = jobs.three_steps.enqueue(user_id=1)
    [claimed] = claim("w1", now=clock.now(), lease=timedelta(seconds=30))
    # w1 stalls past its lease; w2 takes the run over.
    JobRun.objects.filter(pk=run.pk).update(lease_owner="w2")
    executed = execute(claimed, clock=clock, owner="w1", rng=random.Random(1))
    assert not executed.recorded
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.lease_owner == "w2"
    assert not run.steps.exists()  # the first step write was refused
    assert jobs.CALLS["one"] == 1  # it ran, but nothing of it was recorded


def test_claim_order_and_attempt_counting(clock: FakeClock) -> None:
    low = jobs.noop.enqueue()
    clock.advance("1s")
    high = jobs.noop.using(priority=5).enqueue()
    other_queue = jobs.noop.using(queue="mail").enqueue()
    later = jobs.noop.using(run_after=timedelta(hours=1)).enqueue()
    now = clock.now() + timedelta(seconds=5)
    claimed = claim("w", now=now, lease=timedelta(seconds=30), queues=["default"], limit=10)
    assert [c.pk for c in claimed] == [high.pk, low.pk]
    assert all(
        c.attempt == 1 and c.lease_expires_at == now + timedelta(seconds=30) for c in claimed
    )
    assert claim("w2", now=now, lease=timedelta(seconds=30), queues=["default"]) == []
    assert [c.pk for c in claim("w", now=now, lease=timedelta(seconds=30), queues=["mail"])] == [
        other_queue.pk
    ]
    assert JobRun.objects.get(pk=later.pk).status == RunStatus.QUEUED


def test_the_claim_orders_runs_of_every_runnable_status_together(clock: FakeClock) -> None:
    """Priority first, then the wake time, whatever status a run waits in: MariaDB and
    MySQL read each status on its own and merge them (``models.best``)."""
    now = clock.now()

    def run(status: RunStatus, priority: int, ago: int, queue: str = "default") -> JobRun:
        """A run of ``status`` due ``ago`` seconds ago (negative: not due yet)."""
        return JobRun.objects.create(
            job_name="tests.noop",
            queue=queue,
            status=status,
            priority=priority,
            created_at=now,
            wake_at=now - timedelta(seconds=ago),
        )

    old_queued = run(RunStatus.QUEUED, 0, 540)
    new_queued = run(RunStatus.QUEUED, 0, 60)
    urgent_queued = run(RunStatus.QUEUED, 3, 1)
    woken_sleeper = run(RunStatus.SLEEPING, 3, 300)
    timed_out_wait = run(RunStatus.WAITING, 0, 300)
    run(RunStatus.SLEEPING, 9, -3600)  # sleeping for another hour: not due
    run(RunStatus.QUEUED, 9, -3600)  # enqueued to run in an hour
    run(RunStatus.QUEUED, 9, 3600, queue="mail")
    lease = timedelta(seconds=30)
    first = claim("w1", now=now, lease=lease, queues=["default"], limit=3)
    rest = claim("w2", now=now, lease=lease, queues=["default"], limit=10)
    assert [c.pk for c in first] == [woken_sleeper.pk, urgent_queued.pk, old_queued.pk]
    assert [c.pk for c in rest] == [timed_out_wait.pk, new_queued.pk]
    [mail] = claim("w3", now=now, lease=lease, limit=10)  # every queue: what is left
    assert mail.queue == "mail"


def test_backoff_schedule() -> None:
    rng = random.Random(3)
    cap = timedelta(hours=1)
    for attempt in range(1, 8):
        delay = backoff_delay("2s", attempt, cap=cap, rng=rng)
        base = min(timedelta(seconds=2) * 2 ** (attempt - 1), cap)
        assert base / 2 <= delay <= base
    assert backoff_delay("1h", 30, cap=cap, rng=rng) <= cap
    assert backoff_delay(0, 3, cap=cap) == timedelta(0)
    assert backoff_delay(lambda attempt: attempt * 10, 3, cap=cap) == timedelta(seconds=30)


def test_a_job_that_swallows_its_timeout_is_stopped(clock: FakeClock) -> None:
    run = jobs.stubborn.enqueue()
    [claimed] = claim("w", now=clock.now(), lease=timedelta(minutes=1))
    executed = execute(claimed, clock=clock, owner="w")  # real SIGALRM timer
    assert isinstance(executed.outcome, Failed) and not executed.outcome.retryable
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_JOB_TIMEOUT"
    assert jobs.CALLS["stubborn-swallowed"] == 1


def test_run_suspended_sends_wake_at_and_kind_and_still_the_old_names(
    driver: Driver, clock: FakeClock
) -> None:
    """CHANGELOG.md, "Deprecated": resume_at and reason go away after this release."""
    from django_durable_jobs import signals

    sent: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        sent.append(kwargs)

    signals.run_suspended.connect(receiver, weak=False)
    try:
        jobs.onboarding.enqueue(user_id=42)
        driver.step()
    finally:
        signals.run_suspended.disconnect(receiver)
    [kwargs] = sent
    wake_at = clock.now() + timedelta(days=3)
    assert (kwargs["wake_at"], kwargs["kind"]) == (wake_at, StepKind.SLEEP)
    assert (kwargs["resume_at"], kwargs["reason"]) == (wake_at, "sleep")
