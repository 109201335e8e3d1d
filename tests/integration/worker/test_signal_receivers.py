"""A receiver of the worker's signals that raises: logged, and nothing else changes.

Sent with ``send``, a ``run_succeeded`` receiver's exception stopped ``runjobs`` with a
traceback (a sync run's outcome is settled in the main loop), leaving the next claimed
runs to their lease; in the async lane it skipped the rest of a batch's outcomes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.dispatch import Signal

from django_durable_jobs import signals
from django_durable_jobs.contrib.tasks import HAS_TASKS, JOB_PREFIX
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from tests.testapp import async_jobs, jobs

pytestmark = pytest.mark.django_db(transaction=True)

#: The worker's signals a three-step run sends (``_announce`` sends the suspended and
#: failed ones the same way).
WORKER_SIGNALS = ["run_started", "step_completed", "run_succeeded"]


def broken_receiver(sender: Any, **kwargs: Any) -> None:
    raise RuntimeError("a bug in the project's receiver")


@pytest.fixture(params=WORKER_SIGNALS)
def broken(request: pytest.FixtureRequest) -> Iterator[Signal]:
    signal: Signal = getattr(signals, request.param)
    signal.connect(broken_receiver)
    try:
        yield signal
    finally:
        signal.disconnect(broken_receiver)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_receiver_that_raises_is_logged_and_every_run_finishes(
    clock: FakeClock, caplog: pytest.LogCaptureFixture, broken: Signal, kind: str
) -> None:
    for n in range(3):
        if kind == "sync":
            jobs.three_steps.enqueue(user_id=n)
        else:
            async_jobs.async_three_steps.enqueue(user_id=n)
    worker = Worker(WorkerOptions(worker_id="w-test", burst=True), clock=clock)
    with caplog.at_level(logging.ERROR, logger="django_durable_jobs.signals"):
        assert worker.run() == 3
    statuses = list(JobRun.objects.values_list("status", "attempt"))
    assert statuses == [(RunStatus.SUCCEEDED, 1)] * 3
    assert "broken_receiver raised RuntimeError: a bug in the project's receiver" in caplog.text


def test_run_started_is_heard_by_project_receivers_and_by_the_apps_own_for_task_runs_only(
    clock: FakeClock,
) -> None:
    """An async run sends ``run_started`` from a thread off its event loop only when a
    receiver acts on it: the app's own receivers for django.tasks (Django 6) act on
    task runs only; any receiver of the project hears every run."""
    plain = JobRun(job_name="tests.async_three_steps")
    task = JobRun(job_name=f"{JOB_PREFIX}default")
    assert not signals.heard(signals.run_started, plain)
    assert signals.heard(signals.run_started, task) == HAS_TASKS
    started: list[str] = []

    def receiver(sender: Any, run: JobRun, **kwargs: Any) -> None:
        started.append(run.job_name)

    signals.run_started.connect(receiver)
    try:
        assert signals.heard(signals.run_started, plain)
        async_jobs.async_three_steps.enqueue(user_id=1)
        assert Worker(WorkerOptions(worker_id="w-test", burst=True), clock=clock).run() == 1
    finally:
        signals.run_started.disconnect(receiver)
    assert started == ["tests.async_three_steps"]
    assert not signals.heard(signals.run_started, plain)
