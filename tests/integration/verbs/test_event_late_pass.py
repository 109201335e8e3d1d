"""A run that parks while its event's publisher is still open is woken when the event
commits, on every database, and the publisher pays no pass after its commit where a
worker can do it (``Dialect.late_wake``).

The race: the run looked for the event (not committed yet), then parked and looked
once more (still not committed), and only then did the publisher commit; its own
transaction could not wake the run (not parked yet when it looked). On SQLite the
park cannot happen meanwhile: the publisher holds the one write lock, so the park
waits for its commit and the look after it finds the event. On PostgreSQL and
MariaDB the park goes through, and the idle worker that hears of the event (LISTEN,
the doorbell) wakes the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.db import OperationalError, connections, transaction

from django_durable_jobs import publish_event, send
from django_durable_jobs.db import dialect, faults
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import Doorbell, Event, JobRun, RunStatus
from django_durable_jobs.verbs.waking import wake_late
from django_durable_jobs.worker.wakeup import Waker, take_events
from tests.conftest import Driver
from tests.testapp import message_jobs
from tests.testapp.event_jobs import waiter

pytestmark = pytest.mark.django_db(transaction=True)

#: Generous: the waker returns at its first look after the commit.
HEARD_WITHIN = 10.0


def hear_events(waker: Waker, within: float) -> list[int]:
    """The events an idle worker hears of, as its loop does: wait, then look, again
    while a wake-up brought none (on PostgreSQL the run's own enqueue and park notify
    too, and may be what the first wait returns on)."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        if waker.wait(left) and (heard := list(take_events(waker))):
            return heard
    return []


def publish_keyed() -> None:
    publish_event("keyed", {"key": "k"}, key="k")


class Publisher:
    """``deliver`` (``publish_event``, ``send``) on a second connection (a thread), its
    transaction open until ``commit`` is set."""

    def __init__(self, deliver: Callable[[], object] = publish_keyed) -> None:
        self.deliver = deliver
        self.published, self.commit = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            with transaction.atomic():
                self.deliver()
                self.published.set()
                assert self.commit.wait(30), "never told to commit"
        except BaseException as exc:  # surfaced in the test's thread
            self.error = exc
            self.published.set()
        finally:
            connections.close_all()

    def open(self) -> None:
        self.thread.start()
        assert self.published.wait(30), "the second connection did not publish"
        assert self.error is None, self.error

    def committed(self) -> None:
        self.commit.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the second connection did not commit"
        assert self.error is None, self.error


def test_a_run_that_parks_while_the_publisher_is_open_is_woken_when_it_commits(
    driver: Driver, clock: FakeClock, waker: Waker, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = waiter.enqueue("k")
    late_wake = dialect.of("default").late_wake
    publisher = Publisher()
    original = faults.hit

    def publish_after_the_look(point: str, using: str) -> None:
        # The step has looked (no event): the event is published now, in a transaction
        # that stays open while the run parks and looks once more.
        if point == "outcome.before" and not publisher.thread.is_alive():
            publisher.open()
            if late_wake == "nobody":
                # SQLite: the park waits for the publisher's write lock; it commits
                # while the park waits (or before it begins: the same outcome).
                threading.Timer(0.3, publisher.commit.set).start()
        original(point, using)

    monkeypatch.setattr(faults, "hit", publish_after_the_look)
    driver.step(run)
    monkeypatch.undo()
    if late_wake != "nobody":
        # Parked and looked once more, the event not committed yet: not woken.
        run.refresh_from_db()
        assert run.status == RunStatus.WAITING
        assert run.wake_at is not None and run.wake_at > clock.now()
    publisher.committed()
    if late_wake == "worker":
        # The publisher wrote nothing after its commit; the idle worker hears of the
        # event (LISTEN; the doorbell, rung after the commit) and does the pass.
        assert JobRun.objects.get(pk=run.pk).wake_at != clock.now()
        heard = hear_events(waker, HEARD_WITHIN)
        assert heard == [Event.objects.get().pk]
        assert wake_late(heard, clock.now()) == 1
    run.refresh_from_db()
    assert (run.status, run.wake_at) == (RunStatus.WAITING, clock.now())  # woken
    driver.step(run)
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, {"key": "k"})


@pytest.mark.mariadb(reason="the doorbell is MariaDB's and MySQL's")
def test_a_publisher_on_mariadb_rings_once_after_its_commit_and_does_no_pass(
    driver: Driver, clock: FakeClock, waker: Waker
) -> None:
    run = waiter.enqueue("k")
    driver.step(run)
    before = Doorbell.objects.get(pk=1).rung
    with transaction.atomic():
        publish_event("keyed", {"key": "k"}, key="k")  # wakes the run, in its transaction
        publish_event("keyed", {"key": "other"}, key="other")
        assert Doorbell.objects.get(pk=1).rung == before
    assert Doorbell.objects.get(pk=1).rung == before + 1
    assert waker.wait(HEARD_WITHIN)
    heard = list(take_events(waker))
    assert heard == sorted(Event.objects.values_list("pk", flat=True))
    assert take_events(waker) == []  # nothing new since: no second look
    assert wake_late(heard, clock.now()) == 0  # the publisher's transaction woke the run
    assert JobRun.objects.get(pk=run.pk).wake_at == clock.now()


def _crowd_of_waiting_runs(until: datetime) -> None:
    """Thousands of waiting runs, and statistics that count them: a locking read of the
    runs waiting for an event then starts from the step records (MariaDB makes the
    ``EXISTS`` a semi-join), the plan under which it locked a run it did not return."""
    waiter.enqueue_many([(f"other-{i}",) for i in range(3000)])
    JobRun.objects.update(status=RunStatus.WAITING, wake_at=until)
    with connections["default"].cursor() as cursor:
        if connections["default"].vendor == "mysql":
            cursor.execute(
                "ANALYZE TABLE django_durable_jobs_jobrun, django_durable_jobs_steprecord"
            )
        else:
            cursor.execute("ANALYZE django_durable_jobs_jobrun")
            cursor.execute("ANALYZE django_durable_jobs_steprecord")


@pytest.mark.parametrize("delivery", ["event", "message"])
def test_an_open_delivery_does_not_hold_the_run_that_is_parking(
    driver: Driver, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, delivery: str
) -> None:
    """The run has recorded its wait and is about to park when an event (a message) for
    it is published (sent) in a transaction that stays open: the run is not waiting
    yet, so that transaction must not hold its row, or the park waits for its commit."""
    if not connections["default"].features.has_select_for_update_nowait:
        pytest.skip("SQLite: one writer, no row locks")
    _crowd_of_waiting_runs(until=clock.now() + timedelta(days=1))
    if delivery == "event":
        run = waiter.enqueue("k")
        publisher = Publisher()
    else:
        run = message_jobs.inbox.enqueue(1)
        publisher = Publisher(lambda: send(run.pk, "item", {"n": 1}))
    held: list[BaseException] = []
    original = faults.hit

    def deliver_before_the_park(point: str, using: str) -> None:
        if point == "outcome.before" and not publisher.thread.is_alive():
            publisher.open()
            try:
                with transaction.atomic():
                    list(JobRun.objects.select_for_update(nowait=True).filter(pk=run.pk))
            except OperationalError as exc:
                held.append(exc)
        original(point, using)

    monkeypatch.setattr(faults, "hit", deliver_before_the_park)
    driver.step(run)
    monkeypatch.undo()
    publisher.committed()
    assert held == []
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
