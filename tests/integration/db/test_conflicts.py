"""Conflicts with concurrent transactions (``db/conflicts.py``): real deadlocks and
serialization failures are told from lost connections and refused values, and a
worker retries its claim or an outcome after a few milliseconds, not after its poll
interval or a second (a project on SERIALIZABLE transactions conflicts routinely)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

import pytest
from django.db import DatabaseError, IntegrityError, connection, connections, transaction

from django_durable_jobs import publish_event
from django_durable_jobs.db import conflicts, dialect
from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.attempt import Succeeded
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import Event, JobRun, RunStatus
from django_durable_jobs.verbs import waking
from django_durable_jobs.worker import recording
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from django_durable_jobs.worker.outcome import Pending, pending_of
from tests.conftest import Driver
from tests.testapp import jobs
from tests.testapp.event_jobs import waiter
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T", bound=Callable[..., Any])


def on_a_server(test: T) -> T:
    """A test of row locks, deadlocks or a server that ends the session: PostgreSQL or
    MariaDB (SQLite has one writer and no server)."""
    server = pytest.mark.postgres(reason="row locks, deadlocks, sessions: a server database")
    return cast(T, server(pytest.mark.mariadb(test)))


def deadlock() -> DatabaseError:
    """A real deadlock: two transactions, each in its own connection, lock two rows in
    opposite orders; the database rolls one back. Returns what that one raised."""
    first, second = Effect.objects.create(name="a").pk, Effect.objects.create(name="b").pk
    barrier, raised = threading.Barrier(2), []

    def lock(pks: tuple[int, int]) -> None:
        try:
            with transaction.atomic():
                Effect.objects.filter(pk=pks[0]).update(name="x")
                barrier.wait(timeout=10)
                Effect.objects.filter(pk=pks[1]).update(name="y")
        except DatabaseError as exc:
            raised.append(exc)
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=lock, args=(pks,)) for pks in ((first, second), (second, first))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(raised) == 1, raised
    return raised[0]


@on_a_server
def test_a_deadlock_is_a_conflict() -> None:
    exc = deadlock()
    assert conflicts.is_conflict(exc)
    assert conflicts.describe(exc).startswith("conflict with a concurrent transaction (")
    assert "\n" not in conflicts.describe(exc)


@pytest.mark.postgres(reason="SERIALIZABLE snapshots: PostgreSQL's serialization failure")
def test_a_serialization_failure_is_a_conflict() -> None:
    pk = Effect.objects.create(name="a").pk
    read, raised = threading.Event(), list[DatabaseError]()

    def serializable() -> None:
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                list(Effect.objects.filter(pk=pk))  # the snapshot is taken here
                read.set()
                wrote.wait(timeout=10)
                Effect.objects.filter(pk=pk).update(name="late")
        except DatabaseError as exc:
            raised.append(exc)
        finally:
            connections.close_all()

    wrote = threading.Event()
    thread = threading.Thread(target=serializable)
    thread.start()
    assert read.wait(timeout=10)
    Effect.objects.filter(pk=pk).update(name="first")  # commits after that snapshot
    wrote.set()
    thread.join(timeout=30)
    (exc,) = raised
    assert conflicts.is_conflict(exc)
    assert "could not serialize access" in conflicts.describe(exc)


def test_a_refused_value_is_not_a_conflict() -> None:
    run = jobs.noop.enqueue()
    with pytest.raises(IntegrityError) as refused, transaction.atomic():
        JobRun.objects.create(id=run.id, job_name="tests.noop")
    assert not conflicts.is_conflict(refused.value)


def end_this_session() -> None:
    """The server ends this test's session, as a restart or an operator would."""
    if connection.vendor != "mysql":
        dialect.of("default").cut_connection()  # raises
    with connection.cursor() as cursor:
        cursor.execute("SELECT CONNECTION_ID()")
        cursor.execute(f"KILL {cursor.fetchone()[0]}")
        cursor.execute("SELECT 1")


@on_a_server
def test_a_lost_connection_is_not_a_conflict() -> None:
    with pytest.raises(DatabaseError) as lost:
        end_this_session()
    connection.close()
    assert not conflicts.is_conflict(lost.value)


@on_a_server
def test_the_worker_claims_again_at_once_after_a_conflict(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    conflict = deadlock()
    run = jobs.noop.enqueue()
    worker = Worker(WorkerOptions(worker_id="w-conflict", burst=True), clock=clock)
    real_run_once, calls, waits = Worker.run_once, [0], []

    def conflicting(self: Worker) -> bool:  # the first claim meets the deadlock
        calls[0] += 1
        if calls[0] == 1:
            raise conflict
        return real_run_once(self)

    real_wait = worker.stopping.wait

    def wait(timeout: float | None = None) -> bool:
        waits.append(timeout)
        return real_wait(0)

    monkeypatch.setattr(Worker, "run_once", conflicting)
    monkeypatch.setattr(worker.stopping, "wait", wait)
    with caplog.at_level(logging.INFO, logger="django_durable_jobs.worker"):
        assert worker.run() == 1
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    # Before: a second (the poll interval, at most 1 s) after every conflict.
    assert waits and waits[0] is not None and waits[0] <= conflicts.MOST
    retried = [r for r in caplog.records if "conflict with a concurrent transaction" in r.message]
    assert [r.levelno for r in retried] == [logging.INFO]
    assert not [r for r in caplog.records if "database error" in r.message]


@on_a_server
def test_an_outcome_is_recorded_across_conflicts_without_using_its_tries(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    conflict = deadlock()
    jobs.noop.enqueue()
    (run,) = claim("w-conflict", now=clock.now(), lease=timedelta(minutes=5))
    pending = pending_of(run, None, Succeeded("done"), clock.now(), None)
    real_record, sleeps, tried = recording.record, list[float](), [0]

    def record(pending: Pending, owner: str) -> Any:
        tried[0] += 1
        if tried[0] <= 5:  # more conflicts in a row than record_patiently's tries (3)
            raise conflict
        return real_record(pending, owner)

    monkeypatch.setattr(recording, "record", record)
    monkeypatch.setattr("django_durable_jobs.worker.recording.time.sleep", sleeps.append)
    recording.record_patiently(pending, "w-conflict")
    run.refresh_from_db()
    # Before: three tries a second apart, then "run not recorded": the run sat running
    # until its lease expired, and was executed again.
    assert (run.status, run.result, tried[0]) == (RunStatus.SUCCEEDED, "done", 6)
    assert len(sleeps) == 5 and max(sleeps) <= conflicts.MOST


@on_a_server
def test_the_wake_up_after_an_events_commit_is_retried_after_a_conflict(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in the MariaDB process tests: the pass after the commit deadlocked with a
    worker, and the error reached the publisher after its event had committed."""
    conflict = deadlock()
    run = waiter.enqueue("k1")
    driver.drain()
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.WAITING
    real, calls = waking.wake_waiters, [0]

    def conflicting(*args: Any, **kwargs: Any) -> int:
        calls[0] += 1
        if calls[0] == 1:
            raise conflict
        return real(*args, **kwargs)

    monkeypatch.setattr(waking, "wake_waiters", conflicting)
    published = publish_event("keyed", {"n": 1}, key="k1")  # autocommit: the pass runs now
    assert calls[0] == 2 and Event.objects.filter(pk=published.pk).exists()
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error


@on_a_server
def test_a_failed_wake_up_after_the_commit_does_not_fail_the_publisher(
    driver: Driver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run = waiter.enqueue("k2")
    driver.drain()

    def lost(*args: Any, **kwargs: Any) -> int:
        end_this_session()  # raises: a real lost connection, not a conflict
        return 0

    monkeypatch.setattr(waking, "wake_waiters", lost)
    with caplog.at_level(logging.WARNING, logger="django_durable_jobs.events"):
        published = publish_event("keyed", {"n": 2}, key="k2")  # autocommit: the pass now
    connection.close()
    # Committed, and the publisher was not told otherwise: the run, not woken, finds
    # the event at its next re-check (EVENT_POLL).
    assert Event.objects.filter(pk=published.pk).exists()
    # Said once: a lost connection is not a conflict, so the pass is not tried again.
    assert caplog.text.count("were not all woken after its commit") == 1
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.WAITING
