"""The worker loop in-process: claim, execute, reap, release, query counts."""

from __future__ import annotations

import gc
import logging
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.db.claims import claim, release, renew, renew_held, requeue_expired
from django_durable_jobs.db.flow import limits as flow
from django_durable_jobs.db.postgresql import statements
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.worker import loop, outbox
from django_durable_jobs.worker.heartbeat import Heartbeat
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from tests.factories import JobRunFactory
from tests.testapp import jobs
from tests.testapp.models import Effect

LEASE = timedelta(seconds=60)


def worker(clock: FakeClock, **options: Any) -> Worker:
    return Worker(WorkerOptions(worker_id="w-test", burst=True, **options), clock=clock)


def once(w: Worker) -> bool:
    """One claim and execution, with its outcome written (run_once defers the write
    into the next claim)."""
    worked = w.run_once()
    w.flush()
    return worked


@pytest.mark.django_db(transaction=True)
def test_burst_worker_executes_everything_runnable_then_exits(clock: FakeClock) -> None:
    runs = [jobs.three_steps.enqueue(user_id=i) for i in range(3)]
    sleeper = jobs.onboarding.enqueue(user_id=1)
    assert worker(clock).run() == 4
    statuses = {r.pk: r.status for r in JobRun.objects.all()}
    assert [statuses[r.pk] for r in runs] == [RunStatus.SUCCEEDED] * 3
    assert statuses[sleeper.pk] == RunStatus.SLEEPING  # parked: no process held
    assert Effect.objects.filter(name="one").count() == 3


@pytest.mark.django_db(transaction=True)
def test_max_runs_and_queues(clock: FakeClock) -> None:
    for _ in range(3):
        jobs.noop.enqueue()
    mail = jobs.noop.using(queue="mail").enqueue()
    assert worker(clock, max_runs=2, queues=["default"]).run() == 2
    assert worker(clock, queues=["default"]).run() == 1
    assert JobRun.objects.get(pk=mail.pk).status == RunStatus.QUEUED
    assert worker(clock, queues=["mail"]).run() == 1


@pytest.mark.django_db
def test_expired_lease_is_requeued_and_completed_steps_replay(clock: FakeClock) -> None:
    jobs.FAIL_ONCE.add("three")
    run = jobs.three_steps.enqueue(user_id=1)
    [claimed] = claim("dead-worker", now=clock.now(), lease=LEASE)
    assert claimed.claimed_from == RunStatus.QUEUED
    # The "dead" worker never executes; nothing happens before the lease runs out.
    assert requeue_expired(now=clock.now() + LEASE / 2) == 0
    clock.advance(LEASE + timedelta(seconds=1))
    assert requeue_expired(now=clock.now()) == 1
    run.refresh_from_db()
    assert (run.status, run.lease_owner, run.attempt) == (RunStatus.QUEUED, "", 1)
    w = worker(clock)
    assert once(w)  # attempt 2: fails in "three" (injected)
    assert once(w)  # attempt 3: succeeds
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.attempt == 3
    assert Effect.objects.filter(name="one").count() == 1


@pytest.mark.django_db
def test_worker_deaths_use_up_attempts(clock: FakeClock) -> None:
    run = jobs.three_steps.enqueue(user_id=1)  # retries=2: 3 attempts
    for _ in range(3):
        claim("dies", now=clock.now(), lease=LEASE)
        clock.advance(LEASE + timedelta(seconds=1))
        requeue_expired(now=clock.now())
    assert once(worker(clock))
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_ATTEMPTS_EXHAUSTED"
    assert not Effect.objects.exists()


@pytest.mark.django_db
def test_release_gives_the_run_back_without_using_an_attempt(clock: FakeClock) -> None:
    queued = jobs.noop.enqueue()
    [claimed] = claim("w", now=clock.now(), lease=LEASE)
    assert claimed.attempt == 1
    assert release(claimed, "w", now=clock.now())
    queued.refresh_from_db()
    assert (queued.status, queued.attempt, queued.lease_owner) == (RunStatus.QUEUED, 0, "")

    sleeping = jobs.onboarding.enqueue(user_id=3)
    once(worker(clock))  # queued run first (older), executes noop
    once(worker(clock))  # onboarding: sleeps 3 days
    clock.advance("3d")
    [resumed] = claim("w2", now=clock.now(), lease=LEASE)
    assert resumed.pk == sleeping.pk and resumed.claimed_from == RunStatus.SLEEPING
    assert release(resumed, "w2", now=clock.now())
    sleeping.refresh_from_db()
    assert (sleeping.status, sleeping.attempt) == (RunStatus.SLEEPING, 1)
    assert not release(resumed, "w2", now=clock.now())  # no longer ours


@pytest.mark.django_db
def test_heartbeat_renews_only_own_leases(clock: FakeClock) -> None:
    run = jobs.noop.enqueue()
    [claimed] = claim("w", now=clock.now(), lease=LEASE)
    clock.advance("30s")
    assert renew("w", [claimed.pk], now=clock.now(), lease=LEASE) == 1
    assert renew("other", [claimed.pk], now=clock.now(), lease=LEASE) == 0
    run.refresh_from_db()
    assert run.lease_expires_at == clock.now() + LEASE


@pytest.mark.django_db
def test_heartbeat_renews_the_runs_of_every_claim_in_one_statement(clock: FakeClock) -> None:
    """An async lane holds runs of many claims (one owner each). One UPDATE per owner
    queued each beat for SQLite's write lock once per claim: under load the last ones
    landed after the lease expired and live runs were taken over (and failed)."""
    for _ in range(6):
        jobs.noop.enqueue()
    held = {
        run.pk: owner
        for owner in ("w#a", "w#b", "w#c")
        for run in claim(owner, now=clock.now(), lease=LEASE, limit=2)
    }
    assert len(held) == 6
    beat = Heartbeat(clock, LEASE, timedelta(seconds=10))
    for run_id, owner in held.items():
        beat.hold(owner, run_id)
    clock.advance("30s")
    with CaptureQueriesContext(connection) as queries:
        beat.beat()
    assert [query["sql"].split()[0] for query in queries].count("UPDATE") == 1
    leases = set(JobRun.objects.values_list("lease_owner", "lease_expires_at"))
    assert leases == {(owner, clock.now() + LEASE) for owner in ("w#a", "w#b", "w#c")}
    assert renew_held({**held, next(iter(held)): "other"}, now=clock.now(), lease=LEASE) == 5


@pytest.mark.django_db
def test_unknown_job_on_this_worker_fails_with_code(clock: FakeClock) -> None:
    # Runnable for UNKNOWN_JOB_GRACE (10 minutes) and no live worker registers it.
    due = clock.now() - timedelta(minutes=10)
    run = JobRun.objects.create(job_name="gone.away", created_at=due, wake_at=due)
    assert once(worker(clock))
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_JOB_UNKNOWN"


@pytest.mark.django_db
@pytest.mark.psycopg3(reason="the query counts of psycopg 3's one-statement claims")
def test_claim_loop_query_count_is_pinned(
    clock: FakeClock, django_assert_num_queries: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every run here is quick, however loaded the machine (real time decides it).
    monkeypatch.setattr(loop, "QUICK_RUN", 60.0)
    monkeypatch.setattr(outbox, "HOLD_FOR", 60.0)
    for _ in range(7):
        jobs.noop.enqueue()
    w = worker(clock)
    w.run_once()  # the first call also reaps expired leases (and prepares statements)
    # ... and reads the pauses: neither falls due again during the test, however slowly
    # a loaded machine runs it (both are on real time: a poll, a quarter lease).
    monkeypatch.setattr(w._pauses, "_next_read", float("inf"))
    monkeypatch.setattr(w, "_next_reap", float("inf"))
    # A busy worker records the outcomes it holds with the next claim: one statement on
    # PostgreSQL; elsewhere the outcomes (in one transaction when there are several),
    # then select, update, re-read. MariaDB and MySQL select in two steps (a
    # shortlist, then a lock by primary key: see claims.lock_shortlisted) in a
    # transaction, which inside the test's own transaction shows as a savepoint and
    # its release.
    # Once any registered job has a limit (the test jobs do), every claim first looks
    # for runnable runs under a limit: one more query (flow.claim_limited); on
    # PostgreSQL the claim's statement probes for them and the flow claim is asked only
    # when some are due (none are here).
    postgres = connection.vendor == "postgresql"
    flow_look = 1 if flow.has_limits() and not postgres else 0
    savepoints = 2 if connection.vendor == "mysql" else 0
    shortlist = 1 if connection.vendor == "mysql" else 0
    claim = 3 + shortlist + savepoints + flow_look

    def costs(outcomes: int, claims: bool = True) -> int:
        if postgres:
            return 1
        written = outcomes + (2 if outcomes > 1 else 0)  # several: a savepoint and its release
        return written + (claim if claims else 0)

    # The claim came back full and the run was quick: the next claim takes two runs.
    # The first claim that records an outcome on this connection prepares its statement
    # (an earlier test on the same connection may have done it).
    prepared = statements._prepared.get(connection.connection, set()) if postgres else set()
    prepares = postgres and not statements.binds_on_server(connection)  # else sent as text
    made = any(n.startswith("durable_claim_all_f") for n in prepared)
    prepare = 1 if prepares and not made else 0
    with django_assert_num_queries(costs(1) + prepare):
        assert w.run_once()  # run 1 recorded, runs 2 and 3 claimed, run 2 executed
    with django_assert_num_queries(0):
        assert w.run_once()  # run 3, claimed with run 2: run 2's outcome waits for it
    with django_assert_num_queries(costs(2)):
        assert w.run_once()  # runs 2 and 3 recorded together, 4 to 7 claimed, 4 executed
    for _ in range(3):  # runs 5, 6, 7 of that batch: no query
        with django_assert_num_queries(0):
            assert w.run_once()
    look = 1 + savepoints + flow_look  # a claim that finds nothing
    with django_assert_num_queries(1 if postgres else costs(4, claims=False) + look):
        assert w.run_once()  # the four outcomes; nothing left
    # Idle: one look for work (where workers poll, after a claim that took nothing, the
    # probe alone: ``probe.any_due``, no claim built).
    with django_assert_num_queries(1):
        assert not w.run_once()
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 7


@pytest.mark.django_db
def test_runjobs_rejects_bad_arguments() -> None:
    with pytest.raises(CommandError, match="5 mins"):
        call_command("runjobs", "--burst", "--poll-interval", "5 mins")
    with pytest.raises(CommandError, match="concurrency"):
        call_command("runjobs", "--burst", "--concurrency", "0")


@pytest.mark.django_db(transaction=True)
def test_runjobs_called_in_a_process_leaves_its_garbage_collector_alone() -> None:
    """Tuned only in a process started to run the worker (``worker/collector.py``):
    a test that drains its runs with ``call_command`` keeps its own collector."""
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    jobs.noop.enqueue()
    call_command("runjobs", "--burst", "--async-concurrency", "1")
    assert JobRun.objects.get().status == RunStatus.SUCCEEDED
    assert (gc.get_threshold(), gc.get_freeze_count()) == (threshold, frozen)


@pytest.mark.postgres(reason="prepared statements are a PostgreSQL path")
@pytest.mark.skipif(
    bool(connection.settings_dict["OPTIONS"].get("pool")),
    reason="a pool gives back a connection earlier tests prepared statements on",
)
@pytest.mark.django_db(transaction=True)
def test_without_prepared_statements_pgbouncer_mode(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    connection.close()  # a fresh connection: no statement prepared by earlier tests
    runs = [jobs.three_steps.enqueue(user_id=i) for i in range(2)]
    w = worker(clock)
    while w.run_once():
        pass
    w.flush()
    assert {r.status for r in JobRun.objects.filter(pk__in=[r.pk for r in runs])} == {
        RunStatus.SUCCEEDED
    }
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (0,)


@pytest.mark.django_db(transaction=True)
def test_the_run_failed_line_names_the_users_exception_or_our_code(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    jobs.always_fails.enqueue()
    # Its module is not deployed here, nor anywhere for UNKNOWN_JOB_GRACE (10 minutes).
    JobRunFactory.create(job_name="tests.nowhere", wake_at=clock.now() - timedelta(minutes=10))
    with caplog.at_level(logging.WARNING, logger="django_durable_jobs.worker"):
        worker(clock, max_runs=2).run()
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    # Its first attempt is retried: not the run's end, and the line says when it retries.
    (own,) = [line for line in failed if "job=tests.always_fails " in line]
    assert own.startswith("attempt failed, will retry: ")
    assert "attempt=1 code=- status=queued retry_at=" in own
    assert own.endswith("error=ValueError: always fails")
    # Our own errors carry a code, which says the type already.
    (unknown,) = [line for line in failed if "job=tests.nowhere " in line]
    assert unknown.startswith("run failed: ")
    assert "code=X_JOB_UNKNOWN status=failed error=no job is registered as " in unknown


@pytest.mark.django_db(transaction=True)
def test_a_huge_error_is_stored_and_logged_cut(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A 5 MB message was stored four times (the run's and its step's message and
    traceback) and logged whole: a 30 MB admin page and a 5 MB log line."""
    from django_durable_jobs.engine.serialization import MAX_ERROR_MESSAGE, MAX_TRACEBACK

    run = jobs.huge_error.enqueue(5_000_000)
    with caplog.at_level(logging.WARNING, logger="django_durable_jobs.worker"):
        worker(clock, max_runs=1).run()
    run.refresh_from_db()
    step = run.steps.get(name="fetch")
    assert run.status == RunStatus.FAILED
    stored = [(run.error, MAX_ERROR_MESSAGE), (run.traceback, MAX_TRACEBACK)]
    for text, limit in [*stored, (step.error, MAX_ERROR_MESSAGE), (step.traceback, MAX_TRACEBACK)]:
        assert len(text) < limit + 100 and "characters cut ...]" in text
        assert text.rstrip().endswith("end of body")
    (line,) = [r.getMessage() for r in caplog.records if r.msg.startswith("%s: run=")]
    assert line.startswith("run failed: ") and len(line) < 2_500
    assert line.endswith("end of body")
