"""``JobRun.wait`` and ``await_result``: the result of a finished run, the run's own
failure as ``RunFailed``, ``RunCancelled`` for a cancelled or skipped run, and
``TimeoutError``; woken by the finish on PostgreSQL through one LISTEN connection per
process, polling elsewhere."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, connections

from django_durable_jobs import RunCancelled, RunFailed
from django_durable_jobs.db import dialect
from django_durable_jobs.db.postgresql import finished
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.verbs import results
from django_durable_jobs.verbs.runs import cancel
from tests.conftest import Driver
from tests.testapp import flow_jobs, message_jobs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_listener_left() -> Iterator[None]:
    """The listener's connection would keep the test database from being dropped."""
    yield
    finished.stop_all()


def finished_by(driver: Driver, run: JobRun, after: float = 0.2) -> threading.Thread:
    """Execute ``run`` on another thread (its own connection) ``after`` seconds from now."""

    def later() -> None:
        time.sleep(after)  # the waiting call is parked by then
        try:
            driver.step(run)
        finally:
            connections.close_all()

    thread = threading.Thread(target=later)
    thread.start()
    return thread


def test_wait_returns_the_result_once_the_run_finishes(driver: Driver) -> None:
    run = message_jobs.double.enqueue(21)
    thread = finished_by(driver, run)
    assert run.wait(timeout="10s") == 42
    thread.join()
    assert run.status == RunStatus.SUCCEEDED  # the instance is read again meanwhile


def test_await_result_returns_the_result_once_the_run_finishes(driver: Driver) -> None:
    run = message_jobs.double.enqueue(4)
    thread = finished_by(driver, run)
    assert async_to_sync(run.await_result)(timeout="10s") == 8
    thread.join()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["wait", "await_result"])
def test_a_failed_run_raises_run_failed_with_its_own_code_and_error(
    driver: Driver, asynchronous: bool
) -> None:
    run = message_jobs.fails.enqueue()
    driver.step(run)
    with pytest.raises(RunFailed) as failed:
        _wait(run, asynchronous)(timeout="1s")
    assert failed.value.code == "X_RUN_FAILED"
    assert failed.value.error_code == "X_NON_RETRIABLE"
    assert failed.value.error == "the report's source is gone"
    assert failed.value.run_id == str(run.id)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["wait", "await_result"])
def test_a_cancelled_or_skipped_run_raises_run_cancelled(
    clock: FakeClock, asynchronous: bool
) -> None:
    run = message_jobs.approval.enqueue(1)
    cancel(run.id, now=clock.now())
    with pytest.raises(RunCancelled, match="cancelled"):
        _wait(run, asynchronous)()
    first = flow_jobs.welcome_once.enqueue(user_id=1)
    skipped = flow_jobs.welcome_once.enqueue(user_id=1)  # over its RateLimit
    assert first.status == RunStatus.QUEUED and skipped.status == RunStatus.SKIPPED
    with pytest.raises(RunCancelled, match="skipped"):
        _wait(skipped, asynchronous)()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["wait", "await_result"])
def test_an_unfinished_run_times_out(asynchronous: bool) -> None:
    run = message_jobs.double.enqueue(1)
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="still queued"):
        _wait(run, asynchronous)(timeout="300ms")
    assert 0.3 <= time.monotonic() - began < 5


def test_a_parked_run_is_not_finished(driver: Driver) -> None:
    run = message_jobs.approval.enqueue(2)
    driver.step(run)  # parked in its receive
    with pytest.raises(TimeoutError, match="still waiting"):
        run.wait(timeout="100ms")


@pytest.mark.postgres(reason="LISTEN/NOTIFY is PostgreSQL's")
@pytest.mark.psycopg3(reason="the listener uses psycopg 3's notifies()")
def test_many_waiting_calls_share_one_listen_connection_and_wake_on_the_finish(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    read = results._read

    def counted(run: JobRun) -> bool:
        reads.append(str(run.pk))
        return read(run)

    monkeypatch.setattr(results, "_read", counted)
    runs = [message_jobs.double.enqueue(n) for n in range(8)]
    got: dict[int, Any] = {}
    errors: list[BaseException] = []

    def waiter(index: int, run: JobRun) -> None:
        try:
            got[index] = run.wait(timeout="20s")
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=waiter, args=(i, r)) for i, r in enumerate(runs)]
    for thread in threads:
        thread.start()
    _until(lambda: len(_listeners()) == 1, "the listener to connect")
    time.sleep(0.5)  # the eight calls are parked by now
    before = len(reads)
    time.sleep(1)  # polling, each call would read five times or more meanwhile
    assert len(reads) == before  # parked on the listener: no call reads
    for run in runs:
        driver.step(run)
    for thread in threads:
        thread.join(timeout=20)
    assert not errors and got == {i: 2 * i for i in range(8)}
    assert len(_listeners()) == 1  # one LISTEN connection for the eight calls


def test_without_listen_a_wait_polls_at_most_every_200_ms(driver: Driver) -> None:
    run = message_jobs.double.enqueue(3)
    with dialect.chosen(connection.alias, dialect.Dialect(connection.alias)):
        thread = finished_by(driver, run, after=0.5)
        began = time.monotonic()
        assert run.wait(timeout="10s") == 6
        waited = time.monotonic() - began
        thread.join()
    assert waited < 0.5 + results.POLL_MOST + 0.3


def _wait(run: JobRun, asynchronous: bool) -> Callable[..., Any]:
    return async_to_sync(run.await_result) if asynchronous else run.wait


def _listeners() -> list[str]:
    """The sessions of the listener (named ``finished.APPLICATION_NAME``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
        )
        return [name for (name,) in cursor.fetchall() if name == finished.APPLICATION_NAME]


def _until(condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
