"""The worker's async lane in-process: sync and async runs served by one worker,
adaptive batched claims, and what a stopping worker does with runs it claimed."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from django_durable_jobs import conf
from django_durable_jobs.db import dialect
from django_durable_jobs.db.claims import requeue_expired
from django_durable_jobs.db.leases import LAPSED
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from django_durable_jobs.worker import lane
from django_durable_jobs.worker.batching import MAX_BATCH
from django_durable_jobs.worker.connections import fit_to_pool
from django_durable_jobs.worker.heartbeat import Heartbeat
from django_durable_jobs.worker.lane import AsyncLane
from django_durable_jobs.worker.lane_size import lane_capacity, lane_threads
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from django_durable_jobs.worker.recording import record_all
from django_durable_jobs.worker.wakeup import make_waker
from tests.testapp import async_jobs, jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)
LEASE = timedelta(seconds=30)


def worker(clock: FakeClock, **options: Any) -> Worker:
    return Worker(WorkerOptions(worker_id="w-test", burst=True, **options), clock=clock)


def test_one_worker_serves_sync_and_async_runs(clock: FakeClock) -> None:
    sync_runs = [jobs.three_steps.enqueue(user_id=i) for i in range(3)]
    async_runs = [async_jobs.async_three_steps.enqueue(user_id=i) for i in range(5)]
    assert worker(clock).run() == 8
    statuses = dict(JobRun.objects.values_list("pk", "status"))
    assert {statuses[run.pk] for run in sync_runs + async_runs} == {RunStatus.SUCCEEDED}
    assert Effect.objects.filter(name="one").count() == 8  # each step's effect once
    assert JobRun.objects.get(pk=async_runs[0].pk).result == {
        "steps": ["one", "TWO", "three"],
        "user_id": 0,
    }


def test_the_batch_grows_with_async_runs_and_never_past_the_free_slots(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(40):
        async_jobs.async_io.enqueue(0.05, tag=str(n))
    w = worker(clock, async_concurrency=10)
    with caplog.at_level(logging.INFO, logger="django_durable_jobs.worker"):
        assert w.run() == 40
    sizes = [int(m) for m in re.findall(r"runs claimed: (\d+) in one round trip", caplog.text)]
    assert sizes and max(sizes) > 2  # it grew: 1, 2, 4, ...
    # Never more than the lane can start, and the one run it may claim ahead.
    assert max(sizes) <= 10 + 1 <= MAX_BATCH
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 40


def test_a_lane_claims_ahead_while_its_runs_are_quick_and_never_executes_past_its_slots(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 runs of 20 ms through 10 slots: the worker claims runs ahead of the slots
    (more handed over than the lane has slots), yet no more than 10 execute at once."""
    async_jobs.CONCURRENT.update(now=0, most=0)
    for _ in range(200):
        async_jobs.async_concurrent.enqueue(0.02)
    ahead: list[bool] = []
    start = AsyncLane.start

    def start_and_look(self: AsyncLane, run: JobRun, owner: str, *, begin: bool = True) -> None:
        start(self, run, owner, begin=begin)
        ahead.append(self.would_wait(0))  # handed over past its slots

    monkeypatch.setattr(AsyncLane, "start", start_and_look)
    assert worker(clock, async_concurrency=10).run() == 200
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED, attempt=1).count() == 200
    assert any(ahead)
    assert 1 < async_jobs.CONCURRENT["most"] <= 10


def _one_slot_taken_one_run_ahead(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, seconds: float = 3.0
) -> tuple[Worker, AsyncLane, JobRun, JobRun]:
    """A worker whose one-slot lane executes a run of ``seconds`` while a run claimed
    ahead, alone, waits: a quick run freed the slot first (counted for ``AHEAD_WINDOW``,
    made a minute). Their jobs use no connection of their own: with Django's pool the
    lane's threads may hold all there are (``fit_to_pool``)."""
    monkeypatch.setattr(lane, "AHEAD_WINDOW", 60.0)
    async_jobs.CONCURRENT.update(now=0, most=0)
    w = worker(clock, async_concurrency=1, poll_interval=timedelta(milliseconds=200))
    the_lane = w._make_lane(1, fit_to_pool(conf.database(), lane_threads(1)))
    assert the_lane is not None
    w._waker, w._lane = make_waker(), the_lane
    async_jobs.async_concurrent.enqueue(0.0)
    assert w.run_once()
    assert the_lane.wait(10, until_empty=True)
    long = async_jobs.async_concurrent.enqueue(seconds)
    assert the_lane.free() == 2  # its slot, and one ahead
    w._batching.size = 1
    assert w.run_once()  # the long run, alone
    deadline = time.monotonic() + 10
    while not async_jobs.CONCURRENT["now"] and time.monotonic() < deadline:
        time.sleep(0.01)  # the loop begins it
    assert async_jobs.CONCURRENT["now"] == 1
    later = async_jobs.async_concurrent.enqueue(0.0)
    assert the_lane.free() == 1  # one ahead
    assert w.run_once()  # a claim of one run, ahead of the slots
    assert the_lane.would_wait(0)  # the later run waits for the slot
    assert JobRun.objects.get(pk=later.pk).status == RunStatus.RUNNING
    return w, the_lane, long, later


def test_a_run_claimed_ahead_that_waits_too_long_is_given_back_unused_and_not_claimed_again(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs in flight became slow: after ``AHEAD_PATIENCE`` the run claimed ahead
    is given back (another worker may have room) without using an attempt, and the
    worker claims none ahead until its slot frees; then it executes it, once."""
    monkeypatch.setattr(lane, "AHEAD_PATIENCE", 0.3)
    w, the_lane, long, later = _one_slot_taken_one_run_ahead(clock, monkeypatch)
    waker = w._waker
    assert waker is not None
    try:
        deadline = time.monotonic() + 2.0
        while the_lane.would_wait(0) and time.monotonic() < deadline:
            w.run_once()  # each waits for room at most ``AHEAD_PATIENCE``
        for _ in range(3):  # the slot is still taken: none claimed ahead again
            w.run_once()
        row = JobRun.objects.get(pk=later.pk)
        assert (row.status, row.attempt, row.lease_owner) == (RunStatus.QUEUED, 0, "")
        assert JobRun.objects.get(pk=long.pk).status == RunStatus.RUNNING
        assert not StepRecord.objects.filter(run_id=later.pk).exists()
        assert the_lane.wait(10, until_empty=True)  # the long run ends
        assert w.run_once()  # now claimed into the free slot
        assert the_lane.wait(10, until_empty=True)
        w.flush()
    finally:
        w._let_go()
        waker.close()
        w._heartbeat().stop()
    rows = JobRun.objects.filter(pk__in=[long.pk, later.pk])
    assert set(rows.values_list("status", "attempt")) == {(RunStatus.SUCCEEDED, 1)}
    assert StepRecord.objects.filter(run_id=later.pk).count() == 1


def test_runs_claimed_ahead_are_given_back_unused_when_the_worker_stops(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run claimed ahead never began: released as it was, while the run in flight
    is drained to its end."""
    w, _, long, later = _one_slot_taken_one_run_ahead(clock, monkeypatch, seconds=1.0)
    waker = w._waker
    assert waker is not None
    # What the stop signal's log line says the worker does now.
    assert w._doing() == "finishing 1 async run(s) in flight, giving back 1 claimed ahead"
    try:
        w._let_go()  # the worker stops
    finally:
        waker.close()
        w._heartbeat().stop()
    row = JobRun.objects.get(pk=later.pk)
    assert (row.status, row.attempt, row.lease_owner) == (RunStatus.QUEUED, 0, "")
    assert not StepRecord.objects.filter(run_id=later.pk).exists()
    row = JobRun.objects.get(pk=long.pk)
    assert (row.status, row.attempt) == (RunStatus.SUCCEEDED, 1)


def test_a_run_claimed_ahead_keeps_its_attempt_when_its_worker_dies_before_it_began(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claimed ahead, it is a batch's (``LeaseOwner.batch``): the run in flight had its
    start recorded and loses its attempt with the worker; the run that waited keeps its
    own (``requeue_expired``), as a batch's sync runs not yet begun do."""
    w, the_lane, long, later = _one_slot_taken_one_run_ahead(clock, monkeypatch)
    waker = w._waker
    assert waker is not None
    try:
        began = JobRun.objects.filter(pk=long.pk, attempt_started_by=F("lease_owner"))
        deadline = time.monotonic() + 10
        while not began.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the heartbeat records its start a moment after it began
        assert began.exists()
        assert JobRun.objects.get(pk=later.pk).lease_owner.endswith("+")
        w._heartbeat().stop()  # the worker dies here: nothing renews the leases
        clock.advance(w.lease + timedelta(seconds=1))
        assert requeue_expired(now=clock.now()) == 2
    finally:
        the_lane.unstarted()
        the_lane.abandon()
        the_lane.wait(10, until_empty=True)
        the_lane.close()
        waker.close()
    assert JobRun.objects.get(pk=long.pk).attempt == 1
    row = JobRun.objects.get(pk=later.pk)
    assert (row.status, row.attempt, row.lease_owner) == (RunStatus.QUEUED, 0, "")


def test_a_run_that_stopped_frees_its_slot_before_its_outcome_is_recorded(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One slot, two runs, a database slow to take the first outcome: the second run
    is claimed meanwhile (the slot was not held for the recorder), and both outcomes
    are recorded. (Claimed, not executed: with Django's pool the lane may get a single
    connection thread, the one this write holds.)"""
    runs = [async_jobs.async_io.enqueue(0.01, tag=tag) for tag in ("-a", "-b")]
    first_write, overlapped = threading.Event(), threading.Event()

    def slow_first_write(outcomes: Sequence[tuple[Any, str]]) -> None:
        if not first_write.is_set():
            first_write.set()
            # Which run came first is the database's choice (MariaDB's may differ from
            # the enqueues' order). Held until the other was claimed (10 s at most).
            other = [run.pk for run in runs if run.pk != outcomes[0][0].run.pk]
            for _ in range(200):
                if JobRun.objects.filter(pk__in=other, status=RunStatus.RUNNING).exists():
                    overlapped.set()
                    break
                threading.Event().wait(0.05)
        record_all(outcomes)

    monkeypatch.setattr(lane, "record_all", slow_first_write)
    assert worker(clock, async_concurrency=1).run() == 2
    assert overlapped.is_set(), "the second run waited for the first one's outcome"
    assert set(JobRun.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}


def test_a_drain_that_times_out_lets_a_stopped_runs_outcome_be_written(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM while a finished run's outcome is being written, and the drain times out
    before the write ends: the run must not be cancelled and released (it would execute
    again), its outcome lands."""
    run = async_jobs.async_io.enqueue(0.01, tag="-drained")
    w = worker(clock, async_concurrency=1, drain_timeout=timedelta(seconds=0.1))

    def slow_write(outcomes: Sequence[tuple[Any, str]]) -> None:
        w.stopping.set()  # the signal arrives now
        threading.Event().wait(1.0)  # longer than the drain
        record_all(outcomes)

    monkeypatch.setattr(lane, "record_all", slow_write)
    w.run()
    row = JobRun.objects.get(pk=run.pk)
    assert (row.status, row.attempt, row.lease_owner) == (RunStatus.SUCCEEDED, 1, "")


@pytest.mark.postgres(reason="the server ends the session: pg_terminate_backend")
def test_a_lane_thread_drops_a_connection_its_work_broke_without_raising(
    clock: FakeClock,
) -> None:
    """The batched step writes hand a database error back per record instead of
    raising it: the lane thread must still drop the connection, or every later run it
    serves fails with "the connection is closed" (the async fault matrix found it)."""

    def cut_and_carry_on() -> str:
        try:
            dialect.of("default").cut_connection()
        except DatabaseError as exc:
            return type(exc).__name__  # handed back, not raised
        return "not cut"

    async def twice() -> tuple[str, int]:
        return await one.io(cut_and_carry_on), await one.io(JobRun.objects.count)

    one = AsyncLane(capacity=1, db_threads=1, clock=clock, leases=Heartbeat(clock, LEASE, LEASE))
    try:
        got = asyncio.run_coroutine_threadsafe(twice(), one._loop).result(timeout=30)
    finally:
        one.close()
    assert got == ("OperationalError", 0)


def test_an_async_run_frozen_past_its_lease_asks_before_its_first_step(clock: FakeClock) -> None:
    """Its process froze between the claim and the run's first step, for longer than a
    lease, and another worker took the run over meanwhile: the step's side effect must
    not happen (the lane asks the database, off its event loop, as a sync run does)."""
    from django_durable_jobs.db.claims import claim

    run = async_jobs.async_io.enqueue(0.01, tag="-late")
    [claimed] = claim("w-frozen", now=clock.now(), lease=LEASE)
    JobRun.objects.filter(pk=run.pk).update(lease_owner="w-other")  # taken over
    beat = Heartbeat(clock, LEASE, LEASE)  # never beats: the process was frozen
    beat.hold("w-frozen", claimed.pk, since=time.monotonic() - LEASE.total_seconds() - 1)
    one = AsyncLane(capacity=1, db_threads=1, clock=clock, leases=beat)
    try:
        one.start(claimed, "w-frozen")  # holds it again: the claim's time is kept
        assert one.wait(30, until_empty=True)
    finally:
        one.close()
    assert not Effect.objects.filter(name="touch-late").exists()
    assert JobRun.objects.get(pk=run.pk).lease_owner == "w-other"


def test_the_heartbeat_records_the_start_of_a_batchs_async_runs_while_they_run(
    clock: FakeClock,
) -> None:
    """As a batch's sync runs' (``Heartbeat.begin``): within ``RECORD_STARTS_AFTER``,
    together, on the heartbeat's connection; a lapse of their lease then counts their
    attempt (``claims.requeue_expired``)."""
    runs = [async_jobs.async_start_recorded.enqueue(5.0) for _ in range(4)]
    w = worker(clock)
    w._batching.size = 4  # a batch (``LeaseOwner.batch``), whose runs may wait
    assert w.run() == 4
    rows = JobRun.objects.filter(pk__in=[run.pk for run in runs])
    assert set(rows.values_list("status", "attempt", "result")) == {(RunStatus.SUCCEEDED, 1, True)}


#: ``claims.record_starts``: an UPDATE that sets the start's column and nothing else.
RECORD_STARTS = re.compile(r"^UPDATE \S+ SET [`\"]attempt_started_by[`\"] = ")


def test_a_claim_of_async_runs_writes_their_starts_only_for_those_whose_lease_lapsed(
    clock: FakeClock,
) -> None:
    """The claim's thread hands a batch of async runs to the lane with no write of its
    own: a statement and a commit per claim there held up the next claim (with a
    thousand runs in flight, most of that thread's time). Only the runs whose last lease
    lapsed have their start recorded before they begin (``start_needs_record``), all
    of the batch in one statement; the others' are the heartbeat's."""
    fresh = [async_jobs.async_start_recorded.enqueue(5.0) for _ in range(3)]
    lapsed = [async_jobs.async_start_recorded.enqueue() for _ in range(2)]
    JobRun.objects.filter(pk__in=[run.pk for run in lapsed]).update(attempt_started_by=LAPSED)
    w = worker(clock, async_concurrency=10)
    w._batching.size = 5  # one claim takes them all
    with CaptureQueriesContext(connection) as queries:  # the claim's thread only
        assert w.run() == 5
    starts = [q["sql"] for q in queries.captured_queries if RECORD_STARTS.match(q["sql"])]
    assert len(starts) == 1, starts
    rows = JobRun.objects.filter(pk__in=[run.pk for run in [*fresh, *lapsed]])
    # Recorded before their first step (the lapsed ones, at once), or while they ran.
    assert set(rows.values_list("status", "attempt", "result")) == {(RunStatus.SUCCEEDED, 1, True)}


def test_max_runs_counts_the_async_runs_in_hand(clock: FakeClock) -> None:
    """``--max-runs 3`` with room for ten async runs: three are claimed, executed and
    recorded, the others are left queued, unclaimed."""
    for n in range(10):
        async_jobs.async_io.enqueue(0.05, tag=str(n))
    assert worker(clock, async_concurrency=10, max_runs=3).run() == 3
    rows = list(JobRun.objects.values_list("status", "attempt", "lease_owner"))
    assert sorted(rows).count((RunStatus.SUCCEEDED, 1, "")) == 3
    assert sorted(rows).count((RunStatus.QUEUED, 0, "")) == 7


def test_sync_runs_claimed_in_a_batch_but_not_started_are_released_on_stop(
    clock: FakeClock,
) -> None:
    runs = [jobs.add.enqueue(n, 1) for n in range(4)]
    w = worker(clock)
    capacity = lane_capacity(w.options.async_concurrency)
    w._waker, w._lane = make_waker(), w._make_lane(capacity, lane_threads(capacity))
    w._batching.size = 4  # as after batches of async runs
    try:
        assert w.run_once()  # claims all four, starts the first
        w.flush()
        w._let_go()  # the worker stops
    finally:
        w._waker.close()
    rows = [JobRun.objects.get(pk=run.pk) for run in runs]
    # Which of the four came first is the database's choice (equal priority and wake
    # time: MariaDB's batch may come back in another order than the enqueues).
    started = [run for run in rows if run.status == RunStatus.SUCCEEDED]
    assert len(started) == 1 and started[0].attempt == 1
    for run in rows:  # the others are given back as they were: no attempt used, no lease
        if run not in started:
            assert (run.status, run.attempt, run.lease_owner) == (RunStatus.QUEUED, 0, "")


def test_record_all_records_every_outcome_and_a_refused_one_holds_back_no_other(
    clock: FakeClock,
) -> None:
    from django_durable_jobs.db.claims import claim
    from django_durable_jobs.worker.execution import run_to_stop

    for n in range(3):
        jobs.add.enqueue(n, 1)
    claimed = claim("w-test", now=clock.now(), lease=timedelta(minutes=1), limit=3)
    pending = [run_to_stop(run, clock=clock, owner="w-test") for run in claimed]
    record_all([(p, "w-test") for p in pending])
    assert {run.result for run in JobRun.objects.all()} == {1, 2, 3}

    more = [jobs.add.enqueue(n, 1) for n in range(3)]
    claimed = claim("w-test", now=clock.now(), lease=timedelta(minutes=1), limit=3)
    pending = [run_to_stop(run, clock=clock, owner="w-test") for run in claimed]
    bad = pending[1]
    bad.changes["error"] = "x" * 10  # a success cannot carry an error code this long:
    bad.changes["error_code"] = "X" * 500  # the database refuses the whole batch
    record_all([(p, "w-test") for p in pending])
    rows = {run.pk: run for run in JobRun.objects.filter(pk__in=[r.pk for r in more])}
    assert sum(run.status == RunStatus.SUCCEEDED for run in rows.values()) >= 2
    assert all(run.lease_owner == "" for run in rows.values())  # none left claimed


def test_an_async_run_whose_attempts_workers_used_up_fails_instead_of_crashing_the_lane(
    clock: FakeClock,
) -> None:
    """Workers died in each attempt (its lease expired): the next claim counts one too
    many, and the lane must fail the run. Naming where they died reads the steps: that
    read ran on the event loop (SynchronousOnlyOperation) and left the run running."""
    run = async_jobs.async_logged.enqueue(1)  # retries=0: one attempt
    JobRun.objects.filter(pk=run.pk).update(attempt=1)  # the one a dead worker used
    worker(clock).run()
    run.refresh_from_db()
    assert (run.status, run.error_code, run.attempt) == (
        RunStatus.FAILED,
        "X_ATTEMPTS_EXHAUSTED",
        1,
    )
    assert "before its first step completed" in run.error


def test_sync_step_functions_that_hang_do_not_stop_the_lane(clock: FakeClock) -> None:
    """They ran on the lane's database threads: five that hang past their step_timeout
    (more than ASYNC_CONNECTIONS) left every run of the worker 'running', their
    failures and every other run's records waiting for a free thread."""
    async_jobs.RELEASE.clear()
    async_jobs.RETURNED.clear()
    hung = [async_jobs.async_hangs_in_a_sync_step.enqueue(str(n)) for n in range(5)]
    others = [async_jobs.async_only.enqueue(n) for n in range(3)]
    try:
        assert worker(clock, async_concurrency=10).run() == 8
        assert async_jobs.RETURNED == []  # the step functions still hang
    finally:
        async_jobs.RELEASE.set()
    runs = {run.pk: run for run in JobRun.objects.all()}
    assert {(runs[r.pk].status, runs[r.pk].error_code) for r in hung} == {
        (RunStatus.FAILED, "X_JOB_TIMEOUT")
    }
    assert [runs[r.pk].result for r in others] == [0, 2, 4]


def test_async_jobs_ask_patched_in_the_lane_and_their_answers_are_recorded(
    clock: FakeClock,
) -> None:
    runs = [async_jobs.async_patched.enqueue(n) for n in range(3)]
    assert worker(clock, async_concurrency=3).run() == 3
    for run in runs:
        run.refresh_from_db()
        assert (run.status, run.result) == (RunStatus.SUCCEEDED, [True, True])
        steps = list(run.steps.order_by("id").values_list("name", "kind", "output"))
        assert steps == [
            ("one", "run", "patched-one"),
            ("patch:extra", "patch", True),  # written before "extra", the next record
            ("extra", "run", "patched-extra"),
            ("patch:last", "patch", True),  # no step after it: written at the return
        ]


def test_an_async_run_abandoned_twice_is_still_released(clock: FakeClock) -> None:
    """A stopping worker abandons its async runs at the drain's time-out, and the
    supervisor's signal abandons them again at about the same moment: the second
    cancellation landed while the run's release waited for a database thread, the
    release was dropped, and the run kept the lease of a worker that had exited."""
    from django_durable_jobs.db.claims import claim

    run = async_jobs.async_io.enqueue(60, tag="-abandoned")
    [claimed] = claim("w-stopping", now=clock.now(), lease=LEASE)
    one = AsyncLane(capacity=1, db_threads=1, clock=clock, leases=Heartbeat(clock, LEASE, LEASE))
    busy, go = threading.Event(), threading.Event()

    def hold_the_thread() -> None:
        busy.set()
        go.wait(30)

    try:
        one.start(claimed, "w-stopping")
        wait = time.monotonic() + 30
        while not Effect.objects.filter(name="touch-abandoned").exists():
            assert time.monotonic() < wait, "the run never reached its I/O step"
            time.sleep(0.01)
        # The lane's one database thread is busy: the release waits in its queue.
        held = asyncio.run_coroutine_threadsafe(one.io(hold_the_thread), one._loop)
        assert busy.wait(30)
        one.abandon()
        time.sleep(0.2)  # the run's task has caught its cancellation and asked for a thread
        one.abandon()
        time.sleep(0.2)
        go.set()
        held.result(timeout=30)
        assert one.wait(30, until_empty=True)
    finally:
        go.set()
        one.close()
    row = JobRun.objects.get(pk=run.pk)
    assert (row.status, row.lease_owner) == (RunStatus.QUEUED, "")
