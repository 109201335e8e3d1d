"""The idle worker's poll (``db/probe.py``): after a claim that took nothing, one
compiled statement asks whether anything is due before the full claim is built.
It must see exactly what a claim would look at, on every database."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.db import dialect, probe
from django_durable_jobs.db.paused import Paused
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from tests.factories import T0, JobRunFactory
from tests.integration.test_naive_time import naive  # noqa: F401 - a fixture
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def polling() -> Iterator[None]:
    """The ORM's claim, as where workers poll (on PostgreSQL through psycopg 3 the claim
    is one prepared statement and idle workers are woken by NOTIFY: no probe)."""
    with dialect.chosen("default", dialect.Dialect("default")):
        yield


def due(now: datetime = T0, queues: list[str] | None = None) -> bool:
    return probe.any_due("default", now, queues)


def test_nothing_due_in_an_empty_table_or_among_runs_not_runnable() -> None:
    assert not due()
    for status in (RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
        JobRunFactory(status=status)
    assert not due()


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.SLEEPING, RunStatus.WAITING])
def test_a_runnable_run_is_due_from_its_wake_time_on(status: RunStatus) -> None:
    JobRunFactory(status=status, wake_at=T0 + timedelta(seconds=5))
    assert not due(T0)
    assert not due(T0 + timedelta(seconds=4, microseconds=999_000))
    assert due(T0 + timedelta(seconds=5))
    assert due(T0 + timedelta(days=400))


def test_only_the_queues_a_worker_serves() -> None:
    JobRunFactory(queue="emails")
    assert due(queues=None)
    assert due(queues=["emails"])
    assert not due(queues=["default"])
    assert due(queues=["default", "emails"])
    # The statement is compiled once per queue list: a second list is not the first's.
    assert not due(queues=["reports"])


def test_a_run_of_a_paused_queue_or_job_is_not_due() -> None:
    """A paused queue's due runs would otherwise make every idle poll a whole claim."""
    JobRunFactory(queue="emails", job_name="tests.noop")
    assert not probe.any_due("default", T0, None, Paused(queues=frozenset({"emails"})))
    assert not probe.any_due("default", T0, None, Paused(jobs=frozenset({"tests.noop"})))
    assert probe.any_due("default", T0, None, Paused(jobs=frozenset({"tests.add"})))
    assert probe.any_due("default", T0, None, Paused())  # nothing paused: the usual probe


def test_a_run_under_a_limit_is_due_too() -> None:
    """The flow claim looks at the same runs: a limited run due means a full claim."""
    JobRunFactory(concurrency_limit=1, concurrency_key="k", job_name="tests.noop")
    assert due()


def test_an_idle_poll_sends_one_statement_and_still_finds_new_work(
    polling: None, clock: FakeClock
) -> None:
    # A long poll: the pauses, read by the first claim, are not read again meanwhile.
    options = WorkerOptions(worker_id="w-probe", poll_interval=timedelta(minutes=1))
    worker = Worker(options, clock=clock)
    assert not worker.run_once()  # the first claim: the full claim, nothing
    with CaptureQueriesContext(connection) as polled:
        assert not worker.run_once()
        assert not worker.run_once()
    # Each poll: the probe alone (before: the flow claim's and the claim's reads).
    assert len(polled.captured_queries) == 2, polled.captured_queries
    assert all("LIMIT 1" in query["sql"].upper() for query in polled.captured_queries)
    run = jobs.noop.enqueue()
    assert worker.run_once()
    worker.flush()
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    assert not worker.run_once()  # idle again: the next polls probe again
    with CaptureQueriesContext(connection) as polled:
        assert not worker.run_once()
    assert len(polled.captured_queries) == 1


def test_with_use_tz_false_the_time_is_sent_as_django_stores_it(
    naive: None,  # noqa: F811 - the fixture imported above
    clock: FakeClock,
) -> None:
    """``USE_TZ = False`` in Paris: wake times are stored as local time; the probe's time
    must be converted the same way, or it would be two hours off."""
    clock.set(datetime(2026, 7, 1, 10, 0, tzinfo=UTC))  # 12:00 in Paris
    jobs.noop.using(run_after=timedelta(hours=1)).enqueue()
    assert not due(datetime(2026, 7, 1, 10, 59, tzinfo=UTC))
    assert due(datetime(2026, 7, 1, 11, 0, tzinfo=UTC))
