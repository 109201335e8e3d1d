"""Published after the wait started means committed after it, whatever the ids.

An event's id is taken at INSERT and it becomes visible at COMMIT, so on PostgreSQL
and MariaDB a transaction that inserted an event and commits later leaves a smaller
id behind events committed meanwhile. These tests hold such a transaction open on a
second real connection (another thread) while the test's own connection publishes,
starts the wait and commits, interleaved step by step.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connections, transaction

from django_durable_jobs import publish_event
from django_durable_jobs.db import dialect
from django_durable_jobs.engine.clock import FakeClock, current
from django_durable_jobs.models import Event, JobRun, RunStatus
from django_durable_jobs.verbs.waking import wake_late
from tests.conftest import Driver
from tests.testapp.event_jobs import any_key_waiter, waiter

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres(
        reason="SQLite lets one transaction write at a time: the second publisher waits for "
        "the first to commit, so ids already follow commit order"
    ),
    pytest.mark.mariadb,
]


class OpenTransaction:
    """``publish_event`` on a second connection, in a transaction left open until
    ``commit()``."""

    def __init__(self, event: str, payload: Any, key: str | None) -> None:
        self._published, self._commit = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.event: Event | None = None
        self._thread = threading.Thread(target=self._run, args=(event, payload, key))
        self._thread.start()
        assert self._published.wait(30), "the second connection did not publish"
        if self.error is not None:
            raise self.error

    def _run(self, event: str, payload: Any, key: str | None) -> None:
        try:
            with transaction.atomic():
                self.event = publish_event(event, payload, key=key)
                self._published.set()
                self._commit.wait(30)
        except BaseException as exc:  # surfaced in the test's thread
            self.error = exc
            self._published.set()
        finally:
            connections.close_all()

    @property
    def id(self) -> int:
        assert self.event is not None
        return self.event.id

    def commit(self) -> None:
        self._commit.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the second connection did not commit"
        if self.error is not None:
            raise self.error
        if dialect.of("default").late_wake == "worker":
            # The publisher left the pass after its commit to the workers that hear of
            # the event (LISTEN); what such a worker does.
            wake_late([self.id], current().now())


def test_an_event_committed_after_the_wait_started_is_delivered_despite_a_smaller_id(
    driver: Driver, clock: FakeClock
) -> None:
    run = waiter.enqueue("k")
    x = OpenTransaction("keyed", {"n": "X"}, key="k")  # inserted first, commits last
    y = publish_event("keyed", {"n": "Y"}, key="other")  # committed at once
    assert x.id < y.id
    driver.step(run)  # the wait starts: X is not committed yet
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING

    x.commit()
    run.refresh_from_db()
    assert run.wake_at == clock.now()  # woken by X's commit, not by the event poll
    driver.step(run)
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, {"n": "X"})


def test_an_event_committed_before_the_wait_started_does_not_count_despite_a_larger_id(
    driver: Driver, clock: FakeClock
) -> None:
    run = waiter.enqueue("k")
    other = OpenTransaction("unrelated", None, key=None)  # the smallest id, still open
    early = publish_event("keyed", {"n": "early"}, key="k")  # committed before the wait
    assert other.id < early.id
    driver.step(run)
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING

    other.commit()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING and run.wake_at is not None
    assert run.wake_at > clock.now()  # nothing it waits for arrived
    publish_event("keyed", {"n": "late"}, key="k")
    driver.step(run)
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, {"n": "late"})


def test_a_wait_without_match_gets_the_event_committed_after_it_started(
    driver: Driver, clock: FakeClock
) -> None:
    run = any_key_waiter.enqueue()
    x = OpenTransaction("keyed", {"n": "X"}, key="a")
    publish_event("keyed", {"n": "Y"}, key="b")  # committed before the wait: not it
    driver.step(run)
    x.commit()
    run.refresh_from_db()
    assert run.wake_at == clock.now()
    driver.step(run)
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, {"n": "X"})
    assert JobRun.objects.filter(status=RunStatus.WAITING).count() == 0
