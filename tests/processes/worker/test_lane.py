"""Many async runs in one real ``runjobs`` process: kill -9 with 50 runs in
flight, SIGTERM draining every one of them, and no overlap with batched claims.

Same harness as ``test_worker_processes.py`` (short lease, polls with generous
deadlines that only keep a broken worker from hanging the suite).
"""

from __future__ import annotations

import itertools
import re
import signal
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import F

from django_durable_jobs.db import dialect, faults
from django_durable_jobs.models import FINISHED, JobRun, RunStatus, StepRecord, StepStatus
from tests.processes.worker.test_worker import Workers, wait_until
from tests.testapp import async_jobs
from tests.testapp.models import Effect, Execution

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

IN_FLIGHT = 50


@pytest.fixture
def workers(request: pytest.FixtureRequest, transactional_db: None) -> Iterator[Workers]:
    failed_before = request.session.testsfailed
    pool = Workers(request.node.name)
    try:
        yield pool
    finally:
        pool.cleanup(failed=request.session.testsfailed > failed_before)


def run_statuses() -> str:
    """The runs by status, and a few unfinished or failed ones with their lease, error,
    creation and wake time (against the database's clock now): what a failure message
    needs to tell a hang from a failed run, or a run not due yet."""
    counts = Counter(JobRun.objects.values_list("status", "error_code", "attempt"))
    odd = JobRun.objects.exclude(status=RunStatus.SUCCEEDED).values_list(
        "id",
        "status",
        "attempt",
        "lease_owner",
        "lease_expires_at",
        "error",
        "created_at",
        "wake_at",
    )[:10]
    with connection.cursor() as cursor:
        cursor.execute(dialect.of(connection.alias).now_sql or "SELECT NULL")
        (database_now,) = cursor.fetchone()
    lines = [f"(status, error code, attempt): count = {dict(counts)}; database now {database_now}"]
    lines += [f"  {row}" for row in odd]
    return "\n".join(lines)


def effect_counts(name: str) -> Counter[str]:
    return Counter(Effect.objects.filter(name=name).values_list("run_id", flat=True))


def test_kill_9_with_50_async_runs_in_flight_a_new_worker_finishes_them_all(
    workers: Workers,
) -> None:
    with transaction.atomic():
        runs = [async_jobs.async_hang_once.enqueue() for _ in range(IN_FLIGHT)]
    first = workers.start("first")
    # Every run completed "touch" and now hangs in its "io" step: all 50 in flight in
    # one process.
    touched_steps = StepRecord.objects.filter(name="touch", status=StepStatus.COMPLETED)
    wait_until(
        lambda: touched_steps.count() >= IN_FLIGHT,
        timeout=60,
        what=f"{IN_FLIGHT} async runs in flight",
        workers=[first],
    )
    assert JobRun.objects.filter(status=RunStatus.RUNNING).count() == IN_FLIGHT
    # The starts of a batch's runs recorded (by the heartbeat, ``RECORD_STARTS_AFTER``
    # after they began; a run claimed alone began with its claim): the death then
    # counts the attempt of each.
    batch = JobRun.objects.filter(lease_owner__endswith="+")
    wait_until(
        lambda: not batch.exclude(attempt_started_by=F("lease_owner")).exists(),
        timeout=30,
        what="the starts of the runs in flight recorded",
        workers=[first],
    )
    assert first.kill() == -signal.SIGKILL

    second = workers.start("second")
    wait_until(
        lambda: JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() >= IN_FLIGHT,
        timeout=300,
        what=f"the second worker to finish all {IN_FLIGHT} runs",
        workers=[second],
    )
    assert second.terminate() == 0
    ids = {str(run.id) for run in runs}
    touched, after = effect_counts("touch"), effect_counts("after")
    print(
        f"\n[async kill -9 / {connection.vendor}] runs={IN_FLIGHT} "
        f"attempts={Counter(JobRun.objects.values_list('attempt', flat=True))}"
    )
    assert set(touched) == ids and set(touched.values()) == {1}  # replayed, never re-run
    assert set(after) == ids and set(after.values()) == {1}
    assert set(JobRun.objects.values_list("status", "attempt")) == {(RunStatus.SUCCEEDED, 2)}
    assert set(StepRecord.objects.filter(name="touch").values_list("attempts", flat=True)) == {1}


@pytest.mark.parametrize("point", ["step.before_record", "step.recorded"])
def test_kill_9_inside_a_batch_of_step_records_repeats_no_recorded_step_and_loses_no_run(
    workers: Workers, point: str
) -> None:
    """50 async runs reach their first step together and the lane writes its records
    in batches (``AsyncLane.put``). The worker dies (``os._exit``, as kill -9) at the
    25th record: before its batch's statement (``step.before_record``: none of that
    batch is committed) or after its commit (``step.recorded``: every record of it is,
    and no run of it continued yet). A second worker finishes every run; a step
    recorded before the kill is replayed, never executed again, and only a step whose
    record was not committed executes twice (its effect ran before the kill)."""
    with transaction.atomic():
        runs = [async_jobs.async_io.enqueue(0.05) for _ in range(IN_FLIGHT)]
    first = workers.start("first", env={faults.ENV: f"{point}:kill:25"})
    assert first.proc.wait(timeout=120) == faults.KILLED
    # Both points are passed once per completed record (each run's "touch" and "io").
    completed = StepRecord.objects.filter(status=StepStatus.COMPLETED)
    if point == "step.recorded":  # the batch of the 25th record committed whole
        assert completed.count() >= 25
    else:  # the 25th record's batch did not: at most the 24 before it
        assert completed.count() < 25
    touched = completed.filter(name="touch").values_list("run_id", flat=True)
    recorded = {str(run_id) for run_id in touched}

    second = workers.start("second")
    wait_until(
        lambda: JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() >= IN_FLIGHT,
        timeout=300,
        what=f"the second worker to finish all {IN_FLIGHT} runs",
        workers=[second],
        detail=run_statuses,
    )
    assert second.terminate() == 0
    effects = effect_counts("touch")
    assert set(effects) == {str(run.id) for run in runs}  # nothing lost
    assert all(effects[run_id] == 1 for run_id in recorded), effects  # replayed, not re-run
    assert set(effects.values()) <= {1, 2}
    assert set(JobRun.objects.values_list("status", "result")) == {(RunStatus.SUCCEEDED, "done")}
    steps = StepRecord.objects.filter(run__in=runs)
    assert Counter(steps.values_list("name", "status")) == {
        ("touch", StepStatus.COMPLETED): IN_FLIGHT,
        ("io", StepStatus.COMPLETED): IN_FLIGHT,
    }


def test_sigterm_drains_every_async_run_in_flight(workers: Workers) -> None:
    worker = workers.start("drainer", "--drain-timeout", "60s")
    workers.wait_started(worker)
    with transaction.atomic():
        runs = [async_jobs.async_io.enqueue(2.0, tag=str(n)) for n in range(30)]
    wait_until(
        lambda: Effect.objects.filter(name__startswith="touch").count() >= len(runs),
        timeout=60,
        what="30 async runs in flight",
        workers=[worker],
    )
    assert worker.terminate(timeout=90) == 0
    statuses = Counter(JobRun.objects.values_list("status", "attempt"))
    assert statuses == {(RunStatus.SUCCEEDED, 1): len(runs)}, statuses  # finished, not cut
    assert "waiting for" in worker.log() and "async run(s)" in worker.log()
    # Not "idle, exiting": the main thread was idle, the lane was not.
    assert re.search(r"stopping \(SIGTERM\): finishing \d+ async run\(s\) in flight", worker.log())


@pytest.mark.postgres(reason="a table lock held by a psycopg session of our own")
@pytest.mark.psycopg3(reason="a table lock held by a psycopg session of our own")
def test_a_write_stuck_on_a_lock_does_not_keep_a_stopped_worker_from_exiting(
    workers: Workers,
) -> None:
    """The lane's database threads were a ThreadPoolExecutor's: a step write waiting
    for a lock (someone's long transaction, a migration) held the worker's exit, past
    its drain time-out, until the lock was let go. Now the worker exits, and the run is
    given back to the queue once the lock is released."""
    worker = workers.start("stuck", "--drain-timeout", "1s")
    workers.wait_started(worker)
    run = async_jobs.async_io.enqueue(3.0, tag="stuck")
    # Its record, not only its side effect: a "touch" whose record waited for the lock
    # would run again in the next worker, as any step whose record never landed does.
    wait_until(
        lambda: StepRecord.objects.filter(
            run_id=run.pk, name="touch", status=StepStatus.COMPLETED
        ).exists(),
        timeout=60,
        what="the run's first step's record",
        workers=[worker],
    )
    import psycopg

    table = StepRecord._meta.db_table
    params = connection.get_connection_params()
    params = {k: v for k, v in params.items() if k not in {"cursor_factory", "context"}}
    with psycopg.connect(**params) as other:
        other.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')  # until rollback
        wait_until(  # the "io" step ended and its record waits for the lock
            lambda: _waiting_for_a_lock(other, table),
            timeout=60,
            what="the step write to wait for the lock",
            workers=[worker],
        )
        assert worker.terminate(timeout=60) == 0
        assert "still running" in worker.log()
        other.rollback()
    second = workers.start("second")
    wait_until(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCEEDED).exists(),
        timeout=60,
        what="a second worker to finish the run",
        workers=[second],
    )
    assert second.terminate() == 0
    assert Effect.objects.filter(name="touchstuck").count() == 1


def _waiting_for_a_lock(other: Any, table: str) -> bool:
    """Whether a session other than ``other`` waits for a lock on ``table``."""
    row = other.execute(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
        [f'"{table}"'],
    ).fetchone()
    return bool(row and row[0])


RUNS = 400


def test_batched_claims_never_execute_a_run_in_two_workers_at_once(workers: Workers) -> None:
    # A lease no worker outlives on a loaded box: this test is about batched claims never
    # overlapping, not about takeover (the kill -9 tests are); with the suite's 2 s lease
    # a live worker starved of CPU for 2 s had its runs taken over and failed (retries=0).
    steady = {"DURABLE_JOBS_TEST_LEASE": "30s", "DURABLE_JOBS_TEST_HEARTBEAT": "1s"}
    pool = [workers.start(f"w{i}", "--async-concurrency", "20", env=steady) for i in range(3)]
    for worker in pool:
        workers.wait_started(worker)
    with transaction.atomic():
        runs = [async_jobs.async_logged.enqueue(n) for n in range(RUNS)]
    # Wait for every run to finish, not to succeed: a run that failed (a live worker's
    # lease taken over, its attempts used up) ends the wait at once, with its error.
    wait_until(
        lambda: not JobRun.objects.exclude(status__in=FINISHED).exists(),
        timeout=600,  # only keeps a broken worker from hanging the suite (a loaded CI box)
        what=f"{RUNS} runs to finish",
        workers=pool,
        detail=run_statuses,
    )
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == RUNS, run_statuses()
    for worker in pool:
        assert worker.terminate() == 0, worker.name
    per_run: dict[str, list[Execution]] = {}
    for execution in Execution.objects.order_by("started_ns"):
        per_run.setdefault(execution.run_id, []).append(execution)
    assert set(per_run) == {str(run.id) for run in runs}
    assert all(len(rows) == 1 for rows in per_run.values())
    for rows in per_run.values():
        for earlier, later in itertools.pairwise(rows):
            assert earlier.ended_ns and earlier.ended_ns <= later.started_ns
    work = StepRecord.objects.filter(name="work")
    assert set(work.values_list("status", "attempts")) == {(StepStatus.COMPLETED, 1)}
    pids = Counter(rows[0].pid for rows in per_run.values())
    batches = sum(worker.log().count("runs claimed: ") for worker in pool)
    print(
        f"\n[async overlap / {connection.vendor}] per-process={sorted(pids.values())} "
        f"claims of several runs={batches}"
    )
    assert len(pids) > 1, pids
    assert batches > 0  # batching was on: several runs per claim


@pytest.mark.postgres(reason="Django's connection pool is PostgreSQL's (psycopg_pool)")
def test_with_djangos_connection_pool_forked_workers_execute_every_run_once(
    workers: Workers,
) -> None:
    """``OPTIONS={"pool": True}`` (4 connections per process) and ``--concurrency 2``:
    each forked child makes a pool of its own (one inherited from the supervisor would
    share its open connections with the sibling: the first child hung on its first
    query) and gives its async lane the connections the pool has room for."""
    options = {"DURABLE_JOBS_TEST_CONNECTION_OPTIONS": "1"}
    worker = workers.start("pooled", "--concurrency", "2", "--async-concurrency", "10", env=options)
    with transaction.atomic():
        runs = [async_jobs.async_logged.enqueue(n) for n in range(RUNS)]
    wait_until(
        lambda: not JobRun.objects.exclude(status__in=FINISHED).exists(),
        timeout=300,  # only keeps a broken worker from hanging the suite
        what=f"{RUNS} runs to finish",
        workers=[worker],
        detail=run_statuses,
    )
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == RUNS, run_statuses()
    assert worker.terminate() == 0
    executions = Counter(Execution.objects.values_list("run_id", flat=True))
    assert executions == Counter({str(run.id): 1 for run in runs})
    assert len(set(Execution.objects.values_list("pid", flat=True))) == 2  # both children
    log = worker.log()
    assert log.count("the async lane gets 1 of the 4 ASYNC_CONNECTIONS") == 2, log
