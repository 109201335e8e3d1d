"""Pauses seen from a worker, in-process (``worker/pauses.py``): a paused queue's or job's
runs are not claimed (queued runs stay queued, due sleeping and waiting runs stay
parked, a wait's time-out included) until resumed; a run already running finishes; the
worker logs when it sees a pause begin and end."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta

import pytest

from django_durable_jobs import publish_event
from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.timeouts import TimeGuard
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.verbs import pauses
from django_durable_jobs.worker.execution import execute
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


@pytest.fixture
def worker(clock: FakeClock) -> Iterator[Worker]:
    # A poll of 0: the worker reads the pauses before every claim.
    w = Worker(
        WorkerOptions(worker_id="w-pause", burst=True, poll_interval=timedelta(0)), clock=clock
    )
    yield w
    if w._beat is not None:
        w._beat.stop()


def once(w: Worker) -> bool:
    worked = w.run_once()
    w.flush()
    return worked


def status(run: JobRun) -> str:
    return JobRun.objects.get(pk=run.pk).status


@pytest.mark.parametrize(("kind", "name"), [("queue", "mail"), ("job", "tests.noop")])
def test_a_paused_queue_or_job_is_not_claimed_until_resumed(
    kind: str, name: str, worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    paused = jobs.noop.using(queue="mail").enqueue()
    pauses.pause(kind, name, reason="provider down", by="alice")
    other = jobs.add.enqueue(1, 2)
    with caplog.at_level(logging.INFO, logger="django_durable_jobs.worker"):
        assert once(worker)  # the other run
        assert not once(worker)
        assert (status(paused), status(other)) == (RunStatus.QUEUED, RunStatus.SUCCEEDED)
        assert pauses.resume(kind, name)
        assert once(worker)
    assert status(paused) == RunStatus.SUCCEEDED
    assert f"pause seen: {kind}={name} (provider down; by alice)" in caplog.text
    assert f"pause ended: {kind}={name}" in caplog.text
    assert caplog.text.count("pause seen") == 1  # once, however many claims saw it


def test_due_sleeping_and_woken_waiting_runs_stay_parked_while_paused(
    worker: Worker, clock: FakeClock
) -> None:
    run = jobs.onboarding.enqueue(user_id=7)
    assert once(worker)
    assert status(run) == RunStatus.SLEEPING
    pauses.pause("job", "tests.onboarding")
    clock.advance(timedelta(days=3, seconds=1))  # the sleep is over
    assert not once(worker)
    assert status(run) == RunStatus.SLEEPING
    pauses.resume("job", "tests.onboarding")
    assert once(worker)
    assert status(run) == RunStatus.WAITING
    pauses.pause("queue", "default")
    publish_event("order.paid", {"order_id": 1}, key="7")  # wakes it: due now
    assert not once(worker)
    assert status(run) == RunStatus.WAITING
    pauses.resume("queue", "default")
    assert once(worker)
    run.refresh_from_db()
    assert (run.status, (run.result or {})["ordered"]) == (RunStatus.SUCCEEDED, True)


def test_a_wait_timing_out_while_paused_times_out_once_resumed(
    worker: Worker, clock: FakeClock
) -> None:
    run = jobs.onboarding.enqueue(user_id=8)
    assert once(worker)
    clock.advance(timedelta(days=3, seconds=1))
    assert once(worker)
    assert status(run) == RunStatus.WAITING
    pauses.pause("queue", "default")
    clock.advance(timedelta(days=8))  # past the wait's 7-day time-out
    assert not once(worker)
    assert status(run) == RunStatus.WAITING  # neither failed nor timed out: parked
    pauses.resume("queue", "default")
    assert once(worker)
    run.refresh_from_db()
    assert (run.status, (run.result or {})["ordered"]) == (RunStatus.SUCCEEDED, False)


def test_a_run_already_running_when_paused_finishes(clock: FakeClock) -> None:
    run = jobs.three_steps.enqueue(user_id=1)
    [claimed] = claim("w-busy", now=clock.now(), lease=timedelta(minutes=1))
    pauses.pause("job", "tests.three_steps")
    execute(claimed, clock=clock, owner="w-busy", guard=TimeGuard(use_signals=False))
    assert status(run) == RunStatus.SUCCEEDED
