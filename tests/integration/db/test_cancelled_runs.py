"""A run cancelled while a worker holds it (``runs.cancel`` leaves that worker its
lease) stays cancelled whatever becomes of the worker: stopped before it reached the
run's next step (the worker releases the runs in hand), or dead (the reap of expired
leases). Either way the lease and the concurrency slot are let go, and an operator's
retry replays the steps that completed."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command

from django_durable_jobs import signals
from django_durable_jobs.db.claims import claim, let_go_expired_cancelled, release
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.records import RecordedStep
from django_durable_jobs.exceptions import RunCancelled
from django_durable_jobs.models import JobRun, RunStatus, StepRecord, StepStatus
from django_durable_jobs.verbs import runs
from django_durable_jobs.worker.heartbeat import Heartbeat
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from tests.testapp import flow_jobs, jobs
from tests.testapp.models import Effect

LEASE = timedelta(minutes=1)


def worker(clock: FakeClock, **options: Any) -> Worker:
    return Worker(WorkerOptions(worker_id="w-cancel", burst=True, **options), clock=clock)


def effects(run: JobRun) -> Counter[str]:
    return Counter(Effect.objects.filter(run_id=str(run.pk)).values_list("name", flat=True))


def let_go_as_cancelled(run: JobRun) -> None:
    """``run`` is still cancelled, by the operator, and nobody holds it."""
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.CANCELLED, "X_RUN_CANCELLED")
    assert (run.lease_owner, run.lease_expires_at) == ("", None)


# -- the worker stops before the run's next step ----------------------------------------


@pytest.mark.django_db
def test_a_cancelled_run_given_back_stays_cancelled_and_lets_go_of_its_lease(
    clock: FakeClock,
) -> None:
    """Before: ``release`` put it back where it was claimed from (queued), its
    X_RUN_CANCELLED error kept, and a worker executed it again."""
    run = jobs.three_steps.enqueue(user_id=1)
    [claimed] = claim("w", now=clock.now(), lease=LEASE)
    runs.cancel(run.pk)
    assert not release(claimed, "w", now=clock.now())  # not given back: let go
    let_go_as_cancelled(run)
    assert run.attempt == 1  # the attempt its worker started
    assert claim("w2", now=clock.now(), lease=LEASE) == []  # nothing runs it again
    assert not effects(run)


@pytest.mark.django_db
def test_a_cancelled_run_given_back_frees_its_concurrency_slot(clock: FakeClock) -> None:
    first = flow_jobs.one_per_key.enqueue("k")
    [claimed] = claim("w", now=clock.now(), lease=LEASE)
    clock.advance(timedelta(milliseconds=1))
    second = flow_jobs.one_per_key.enqueue("k")
    assert JobRun.objects.get(pk=second.pk).wake_at is None  # held: the slot is taken
    runs.cancel(first.pk)
    release(claimed, "w", now=clock.now())
    let_go_as_cancelled(first)
    second.refresh_from_db()
    assert (second.status, second.wake_at) == (RunStatus.QUEUED, clock.now())  # let go
    [taken] = claim("w2", now=clock.now(), lease=LEASE)
    assert taken.pk == second.pk


@contextmanager
def stop_signals(subject: Worker) -> Iterator[None]:
    """``subject``'s stop-signal handlers, as ``runjobs`` installs them, for the test."""
    names = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
    saved = {signum: signal.getsignal(signum) for signum in names}
    subject.install_signal_handlers()
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


@pytest.mark.django_db(transaction=True)
def test_a_worker_stopped_as_it_records_a_cancelled_runs_step_keeps_the_step_and_the_cancel(
    clock: FakeClock,
) -> None:
    """The operator cancels the run while step "two" works; the step completes, and
    while its record is written (it is: a retry must replay it) the worker is told to
    stop at once (SIGUSR2: a drain past ``--drain-timeout``). Before: the release put
    the run back to queued with its X_RUN_CANCELLED error, and it executed again."""
    run = jobs.cancelled_in_a_step.enqueue()

    def stop_at_once(sender: Any, run_id: str, step: RecordedStep, **kwargs: Any) -> None:
        if step.name == "two":
            os.kill(os.getpid(), signal.SIGUSR2)

    subject = worker(clock)
    signals.step_completed.connect(stop_at_once)
    try:
        with stop_signals(subject):
            assert subject.run() == 0  # stopped inside its only run
    finally:
        signals.step_completed.disconnect(stop_at_once)
    let_go_as_cancelled(run)
    steps = dict(StepRecord.objects.filter(run=run).values_list("name", "status"))
    assert steps == {"one": StepStatus.COMPLETED, "two": StepStatus.COMPLETED}
    assert worker(clock).run() == 0  # nothing runs it again
    assert effects(run) == {"w-one": 1, "w-cancelled": 1, "w-two": 1}
    runs.retry(run.pk, now=clock.now())
    assert worker(clock).run() == 1
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    # "one" and "two" replayed: each side effect happened once.
    assert effects(run) == {"w-one": 1, "w-cancelled": 1, "w-two": 1, "w-three": 1}


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_run_claimed_in_a_batch_but_not_started_stays_cancelled_when_the_worker_stops(
    clock: FakeClock,
) -> None:
    """A sync run waiting in the worker's hand behind the one it executes (a batch
    claim) is cancelled, then the worker stops: the others of the batch are given
    back, the cancelled one is not (before: it was, and executed)."""
    batch = [jobs.three_steps.enqueue(user_id=n) for n in range(3)]
    w = worker(clock)
    w._batching.size = 3
    assert w.run_once()  # claims the three, executes one
    w.flush()
    waiting = list(JobRun.objects.filter(status=RunStatus.RUNNING).order_by("pk"))
    assert len(waiting) == 2
    cancelled, other = waiting
    runs.cancel(cancelled.pk)
    w._let_go()  # the worker stops
    let_go_as_cancelled(cancelled)
    other.refresh_from_db()
    assert (other.status, other.attempt, other.lease_owner) == (RunStatus.QUEUED, 0, "")
    assert worker(clock).run() == 1  # the other one, not the cancelled one
    assert not effects(cancelled)
    finished = JobRun.objects.filter(pk__in=[run.pk for run in batch]).exclude(pk=cancelled.pk)
    assert set(finished.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}


# -- the worker died -------------------------------------------------------------------


@pytest.mark.django_db
def test_the_reap_lets_go_of_a_cancelled_run_whose_worker_died_and_a_retry_replays_it(
    clock: FakeClock,
) -> None:
    """Before: expired leases were looked for on running runs only, and retry, replay
    and purge all want a run no worker holds: such a run kept its lease for ever."""
    jobs.FAIL_ONCE.add("two")
    run = jobs.three_steps.enqueue(user_id=1)
    w = worker(clock)
    assert w.run_once()  # attempt 1: "one" completes, "two" fails
    w.flush()
    run.refresh_from_db()
    assert (run.status, run.attempt) == (RunStatus.QUEUED, 1)
    [claimed] = claim("dead", now=clock.now(), lease=LEASE)  # attempt 2; the worker dies
    runs.cancel(claimed.pk)
    assert not worker(clock).run_once()  # a worker's reap: the lease still holds
    run.refresh_from_db()
    assert (run.status, run.lease_owner) == (RunStatus.CANCELLED, "dead")
    clock.advance(LEASE + timedelta(seconds=1))
    assert not worker(clock).run_once()  # its reap lets go of the run; nothing to execute
    let_go_as_cancelled(run)
    assert effects(run) == {"one": 1, "two": 1}
    call_command("jobs", "retry", str(run.pk))
    w = worker(clock)
    assert w.run_once()
    w.flush()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert effects(run) == {"one": 1, "two": 2, "three": 1}  # "one" replayed


@pytest.mark.django_db
def test_the_reap_frees_the_slot_of_a_cancelled_run_whose_worker_died(clock: FakeClock) -> None:
    first = flow_jobs.one_per_key.enqueue("k")
    claim("dead", now=clock.now(), lease=LEASE)
    clock.advance(timedelta(milliseconds=1))
    second = flow_jobs.one_per_key.enqueue("k")
    runs.cancel(first.pk)
    clock.advance(LEASE + timedelta(seconds=1))
    assert let_go_expired_cancelled(now=clock.now()) == 1
    let_go_as_cancelled(first)
    second.refresh_from_db()
    assert (second.status, second.wake_at) == (RunStatus.QUEUED, clock.now())  # let go


@pytest.mark.django_db
def test_a_live_worker_keeps_the_lease_of_a_run_cancelled_in_its_hand(clock: FakeClock) -> None:
    """The heartbeat renews the lease of a cancelled run it still executes (a step in
    flight finishes and is recorded, then the worker lets go of the run): the reap
    leaves it alone. Before: only running runs were renewed, so a reap would take the
    run from under a step longer than a lease, and the step's record was refused."""
    run = jobs.three_steps.enqueue(user_id=1)
    [claimed] = claim("w", now=clock.now(), lease=LEASE)
    beat = Heartbeat(clock, LEASE, timedelta(seconds=10))
    beat.hold("w", claimed.pk)
    runs.cancel(run.pk)
    clock.advance(LEASE - timedelta(seconds=1))
    beat.beat()
    assert isinstance(beat.interruption_for(run.pk)(), RunCancelled)  # noticed
    run.refresh_from_db()
    assert (run.status, run.lease_owner) == (RunStatus.CANCELLED, "w")
    assert run.lease_expires_at == clock.now() + LEASE
    clock.advance(LEASE - timedelta(seconds=1))
    assert let_go_expired_cancelled(now=clock.now()) == 0
    beat.drop(run.pk)  # no longer renewed (the worker died): the reap takes it
    clock.advance(timedelta(seconds=2))
    assert let_go_expired_cancelled(now=clock.now()) == 1
    assert StepRecord.objects.filter(run=run).count() == 0
