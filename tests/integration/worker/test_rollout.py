"""A rolling deploy seen from one worker, in-process (``worker/rollout.py``): a run of a
job or version it does not register is left to a live worker that has it, and fails
only once no live worker has had it for ``UNKNOWN_JOB_GRACE``."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.worker import presence
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from tests.factories import JobRunFactory
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

LEASE = timedelta(seconds=60)
GRACE = timedelta(minutes=10)


def worker(clock: FakeClock) -> Worker:
    return Worker(WorkerOptions(worker_id="old", burst=True), clock=clock)


def once(w: Worker) -> bool:
    worked = w.run_once()
    w.flush()
    return worked


def hears(w: Worker, clock: FakeClock) -> None:
    """What its heartbeat does after each beat: read what the live workers register."""
    w._rollout.heard(presence.live_registries(now=clock.now(), lease=LEASE))


def another_worker(clock: FakeClock, jobs: dict[str, list[int]]) -> None:
    """A live worker of the new deploy (its row, as ``runjobs`` writes it)."""
    presence.register("new", queues=None, concurrency=1, now=clock.now(), jobs=jobs)


def test_a_worker_records_the_jobs_and_versions_it_registers(clock: FakeClock) -> None:
    w = worker(clock)
    w._register()
    try:
        row = presence.listing(now=clock.now())[0]
        assert row["worker_id"] == "old"
        assert row["jobs"]["tests.three_steps"] == [1]
        assert set(row["jobs"]) >= {"tests.noop", "tests.onboarding"}
    finally:
        w._heartbeat().stop()


def test_a_run_of_a_job_it_lacks_is_given_back_untouched_and_left_alone(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    run = JobRunFactory.create(job_name="tests.added", created_at=clock.now())
    w = worker(clock)
    assert not w._rollout.filtering  # all live workers alike: the usual claim
    with caplog.at_level(logging.INFO, logger="django_durable_jobs.worker"):
        assert not once(w)  # claimed, and given back: nothing executed
    run.refresh_from_db()
    assert (run.status, run.attempt, run.started_at) == (RunStatus.QUEUED, 0, None)
    assert (run.lease_owner, run.wake_at) == ("", clock.now())  # how long it waited counts
    (line,) = [r.getMessage() for r in caplog.records if "left to other" in r.getMessage()]
    assert "job=tests.added version=1" in line
    assert "no live worker has it: it fails once runnable for 0:10:00" in line
    assert w._rollout.filtering  # from now on its claim leaves such runs out
    assert w._outbox._only(clock.now()) is not None


def test_a_run_nobody_registers_fails_once_runnable_for_the_grace(clock: FakeClock) -> None:
    run = jobs.three_steps.enqueue(user_id=1)
    JobRun.objects.filter(pk=run.pk).update(job_version=2)  # a deploy since rolled back
    w = worker(clock)
    assert not once(w)
    clock.advance(GRACE - timedelta(seconds=1))
    assert not once(w)
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.QUEUED
    clock.advance("1s")
    assert once(w)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_JOB_UNKNOWN"
    assert "job 'tests.three_steps' has no version 2 registered here (versions: 1)" in run.error


def test_a_run_another_live_worker_registers_is_never_claimed(clock: FakeClock) -> None:
    run = JobRunFactory.create(job_name="tests.added", created_at=clock.now())
    another_worker(clock, {"tests.added": [1]})
    w = worker(clock)
    hears(w, clock)
    assert w._rollout.filtering  # a worker with other code: the claim is filtered at once
    for _ in range(3):  # past the grace too, while the other worker beats
        assert not once(w)
        clock.advance(GRACE)
        presence.beat("new", now=clock.now(), executed=0)
        hears(w, clock)
    run.refresh_from_db()
    assert (run.status, run.attempt, run.lease_owner) == (RunStatus.QUEUED, 0, "")


def test_the_filter_is_lifted_once_the_other_code_is_gone(clock: FakeClock) -> None:
    another_worker(clock, {"tests.added": [1], "tests.noop": [1]})
    w = worker(clock)
    hears(w, clock)
    assert w._rollout.filtering
    presence.stopped("new", now=clock.now(), executed=0)
    hears(w, clock)
    assert not w._rollout.filtering
    noop = jobs.noop.enqueue()
    assert once(w)
    assert JobRun.objects.get(pk=noop.pk).status == RunStatus.SUCCEEDED


def test_with_no_grace_a_run_nobody_registers_fails_at_once(
    clock: FakeClock, settings: Any
) -> None:
    settings.DURABLE_JOBS = {"UNKNOWN_JOB_GRACE": 0}
    run = JobRunFactory.create(job_name="tests.added", created_at=clock.now())
    assert once(worker(clock))
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_JOB_UNKNOWN"
    assert "no job is registered as 'tests.added'" in run.error


def test_a_filtered_worker_executes_its_own_runs_and_records_their_outcomes(
    clock: FakeClock,
) -> None:
    another_worker(clock, {"tests.added": [1]})
    theirs = JobRunFactory.create(job_name="tests.added", created_at=clock.now())
    mine = [jobs.noop.enqueue() for _ in range(3)]
    w = worker(clock)
    hears(w, clock)
    # Each claim also records the previous run's outcome (in one statement on PostgreSQL).
    while w.run_once():
        pass
    w.flush()
    statuses = dict(JobRun.objects.values_list("pk", "status"))
    assert [statuses[run.pk] for run in mine] == [RunStatus.SUCCEEDED] * 3
    assert statuses[theirs.pk] == RunStatus.QUEUED
